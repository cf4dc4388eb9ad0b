// Helpers for the graph pass tests: a graph from IR text, and its outputs by the reference
// interpreter on random inputs (to check that a pass kept the graph's meaning).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"

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

}  // namespace kiln
