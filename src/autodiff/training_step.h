// The training step: one graph that runs the forward pass, the backward pass
// and the optimizer update, so that the compiler sees (and fuses across) all
// three.
//
// make_training_step clones the forward graph, appends the gradient of the loss
// with respect to each parameter (autodiff/gradients.h) and, given an
// optimizer, each parameter's update (autodiff/optimizer.h); then dead-code and
// common-subexpression elimination drop what the step does not need (the
// forward graph's other outputs, such as logits) and merge the recomputations
// that gradient rules introduce. The step's signature:
//
//   inputs:  the forward graph's inputs, in order (data and parameters);
//            with an optimizer: %lr (scalar learning rate), %step (Adam and
//            AdamW: the step count t, 1 first), then each parameter's state,
//            "<param>.<state>" (e.g. %fc.w.momentum, %fc.w.m, %fc.w.v),
//            parameter by parameter; state starts at zeros
//   outputs: the loss; then per parameter its gradient "<param>.grad" (no
//   optimizer) or its
//            updated value "<param>.next"; then the updated state,
//            "<param>.<state>.next", in the order of the state inputs
//
// The scalars have the dtype of the parameters (all parameters must share one).
//
// With loss scaling (an optimizer's step only), as torch.amp.GradScaler scales an fp16 step so
// that small gradients do not underflow f16: two more inputs after %step, %loss_scale (the
// scale, LossScaling::initial_scale first) and %loss_scale_steps (finite steps since the scale
// last changed, 0 first), and their ".next" outputs last. The gradients are those of
// loss * loss_scale, multiplied by 1 / loss_scale before the update reads them; where any of
// them is infinite or NaN, every parameter and state keeps its value (the step is skipped) and
// the scale is multiplied by backoff_factor; after growth_interval finite steps in a row, by
// growth_factor. Adam's and AdamW's steps then return %step.next last, %step + 1 when the
// update ran and %step when it was skipped (GradScaler skips optimizer.step()), which the
// caller feeds back; without loss scaling the caller advances %step itself.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autodiff/optimizer.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

struct TrainingStep {
  Graph graph;
  std::vector<std::string> parameters = {};    // in order, as given
  int num_forward_inputs = 0;                  // the step's first inputs are the forward graph's
  // The inputs after those: %lr, %step, the loss scaler's, the state.
  std::vector<std::string> extra_inputs = {};
};

// Dynamic loss scaling, with GradScaler's defaults.
struct LossScaling {
  double initial_scale = 65536;
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int growth_interval = 2000;

  // A positive scale, growth >= 1, backoff in (0, 1), an interval >= 1.
  Status validate() const;
};

// `loss` is a floating scalar value and `parameters` are distinct floating
// graph inputs, all of `forward`. Without an optimizer the step returns
// gradients; loss scaling needs an optimizer.

Expected<TrainingStep> make_training_step(const Graph &forward, const Value *loss,
                                          std::span<const Value *const> parameters,
                                          const std::optional<Optimizer> &optimizer,
                                          const std::optional<LossScaling> &loss_scaling = {});

}  // namespace kiln
