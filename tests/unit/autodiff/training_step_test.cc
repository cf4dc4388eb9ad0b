// make_training_step: its signature, and SGD, Adam and AdamW updates checked
// against the optimizers' formulas evaluated here in plain C++ from the step's
// own gradients.
#include "autodiff/training_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/common_subexpressions.h"
#include "passes/dead_code.h"
#include "passes/decompose.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;

// A two-layer classifier in f64: the loss and, as a second output, the logits
// (which the step does not need).
constexpr const char *kForward =
    R"(graph @mlp(%x: f64[4,3], %labels: i64[4], %w1: f64[3,5],
    %b1: f64[5], %w2: f64[5,2]) {
  %h = matmul(%x, %w1) : f64[4,5]
  %hb = add(%h, %b1) : f64[4,5]
  %a = tanh(%hb) : f64[4,5]
  %logits = matmul(%a, %w2) : f64[4,2]
  %loss = cross_entropy(%logits, %labels) : f64[]
  return %loss, %logits
})";

struct Fixture {
  Graph forward;
  std::vector<const Value *> params = {};
  std::vector<Array> inputs = {};  // the forward graph's
};

Fixture make_fixture() {
  Expected<Graph> graph = parse_graph(kForward);
  EXPECT_TRUE(graph.has_value()) << graph.status().message();
  Fixture fixture{.forward = std::move(*graph)};
  for (const char *name : {"w1", "b1", "w2"}) {
    fixture.params.push_back(fixture.forward.find_value(name));
  }
  fixture.inputs = random_inputs(fixture.forward, {.seed = 11, .int_range = 2});
  return fixture;
}

std::vector<Array> run(const Graph &graph, const std::vector<Array> &inputs) {
  Expected<std::vector<Array>> outputs = interpret(graph, inputs);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return outputs ? *outputs : std::vector<Array>{};
}

std::vector<std::string> output_names(const Graph &graph) {
  std::vector<std::string> names;
  for (const Value *value : graph.outputs()) names.push_back(value->name());
  return names;
}

// Arrays shaped like the parameters, filled with `fill(parameter, element)`.
std::vector<Array> per_parameter(const Fixture &fixture,
                                 const std::function<double(size_t, int64_t)> &fill) {
  std::vector<Array> arrays;
  for (size_t p = 0; p < fixture.params.size(); ++p) {
    Array array(DType::f64, fixture.params[p]->shape());
    for (int64_t i = 0; i < array.size(); ++i) array[i] = fill(p, i);
    arrays.push_back(std::move(array));
  }
  return arrays;
}

// The gradients, from the step without an optimizer.
std::vector<Array> gradients(const Fixture &fixture) {
  Expected<TrainingStep> step = make_training_step(
      fixture.forward, fixture.forward.find_value("loss"), fixture.params, std::nullopt);
  EXPECT_TRUE(step.has_value()) << step.status().message();
  std::vector<Array> outputs = run(step->graph, fixture.inputs);
  return std::vector<Array>(outputs.begin() + 1, outputs.end());
}

TEST(TrainingStep, WithoutOptimizerReturnsLossAndNamedGradients) {
  const Fixture fixture = make_fixture();
  Expected<TrainingStep> step = make_training_step(
      fixture.forward, fixture.forward.find_value("loss"), fixture.params, std::nullopt);
  ASSERT_TRUE(step.has_value()) << step.status().message();
  EXPECT_EQ(output_names(step->graph),
            (std::vector<std::string>{"loss", "w1.grad", "b1.grad", "w2.grad"}));
  EXPECT_EQ(step->num_forward_inputs, 5);
  EXPECT_TRUE(step->extra_inputs.empty());
  // The loss equals the forward graph's, and the step is already lean.
  EXPECT_EQ(run(step->graph, fixture.inputs)[0][0], run(fixture.forward, fixture.inputs)[0][0]);
  EXPECT_FALSE(eliminate_dead_code(step->graph));
  EXPECT_FALSE(eliminate_common_subexpressions(step->graph));
}

TEST(TrainingStep, GradientsMatchFiniteDifferencesOfTheLoss) {
  const Fixture fixture = make_fixture();
  const std::vector<Array> grads = gradients(fixture);
  ASSERT_EQ(grads.size(), 3u);
  // Parameter inputs are 2, 3 and 4 of the forward graph.
  for (size_t p = 0; p < 3; ++p) {
    for (int64_t i = 0; i < grads[p].size(); ++i) {
      std::vector<Array> plus = fixture.inputs;
      std::vector<Array> minus = fixture.inputs;
      const double h = 1e-6;
      plus[p + 2][i] += h;
      minus[p + 2][i] -= h;
      const double numeric =
          (run(fixture.forward, plus)[0][0] - run(fixture.forward, minus)[0][0]) / (2 * h);
      EXPECT_NEAR(grads[p][i], numeric, 1e-7) << "parameter " << p << " element " << i;
    }
  }
}

TEST(TrainingStep, SgdWithMomentumAndWeightDecayFollowsItsFormula) {
  const Fixture fixture = make_fixture();
  const Optimizer sgd = Optimizer::sgd(/*momentum=*/0.9, /*weight_decay=*/0.01);
  Expected<TrainingStep> step =
      make_training_step(fixture.forward, fixture.forward.find_value("loss"), fixture.params, sgd);
  ASSERT_TRUE(step.has_value()) << step.status().message();
  EXPECT_EQ(step->extra_inputs,
            (std::vector<std::string>{"lr", "w1.momentum", "b1.momentum", "w2.momentum"}));
  EXPECT_EQ(output_names(step->graph),
            (std::vector<std::string>{"loss", "w1.next", "b1.next", "w2.next", "w1.momentum.next",
                                      "b1.momentum.next", "w2.momentum.next"}));

  const double lr = 0.1;
  const std::vector<Array> momentum =
      per_parameter(fixture, [](size_t p, int64_t i) { return 0.01 * (double(p) - double(i)); });
  std::vector<Array> inputs = fixture.inputs;
  inputs.push_back(Array::scalar(DType::f64, lr));
  inputs.insert(inputs.end(), momentum.begin(), momentum.end());
  const std::vector<Array> outputs = run(step->graph, inputs);
  const std::vector<Array> grads = gradients(fixture);
  for (size_t p = 0; p < 3; ++p) {
    const Array &param = fixture.inputs[p + 2];
    for (int64_t i = 0; i < param.size(); ++i) {
      const double g = grads[p][i] + 0.01 * param[i];
      const double buffer = 0.9 * momentum[p][i] + g;
      EXPECT_NEAR(outputs[4 + p][i], buffer, 1e-14);
      EXPECT_NEAR(outputs[1 + p][i], param[i] - lr * buffer, 1e-14);
    }
  }
}

// Adam (decoupled = false) or AdamW (true) at step t, against torch.optim's
// formulas.
void check_adam(bool decoupled) {
  const Fixture fixture = make_fixture();
  const double weight_decay = 0.05;
  const Optimizer optimizer =
      decoupled ? Optimizer::adamw(weight_decay) : Optimizer::adam(weight_decay);
  Expected<TrainingStep> step = make_training_step(
      fixture.forward, fixture.forward.find_value("loss"), fixture.params, optimizer);
  ASSERT_TRUE(step.has_value()) << step.status().message();
  ASSERT_EQ(step->extra_inputs.size(), 2u + 2 * 3);
  EXPECT_EQ(step->extra_inputs[1], "step");
  EXPECT_EQ(step->extra_inputs[2], "w1.m");
  EXPECT_EQ(step->extra_inputs[3], "w1.v");

  const double lr = 0.01;
  const double t = 3;
  const std::vector<Array> m =
      per_parameter(fixture, [](size_t p, int64_t i) { return 0.02 * (double(i) - double(p)); });
  const std::vector<Array> v =
      per_parameter(fixture, [](size_t p, int64_t i) { return 0.001 * double(1 + i + p); });
  std::vector<Array> inputs = fixture.inputs;
  inputs.push_back(Array::scalar(DType::f64, lr));
  inputs.push_back(Array::scalar(DType::f64, t));
  for (size_t p = 0; p < 3; ++p) {
    inputs.push_back(m[p]);
    inputs.push_back(v[p]);
  }
  const std::vector<Array> outputs = run(step->graph, inputs);
  const std::vector<Array> grads = gradients(fixture);
  for (size_t p = 0; p < 3; ++p) {
    const Array &param = fixture.inputs[p + 2];
    for (int64_t i = 0; i < param.size(); ++i) {
      double w = param[i];
      double g = grads[p][i];
      if (decoupled) {
        w *= 1 - lr * weight_decay;
      } else {
        g += weight_decay * w;
      }
      const double m_next = 0.9 * m[p][i] + 0.1 * g;
      const double v_next = 0.999 * v[p][i] + 0.001 * g * g;
      const double m_hat = m_next / (1 - std::pow(0.9, t));
      const double v_hat = v_next / (1 - std::pow(0.999, t));
      EXPECT_NEAR(outputs[1 + p][i], w - lr * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-13);
      EXPECT_NEAR(outputs[4 + 2 * p][i], m_next, 1e-14);
      EXPECT_NEAR(outputs[5 + 2 * p][i], v_next, 1e-14);
    }
  }
}

TEST(TrainingStep, AdamFollowsItsFormula) { check_adam(false); }
TEST(TrainingStep, AdamWDecaysWeightsDecoupled) { check_adam(true); }

// Dynamic loss scaling (torch.amp.GradScaler): the update of the scaled loss's gradients
// unscaled, which a power-of-two scale leaves exact; a step whose gradients overflow keeps
// every parameter and halves the scale; 2000 finite steps double it.
TEST(TrainingStep, LossScalingUnscalesSkipsOverflowsAndGrowsTheScale) {
  const Fixture fixture = make_fixture();
  const Optimizer sgd = Optimizer::sgd(/*momentum=*/0);
  const Value *loss = fixture.forward.find_value("loss");
  Expected<TrainingStep> plain = make_training_step(fixture.forward, loss, fixture.params, sgd);
  Expected<TrainingStep> scaled =
      make_training_step(fixture.forward, loss, fixture.params, sgd, LossScaling{});
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  ASSERT_TRUE(scaled.has_value()) << scaled.status().message();
  EXPECT_EQ(scaled->extra_inputs,
            (std::vector<std::string>{"lr", "loss_scale", "loss_scale_steps"}));
  EXPECT_EQ(output_names(scaled->graph),
            (std::vector<std::string>{"loss", "w1.next", "b1.next", "w2.next", "loss_scale.next",
                                      "loss_scale_steps.next"}));
  std::vector<Array> inputs = fixture.inputs;
  inputs.push_back(Array::scalar(DType::f64, 0.1));
  const std::vector<Array> want = run(plain->graph, inputs);
  const auto step = [&](double scale, double steps, std::vector<Array> given) {
    given.push_back(Array::scalar(DType::f64, scale));
    given.push_back(Array::scalar(DType::f64, steps));
    return run(scaled->graph, given);
  };
  const std::vector<Array> finite = step(65536, 3, inputs);
  ASSERT_EQ(finite.size(), 6u);
  for (size_t o = 0; o < 4; ++o) EXPECT_EQ(finite[o].data, want[o].data) << o;
  EXPECT_EQ(finite[4][0], 65536);
  EXPECT_EQ(finite[5][0], 4);
  // A NaN in a bias: NaN gradients, the step skipped, the scale halved.
  std::vector<Array> with_nan = inputs;
  with_nan[3][0] = std::nan("");
  const std::vector<Array> skipped = step(65536, 3, with_nan);
  ASSERT_EQ(skipped.size(), 6u);
  EXPECT_EQ(skipped[1].data, fixture.inputs[2].data);  // w1
  EXPECT_EQ(skipped[3].data, fixture.inputs[4].data);  // w2
  EXPECT_EQ(skipped[4][0], 32768);
  EXPECT_EQ(skipped[5][0], 0);
  const std::vector<Array> grown = step(1024, 1999, inputs);
  EXPECT_EQ(grown[4][0], 2048);
  EXPECT_EQ(grown[5][0], 0);
  EXPECT_TRUE(is_error_with(
      make_training_step(fixture.forward, loss, fixture.params, std::nullopt, LossScaling{})
          .status(),
      {"optimizer"}));

  // Adam's step count advances only when the update ran, as GradScaler skips optimizer.step().
  Expected<TrainingStep> adam =
      make_training_step(fixture.forward, loss, fixture.params, Optimizer::adam(), LossScaling{});
  ASSERT_TRUE(adam.has_value()) << adam.status().message();
  ASSERT_EQ(output_names(adam->graph).back(), "step.next");
  const auto adam_step = [&](std::vector<Array> given) {
    given.push_back(Array::scalar(DType::f64, 0.1));  // lr
    given.push_back(Array::scalar(DType::f64, 7));    // step
    given.push_back(Array::scalar(DType::f64, 65536));
    given.push_back(Array::scalar(DType::f64, 3));
    for (size_t p = 0; p < fixture.params.size(); ++p) {
      for (int moment = 0; moment < 2; ++moment) {
        given.push_back(Array(DType::f64, fixture.params[p]->shape()));
      }
    }
    return run(adam->graph, given).back()[0];
  };
  std::vector<Array> nan_forward = fixture.inputs;
  nan_forward[3][0] = std::nan("");
  EXPECT_EQ(adam_step(fixture.inputs), 8);
  EXPECT_EQ(adam_step(nan_forward), 7);
}

TEST(TrainingStep, RejectsBadParametersAndOptimizers) {
  const Fixture fixture = make_fixture();
  const Value *loss = fixture.forward.find_value("loss");
  const Value *hidden = fixture.forward.find_value("h");
  const Value *labels = fixture.forward.find_value("labels");
  const Value *w1 = fixture.forward.find_value("w1");
  const std::vector<const Value *> not_input = {hidden};
  EXPECT_TRUE(
      is_error_with(make_training_step(fixture.forward, loss, not_input, std::nullopt).status(),
                    {"parameter %h is not a graph input"}));
  const std::vector<const Value *> integer = {labels};
  EXPECT_TRUE(
      is_error_with(make_training_step(fixture.forward, loss, integer, std::nullopt).status(),
                    {"parameter %labels is i64[4], not floating"}));
  const std::vector<const Value *> twice = {w1, w1};
  EXPECT_TRUE(is_error_with(make_training_step(fixture.forward, loss, twice, std::nullopt).status(),
                            {"parameter %w1 is given twice"}));
  const std::vector<const Value *> none;
  EXPECT_TRUE(is_error_with(make_training_step(fixture.forward, loss, none, std::nullopt).status(),
                            {"at least one parameter"}));
  const std::vector<const Value *> params = {w1};
  EXPECT_TRUE(is_error_with(
      make_training_step(fixture.forward, hidden, params, std::nullopt).status(), {"scalar"}));
  EXPECT_TRUE(
      is_error_with(make_training_step(fixture.forward, loss, params, Optimizer::sgd(1.5)).status(),
                    {"sgd: momentum must be in [0, 1), got 1.5"}));
}

// The decompositions build a norm's statistics as its gradient rule does, so in a decomposed
// step cse computes each once: one mean of x per norm (the gradient's recomputation of the
// mean merged with the forward's), where the composite step has the norm itself and a mean.
TEST(TrainingStep, DecomposedNormsShareTheirStatisticsWithTheBackward) {
  Expected<Graph> forward = parse_graph(R"(graph @norms(%x: f64[2,3,4,4], %s: f64[3], %b: f64[3],
    %w: f64[4], %c: f64[4]) {
  %y, %m, %v = batch_norm_train(%x, %s, %b) : f64[2,3,4,4], f64[3], f64[3]
  %z = layer_norm(%y, %w, %c) : f64[2,3,4,4]
  %loss = sum(%z) : f64[]
  return %loss
})");
  ASSERT_TRUE(forward) << forward.status().message();
  std::vector<const Value *> params;
  for (const char *name : {"s", "b", "w", "c"}) params.push_back(forward->find_value(name));
  Expected<TrainingStep> step =
      make_training_step(*forward, forward->outputs()[0], params, std::nullopt);
  ASSERT_TRUE(step) << step.status().message();
  const std::vector<Array> inputs = random_inputs(step->graph, {.seed = 4});
  Expected<std::vector<Array>> before = interpret(step->graph, inputs);
  ASSERT_TRUE(before) << before.status().message();

  ASSERT_TRUE(decompose_all_composites(step->graph));
  eliminate_common_subexpressions(step->graph);
  eliminate_dead_code(step->graph);
  // The means over x (batch norm) and over the layer norm's input, each computed once.
  std::map<const Value *, int> means_of;
  for (const Node *node : step->graph.nodes()) {
    if (node->op() == Op::reduce_mean) ++means_of[node->input(0)];
  }
  EXPECT_EQ(means_of[step->graph.find_value("x")], 1) << print_graph(step->graph);
  int single = 0;
  for (const auto &[input, count] : means_of) single += count == 1;
  EXPECT_EQ(single, static_cast<int>(means_of.size())) << print_graph(step->graph);

  Expected<std::vector<Array>> after = interpret(step->graph, inputs);
  ASSERT_TRUE(after) << after.status().message();
  for (size_t o = 0; o < before->size(); ++o) {
    for (int64_t i = 0; i < (*before)[o].size(); ++i) {
      EXPECT_NEAR((*after)[o][i], (*before)[o][i], 1e-9 * (1 + std::fabs((*before)[o][i])));
    }
  }
}

}  // namespace
}  // namespace kiln
