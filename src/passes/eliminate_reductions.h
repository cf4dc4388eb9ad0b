// Reduction elimination: reductions that merge into a neighbour or need not run at all.
//
// Four rewrites, each exact up to floating-point reassociation:
//
// 1. A sum over the batch of a batched matmul whose contraction runs over rows joins the
//    contraction. Every weight gradient of a dense layer applied to [batch, seq, features]
//    has this form (the gradient rule's matmul, then sum_to the weight's shape); the rewrite
//    contracts over batch x seq at once, so the [batch, k, n] product is never stored:
//
//      %p = matmul(%x, %dy) {transpose_a = true} : f32[8,768,3072]      %xf = reshape(%x) : f32[1024,768]
//      %g = sum(%p) {axes = [0]} : f32[768,3072]                  ==>   %df = reshape(%dy) : f32[1024,3072]
//                                                                        %g = matmul(%xf, %df) {transpose_a = true}
//
// 2. A reduction over axes of extent 1 only is a reshape (sum, mean, max, min, prod).
// 3. A reduction of a reduction of the same kind is one reduction over both sets of axes
//    (sum, max, min, prod; mean when floating, since every inner mean averages as many
//    elements), when the inner one has no other reader.
// 4. A sum or mean over axes that a broadcast_to created reads the broadcast's input instead:
//    sum(broadcast_to(%v)) over n copies is n * %v, their mean and max and min are %v.
//
// The replaced nodes are left without readers for dead-code elimination to remove.
#pragma once

#include "ir/graph.h"

namespace kiln {

// Returns whether anything was rewritten.
bool eliminate_reductions(Graph& graph);

}  // namespace kiln
