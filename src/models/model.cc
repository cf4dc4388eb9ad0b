#include "models/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "frontend/onnx_export.h"
#include "interp/random_inputs.h"
#include "models/presets.h"
#include "support/check.h"

namespace kiln {

Initializer normal_init(double stddev) {
  return [stddev](const TensorType& type, uint64_t seed) {
    Array array = random_array(type, seed);
    for (double& v : array.data) v *= stddev;
    array.round_to_dtype();
    return array;
  };
}

Initializer constant_init(double value) {
  return [value](const TensorType& type, uint64_t) {
    return Array(type.dtype, type.shape,
                 std::vector<double>(static_cast<size_t>(type.shape.num_elements()), value));
  };
}

Initializer uniform_int_init(int64_t range) {
  return [range](const TensorType& type, uint64_t seed) { return random_array(type, seed, range); };
}

Initializer bernoulli_init(double probability) {
  constexpr int64_t kResolution = 1024;
  const auto threshold = static_cast<double>(std::llround(probability * kResolution));
  return [threshold](const TensorType& type, uint64_t seed) {
    Array draws = random_array({DType::i64, type.shape}, seed, kResolution);
    Array array(type.dtype, type.shape);
    for (int64_t i = 0; i < array.size(); ++i) array[i] = draws[i] < threshold ? 1 : 0;
    return array;
  };
}

Initializer given_init(Array value) {
  return [value = std::move(value)](const TensorType& type, uint64_t) {
    KILN_CHECK(value.type() == type, "given value of type {} for an input of type {}",
               value.type().to_string(), type.to_string());
    return value;
  };
}

namespace {

// FNV-1a of the name, mixed with the model seed: each input's own random stream.
uint64_t input_seed(uint64_t model_seed, std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash ^ (model_seed * 0x9E3779B97F4A7C15ull);
}

const std::vector<Preset>& registry() {
  static const std::vector<Preset> presets = [] {
    std::vector<Preset> all;
    for (auto family :
         {mlp_presets, bert_presets, vit_presets, resnet_presets, xml_cnn_presets, gcn_presets}) {
      std::ranges::move(family(), std::back_inserter(all));
    }
    return all;
  }();
  return presets;
}

Expected<ModelGraph> build_graph(const Preset& preset, GraphKind kind, const ModelOptions& options,
                                 std::map<std::string, ModelInput>& inputs) {
  std::string graph_name = preset.info.name;
  std::ranges::replace(graph_name, '-', '_');
  if (kind == GraphKind::inference) graph_name += "_inference";
  ModelBuilder m(graph_name, kind, options.portable && kind == GraphKind::inference);
  KILN_ASSIGN_OR_RETURN(std::vector<Value*> outputs, preset.build(m, options));
  return m.finish(outputs, inputs);
}

}  // namespace

Expected<int64_t> size_option(const std::optional<int64_t>& value, int64_t default_value,
                              std::string_view option, int64_t minimum) {
  const int64_t result = value.value_or(default_value);
  if (result < minimum)
    return Status::errorf("{} must be at least {}, got {}", option, minimum, result);
  return result;
}

Expected<Array> ModelInstance::value(const std::string& name) const {
  auto it = inputs.find(name);
  if (it == inputs.end()) {
    return Status::errorf("model '{}' has no input named '{}'", preset, name);
  }
  return it->second.init(it->second.type, input_seed(seed, name));
}

Expected<std::vector<Array>> ModelInstance::input_values(const ModelGraph& graph) const {
  std::vector<Array> values;
  for (const Value* input : graph.graph.inputs()) {
    KILN_ASSIGN_OR_RETURN(Array array, value(input->name()));
    values.push_back(std::move(array));
  }
  return values;
}

Expected<std::map<std::string, Array>> ModelInstance::weights(const ModelGraph& graph) const {
  std::map<std::string, Array> result;
  for (size_t i = 0; i < graph.input_kinds.size(); ++i) {
    if (graph.input_kinds[i] == InputKind::data) continue;
    const std::string& name = graph.graph.inputs()[i]->name();
    KILN_ASSIGN_OR_RETURN(result[name], value(name));
  }
  return result;
}

int64_t ModelInstance::parameter_count() const {
  int64_t count = 0;
  for (const auto& [name, input] : inputs) {
    if (input.kind == InputKind::parameter) count += input.type.shape.num_elements();
  }
  return count;
}

double graph_flops(const Graph& graph) {
  double flops = 0;
  for (const Node* node : graph.nodes()) {
    flops += node->def().cost(node->input_types(), node->output_types(), node->attrs()).flops;
  }
  return flops;
}

Expected<TrainingStep> build_training_step(const ModelInstance& model,
                                           const std::optional<Optimizer>& optimizer,
                                           const std::optional<LossScaling>& loss_scaling) {
  const Graph& graph = model.loss.graph;
  std::vector<const Value*> parameters;
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    if (model.loss.input_kinds[i] == InputKind::parameter) parameters.push_back(graph.inputs()[i]);
  }
  Expected<TrainingStep> step =
      make_training_step(graph, graph.outputs().front(), parameters, optimizer, loss_scaling);
  if (!step) return step.status().with_context(model.preset + " training step");
  return step;
}

Expected<Array> first_step_input(const ModelInstance& model, const Graph& step, size_t index) {
  const Value& input = *step.inputs().at(index);
  if (index < model.loss.graph.inputs().size()) return model.value(input.name());
  Array value(input.dtype(), input.shape());
  if (input.name() == "lr") value.data = {1e-3};
  if (input.name() == "step") value.data = {1};
  if (input.name() == "loss_scale") value.data = {LossScaling{}.initial_scale};
  value.round_to_dtype();
  return value;
}

Expected<std::vector<Array>> first_step_inputs(const ModelInstance& model, const Graph& step) {
  std::vector<Array> inputs;
  for (size_t i = 0; i < step.inputs().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Array value, first_step_input(model, step, i));
    inputs.push_back(std::move(value));
  }
  return inputs;
}

std::span<const PresetInfo> zoo_presets() {
  static const std::vector<PresetInfo> infos = [] {
    std::vector<PresetInfo> result;
    for (const Preset& preset : registry()) result.push_back(preset.info);
    return result;
  }();
  return infos;
}

Expected<ModelInstance> build_model(std::string_view preset_name, const ModelOptions& options) {
  const std::vector<Preset>& presets = registry();
  auto preset = std::ranges::find(presets, preset_name,
                                  [](const Preset& p) { return std::string_view(p.info.name); });
  if (preset == presets.end()) {
    std::vector<std::string_view> names;
    for (const Preset& p : presets) names.push_back(p.info.name);
    return Status::errorf("unknown model '{}'; the zoo has {}", preset_name,
                          fmt::join(names, ", "));
  }
  ModelInstance model;
  model.preset = preset->info.name;
  model.family = preset->info.family;
  model.seed = options.seed;
  for (GraphKind kind : {GraphKind::loss, GraphKind::inference}) {
    Expected<ModelGraph> graph = build_graph(*preset, kind, options, model.inputs);
    if (!graph) return graph.status().with_context(model.preset);
    (kind == GraphKind::loss ? model.loss : model.inference) = std::move(*graph);
  }
  return model;
}

Status export_inference_onnx(const ModelInstance& model, const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto initializers, model.weights(model.inference));
  return export_onnx_file(model.inference.graph, path, {.initializers = std::move(initializers)})
      .with_context(model.preset);
}

}  // namespace kiln
