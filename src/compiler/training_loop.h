// A training loop over a CompiledTrainingStep: the step runs again and again, each step's
// updated parameters and optimizer state feeding the next, and the loss is computed only on
// the steps that log it. The others run the loss-free variant (passes/eliminate_loss.h).
//
// The step's signature is make_training_step's (autodiff/training_step.h): every output after
// the loss is named "<input>.next" after the input it replaces, and an input named "step" (the
// Adam step count) counts up by one per step, unless the step returns it (%step.next, with loss
// scaling: a skipped step does not count). Buffers are swapped, not copied: an output of
// one step is the next step's input.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "ir/array.h"
#include "kiln/kiln.h"
#include "support/status.h"

namespace kiln {

struct TrainingLoopOptions {
  int steps = 10;
  // The loss is computed on steps loss_every, 2 * loss_every, ... and on the last step
  // (steps count from 1); 1 computes it on every step.
  int loss_every = 10;
};

struct LoggedLoss {
  int step = 0;
  double loss = 0;
};

struct TrainingLoopResult {
  std::vector<LoggedLoss> losses;
  std::vector<double> seconds_with_loss;     // wall time of each step that computed the loss
  std::vector<double> seconds_without_loss;  // and of each that did not
  // The inputs the next step would take (updated weights and state), as the kernels read them.
  std::vector<TensorType> input_types;
  std::vector<std::vector<std::byte>> final_input_bytes;

  Array final_input(size_t index) const;  // decoded
};

// `make_input(i)` gives the first step's input i, of its exact type; each is encoded as it
// comes, so that no more than one is held in f64 (bert-large's Adam step has 1.0 G input
// elements: 8 GB as Arrays, 4 GB encoded).
Expected<TrainingLoopResult> run_training_loop(
    CompiledTrainingStep& step, const std::function<Expected<Array>(size_t)>& make_input,
    const TrainingLoopOptions& options);
// The same on inputs given whole, one per input of the step.
Expected<TrainingLoopResult> run_training_loop(CompiledTrainingStep& step,
                                               std::span<const Array> inputs,
                                               const TrainingLoopOptions& options);

}  // namespace kiln
