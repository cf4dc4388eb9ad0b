// Layout folding: transposes, reshapes, broadcasts and copies that a neighbour's indexing can
// absorb, so that they cost no kernel and no pass over memory.
//
//   %t = transpose(%w) {perm = [1, 0]} : f32[64,32]
//   %y = matmul(%x, %t) : f32[8,32]                       ==>   %y = matmul(%x, %w) {transpose_b = true} : f32[8,32]
//
//   %r = reshape(%x) {shape = [2, 16, 1]} : f32[2,16,1]
//   %s = broadcast_to(%r) {shape = [2, 16, 8]} : f32[2,16,8]
//   %z = mul(%s, %y) : f32[2,16,8]                        ==>   %z = mul(%r, %y) : f32[2,16,8]
//
// The rewrites: a reshape of a reshape is one reshape, and a reshape to the input's own shape
// is the input; a transpose of a transpose is one transpose (with the composed permutation),
// and the identity permutation is the input; identity(x) is x; a matmul operand that swaps its
// last two axes (and keeps the others) becomes the matmul's transpose flag; and a broadcast_to
// read by an op that broadcasts its operands itself (add ... where, ir/ops.def) is skipped when
// the op's result keeps its shape; a split of one piece of a split along the same axis is one
// split, when nothing else reads the piece; a concat of all of a split's pieces, in order and
// along its axis, is the split's input. The nodes left without readers go with dead-code
// elimination. Layout ops that survive (the head split of attention, for one) are inlined into
// their readers by the partitioner where those readers are fused kernels.
#pragma once

#include "ir/graph.h"

namespace kiln {

// Returns whether anything was rewritten.
bool fold_layout(Graph& graph);

}  // namespace kiln
