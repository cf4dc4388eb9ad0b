// Freezing: graph inputs whose values are known when compiling (an inference graph's trained
// parameters) become constants, so that what is computed from them alone (Q, K and V weights
// concatenated by a substitution, a weight transposed for its gemm) folds once at compile time
// (passes/fold_constants.h) instead of running on every call.
//
//   graph @g(%x: f32[2,3], %w: f32[3,4]) {          graph @g(%x: f32[2,3]) {
//     %y = matmul(%x, %w) : f32[2,4]        ==>       %w = constant() {value = ...} : f32[3,4]
//     return %y                                       %y = matmul(%x, %w) : f32[2,4]
//   }                                                 return %y
//                                                   }
//
// The frozen inputs leave the graph's signature (each constant takes its input's name), so a
// caller cannot pass values that disagree with those folded into the compiled model.
#pragma once

#include <map>
#include <string>

#include "ir/array.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// Every name must be a graph input of the value's type, and not a graph output itself (a
// graph that returns a parameter unchanged has nothing to gain from freezing it).
Status freeze_inputs(Graph& graph, const std::map<std::string, Array>& values);

}  // namespace kiln
