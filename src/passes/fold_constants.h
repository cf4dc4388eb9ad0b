// Constant folding: a node all of whose inputs are constants (or that has no inputs, as
// fill and iota) becomes a constant, evaluated once at compile time by the op's reference
// evaluation (which rounds to the output's dtype, so the value is the interpreter's).
//
//   %a = constant() {value = tensor<f32[]>[1.0]} : f32[]
//   %b = constant() {value = tensor<f32[]>[0.0078125]} : f32[]      ==>   %c = constant() {value = tensor<f32[]>[0.0078125]} : f32[]
//   %c = mul(%a, %b) : f32[]
//
// Arithmetic with a neutral constant goes too: x * 1, x / 1, x + 0 and x - 0 are x, where
// the constant does not broadcast x to a larger shape. Training steps are full of these (a loss's 1/n scaling times the seed gradient 1.0), and
// each would otherwise be a kernel. A result larger than kMaxFoldedElements folds only when it
// is no larger than its constant operands together (weights frozen into an inference graph,
// passes/freeze_inputs.h, concatenated or transposed): a constant is stored in the program,
// and a broadcast of a scalar is cheaper to compute than to store. Multi-output nodes fold too.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace kiln {

inline constexpr int64_t kMaxFoldedElements = 4096;

// Returns whether anything was folded.
bool fold_constants(Graph& graph);

}  // namespace kiln
