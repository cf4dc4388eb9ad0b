#include "autodiff/training_step.h"

#include <algorithm>
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

}  // namespace

Expected<TrainingStep> make_training_step(const Graph &forward, const Value *loss,
                                          std::span<const Value *const> parameters,
                                          const std::optional<Optimizer> &optimizer) {
  if (loss == nullptr || !forward.owns(loss)) {
    return Status::error("the loss is not a value of the forward graph");
  }
  if (parameters.empty()) return Status::error("a training step needs at least one parameter");
  if (optimizer) KILN_RETURN_IF_ERROR(optimizer->validate());

  TrainingStep step{.graph = forward.clone()};
  Graph &graph = step.graph;
  step.num_forward_inputs = static_cast<int>(forward.inputs().size());
  KILN_ASSIGN_OR_RETURN(std::vector<Value *> params, find_parameters(forward, graph, parameters));
  for (const Value *parameter : params) step.parameters.push_back(parameter->name());
  Value *step_loss = graph.find_value(loss->name());
  KILN_ASSIGN_OR_RETURN(std::vector<Value *> grads, build_gradients(graph, step_loss, params));

  std::vector<Value *> outputs = {step_loss};
  if (!optimizer) {
    for (size_t i = 0; i < params.size(); ++i) {
      name_output(graph, grads[i], step.parameters[i] + ".grad", outputs);
      outputs.push_back(grads[i]);
    }
  } else {
    const DType dtype = params.front()->dtype();
    GraphBuilder b(graph);
    OptimizerScalars scalars{.learning_rate = b.input("lr", dtype, Shape{})};
    step.extra_inputs.push_back(scalars.learning_rate->name());
    if (optimizer->needs_step_count()) {
      scalars.step = b.input("step", dtype, Shape{});
      step.extra_inputs.push_back(scalars.step->name());
    }
    std::vector<Value *> new_state;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<Value *> state;
      for (const std::string &suffix : optimizer->state_names()) {
        state.push_back(b.input(step.parameters[i] + "." + suffix, dtype, params[i]->shape()));
        step.extra_inputs.push_back(state.back()->name());
      }
      ParameterUpdate update = update_parameter(b, *optimizer, scalars, params[i], grads[i], state);
      if (!b.ok()) return b.status().with_context("optimizer update");
      name_output(graph, update.parameter, step.parameters[i] + ".next", outputs);
      outputs.push_back(update.parameter);
      for (size_t s = 0; s < state.size(); ++s) {
        name_output(graph, update.state[s], state[s]->name() + ".next", new_state);
        new_state.push_back(update.state[s]);
      }
    }
    outputs.insert(outputs.end(), new_state.begin(), new_state.end());
  }
  graph.set_outputs(outputs);
  eliminate_dead_code(graph);
  eliminate_common_subexpressions(graph);
  eliminate_dead_code(graph);
  KILN_CHECK(verify(graph).is_ok(), "training step does not verify: {}", verify(graph).message());
  return step;
}

}  // namespace kiln
