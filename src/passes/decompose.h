// Decomposition: composite ops become the primitive ops their definitions build (OpDef's
// `decompose`, ir/ops/composite.cc): softmax, log_softmax, layer_norm, batch_norm_train,
// cross_entropy, nll_loss and binary_cross_entropy.
//
//   %y = layer_norm(%x, %s, %b) : f32[4,8]      ==>   %m = mean(%x) {axes = [1], keepdims}
//                                                     %c = sub(%x, %m)
//                                                     %v = mean(mul(%c, %c)) ...
//                                                     %y = add(mul(mul(%c, rsqrt(%v + eps)), %s), %b)
//
// A composite lowers to one stitched kernel of its own, so decomposing one pays only where the
// pieces fuse better with their neighbours: in a training step, the forward's statistics are
// the very nodes the gradient rules recompute (the decompositions build them in the same form),
// and common-subexpression elimination then computes them once. Whether a kind is worth
// decomposing is the compiler's decision, by the partitioner's estimated cost
// (compiler/decompose_by_cost.h); this pass only carries it out.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/op.h"

namespace kiln {

// The units the compiler decides on, each a set of composites decomposed together because
// their pieces share nodes: a softmax and the cross-entropy of the same logits share the max,
// exp and sum.
struct DecompositionUnit {
  std::string_view name;
  std::vector<Op> ops;
};
std::span<const DecompositionUnit> decomposition_units();

// Decomposes every node applying one of `ops`; returns whether any was. Leaves the composites'
// nodes dead (for dead-code elimination) and the shared pieces duplicated (for
// common-subexpression elimination).
bool decompose_composites(Graph& graph, std::span<const Op> ops);

// Every composite with a decomposition (the `decompose` pass of `kiln opt`).
bool decompose_all_composites(Graph& graph);

}  // namespace kiln
