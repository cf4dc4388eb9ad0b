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

struct LoweredGroup {
  Kernel kernel;
  std::vector<const Value*> inputs;   // bound to kernel.params[0, inputs.size())
  std::vector<const Value*> outputs;  // bound to the parameters after them, in order
};

// `nodes` are distinct nodes of `graph`, in any order. Errors name the op that cannot be
// lowered.
Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes);

}  // namespace kiln::loop
