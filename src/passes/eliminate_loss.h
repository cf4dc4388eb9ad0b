// Loss elimination: a training step whose caller does not read the loss drops it.
//
// A training step (autodiff/training_step.h) returns the loss first, then the updated
// parameters (or gradients) and state. Between the steps whose loss a training loop logs,
// nobody reads the loss, yet computing it is a pass over the logits of its own: for
// cross-entropy, a log-sum-exp per row and a reduction over the positions, on top of the
// softmax the gradient needs. The gradient never needs the loss's value: every loss's gradient
// rule is written from the loss's inputs (cross-entropy's is softmax minus one-hot, scaled by
// the upstream gradient over the positions; binary cross-entropy's is sigmoid minus target), so
// dropping the loss output and the dead code behind it leaves every other output unchanged.
//
//   graph @step(%z: f32[4], %t: f32[4], %w: f32[4]) {        graph @step(...) {
//     %loss = binary_cross_entropy(%z, %t) : f32[]              %g = sub(sigmoid(%z), %t) ...
//     %g = ... sub(sigmoid(%z), %t) ...               ==>       return %w.next
//     return %loss, %w.next                                   }
//   }
//
// The result has one output fewer: it is a second program beside the full step, not a rewrite
// of it (the compiler's pipeline keeps a graph's signature), and CompiledTrainingStep
// (kiln/kiln.h) holds both.
#pragma once

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// Removes `step`'s first output, which must be a floating scalar with other outputs after it,
// and every node only it needed. Returns how many nodes went.
Expected<int> eliminate_loss(Graph& step);

}  // namespace kiln
