// Random inputs for running a graph: the same seed gives the same arrays on every machine.
//
// Floating values are standard normal, rounded to the dtype; integers are uniform in
// [0, int_range) (small and non-negative so that they are valid indices and labels for typical
// graphs); bool is a fair coin. The generator is explicit (splitmix64 + Box-Muller) rather than
// std::normal_distribution, whose output differs between standard libraries.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"

namespace kiln {

struct RandomInputOptions {
  uint64_t seed = 0;
  int64_t int_range = 4;  // integers are drawn from [0, int_range); must be positive
};

Array random_array(const TensorType& type, uint64_t seed, int64_t int_range = 4);
// The random value of graph input `index` (seeded by (options.seed, index)).
Array random_input(const Graph& graph, size_t index, const RandomInputOptions& options = {});
// One array per graph input, each as random_input gives it.
std::vector<Array> random_inputs(const Graph& graph, const RandomInputOptions& options = {});

}  // namespace kiln
