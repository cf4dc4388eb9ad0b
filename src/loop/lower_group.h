// Lowering a group of graph nodes (a fusion group, or one op) to one loop-IR kernel.
//
// The kernel's parameters are the group's external inputs (values the group reads but does
// not compute, in order of first use) followed by its outputs (values it computes that are
// graph outputs or are used by a node outside the group, in node order). Each output gets a
// loop nest over its shape that stores its compute definition (loop/compute.h). Values used
// only inside the group are
//  - inlined into their consumers when their op is elementwise, broadcast or injective (the
//    consumer's accessor substitutes the producer's definition at the index it reads: cheap
//    to recompute, no buffer), and
//  - otherwise (reductions, contractions, composites) materialised: computed once, in node
//    order, into a local buffer that the consumers load from.
// A group output is stored once and its consumers in the group load it back.
//
//   mean -> sub -> exp over x [R, N]:
//     allocate t0[R] { for i0: t0[i0] = sum(k0, 0, N, x[i0, k0]) / N
//                      for i1, i2: out0[i1, i2] = exp(x[i1, i2] - t0[i1]) }
//
// An op whose lowering record has a store nest that applies to the node (StoreNest,
// loop/compute.h) is stored by the nest's own statements instead, built beside the op's
// definitions through the group's context (loop/lowering/group_context.h): matmuls and
// convolutions of f32 and f64 as gemm statements, with the outputs computed from them on
// each block, while it is in cache, as their epilogues (loop/lowering/gemm.h); scatter_add of
// f32, f64, i32 and i64 as a copy of the data and one accumulating store per update
// (loop/lowering/layout.cc); a transposed spmm as one pass over its non-zeros
// (loop/lowering/contraction.cc); max_pool_grad as a scatter and a separable max_pool in two
// steps (loop/lowering/pooling.h). Nodes no nest applies to (other dtypes, an untransposed
// spmm) keep their definitions. A nest that reads its inputs from memory (a gemm's) has an
// operand computed in the group stored in a local buffer even where it would be inlined.
//
// Constants of more than one element are not computed by the kernel: their values become
// kernel inputs (bound, like any input, to the constant node's output value). Names in the
// kernel are Kiln's own (in0, out0, t0, i0, k0): model value names never reach loop IR. The
// result is simplified (loop/simplify.h) and verified (loop/verifier.h).
#pragma once

#include <span>
#include <vector>

#include "ir/graph.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

struct LowerGroupOptions {
  // Rows of C per gemm call for a matmul with epilogues; 0: chosen so that a block stays in
  // cache (loop/lowering/gemm_epilogues.cc). Tests set it to make blocks and tails small.
  int64_t gemm_block_rows = 0;
};

// A reshape result the group's readers outside need, with no bytes of its own: row-major data
// keeps its bytes under a reshape, so when the reshaped value is in memory anyway (an input
// of the group, an output of it, or another view) the result is that value's buffer.
struct ViewOutput {
  const Value* value;   // the reshape's result
  const Value* source;  // the value whose buffer holds its bytes
};

struct LoweredGroup {
  Kernel kernel;
  std::vector<const Value*> inputs;   // bound to kernel.params[0, inputs.size())
  std::vector<const Value*> outputs;  // bound to the parameters after them, in order
  std::vector<ViewOutput> views;      // not kernel parameters; in node order
};

// Whether lower_group stores `node` (a matmul) as gemm statements: f32, f64, and f16 and bf16
// accumulating in f32 (oneDNN, cuBLASLt); integer matmuls keep the reduce definition. Defined
// with the gemm nests (loop/lowering/gemm_nests.cc), as is conv_takes_epilogue.
bool lowers_matmul_to_gemm(const Node& node);

// Whether lower_group stores `node` (a conv_channels_last of f32, bf16 or f16) as one conv
// statement (oneDNN's direct convolution), defined with the gemm nests.
bool lowers_conv_to_library(const Node& node);

// Whether lower_group runs elementwise consumers of `node` on each image's block of its
// output: a conv or conv_grad_data lowered to gemm (f32, f64, bf16, f16), or after it, a
// conv_channels_last stored as a conv statement. conv_grad_weight sums over
// every image into one output, so no block of it is complete before the end.
bool conv_takes_epilogue(const Node& node);

// `nodes` are distinct nodes of `graph`, in any order. Errors name the op that cannot be
// lowered; they are returned, never kept in the lowerer (loop/lowering/group_context.h says
// how an input accessor's error comes back).
Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes,
                                   const LowerGroupOptions& options = {});

}  // namespace kiln::loop
