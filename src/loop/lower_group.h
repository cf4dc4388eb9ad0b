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
// Contractions call a library for their inner block. A matmul of f32 or f64 is not stored
// through its reduce definition but as gemm statements (loop/stmt.h; BLAS in generated
// code): a loop over its batch dims and blocks of output rows, one gemm per block. Group
// outputs computed elementwise from it (a bias add, an activation, a residual add) are its
// *epilogue*: stored in the same block loop right after each gemm, while the block is in
// cache, instead of in a separate pass over memory; an intermediate matmul read only by
// epilogues then lives in a block-sized local buffer.
//
//   matmul -> add bias -> relu over a [M, K], w [K, N]:
//     for (i0, 0, M / R) allocate blk[R*N] {
//       gemm(R, N, K) blk[0, ld N] = in0[i0*R*K, ld K] * in1[0, ld N]
//       for i1, i2: out0[i0*R + i1, i2] = max(blk[i1*N + i2] + in2[i2], 0.0f) }
//
// Consumers that do not fit (a transpose of the product, a reduction) read the matmul from
// a full buffer as before. A gemm reads its operands from memory, so an operand computed in
// the group is stored in a local buffer even where it would otherwise be inlined.
// Convolutions and their gradients of f32 and f64 are im2col and gemm statements per image
// and group (loop/lower_conv.h). A conv's or conv_grad_data's elementwise consumers are its
// epilogue in the same way, run on each image's block as soon as it is complete; a product
// read only by them is written into the last epilogue's buffer, so it needs no buffer of its
// own. scatter_add of f32, f64, i32 and i64 is a copy of the data
// and then one accumulating store per update, in index order (linear in the updates, where
// the gather-form definition is quadratic). Other dtypes (f16, bf16, integers: no BLAS routine) and
// spmm (OpenBLAS has no sparse routine) keep their reduce definitions.
//
//   mean -> sub -> exp over x [R, N]:
//     allocate t0[R] { for i0: t0[i0] = sum(k0, 0, N, x[i0, k0]) / N
//                      for i1, i2: out0[i1, i2] = exp(x[i1, i2] - t0[i1]) }
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
  // Rows of C per gemm call for a matmul with epilogues; 0: chosen so that a block fits in
  // L2 (lower_group.cc). Tests set it to make blocks and tails small.
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

// Whether lower_group stores `node` (a matmul) as gemm statements: f32 and f64 (BLAS has no
// f16, bf16 or integer gemm; those keep the reduce definition).
bool lowers_matmul_to_gemm(const Node& node);

// Whether lower_group runs elementwise consumers of `node` on each image's block of its
// output: a conv or conv_grad_data lowered to gemm (f32, f64). conv_grad_weight sums over
// every image into one output, so no block of it is complete before the end.
bool conv_takes_epilogue(const Node& node);

// `nodes` are distinct nodes of `graph`, in any order. Errors name the op that cannot be
// lowered.
Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes,
                                   const LowerGroupOptions& options = {});

}  // namespace kiln::loop
