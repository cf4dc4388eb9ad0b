// Where a command's model comes from: a file (ONNX, or IR text) or a preset of the model zoo,
// named "zoo:NAME", with the preset's sizes and the choice of its graph (the loss graph, the
// inference graph or the training step). `kiln run`, `compile`, `explain` and `bench` take
// either, so the zoo's commands of the same names are the same commands.
//
// Both kinds give a graph and its inputs' values: a file's data inputs given by name or random
// (from `seed`) followed by its weights; a preset's own deterministic values (weights and data
// from its seed; for the training step, those of a first step).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "models/model.h"
#include "support/status.h"

namespace kiln {

// Which of a preset's graphs.
struct ZooGraphChoice {
  bool inference = false;          // the inference graph (logits, no loss)
  bool train = false;              // the training step: forward, backward and the update
  std::string optimizer = "adam";  // with `train`: sgd, adam, adamw, or none (the gradients)
  bool without_loss = false;  // with `train`: the step without its loss (passes/eliminate_loss.h)
  // With `train`: dynamic loss scaling (autodiff/training_step.h), which an fp16 step needs
  // lest its small gradients underflow; the commands set it with --precision fp16.
  bool loss_scaling = false;
};

struct ModelSourceOptions {
  std::string spec;  // a file path, or "zoo:NAME"
  // A file's random data inputs' seed; a preset's weights' and data's (ModelOptions::seed).
  uint64_t seed = 0;
  // A preset's parameters and state compiled in as constants (passes/freeze_inputs.h; not
  // with the training step). A model file's weights (an ONNX model's initializers) are
  // constants unless `weights_as_inputs`, as ONNX Runtime treats them: what is computed from
  // them alone (a transposed weight, a folded batch norm) is computed once, when compiling.
  bool freeze = false;
  // A model file's weights as graph inputs after its data, to swap weights between runs.
  bool weights_as_inputs = false;
  std::vector<std::string> shapes = {};  // an ONNX file's symbolic dims: "NAME=1x128"
  ModelOptions zoo = {};                 // a preset's sizes (its seed is `seed`, not zoo.seed)
  ZooGraphChoice graph = {};             // a preset's graph
};

struct SourceModel {
  Graph graph;
  // The line a command prints first: "FILE: graph @g: 2 inputs, 3 weights, 9 nodes", or
  // "bert-tiny training step (adam): 917 nodes".
  std::string description;
  int num_data_inputs = 0;           // a file's inputs that are not weights
  std::vector<Array> weights;        // a file's, for its graph inputs after the data inputs
  std::optional<ModelInstance> zoo;  // a preset's
};

// The preset's name when `spec` names one ("zoo:bert-tiny" -> "bert-tiny").
std::optional<std::string> zoo_preset_of(const std::string& spec);

// The preset named `preset`, at the sizes and seed of `options`.
Expected<ModelInstance> build_preset(const std::string& preset, const ModelSourceOptions& options);

// The model `options` name. Errors name the option that does not apply to the kind of source
// (--shape to a preset, --train to a file).
Expected<SourceModel> load_model_source(const ModelSourceOptions& options);

// The value of input `index` of a model's graph, made when asked for: a caller can encode each
// as it comes instead of holding every input in f64 (bert-large's Adam step has 1.0 G input
// elements: 8 GB as Arrays, 4 GB as f32). Each index is asked for once; the maker refers to
// the SourceModel and its graph, which must outlive it unmoved (compile a clone).
using InputMaker = std::function<Expected<Array>(size_t index)>;

// Values for every input of `model.graph`: a preset's own; for a file, the data inputs named in
// `given` (which must exist and match their types), the rest random (listed in
// `random_names`), then the weights (moved out of `model`). Errors in `given` are reported
// here, before any value is made.
Expected<InputMaker> model_input_maker(SourceModel& model, const ModelSourceOptions& options,
                                       std::map<std::string, Array> given,
                                       std::vector<std::string>& random_names);

// Every value model_input_maker makes, in input order.
Expected<std::vector<Array>> model_inputs(SourceModel& model, const ModelSourceOptions& options,
                                          std::map<std::string, Array> given,
                                          std::vector<std::string>& random_names);

// "sgd", "adam", "adamw" or "none" (gradients only: nullopt).
Expected<std::optional<Optimizer>> parse_optimizer(const std::string& name);

// "training step (adam)", "inference graph (parameters frozen)", "loss graph".
std::string zoo_graph_kind(const ZooGraphChoice& choice, bool freeze);

}  // namespace kiln
