#include "compiler/training_loop.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "compiler/tensor_bytes.h"

namespace kiln {
namespace {

// For each output after the loss, the index of the input it replaces in the next step.
Expected<std::vector<size_t>> feedback_inputs(const Graph& step) {
  std::vector<size_t> feedback;
  const std::vector<Value*>& inputs = step.inputs();
  for (size_t o = 1; o < step.outputs().size(); ++o) {
    const Value& output = *step.outputs()[o];
    const std::string& name = output.name();
    auto input = inputs.end();
    if (name.ends_with(".next")) {
      const std::string replaced = name.substr(0, name.size() - std::string(".next").size());
      input = std::ranges::find(inputs, replaced, &Value::name);
    }
    if (input == inputs.end() || (*input)->type() != output.type()) {
      return Status::errorf("output %{} of @{} does not name an input it replaces (\"<input>.next\" "
                            "of the input's type): a training loop needs a step with an "
                            "optimizer, whose outputs after the loss are the updated parameters "
                            "and state",
                            name, step.name());
    }
    feedback.push_back(static_cast<size_t>(input - inputs.begin()));
  }
  return feedback;
}

}  // namespace

Array TrainingLoopResult::final_input(size_t index) const {
  return decode_array(input_types.at(index), final_input_bytes.at(index).data());
}

Expected<TrainingLoopResult> run_training_loop(
    CompiledTrainingStep& step, const std::function<Expected<Array>(size_t)>& make_input,
    const TrainingLoopOptions& options) {
  if (options.steps < 1 || options.loss_every < 1) {
    return Status::errorf("a training loop needs steps >= 1 and loss_every >= 1, got {} and {}",
                          options.steps, options.loss_every);
  }
  const Graph& graph = step.full_step().graph();
  KILN_ASSIGN_OR_RETURN(const std::vector<size_t> feedback, feedback_inputs(graph));
  const auto step_count = std::ranges::find(graph.inputs(), std::string("step"), &Value::name);
  const size_t step_index = static_cast<size_t>(step_count - graph.inputs().begin());
  // A step with loss scaling counts itself (%step.next, fed back: a skipped step is none).
  const bool counts_steps = step_count != graph.inputs().end() && (*step_count)->rank() == 0 &&
                            std::ranges::find(feedback, step_index) == feedback.end();

  std::vector<std::vector<std::byte>> input_bytes;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(const Array input, make_input(i));
    if (input.type() != graph.inputs()[i]->type()) {
      return Status::errorf("input %{} must be {}, got {}", graph.inputs()[i]->name(),
                            graph.inputs()[i]->type().to_string(), input.type().to_string());
    }
    input_bytes.push_back(encode_array(input));
  }
  std::vector<std::vector<std::byte>> output_bytes;
  for (const Value* output : graph.outputs()) {
    output_bytes.emplace_back(static_cast<size_t>(output->shape().num_elements() *
                                                  dtype_size_bytes(output->dtype())));
  }
  TrainingLoopResult result;
  CompiledModel* loss_free = step.loss_free_step();
  for (int s = 1; s <= options.steps; ++s) {
    const bool with_loss = s % options.loss_every == 0 || s == options.steps;
    std::vector<const void*> input_pointers;
    for (const auto& bytes : input_bytes) input_pointers.push_back(bytes.data());
    std::vector<void*> output_pointers;
    for (auto& bytes : output_bytes) output_pointers.push_back(bytes.data());
    const auto start = std::chrono::steady_clock::now();
    if (with_loss || loss_free == nullptr) {
      KILN_RETURN_IF_ERROR(step.full_step().run_raw(input_pointers, output_pointers));
    } else {
      KILN_RETURN_IF_ERROR(loss_free->run_raw(
          input_pointers, std::span<void* const>(output_pointers).subspan(1)));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (with_loss ? result.seconds_with_loss : result.seconds_without_loss).push_back(seconds);
    if (with_loss) {
      const Array loss = decode_array(graph.outputs()[0]->type(), output_bytes[0].data());
      result.losses.push_back({.step = s, .loss = loss[0]});
    }
    for (size_t o = 0; o < feedback.size(); ++o) {
      std::swap(input_bytes[feedback[o]], output_bytes[o + 1]);
    }
    if (counts_steps) {
      Array count = decode_array(graph.inputs()[step_index]->type(),
                                 input_bytes[step_index].data());
      count.data[0] += 1;
      input_bytes[step_index] = encode_array(count);
    }
  }
  for (const Value* input : graph.inputs()) result.input_types.push_back(input->type());
  result.final_input_bytes = std::move(input_bytes);
  return result;
}

Expected<TrainingLoopResult> run_training_loop(CompiledTrainingStep& step,
                                               std::span<const Array> inputs,
                                               const TrainingLoopOptions& options) {
  const Graph& graph = step.full_step().graph();
  if (inputs.size() != graph.inputs().size()) {
    return Status::errorf("@{} takes {} inputs, got {}", graph.name(), graph.inputs().size(),
                          inputs.size());
  }
  return run_training_loop(
      step, [&](size_t i) { return Expected<Array>(inputs[i]); }, options);
}

}  // namespace kiln
