// Shared helpers for the lowering family files (loop/lowering/*.cc). Internal to src/loop.
//
// Each family file defines `register_<family>_lowerings(LoweringTable&)`, filling one entry
// per op of the family, as ir/ops/ does for op records. The helpers are the index arithmetic
// many definitions share: broadcasting, clamping a data-dependent index, nested reductions
// over several axes.
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

// op over the multi-index k (one fresh variable per extent, k[0] outermost) of body(k): a
// nest of reduce expressions. With no extents, body({}).
Expr reduce_nest(ReduceOp op, const std::vector<int64_t>& extents, NameGenerator& names,
                 const std::function<Expr(const std::vector<Expr>&)>& body);

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

// max_pool in two steps (loop/lowering/pooling.cc), for the attrs max_pool_is_separable
// accepts (two or more spatial dims, windows wider than 1 along the last and some other dim).
// max_pool_leading_max is the maximum over the taps of every spatial dim but the last at
// `partial`, an index [n, c, *pooled but the last, position in x's last dim]; args are
// max_pool's. max_pool_last_max is the output element at args.index, the maximum over the
// last dim's taps of `partial_of` (the first step's value at such an index).
using ElementAt = std::function<Expr(const std::vector<Expr>& index)>;
bool max_pool_is_separable(const Attrs& attrs);
Expr max_pool_leading_max(const ComputeArgs& args, const std::vector<Expr>& partial);
Expr max_pool_last_max(const ComputeArgs& args, const ElementAt& partial_of);

// max_pool_grad as a scatter (lower_group stores it so). max_pool_window_argmax is the
// row-major number of the tap the interpreter routes the gradient of window `window` ([n, c,
// *pooled] of dy) to: args are max_pool_grad's, read at that window. For a separable pool it
// is found in the two steps' rows instead (args of max_pool_grad: the taps are x's either
// way): max_pool_leading_argmax is, at `partial`, the first tap of the leading dims equal to
// the leading maximum m there (numbered row-major over the leading dims); max_pool_last_argmax
// is the window's tap given its maximum m and both rows (the leading maximum and argmax at a
// partial index). max_pool_tap_position is the index in x ([n, c, *spatial]) of tap `tap`
// (such a number) of that window, clamped into x.
Expr max_pool_window_argmax(const ComputeArgs& args, const std::vector<Expr>& window);
Expr max_pool_leading_argmax(const ComputeArgs& args, const std::vector<Expr>& partial,
                             const Expr& m);
Expr max_pool_last_argmax(const ComputeArgs& args, const Expr& m, const ElementAt& partial_max_of,
                          const ElementAt& partial_argmax_of);
std::vector<Expr> max_pool_tap_position(const ComputeArgs& args, const std::vector<Expr>& window,
                                        const Expr& tap);

}  // namespace kiln::loop::lowering
