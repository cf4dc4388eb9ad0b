// Convolutions as gemm statements (im2col), used by lower_group for conv, conv_grad_data and
// conv_grad_weight of f32, f64, and bf16 and f16 (mixed precision's). Internal to src/loop.
//
// For each batch element n and group g, the window of every output position is unrolled
// into a column buffer (im2col) so that the convolution is one matrix product:
//
//   col [Cg*K, Y]  col[(c, tap), y] = x[n, g*Cg + c, y * stride - pad + tap * dilation] or 0
//   conv:              y[n, g]  [Og, Y]     = w[g] [Og, Cg*K] x col
//   conv_grad_weight:  dw[g]    [Og, Cg*K] += dy[n, g] [Og, Y] x col^T     (over every n)
//   conv_grad_data:    col      [Cg*K, Y]   = w[g]^T x dy[n, g], then each dx element sums
//                      the col entries of the (tap, y) pairs that read it (col2im, gather form)
//
// where Cg and Og are the input and output channels per group, K the number of kernel taps
// and Y the number of output positions. A pointwise convolution (every kernel dim 1, stride
// 1, no padding) needs no column buffer: x itself is the [Cg, Y] matrix. The column buffer
// is allocated in each (n, g), which is all it serves (on a CPU, loop/scratch.h makes one
// buffer of it for every (n, g) when it is large, and a small one is on the stack; a GPU may
// give each (n, g) a slice of its own).
//
// With few positions per image (Y below kBatchColumnsBelow, loop/tuning.h; one group, several
// images) a gemm per image has too few columns to run well, so the batch's columns lie side
// by side, [Cg*K, N*Y], and each op is one gemm over the batch; y, or dy, is copied between
// [N, Og, Y] and [Og, N*Y] around it (ResNet-50's last two stages gained most).
//
// A 1-D conv at stride 1 with many channels per group (kTapGemmsFromChannels, loop/tuning.h;
// XML-CNN's text convolutions) needs no column buffer: its column matrix is K copies of x
// shifted by a tap each. It runs one gemm per tap, accumulated, each reading x padded once:
//
//   xpad [Cg, P]     xpad[c, p] = x[n, g*Cg + c, p - pad] or 0   (P = Y + (K-1) * dilation)
//   wt   [K, O, Cg]  wt[tap, o, c] = w[o, c, tap], once per call
//   y[n, g] [Og, Y]  = sum over taps of wt[tap, g*Og..] [Og, Cg] x xpad[:, tap * dilation..]
//
// so x is copied once per image instead of K times (the column buffer of XML-CNN's width-8
// convolution was 4.8 MB per image), and the products read it from cache.
//
// In bf16 and f16 every gemm reads 16-bit operands and sums in f32 (mixed precision's gemm,
// loop/stmt.h), and every sum is rounded once, as the reference rounds it: a conv's gemm
// writes y's 16-bit values; where a sum runs on past a gemm, the gemm writes f32 and the sum
// goes on in f32 before its one rounding: conv_grad_data's columns are f32 and col2im adds a
// channel's taps into an f32 plane; conv_grad_weight adds each image's product into an f32
// copy of dw (a batch in one gemm writes dw itself); and a conv runs no gemm per tap (those
// would add into y, rounding once per tap).
//
// A conv or conv_grad_data may carry an *epilogue*: statements that run as soon as one image
// and group of its output is complete (after that image's gemm, col2im or copy out of the
// batch's matrix), while the block is in cache. lower_group stores its elementwise consumers
// there (a bias, batch norm's scaling, relu, a residual add; relu's gradient mask).
#pragma once

#include <functional>

#include "ir/graph.h"
#include "loop/compute.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

// Whether lower_group stores `node` (a conv or one of its gradients) through conv_as_gemm.
bool lowers_conv_to_gemm(const Node& node);

// The statements run once image `n`, group `g` of the output is complete: its channels
// [g * C/groups, (g + 1) * C/groups) of image n.
using ConvEpilogue = std::function<Stmt(const Expr& n, const Expr& g)>;

// The statements computing `node`'s output into `out` from its inputs in `in0` and `in1`
// (row-major buffers of the values' shapes), each block followed by `epilogue` when it is
// given (only where conv_takes_epilogue, loop/lower_group.h).
Stmt conv_as_gemm(const Node& node, const Buffer& in0, const Buffer& in1, const Buffer& out,
                  NameGenerator& names, const ConvEpilogue& epilogue = {});

}  // namespace kiln::loop
