// The zoo's tiny presets compiled, forward (the loss graph) and the whole Adam training step,
// unfused, fused greedily and fused by the ILP, against the reference interpreter on the
// presets' own deterministic inputs. The interpreter rounds every value to f32 after computing it in f64; compiled
// kernels accumulate in f32, so results agree to f32 accumulation error, compounded through
// the layers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "interp/interpreter.h"
#include "kiln/kiln.h"
#include "loop/gpu_mapping.h"
#include "loop/printer.h"
#include "models/model.h"

namespace kiln {
namespace {

struct TinyPreset {
  std::string name;
  ModelOptions options;
};

const std::vector<TinyPreset>& tiny_presets() {
  static const std::vector<TinyPreset> presets = {
      {"mlp-tiny", {}},    {"bert-tiny", {}},    {"vit-tiny", {.image_size = 32}},
      {"resnet-tiny", {}}, {"xml-cnn-tiny", {}}, {"gcn-tiny", {}}};
  return presets;
}

// Adam's extra inputs: learning rate, step count (3, so that bias correction matters), and
// per parameter a first moment (small, either sign) and second moment (positive).
std::vector<Array> adam_extras(const Graph& step, size_t first_extra) {
  std::mt19937_64 rng(11);
  std::vector<Array> extras;
  for (size_t i = first_extra; i < step.inputs().size(); ++i) {
    const Value& input = *step.inputs()[i];
    Array value(input.dtype(), input.shape());
    const bool second_moment = input.name().ends_with(".v");
    for (double& v : value.data) {
      v = second_moment ? std::uniform_real_distribution<double>(1e-6, 1e-4)(rng)
                        : std::uniform_real_distribution<double>(-1e-2, 1e-2)(rng);
    }
    if (input.name() == "lr") value.data = {1e-3};
    if (input.name() == "step") value.data = {3};
    value.round_to_dtype();
    extras.push_back(std::move(value));
  }
  return extras;
}

// A tiny preset's model and its Adam training step.
struct TinyStep {
  ModelInstance model;
  TrainingStep step;
};

Expected<TinyStep> tiny_adam_step(const TinyPreset& preset) {
  KILN_ASSIGN_OR_RETURN(ModelInstance model, build_model(preset.name, preset.options));
  KILN_ASSIGN_OR_RETURN(TrainingStep step, build_training_step(model, Optimizer::adam()));
  return TinyStep{std::move(model), std::move(step)};
}

void expect_compiled_matches(const Graph& graph, const std::vector<Array>& inputs,
                             fusion::FusionMode mode) {
  SCOPED_TRACE(fusion::fusion_mode_name(mode));
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected) << expected.status().message();
  CompileOptions options;
  options.fusion.mode = mode;
  Expected<CompiledModel> model = Compiler(options).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  Expected<std::vector<Array>> actual = model->run(inputs);
  ASSERT_TRUE(actual) << actual.status().message();
  for (size_t o = 0; o < expected->size(); ++o) {
    const Array& want = (*expected)[o];
    const Array& got = (*actual)[o];
    double scale = 1;
    for (double v : want.data) scale = std::max(scale, std::fabs(v));
    for (int64_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-3 * std::fabs(want[i]) + 1e-4 * scale)
          << "output " << o << " (" << graph.outputs()[o]->name() << ") element " << i;
    }
  }
}

TEST(ZooCompiled, TinyPresetsLossAndInferenceGraphsMatchInterpreter) {
  for (const TinyPreset& preset : tiny_presets()) {
    SCOPED_TRACE(preset.name);
    Expected<ModelInstance> model = build_model(preset.name, preset.options);
    ASSERT_TRUE(model) << model.status().message();
    Expected<std::vector<Array>> inputs = model->input_values(model->loss);
    ASSERT_TRUE(inputs) << inputs.status().message();
    for (fusion::FusionMode mode : {fusion::FusionMode::off, fusion::FusionMode::ilp}) {
      expect_compiled_matches(model->loss.graph, *inputs, mode);
    }
    Expected<std::vector<Array>> inference_inputs = model->input_values(model->inference);
    ASSERT_TRUE(inference_inputs) << inference_inputs.status().message();
    expect_compiled_matches(model->inference.graph, *inference_inputs, fusion::FusionMode::ilp);
  }
}

TEST(ZooCompiled, TinyPresetsAdamTrainingStepMatchesInterpreter) {
  for (const TinyPreset& preset : tiny_presets()) {
    SCOPED_TRACE(preset.name);
    Expected<TinyStep> tiny = tiny_adam_step(preset);
    ASSERT_TRUE(tiny) << tiny.status().message();
    const Graph& step = tiny->step.graph;
    Expected<std::vector<Array>> inputs = tiny->model.input_values(tiny->model.loss);
    ASSERT_TRUE(inputs) << inputs.status().message();
    for (Array& extra : adam_extras(step, inputs->size())) inputs->push_back(std::move(extra));
    for (fusion::FusionMode mode : {fusion::FusionMode::off, fusion::FusionMode::greedy,
                                    fusion::FusionMode::ilp}) {
      expect_compiled_matches(step, *inputs, mode);
    }
  }
}

// Every kernel of the tiny presets' training steps, mapped onto a GPU, computes each reduction
// once for the elements that share it: a row statistic recomputed for each element stored is
// right, but O(row^2) (with bert-tiny's cross entropy over 30,522 logits per row done that way,
// its step took 284.7 ms on an H100; 1.43 ms without).
TEST(ZooCompiled, TinyPresetsGpuMappingComputesEachReductionOnce) {
  for (const TinyPreset& preset : tiny_presets()) {
    SCOPED_TRACE(preset.name);
    Expected<TinyStep> tiny = tiny_adam_step(preset);
    ASSERT_TRUE(tiny) << tiny.status().message();
    CompileOptions options;
    options.device.kind = DeviceKind::cuda;
    options.pipeline.stop_after = Stage::schedule;
    Expected<Compilation> compilation = Compiler(options).run_pipeline(tiny->step.graph.clone());
    ASSERT_TRUE(compilation) << compilation.status().message();
    for (const KernelRecord& record : compilation->compiled().records) {
      const std::vector<std::string> recomputed = loop::recomputed_reductions(record.kernel);
      ASSERT_TRUE(recomputed.empty())
          << fmt::format("{}\n{}", fmt::join(recomputed, "; "), loop::print(record.kernel));
    }
  }
}

}  // namespace
}  // namespace kiln
