// Max pools and their gradients in steps, for the store nests of loop/lowering/pooling_nests.cc.
// Internal to src/loop.
//
// A max_pool over two or more spatial dims, with windows wider than 1 along the last and
// some other dim (max_pool_is_separable), runs in two steps when lower_group stores it: for
// each row of windows, the maximum over the taps of every spatial dim but the last, at every
// position of x's last dim (a row that loads x contiguously, so it vectorizes), then the
// maximum over the last dim's taps of that row. max is exact and order-free (NaN propagates
// either way), so the result is the one-step definition's bit for bit; the work per output
// falls from the kernel volume (9 for ResNet's 3x3 pool) to about its sum, and the strided
// scalar part reads a row that sits in L1.
//
// max_pool_grad is stored as the interpreter computes it, a scatter of dy into dx at each
// window's first maximum; its definition (loop/lowering/pooling.cc) is the gather form, which
// recomputes each candidate window's argmax for every dx element.
#pragma once

#include <vector>

#include "loop/lowering/group_context.h"

namespace kiln::loop::lowering {

// max_pool_leading_max is the maximum over the taps of every spatial dim but the last at
// `partial`, an index [n, c, *pooled but the last, position in x's last dim]; args are
// max_pool's. max_pool_last_max is the output element at args.index, the maximum over the
// last dim's taps of `partial_of` (the first step's value at such an index).
bool max_pool_is_separable(const Attrs& attrs);
Expr max_pool_leading_max(const ComputeArgs& args, const std::vector<Expr>& partial);
Expr max_pool_last_max(const ComputeArgs& args, const ElementAt& partial_of);

// max_pool_window_argmax is the row-major number of the tap the interpreter routes the
// gradient of window `window` ([n, c, *pooled] of dy) to: args are max_pool_grad's, read at
// that window. For a separable pool it is found in the two steps' rows instead (args of
// max_pool_grad: the taps are x's either way): max_pool_leading_argmax is, at `partial`, the
// first tap of the leading dims equal to the leading maximum m there (numbered row-major over
// the leading dims); max_pool_last_argmax is the window's tap given its maximum m and both
// rows (the leading maximum and argmax at a partial index). max_pool_tap_position is the
// index in x ([n, c, *spatial]) of tap `tap` (such a number) of that window, clamped into x.
Expr max_pool_window_argmax(const ComputeArgs& args, const std::vector<Expr>& window);
Expr max_pool_leading_argmax(const ComputeArgs& args, const std::vector<Expr>& partial,
                             const Expr& m);
Expr max_pool_last_argmax(const ComputeArgs& args, const Expr& m, const ElementAt& partial_max_of,
                          const ElementAt& partial_argmax_of);
std::vector<Expr> max_pool_tap_position(const ComputeArgs& args, const std::vector<Expr>& window,
                                        const Expr& tap);

// The store nests (StoreNest::build) of a separable max_pool and of max_pool_grad.
Expected<Stmt> max_pool_nest(const Value& value, GroupContext& group);
Expected<Stmt> max_pool_grad_nest(const Value& value, GroupContext& group);

}  // namespace kiln::loop::lowering
