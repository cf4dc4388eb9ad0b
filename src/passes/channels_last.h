// Channels-last convolutions: the CPU's layout for a network of convolutions.
//
// Kiln's conv computes on images with their channels first ([N, C, H, W], ONNX's and PyTorch's
// layout) as im2col and gemm. oneDNN's direct convolutions (brgconv on AVX-512) run faster on
// images with their channels last ([N, H, W, C]), but each conversion between the two
// layouts is a pass over memory, which, made around every convolution, took back what the
// convolutions gained (docs/benchmarks.md). So the layout changes once for a whole network,
// not once per convolution:
//
//   1. every f32, bf16 or f16 conv becomes to_first(conv_channels_last(to_last(x), w)), where
//      to_last and to_first are transposes moving dim 1 last and back;
//   2. to_first transposes sink below the elementwise and broadcasting ops that read them (a
//      bias add, a ReLU, a residual add of two convolutions): op(to_first(a), to_first(b)) is
//      to_first(op(a, b)), and an operand with no more elements than the channels (a
//      per-channel bias, a scalar) is moved to the channels-last layout itself; likewise
//      below a split (two convolutions of one input, merged by the substitution search,
//      then split along the channels) and an inference batch norm (as the per-channel
//      arithmetic it computes, over the last axis);
//   3. a bias add (one value per channel) and then a ReLU reading a convolution alone join it
//      (conv_channels_last's bias input and relu attribute): oneDNN computes them in its
//      epilogue, while the output is in cache;
//   4. the rewrite passes then cancel each to_last(to_first(v)) (passes/fold_layout.h) and
//      fold the moved constants, so a chain of convolutions, biases, ReLUs and residual adds
//      runs channels last from its first convolution to its last reader that needs channels
//      first (a pooling, a flatten), where one transpose remains;
//   5. a 3x3 convolution at stride 1 is marked `winograd` where the cost model prices
//      Winograd's minimal filtering below the direct sum: its multiplications (the op's cost
//      says how many fewer) at the machine's gemm rate, plus oneDNN's copies of x and y into
//      and out of the blocked layout its Winograd kernels take, at its memory bandwidth. At
//      run time a shape oneDNN has no Winograd kernel for computes the direct sum.
//
//   %y = conv(%x, %w); %r = relu(add(%y, %b))
//     ==> %y = conv_channels_last(transpose(%x, [0,2,3,1]), %w, %b') {relu = true}
//         %r = transpose(%y, [0,3,1,2])                     (%b' = %b as [O])
//
// It runs on inference graphs only: a training step's convolution gradients read x and dy
// channels first, so each would need its own transposes. Grouped convolutions keep conv.
#pragma once

#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "ir/graph.h"

namespace kiln {

struct ChannelsLastReport {
  int converted = 0;              // convolutions now conv_channels_last
  int sunk = 0;                   // elementwise ops moved to channels last
  int fused = 0;                  // bias adds and relus the convolutions compute
  int winograd = 0;               // convolutions computed by Winograd's algorithm (step 5)
  std::vector<std::string> kept;  // why the other convolutions keep conv, one line each
};

// Rewrites `graph` as above, then folds what the rewrite leaves (passes/rewrite_graph.h's
// passes: fold-layout, fold-constants, dead code); `profile` prices step 5's choice.
ChannelsLastReport convert_to_channels_last(Graph& graph, const cost::DeviceProfile& profile);

}  // namespace kiln
