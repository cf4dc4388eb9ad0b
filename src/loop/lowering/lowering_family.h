// Shared helpers for the lowering family files (loop/lowering/*.cc). Internal to src/loop.
//
// Each family file defines `register_<family>_lowerings(LoweringTable&)`, filling one entry
// per op of the family, as ir/ops/ does for op records: its definition, and the store nest
// of an op that lower_group stores with statements of its own. The helpers are the index
// arithmetic many definitions share: broadcasting, clamping a data-dependent index, nested
// reductions over several axes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loop/compute.h"

namespace kiln::loop::lowering {

class LoweringTable {
 public:
  explicit LoweringTable(std::vector<Lowering>& entries) : entries_(entries) {}
  void define(Op op, ComputeFn compute);
  // lower_group stores the op's values with `nest` where it applies (loop/compute.h).
  void store_with(Op op, StoreNest nest);

 private:
  std::vector<Lowering>& entries_;
};

void register_unary_lowerings(LoweringTable& table);
void register_binary_lowerings(LoweringTable& table);
void register_reduction_lowerings(LoweringTable& table);
void register_layout_lowerings(LoweringTable& table);
void register_contraction_lowerings(LoweringTable& table);
void register_pooling_lowerings(LoweringTable& table);
void register_composite_lowerings(LoweringTable& table);

// `value` stored in `dtype` (round_to_dtype), as a constant of that type.
Expr constant_of(DType dtype, double value);

// The index NumPy broadcasting reads in an input of `shape` for the output index `index`
// (whose rank may be larger): leading output dims are dropped, size-1 dims read 0.
std::vector<Expr> broadcast_index(const std::vector<Expr>& index, const Shape& shape);

// `index` clamped into [0, extent - 1]: keeps a data-dependent load inside its buffer.
Expr clamp_index(const Expr& index, int64_t extent);

// `value` bound to a fresh name around the expression `body(name)` builds, so that an input
// read several times is computed once. Constants and variables are passed through.
Expr bind(NameGenerator& names, const Expr& value, const std::function<Expr(const Expr&)>& body);

// `value` cast to its accumulation dtype (ir/dtype.h: f32 for f16 and bf16, as the libraries'
// low-precision contractions accumulate; unchanged otherwise). Sums rounded to bf16 after
// every term lost whole units over a few thousand terms, where the reference rounds once.
Expr widen_for_accumulation(const Expr& value);
// `value` cast to `dtype` where it is of another.
Expr narrow_to(DType dtype, const Expr& value);

// op over the multi-index k (one fresh variable per extent, k[0] outermost) of body(k): a
// nest of reduce expressions. With no extents, body({}). A sum or product of f16 or bf16 terms
// accumulates in f32 and is rounded once to the terms' dtype; a caller that goes on computing
// with the total (a mean, a contraction's output dtype) widens the terms itself, so that the
// total stays f32 until its last operation.
Expr reduce_nest(ReduceOp op, const std::vector<int64_t>& extents, NameGenerator& names,
                 const std::function<Expr(const std::vector<Expr>&)>& body);

// Row-major flat offset of `index` in `shape`.
Expr row_major_offset(const std::vector<Expr>& index, const Shape& shape);

// One fresh variable from `names` per dim, for definitions built only to be inspected.
std::vector<Expr> symbolic_index(int rank, NameGenerator& names);

// Product of dims[begin, end).
int64_t dims_product(const Shape& shape, int begin, int end);

// Resolves a possibly negative axis attribute against `rank`; infer has validated it.
int axis_of(int64_t axis, int rank);

// conv's window parameters, as ir/ops/contraction.cc reads them (validated by inference).
struct ConvParams {
  std::vector<int64_t> strides;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> dilations;
  int64_t groups = 1;
};
ConvParams conv_params(const Attrs& attrs, int spatial);

// The x position of output position `out` and kernel tap `tap` along spatial dim `d`.
Expr tap_position(const ConvParams& p, size_t d, const Expr& out, const Expr& tap);

// batch_norm_train's y at args.index from its channel's mean and biased variance (the op's
// other two outputs), so that lower_group can read statistics computed once per channel.
Expr batch_norm_normalize(const ComputeArgs& args, const Expr& mean, const Expr& variance);
// batch_norm_train's biased variance output at args.index ([C]) about its channel's `mean`,
// so that a kernel storing the mean first does not compute it again.
Expr batch_norm_variance(const ComputeArgs& args, const Expr& mean);

// The value of the element at a multi-index, as a step of a definition reads it.
using ElementAt = std::function<Expr(const std::vector<Expr>& index)>;

}  // namespace kiln::loop::lowering
