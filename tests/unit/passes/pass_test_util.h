// Helpers for the graph pass tests: a graph from IR text, its outputs by the reference
// interpreter on random inputs, and the check that a pass kept them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "passes/dead_code.h"

namespace kiln {

inline Graph parse(const std::string& text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph.has_value()) << graph.status().message();
  return std::move(*graph);
}

inline std::vector<Array> evaluate(const Graph& graph, uint64_t seed = 3) {
  Expected<std::vector<Array>> outputs = interpret(graph, random_inputs(graph, {.seed = seed}));
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return outputs.has_value() ? std::move(*outputs) : std::vector<Array>{};
}

// Runs `pass` and dead-code elimination on `text`'s graph and checks that the outputs keep
// their values on random inputs (to f32 rounding and reassociation error); returns the graph.
inline Graph rewrite_keeping_outputs(const std::string& text, bool (*pass)(Graph&)) {
  Graph graph = parse(text);
  const std::vector<Array> before = evaluate(graph, 5);
  EXPECT_TRUE(pass(graph)) << "nothing rewritten";
  eliminate_dead_code(graph);
  const std::vector<Array> after = evaluate(graph, 5);
  EXPECT_EQ(before.size(), after.size());
  for (size_t o = 0; o < before.size() && o < after.size(); ++o) {
    EXPECT_EQ(before[o].type(), after[o].type());
    for (int64_t i = 0; i < before[o].size() && i < after[o].size(); ++i) {
      EXPECT_NEAR(after[o][i], before[o][i], 1e-5 * (1 + std::fabs(before[o][i])))
          << "output " << o << " element " << i;
    }
  }
  return graph;
}

}  // namespace kiln
