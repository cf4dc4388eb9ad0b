// Which producer -> consumer edges may be inside one kernel, by named rules.
//
// An edge is a value computed by one node and read by another. Whether the two may share a
// kernel depends on what lower_group (loop/lower_group.h) can do with them:
//
//   inline-producer    elementwise, broadcast or injective producer: its definition is
//                      inlined where the consumer reads it; nothing is stored
//   stitch-reduction   reduction producer (sum, mean, softmax, layer norm, ...) read by an
//                      elementwise, broadcast or reduction consumer: the reduced values are
//                      computed into a local buffer first, in the same kernel
//   matmul-epilogue    f32/f64 matmul read by an elementwise or broadcast consumer of the
//                      product's shape: the consumer runs on each output block after its gemm
//   conv-epilogue      the same for an f32/f64 conv or conv_grad_data: the consumer runs on
//                      each image's block of the output once it is complete
//
// Every other edge is cut, with the reason. The reasons are about the machine, not taste: a
// BLAS gemm reads its operands from memory, so a producer feeding one is stored in full
// either way; opaque ops (scatters, pooling gradients) are lowered in gather form and read
// their inputs many times; a collective (all_reduce, broadcast) runs through a communicator
// as a program step of its own, never inside a kernel. A rule can be disabled by name
// (FusionOptions::disabled_rules) to bisect a wrong result: its edges are then cut with "rule
// disabled".
#pragma once

#include <set>
#include <span>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace kiln::fusion {

struct FusionRule {
  std::string_view name;
  std::string_view summary;
};

std::span<const FusionRule> fusion_rules();

struct EdgeVerdict {
  bool fusible = false;
  std::string rule;    // the rule that allows the edge; empty when it is cut
  std::string reason;  // why it may be fused, or why it is cut
};

// The verdict on putting `producer` and `consumer` (which reads one of its outputs) in one
// kernel.
EdgeVerdict classify_edge(const Node& producer, const Node& consumer,
                          const std::set<std::string>& disabled_rules);

}  // namespace kiln::fusion
