// Shared helpers for the op family files (ir/ops/*.cc). Internal to src/ir.
//
// Each family file defines `register_<family>_ops(OpTable&)`, which fills one OpDef per op of
// the family. The helpers here are the checks, cost formulas and gradient pieces many ops
// share, so that error messages and rules read the same everywhere.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "ir/op.h"

namespace kiln::ops {

class OpTable {
 public:
  explicit OpTable(std::vector<OpDef>& defs) : defs_(defs) {}
  // The record for `op`, with `op` and `name` already set from ops.def.
  OpDef& define(Op op) { return defs_[static_cast<size_t>(op)]; }

 private:
  std::vector<OpDef>& defs_;
};

void register_unary_ops(OpTable& table);
void register_binary_ops(OpTable& table);
void register_reduction_ops(OpTable& table);
void register_layout_ops(OpTable& table);
void register_contraction_ops(OpTable& table);
void register_pooling_ops(OpTable& table);
void register_composite_ops(OpTable& table);
void register_collective_ops(OpTable& table);

// Cost of an op that reads each input once, writes each output once and spends
// `flops_per_element` operations per output element.
CostFn per_element_cost(double flops_per_element);

// The rule of a piecewise-constant op (floor, sign, ...): its gradient is zero almost
// everywhere (and undefined at the jumps), so no input gets one, as in PyTorch and JAX.
GradFn zero_gradient();

// A scalar constant of `like`'s dtype, for arithmetic in gradient rules.
Value* scalar_like(GraphBuilder& b, double value, const Value* like);

// Input checks; `input` is the input's name as in OpDef::input_names.
Status require_floating(const TensorType& type, std::string_view input);
Status require_integer(const TensorType& type, std::string_view input);  // i32 or i64
Status require_bool(const TensorType& type, std::string_view input);
Status require_rank(const TensorType& type, std::string_view input, int rank);
Status require_min_rank(const TensorType& type, std::string_view input, int min_rank);
Status require_same_dtype(const TensorType& a, std::string_view a_name, const TensorType& b,
                          std::string_view b_name);

}  // namespace kiln::ops
