// Whether a graph is cheap enough to run in the reference interpreter inside a fuzz loop: the
// fuzz tests (tests/fuzz/) run only such graphs, so that a mutant with huge shapes or heavy
// arithmetic cannot stall them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ir/graph.h"

namespace kiln::testing {

// Every value small (counting zero extents as 1, since loops over the other dims still run)
// and little arithmetic.
inline bool small_enough_to_interpret(const Graph& graph) {
  constexpr int64_t kMaxExtent = 1 << 12;
  constexpr double kMaxFlops = 1e6;
  auto small = [](const Value* value) {
    int64_t extent = 1;
    for (int64_t dim : value->shape().dims()) {
      if (dim > kMaxExtent) return false;
      extent *= std::max<int64_t>(dim, 1);
      if (extent > kMaxExtent) return false;
    }
    return true;
  };
  if (!std::ranges::all_of(graph.inputs(), small)) return false;
  double flops = 0;
  for (const Node* node : graph.nodes()) {
    if (!std::ranges::all_of(node->outputs(), small)) return false;
    flops += node->def().cost(node->input_types(), node->output_types(), node->attrs()).flops;
  }
  return flops <= kMaxFlops;
}

}  // namespace kiln::testing
