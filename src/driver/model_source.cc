#include "driver/model_source.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

#include "driver/model_io.h"
#include "interp/random_inputs.h"
#include "ir/printer.h"
#include "passes/eliminate_loss.h"
#include "passes/freeze_inputs.h"
#include "support/text.h"

namespace kiln {
namespace {

constexpr std::string_view kZooPrefix = "zoo:";

// The options that only a preset takes, by their command-line names, when given.
std::vector<std::string> zoo_options_given(const ModelSourceOptions& options) {
  std::vector<std::string> given;
  const ModelOptions& zoo = options.zoo;
  if (zoo.batch) given.emplace_back("--batch");
  if (zoo.seq_len) given.emplace_back("--seq-len");
  if (zoo.image_size) given.emplace_back("--image-size");
  if (zoo.nodes) given.emplace_back("--nodes");
  if (zoo.avg_degree) given.emplace_back("--avg-degree");
  if (options.graph.inference) given.emplace_back("--inference");
  if (options.graph.train) given.emplace_back("--train");
  if (options.graph.without_loss) given.emplace_back("--without-loss");
  return given;
}

Expected<SourceModel> load_file(const ModelSourceOptions& options) {
  if (const std::vector<std::string> given = zoo_options_given(options); !given.empty()) {
    return Status::errorf("{} applies to zoo presets (zoo:NAME), not to the model file {}",
                          given.front(), options.spec);
  }
  KILN_ASSIGN_OR_RETURN(const OnnxImportOptions import_options,
                        import_options_from_shapes(options.shapes));
  KILN_ASSIGN_OR_RETURN(ImportedModel model, load_model(options.spec, import_options));
  if (!options.weights_as_inputs) KILN_RETURN_IF_ERROR(freeze_weights(model));
  SourceModel source;
  source.description = fmt::format(
      "{}: graph @{}: {}, {} weights{}, {}{}", options.spec, model.graph.name(),
      count_noun(static_cast<size_t>(model.num_data_inputs), "input"), model.weights.size(),
      options.weights_as_inputs ? " (inputs)" : "",
      count_noun(static_cast<size_t>(model.graph.num_nodes()), "node"),
      model.upgraded_from == 0
          ? ""
          : fmt::format(" (upgraded from opset {} to {} by ONNX's version converter)",
                        model.upgraded_from, model.opset));
  source.graph = std::move(model.graph);
  source.num_data_inputs = model.num_data_inputs;
  source.weights = std::move(model.weights);
  return source;
}

// The preset's graph the choice names, frozen when asked.
Expected<Graph> zoo_graph(const ModelInstance& model, const ModelSourceOptions& options) {
  const ZooGraphChoice& choice = options.graph;
  if (!choice.train) {
    const ModelGraph& source = choice.inference ? model.inference : model.loss;
    Graph graph = source.graph.clone();
    if (options.freeze) {
      KILN_ASSIGN_OR_RETURN(const auto weights, model.weights(source));
      KILN_RETURN_IF_ERROR(freeze_inputs(graph, weights));
    }
    return graph;
  }
  if (options.freeze)
    return Status::error("--freeze applies to a preset's loss or inference graph");
  KILN_ASSIGN_OR_RETURN(std::optional<Optimizer> optimizer, parse_optimizer(choice.optimizer));
  KILN_ASSIGN_OR_RETURN(
      TrainingStep step,
      build_training_step(model, optimizer,
                          choice.loss_scaling ? std::optional(LossScaling{}) : std::nullopt));
  if (choice.without_loss) KILN_RETURN_IF_ERROR(eliminate_loss(step.graph).status());
  return std::move(step.graph);
}

Expected<SourceModel> load_preset(const std::string& preset, const ModelSourceOptions& options) {
  if (options.weights_as_inputs) {
    return Status::error("--weights-as-inputs applies to model files: a preset's parameters "
                         "are inputs unless --freeze");
  }
  if (!options.shapes.empty()) {
    return Status::error(
        "--shape applies to ONNX models; a zoo preset's sizes are --batch, "
        "--seq-len, --image-size, --nodes and --avg-degree");
  }
  if (options.graph.without_loss && !options.graph.train) {
    return Status::error("--without-loss applies to the training step (--train)");
  }
  KILN_ASSIGN_OR_RETURN(ModelInstance model, build_preset(preset, options));
  KILN_ASSIGN_OR_RETURN(Graph graph, zoo_graph(model, options));
  SourceModel source;
  source.description =
      fmt::format("{} {}: {}", model.preset, zoo_graph_kind(options.graph, options.freeze),
                  count_noun(static_cast<size_t>(graph.num_nodes()), "node"));
  source.num_data_inputs = static_cast<int>(graph.inputs().size());
  source.graph = std::move(graph);
  source.zoo.emplace(std::move(model));
  return source;
}

// A preset's value for its graph's input `index`: the preset's own, by name (frozen, the graph
// keeps only the data inputs: the parameters and state are constants now); for the training
// step, that of a first step.
Expected<Array> preset_input(const ModelInstance& model, const Graph& graph,
                             const ModelSourceOptions& options, size_t index) {
  if (options.graph.train) return first_step_input(model, graph, index);
  return model.value(graph.inputs().at(index)->name());
}

}  // namespace

Expected<ModelInstance> build_preset(const std::string& preset, const ModelSourceOptions& options) {
  ModelOptions model_options = options.zoo;
  model_options.seed = options.seed;
  return build_model(preset, model_options);
}

std::optional<std::string> zoo_preset_of(const std::string& spec) {
  if (!spec.starts_with(kZooPrefix)) return std::nullopt;
  return spec.substr(kZooPrefix.size());
}

Expected<SourceModel> load_model_source(const ModelSourceOptions& options) {
  if (const std::optional<std::string> preset = zoo_preset_of(options.spec)) {
    return load_preset(*preset, options);
  }
  return load_file(options);
}

Expected<InputMaker> model_input_maker(SourceModel& model, const ModelSourceOptions& options,
                                       std::map<std::string, Array> given,
                                       std::vector<std::string>& random_names) {
  if (model.zoo) {
    if (!given.empty()) {
      return Status::errorf(
          "--input applies to model files; a zoo preset's inputs are its own "
          "(given: '{}')",
          given.begin()->first);
    }
    return InputMaker([&model, options](size_t index) {
      return preset_input(*model.zoo, model.graph, options, index);
    });
  }
  // A file's: the data inputs given or random, then its weights, each moved out when asked for.
  const auto data = std::make_shared<std::vector<std::optional<Array>>>();
  for (int i = 0; i < model.num_data_inputs; ++i) {
    const Value& input = *model.graph.inputs()[static_cast<size_t>(i)];
    auto it = given.find(input.name());
    if (it == given.end()) {
      random_names.push_back(print_value_ref(input));
      data->emplace_back();
      continue;
    }
    if (it->second.type() != input.type()) {
      return Status::errorf("input '{}' is {} in the model, the file gives {}", input.name(),
                            input.type().to_string(), it->second.type().to_string());
    }
    data->emplace_back(std::move(it->second));
    given.erase(it);
  }
  if (!given.empty()) {
    return Status::errorf("the model has no input named '{}'", given.begin()->first);
  }
  for (Array& weight : model.weights) data->emplace_back(std::move(weight));
  model.weights.clear();
  return InputMaker([&model, data, seed = options.seed](size_t index) -> Expected<Array> {
    std::optional<Array>& value = data->at(index);
    if (!value) return random_input(model.graph, index, {.seed = seed});
    Array made = std::move(*value);
    value.reset();
    return made;
  });
}

Expected<std::vector<Array>> model_inputs(SourceModel& model, const ModelSourceOptions& options,
                                          std::map<std::string, Array> given,
                                          std::vector<std::string>& random_names) {
  KILN_ASSIGN_OR_RETURN(const InputMaker make,
                        model_input_maker(model, options, std::move(given), random_names));
  std::vector<Array> arrays;
  for (size_t i = 0; i < model.graph.inputs().size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Array value, make(i));
    arrays.push_back(std::move(value));
  }
  return arrays;
}

Expected<std::optional<Optimizer>> parse_optimizer(const std::string& name) {
  if (name == "none") return std::optional<Optimizer>();
  if (name == "sgd") return std::optional<Optimizer>(Optimizer::sgd());
  if (name == "adam") return std::optional<Optimizer>(Optimizer::adam());
  if (name == "adamw") return std::optional<Optimizer>(Optimizer::adamw());
  return Status::errorf("unknown optimizer '{}' (sgd, adam, adamw or none)", name);
}

std::string zoo_graph_kind(const ZooGraphChoice& choice, bool freeze) {
  if (choice.train) {
    return fmt::format("training step ({}{})", choice.optimizer,
                       choice.without_loss ? ", without the loss" : "");
  }
  return fmt::format("{}{}", choice.inference ? "inference graph" : "loss graph",
                     freeze ? " (parameters frozen)" : "");
}

}  // namespace kiln
