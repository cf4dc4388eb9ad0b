// A compiled training step with and without its loss (Compiler::compile_training_step), and the
// training loop over it, against the reference interpreter: the loss-free step gives the full
// step's other outputs, and a loop of steps (updated weights and Adam state fed back, the step
// count counting up) gives what interpreting the step again and again gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compiler/training_loop.h"
#include "interp/interpreter.h"
#include "kiln/kiln.h"
#include "models/model.h"

namespace kiln {
namespace {

// The first step's inputs, which the test's preset can always make.
std::vector<Array> step_inputs(const ModelInstance& model, const Graph& step) {
  Expected<std::vector<Array>> inputs = first_step_inputs(model, step);
  EXPECT_TRUE(inputs) << inputs.status().message();
  return inputs ? std::move(*inputs) : std::vector<Array>{};
}

void expect_close(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  double scale = 1;
  for (double v : want.data) scale = std::max(scale, std::fabs(v));
  for (int64_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-3 * std::fabs(want[i]) + 1e-4 * scale)
        << what << " element " << i;
  }
}

TEST(CompiledTrainingStep, LossFreeStepGivesTheFullStepsOtherOutputs) {
  for (const char* preset : {"bert-tiny", "xml-cnn-tiny"}) {
    SCOPED_TRACE(preset);
    Expected<ModelInstance> model = build_model(preset, {});
    ASSERT_TRUE(model) << model.status().message();
    Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
    ASSERT_TRUE(step) << step.status().message();
    const std::vector<Array> inputs = step_inputs(*model, step->graph);
    Expected<std::vector<Array>> expected = interpret(step->graph, inputs);
    ASSERT_TRUE(expected) << expected.status().message();

    Expected<CompiledTrainingStep> compiled = Compiler().compile_training_step(step->graph.clone());
    ASSERT_TRUE(compiled) << compiled.status().message();
    ASSERT_NE(compiled->loss_free_step(), nullptr);
    EXPECT_GT(compiled->loss_nodes_eliminated(), 0);
    EXPECT_LT(compiled->loss_free_step()->graph().num_nodes(),
              compiled->full_step().graph().num_nodes());

    Expected<std::vector<Array>> without = compiled->run(inputs, /*with_loss=*/false);
    ASSERT_TRUE(without) << without.status().message();
    ASSERT_EQ(without->size() + 1, expected->size());
    for (size_t o = 0; o < without->size(); ++o) {
      expect_close((*without)[o], (*expected)[o + 1], step->graph.outputs()[o + 1]->name());
    }
    Expected<std::vector<Array>> with = compiled->run(inputs, /*with_loss=*/true);
    ASSERT_TRUE(with) << with.status().message();
    ASSERT_EQ(with->size(), expected->size());
    expect_close((*with)[0], (*expected)[0], "loss");
  }
}

TEST(TrainingLoop, MatchesTheInterpretedStepRunAgainAndAgain) {
  Expected<ModelInstance> model = build_model("mlp-tiny", {});
  ASSERT_TRUE(model) << model.status().message();
  Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
  ASSERT_TRUE(step) << step.status().message();
  const Graph& graph = step->graph;
  const std::vector<Array> first = step_inputs(*model, graph);

  // The oracle: three interpreted steps, each output "<input>.next" becoming its input.
  std::vector<Array> inputs = first;
  std::vector<double> losses;
  for (int s = 1; s <= 3; ++s) {
    Expected<std::vector<Array>> outputs = interpret(graph, inputs);
    ASSERT_TRUE(outputs) << outputs.status().message();
    losses.push_back((*outputs)[0][0]);
    for (size_t o = 1; o < outputs->size(); ++o) {
      const std::string& name = graph.outputs()[o]->name();
      const Value* input = graph.find_value(name.substr(0, name.size() - 5));
      ASSERT_NE(input, nullptr) << name;
      const auto index = std::find(graph.inputs().begin(), graph.inputs().end(), input) -
                         graph.inputs().begin();
      inputs[static_cast<size_t>(index)] = std::move((*outputs)[o]);
    }
    const auto step_index = std::find(graph.inputs().begin(), graph.inputs().end(),
                                      graph.find_value("step")) - graph.inputs().begin();
    inputs[static_cast<size_t>(step_index)].data[0] += 1;
  }
  EXPECT_LT(losses[2], losses[0]);  // it learns

  for (int loss_every : {1, 2}) {
    SCOPED_TRACE(loss_every);
    Expected<CompiledTrainingStep> compiled = Compiler().compile_training_step(graph.clone());
    ASSERT_TRUE(compiled) << compiled.status().message();
    Expected<TrainingLoopResult> result =
        run_training_loop(*compiled, first, {.steps = 3, .loss_every = loss_every});
    ASSERT_TRUE(result) << result.status().message();
    // Logged on the multiples of loss_every and on the last step.
    const std::vector<int> logged_steps = loss_every == 1 ? std::vector<int>{1, 2, 3}
                                                          : std::vector<int>{2, 3};
    ASSERT_EQ(result->losses.size(), logged_steps.size());
    for (size_t l = 0; l < logged_steps.size(); ++l) {
      EXPECT_EQ(result->losses[l].step, logged_steps[l]);
      const double want = losses[static_cast<size_t>(logged_steps[l] - 1)];
      EXPECT_NEAR(result->losses[l].loss, want, 1e-4 * (1 + std::fabs(want)));
    }
    EXPECT_EQ(result->seconds_with_loss.size() + result->seconds_without_loss.size(), 3u);
    ASSERT_EQ(result->final_input_bytes.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      expect_close(result->final_input(i), inputs[i], graph.inputs()[i]->name());
    }
  }
}

// With loss scaling, the step counts itself: a step whose gradients are not finite is skipped
// and does not count in Adam's %step (GradScaler skips optimizer.step()); finite ones do.
TEST(TrainingLoop, ALossScaledStepCountsOnlyTheStepsItTook) {
  Expected<ModelInstance> model = build_model("mlp-tiny", {});
  ASSERT_TRUE(model) << model.status().message();
  Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam(), LossScaling{});
  ASSERT_TRUE(step) << step.status().message();
  const std::vector<Value*>& names = step->graph.inputs();
  const auto index_of = [&](const std::string& name) {
    return static_cast<size_t>(std::ranges::find(names, name, &Value::name) - names.begin());
  };
  Expected<CompiledTrainingStep> compiled = Compiler().compile_training_step(step->graph.clone());
  ASSERT_TRUE(compiled) << compiled.status().message();
  const int steps = 3;
  for (const bool poisoned : {false, true}) {
    SCOPED_TRACE(poisoned ? "a NaN in the batch" : "a finite batch");
    std::vector<Array> inputs = step_inputs(*model, step->graph);
    if (poisoned) inputs[0][0] = std::nan("");  // every gradient NaN, every step skipped
    Expected<TrainingLoopResult> result =
        run_training_loop(*compiled, inputs, {.steps = steps, .loss_every = 1});
    ASSERT_TRUE(result) << result.status().message();
    const double scale = LossScaling{}.initial_scale;
    EXPECT_EQ(result->final_input(index_of("step"))[0], poisoned ? 1 : 1 + steps);
    EXPECT_EQ(result->final_input(index_of("loss_scale"))[0],
              poisoned ? scale / (1 << steps) : scale);
  }
}

TEST(TrainingLoop, RefusesAStepThatReturnsGradients) {
  Expected<ModelInstance> model = build_model("mlp-tiny", {});
  ASSERT_TRUE(model) << model.status().message();
  Expected<TrainingStep> step = build_training_step(*model, std::nullopt);
  ASSERT_TRUE(step) << step.status().message();
  const std::vector<Array> inputs = step_inputs(*model, step->graph);
  Expected<CompiledTrainingStep> compiled = Compiler().compile_training_step(step->graph.clone());
  ASSERT_TRUE(compiled) << compiled.status().message();
  Expected<TrainingLoopResult> result = run_training_loop(*compiled, inputs, {.steps = 2});
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("needs a step with an optimizer"), std::string::npos)
      << result.status().message();

  result = run_training_loop(*compiled, inputs, {.steps = 0});
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("steps >= 1"), std::string::npos);
  result = run_training_loop(*compiled, std::span<const Array>(inputs).first(1), {.steps = 1});
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("inputs, got 1"), std::string::npos);
}

}  // namespace
}  // namespace kiln
