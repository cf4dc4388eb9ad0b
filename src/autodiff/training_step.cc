#include "autodiff/training_step.h"

#include <algorithm>
#include <limits>
#include <set>

#include "autodiff/gradients.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "passes/common_subexpressions.h"
#include "passes/dead_code.h"
#include "support/check.h"

namespace kiln {
namespace {

// The parameters' counterparts in the cloned graph (found by name: clone keeps
// names), checked.
Expected<std::vector<Value *>> find_parameters(const Graph &forward, Graph &step,
                                               std::span<const Value *const> parameters) {
  std::vector<Value *> found;
  std::set<const Value *> seen;
  for (const Value *parameter : parameters) {
    if (parameter == nullptr || !forward.owns(parameter)) {
      return Status::error("a parameter is not a value of the forward graph");
    }
    if (!parameter->is_graph_input()) {
      return Status::errorf("parameter %{} is not a graph input", parameter->name());
    }
    if (!is_floating(parameter->dtype())) {
      return Status::errorf("parameter %{} is {}, not floating", parameter->name(),
                            parameter->type().to_string());
    }
    if (!seen.insert(parameter).second) {
      return Status::errorf("parameter %{} is given twice", parameter->name());
    }
    if (parameter->dtype() != parameters.front()->dtype()) {
      return Status::errorf("parameters %{} and %{} have different dtypes",
                            parameters.front()->name(), parameter->name());
    }
    found.push_back(step.find_value(parameter->name()));
  }
  return found;
}

// Names `value` for the step's signature unless it is a graph input (a gradient
// can be the seed's input only in degenerate graphs) or already carries another
// output's name.
void name_output(Graph &graph, Value *value, const std::string &name,
                 const std::vector<Value *> &outputs) {
  if (value->is_graph_input()) return;
  if (std::find(outputs.begin(), outputs.end(), value) != outputs.end()) return;
  graph.rename_value(value, name);
}

// The loss scaler's inputs, and whether this step's gradients are all finite.
struct LossScaler {
  Value *scale = nullptr;
  Value *steps = nullptr;
  Value *finite = nullptr;  // bool[]
};

// Whether every element of every gradient is finite: the largest magnitude (a reduction over
// no axes named reduces over all), NaN where any is (max propagates NaN), below infinity.
Value *all_finite(GraphBuilder &b, std::span<Value *const> grads) {
  Value *largest = nullptr;
  for (Value *grad : grads) {
    Value *magnitude = b.reduce_max(b.abs(grad), {});
    largest = largest == nullptr ? magnitude : b.max(largest, magnitude);
  }
  return b.apply1(Op::less, {largest, b.scalar(std::numeric_limits<double>::infinity(),
                                                largest->dtype())});
}

// The scale and its step count after this step (GradScaler's update).
std::pair<Value *, Value *> next_scale(GraphBuilder &b, const LossScaling &scaling,
                                       const LossScaler &scaler) {
  const DType dtype = scaler.scale->dtype();
  Value *counted = b.where(scaler.finite, b.add_scalar(scaler.steps, 1), b.scalar(0, dtype));
  Value *grow = b.greater_equal(counted, b.scalar(scaling.growth_interval, dtype));
  Value *scale = b.where(
      scaler.finite,
      b.where(grow, b.mul_scalar(scaler.scale, scaling.growth_factor), scaler.scale),
      b.mul_scalar(scaler.scale, scaling.backoff_factor));
  return {scale, b.where(grow, b.scalar(0, dtype), counted)};
}

}  // namespace

Status LossScaling::validate() const {
  if (initial_scale > 0 && growth_factor >= 1 && backoff_factor > 0 && backoff_factor < 1 &&
      growth_interval >= 1) {
    return Status::ok();
  }
  return Status::errorf(
      "loss scaling needs a positive scale, growth >= 1, backoff in (0, 1) and an interval "
      ">= 1, got {}, {}, {} and {}",
      initial_scale, growth_factor, backoff_factor, growth_interval);
}

Expected<TrainingStep> make_training_step(const Graph &forward, const Value *loss,
                                          std::span<const Value *const> parameters,
                                          const std::optional<Optimizer> &optimizer,
                                          const std::optional<LossScaling> &loss_scaling) {
  if (loss == nullptr || !forward.owns(loss)) {
    return Status::error("the loss is not a value of the forward graph");
  }
  if (parameters.empty()) return Status::error("a training step needs at least one parameter");
  if (optimizer) KILN_RETURN_IF_ERROR(optimizer->validate());
  if (loss_scaling && !optimizer) {
    return Status::error("loss scaling needs an optimizer: it skips the update of a step whose "
                         "gradients overflow");
  }
  if (loss_scaling) KILN_RETURN_IF_ERROR(loss_scaling->validate());

  TrainingStep step{.graph = forward.clone()};
  Graph &graph = step.graph;
  step.num_forward_inputs = static_cast<int>(forward.inputs().size());
  KILN_ASSIGN_OR_RETURN(std::vector<Value *> params, find_parameters(forward, graph, parameters));
  for (const Value *parameter : params) step.parameters.push_back(parameter->name());
  Value *step_loss = graph.find_value(loss->name());
  const DType dtype = params.front()->dtype();
  GraphBuilder b(graph);
  // The step's scalar inputs, in the signature's order, before the nodes that read them.
  OptimizerScalars scalars;
  LossScaler scaler;
  if (optimizer) {
    scalars.learning_rate = b.input("lr", dtype, Shape{});
    step.extra_inputs.push_back(scalars.learning_rate->name());
    if (optimizer->needs_step_count()) {
      scalars.step = b.input("step", dtype, Shape{});
      step.extra_inputs.push_back(scalars.step->name());
    }
  }
  Value *differentiated = step_loss;
  if (loss_scaling) {
    scaler.scale = b.input("loss_scale", dtype, Shape{});
    scaler.steps = b.input("loss_scale_steps", dtype, Shape{});
    step.extra_inputs.push_back(scaler.scale->name());
    step.extra_inputs.push_back(scaler.steps->name());
    differentiated = b.mul(step_loss, step_loss->dtype() == dtype
                                          ? scaler.scale
                                          : b.cast(scaler.scale, step_loss->dtype()));
    if (!b.ok()) return b.status().with_context("loss scaling");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Value *> grads,
                        build_gradients(graph, differentiated, params));
  if (loss_scaling) {
    Value *inverse = b.unary(Op::reciprocal, scaler.scale);
    for (Value *&grad : grads) grad = b.mul(grad, inverse);
    scaler.finite = all_finite(b, grads);
    if (!b.ok()) return b.status().with_context("loss scaling");
  }

  std::vector<Value *> outputs = {step_loss};
  if (!optimizer) {
    for (size_t i = 0; i < params.size(); ++i) {
      name_output(graph, grads[i], step.parameters[i] + ".grad", outputs);
      outputs.push_back(grads[i]);
    }
  } else {
    std::vector<Value *> new_state;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<Value *> state;
      for (const std::string &suffix : optimizer->state_names()) {
        state.push_back(b.input(step.parameters[i] + "." + suffix, dtype, params[i]->shape()));
        step.extra_inputs.push_back(state.back()->name());
      }
      ParameterUpdate update = update_parameter(b, *optimizer, scalars, params[i], grads[i], state);
      if (loss_scaling) {
        // A step whose gradients overflowed changes nothing.
        update.parameter = b.where(scaler.finite, update.parameter, params[i]);
        for (size_t s = 0; s < state.size(); ++s) {
          update.state[s] = b.where(scaler.finite, update.state[s], state[s]);
        }
      }
      if (!b.ok()) return b.status().with_context("optimizer update");
      name_output(graph, update.parameter, step.parameters[i] + ".next", outputs);
      outputs.push_back(update.parameter);
      for (size_t s = 0; s < state.size(); ++s) {
        name_output(graph, update.state[s], state[s]->name() + ".next", new_state);
        new_state.push_back(update.state[s]);
      }
    }
    outputs.insert(outputs.end(), new_state.begin(), new_state.end());
    if (loss_scaling) {
      const auto [scale, steps] = next_scale(b, *loss_scaling, scaler);
      if (!b.ok()) return b.status().with_context("loss scaling");
      name_output(graph, scale, "loss_scale.next", outputs);
      name_output(graph, steps, "loss_scale_steps.next", outputs);
      outputs.push_back(scale);
      outputs.push_back(steps);
      if (scalars.step != nullptr) {
        // A skipped step is no step of Adam's, as GradScaler then skips optimizer.step().
        Value *counted =
            b.where(scaler.finite, b.add_scalar(scalars.step, 1), scalars.step);
        if (!b.ok()) return b.status().with_context("loss scaling");
        name_output(graph, counted, "step.next", outputs);
        outputs.push_back(counted);
      }
    }
  }
  graph.set_outputs(outputs);
  eliminate_dead_code(graph);
  eliminate_common_subexpressions(graph);
  eliminate_dead_code(graph);
  KILN_CHECK(verify(graph).is_ok(), "training step does not verify: {}", verify(graph).message());
  return step;
}

}  // namespace kiln
