// Mixed precision: a graph of f32 computed under a precision policy, as torch.autocast computes
// a PyTorch program.
//
// Each op's record says how it runs under mixed precision (ir/op.h: PrecisionPolicy):
//   - low: contractions (matmul, the convolutions) read their f32 operands cast to the low
//     dtype (bf16 or f16), accumulate in f32 (loop/stmt.h's library calls, the lowerings'
//     sums) and write the low dtype, where the target has a library that runs them so (on
//     the CPU and the GPU today, matmuls); elsewhere they compute in f32;
//   - f32: softmax, normalizations, sums and means, exp and log, the losses read low
//     operands cast up to f32 and write f32;
//   - follow: everything else (elementwise, layout, max) computes in its operands' dtype, the
//     widest where they differ, as PyTorch's type promotion chooses: a residual add of an f32
//     stream and a bf16 branch is f32, and so is an optimizer's update of an f32 moment by a
//     bf16 gradient. Only parameters and constants that broadcast against the rest (a bias, a
//     scalar) are cast down instead, as autocast casts a linear layer's bias with its weight:
//     a bias add after a bf16 matmul stays bf16. And an op whose results reach only f32
//     outputs and f32 ops computes in f32: the optimizer's update of an f32 parameter from a
//     gradient a low contraction made (a squared f16 gradient would underflow), a scaling
//     before a softmax.
//
//   %y = matmul(%x, %w) : f32[8,64]            %x.bf16 = cast(%x) {to = bf16} : bf16[8,32]
//   %z = add(%y, %b) : f32[8,64]       ==>     %w.bf16 = cast(%w) {to = bf16} : bf16[32,64]
//   %g = gelu(%z) : f32[8,64]                  %y = matmul(%x.bf16, %w.bf16) : bf16[8,64]
//   %h = matmul(%g, %v) : f32[8,16]            %b.bf16 = cast(%b) {to = bf16} : bf16[64]
//                                              %z = add(%y, %b.bf16) : bf16[8,64]
//                                              %g = gelu(%z) : bf16[8,64]
//                                              %v.bf16 = cast(%v) {to = bf16} : bf16[64,16]
//                                              %h.bf16 = matmul(%g, %v.bf16) : bf16[8,16]
//                                              %h = cast(%h.bf16) {to = f32} : f32[8,16]
//
// The graph's inputs and outputs keep their dtypes (an output computed in the low dtype is cast
// back), so a compiled graph takes and returns what it did in f32. On a training step (forward,
// backward and update in one graph) the parameters and optimizer state stay f32: master
// weights, each cast to the low dtype once, where the forward and backward contractions read
// it; the weight gradients come out of their contractions in the low dtype and the update
// computes in f32. Values of other dtypes (f64, integers, bool) are left as they are. The pass
// is idempotent, and a graph traced under autocast gains at most the f32 of its sums.
//
// fp32 changes nothing. tf32 changes no dtype either: it is the precision of f32 contractions
// on a GPU's tensor cores, a choice of the library call, not of the graph: the CUDA code
// generator marks the f32 gemms of a tf32 compilation (runtime/cuda_launch.h: CudaGemm::tf32),
// and the CPU computes them as fp32.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

enum class Precision : uint8_t { fp32, tf32, bf16, fp16 };

inline constexpr Precision kAllPrecisions[] = {Precision::fp32, Precision::tf32, Precision::bf16,
                                               Precision::fp16};

std::string_view precision_name(Precision precision);  // "fp32", "tf32", "bf16", "fp16"
Expected<Precision> parse_precision(std::string_view name);
// The dtype contractions run in: bf16, f16; none for fp32 and tf32.
std::optional<DType> low_precision_dtype(Precision precision);

struct PrecisionSummary {
  std::optional<DType> low;     // bf16 or f16; none where the pass changed no dtype
  int low_precision_nodes = 0;  // nodes computing in the low dtype
  int casts_inserted = 0;
};

// Whether an op whose policy is low computes in the low dtype on the target compiled for
// (target/target.h); those it declines compute in f32.
using RunsInLowPrecision = std::function<bool(Op)>;

// Rewrites `graph` under the policy for `precision` (a new graph; value names kept). Without
// `runs_low`, every op whose policy is low computes in the low dtype.
Expected<PrecisionSummary> apply_precision(Graph& graph, Precision precision,
                                           const RunsInLowPrecision& runs_low = nullptr);

}  // namespace kiln
