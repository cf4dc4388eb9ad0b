// The zoo's training steps: every preset's step builds and verifies (bert-large's quickly), and
// on every tiny preset the whole-model gradient agrees with a central finite difference of the
// loss along a random direction through all parameters, in f64.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "ir/verifier.h"
#include "models/model.h"

namespace kiln {
namespace {

ModelInstance build(const std::string& preset, const ModelOptions& options = {}) {
  Expected<ModelInstance> model = build_model(preset, options);
  EXPECT_TRUE(model) << model.status().message();
  return std::move(model).value();  // throws, failing the test, when there is none
}

Array as_f64(const Array& array) {
  if (array.dtype != DType::f32) return array;
  Array converted(DType::f64, array.shape);
  for (int64_t i = 0; i < array.size(); ++i) converted[i] = array[i];
  return converted;
}

// The graph rebuilt with every f32 (input types, dtype and tensor attributes) made f64: the zoo
// builds f32 models, and finite differences need f64.
Graph to_f64(const Graph& graph) {
  const auto widen = [](DType dtype) { return dtype == DType::f32 ? DType::f64 : dtype; };
  Graph result(graph.name());
  std::map<const Value*, Value*> mapped;
  for (const Value* input : graph.inputs()) {
    mapped[input] = result.add_input({widen(input->dtype()), input->shape()}, input->name());
  }
  for (const Node* node : graph.nodes()) {
    Attrs attrs;
    for (const auto& [name, value] : node->attrs().entries()) {
      if (value.kind() == AttrKind::dtype) {
        attrs.set(name, widen(value.as_dtype()));
      } else if (value.kind() == AttrKind::tensor) {
        attrs.set(name, as_f64(value.as_tensor()));
      } else {
        attrs.set(name, value);
      }
    }
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(mapped.at(input));
    Expected<Node*> added = result.add_node(node->op(), inputs, attrs);
    EXPECT_TRUE(added) << added.status().message();
    for (int i = 0; i < node->num_outputs(); ++i) mapped[node->output(i)] = (*added)->output(i);
  }
  std::vector<Value*> outputs;
  for (const Value* output : graph.outputs()) outputs.push_back(mapped.at(output));
  result.set_outputs(outputs);
  return result;
}

double loss_at(const Graph& loss_graph, const std::vector<Array>& inputs) {
  Expected<std::vector<Array>> outputs = interpret(loss_graph, inputs);
  EXPECT_TRUE(outputs) << outputs.status().message();
  return outputs ? (*outputs)[0][0] : 0;
}

TEST(ZooTrainingStep, EveryPresetBuildsAVerifiedStep) {
  for (const PresetInfo& preset : zoo_presets()) {
    SCOPED_TRACE(preset.name);
    const ModelInstance model = build(preset.name);
    Expected<TrainingStep> step = build_training_step(model, Optimizer::adam());
    ASSERT_TRUE(step) << step.status().message();
    EXPECT_TRUE(verify(step->graph).is_ok());
    // The loss, each parameter and its two Adam moments.
    EXPECT_EQ(step->graph.outputs().size(), 1 + 3 * step->parameters.size());
    EXPECT_EQ(step->extra_inputs.size(), 2 + 2 * step->parameters.size());
  }
}

TEST(ZooTrainingStep, BertLargeStepBuildsInUnderTwoSeconds) {
  const ModelInstance model = build("bert-large");
  const auto start = std::chrono::steady_clock::now();
  Expected<TrainingStep> step = build_training_step(model, Optimizer::adamw());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(step) << step.status().message();
  // A generous bound (it takes about 0.2 s): this guards against quadratic passes, not speed.
  EXPECT_LT(seconds, 2.0);
  EXPECT_LT(step->graph.num_nodes(), 12000);
  RecordProperty("nodes", step->graph.num_nodes());
}

TEST(ZooTrainingStep, TinyPresetGradientsMatchFiniteDifferences) {
  const std::vector<std::pair<std::string, ModelOptions>> presets = {
      {"mlp-tiny", {}},    {"bert-tiny", {}},    {"vit-tiny", {.image_size = 32}},
      {"resnet-tiny", {}}, {"xml-cnn-tiny", {}}, {"gcn-tiny", {}}};
  for (const auto& [preset, options] : presets) {
    SCOPED_TRACE(preset);
    const ModelInstance model = build(preset, options);
    Expected<TrainingStep> step = build_training_step(model, std::nullopt);
    ASSERT_TRUE(step) << step.status().message();
    const Graph step64 = to_f64(step->graph);
    const Graph loss64 = to_f64(model.loss.graph);
    Expected<std::vector<Array>> values = model.input_values(model.loss);
    ASSERT_TRUE(values) << values.status().message();
    std::vector<Array> inputs;
    for (const Array& value : *values) inputs.push_back(as_f64(value));
    Expected<std::vector<Array>> gradients = interpret(step64, inputs);
    ASSERT_TRUE(gradients) << gradients.status().message();

    // A random direction d through every parameter; the gradient's prediction is g . d.
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal;
    // Small, because ResNet's ReLUs and max pooling have kinks: at 1e-6 a few of its 30,000
    // activations cross one and the difference is off by 4e-4; f64 rounding costs only ~1e-9.
    const double epsilon = 1e-7;
    std::vector<Array> plus = inputs;
    std::vector<Array> minus = inputs;
    double predicted = 0;
    size_t parameter = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (model.loss.input_kinds[i] != InputKind::parameter) continue;
      const Array& gradient = (*gradients)[1 + parameter++];
      for (int64_t j = 0; j < gradient.size(); ++j) {
        const double d = normal(rng);
        predicted += gradient[j] * d;
        plus[i][j] += epsilon * d;
        minus[i][j] -= epsilon * d;
      }
    }
    ASSERT_EQ(parameter, step->parameters.size());
    const double measured = (loss_at(loss64, plus) - loss_at(loss64, minus)) / (2 * epsilon);
    EXPECT_NEAR(measured, predicted, 1e-6 * std::abs(predicted))
        << "loss " << loss_at(loss64, inputs);
  }
}

}  // namespace
}  // namespace kiln
