// The model zoo: named presets of standard models built as Kiln graphs, with deterministic
// weights and data, for tests, benchmarks and `kiln zoo`.
//
// A preset ("bert-tiny", "resnet-50") fixes a model's architecture and default sizes;
// ModelOptions override the sizes that do not change the architecture (batch, sequence length,
// image size, graph size) and choose the seed. `build_model` returns a ModelInstance holding
// two graphs over the same named inputs:
//  - `loss`: the forward pass with the task loss. Outputs: the loss (f32 scalar), then the
//    logits. Batch norm uses batch statistics (batch_norm_train), as in a training step.
//  - `inference`: the forward pass without labels or loss. Output: the logits. Batch norm uses
//    running statistics, which are `state` inputs.
// Every graph input is data (token ids, labels, images, a CSR adjacency), a trained parameter
// (named after its place in the model: "layer0.attn.wq"), or non-trained state (batch norm
// running statistics). Each has a deterministic value made on demand from the seed and its
// name, so that both graphs see the same values and a value does not depend on building order.
//
// No graph has dropout: the zoo's models are the deterministic functions that training and
// inference compile (as with dropout ratio 0).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "autodiff/training_step.h"
#include "ir/array.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

enum class InputKind { data, parameter, state };

// Makes the value of an input of `type` from a seed (derived from the model seed and the
// input's name). Must be deterministic.
using Initializer = std::function<Array(const TensorType& type, uint64_t seed)>;

// Standard normal times `stddev`.
Initializer normal_init(double stddev);
// Every element `value`.
Initializer constant_init(double value);
// Integers uniform in [0, range).
Initializer uniform_int_init(int64_t range);
// 1 with probability `probability` (to a resolution of 1/1024), else 0.
Initializer bernoulli_init(double probability);
// Exactly `value` (whose type must be the input's).
Initializer given_init(Array value);

struct ModelOptions {
  // Sizes; unset means the preset's default. Each applies to the models that have it.
  std::optional<int64_t> batch = std::nullopt;
  std::optional<int64_t> seq_len = std::nullopt;     // bert, xml-cnn
  std::optional<int64_t> image_size = std::nullopt;  // vit, resnet (square images)
  std::optional<int64_t> nodes = std::nullopt;       // gcn
  std::optional<double> avg_degree = std::nullopt;   // gcn
  uint64_t seed = 0;
  // Build the inference graph from ops that have an ONNX export only. Changes GCN alone: ONNX
  // has no sparse product, so its adjacency becomes a dense data input "adjacency" multiplied
  // by matmul, in place of adjacency.{row_ptr, col_indices, values} and spmm.
  bool portable = false;
};

// One input of a zoo graph: what it is and how its value is made.
struct ModelInput {
  std::string name;
  InputKind kind = InputKind::data;
  TensorType type;
  Initializer init;
};

// A zoo graph and the role of each of its inputs.
struct ModelGraph {
  Graph graph;
  std::vector<InputKind> input_kinds;  // one per graph input, in input order
};

struct ModelInstance {
  std::string preset;
  std::string family;  // "bert", "resnet", ...
  uint64_t seed = 0;
  ModelGraph loss;                           // outputs: loss (f32 scalar), logits
  ModelGraph inference;                      // output: logits
  std::map<std::string, ModelInput> inputs;  // every input of either graph, by name

  // The value of input `name` (of either graph). Deterministic: the same preset, options and
  // seed give the same array on every machine.
  Expected<Array> value(const std::string& name) const;
  // The values of `graph`'s inputs, in input order (as interpret() takes them).
  Expected<std::vector<Array>> input_values(const ModelGraph& graph) const;
  // The trained parameters' and state's values, by name (as OnnxExportOptions::initializers).
  Expected<std::map<std::string, Array>> weights(const ModelGraph& graph) const;

  // Number of trained parameter elements (state such as running statistics is not counted).
  int64_t parameter_count() const;
};

// Arithmetic operations of one evaluation of `graph`, summed from each op's cost function.
double graph_flops(const Graph& graph);
// The training step of the loss graph (autodiff/training_step.h) with respect to every
// parameter (not the state): the gradients without an optimizer, else the updated parameters.
// Its first inputs are the loss graph's, so input_values(model.loss) feeds them.
// With `loss_scaling`, the step scales its loss as an fp16 step needs (autodiff/training_step.h).
Expected<TrainingStep> build_training_step(const ModelInstance& model,
                                           const std::optional<Optimizer>& optimizer,
                                           const std::optional<LossScaling>& loss_scaling = {});
// The inputs of a first training step, `step` being build_training_step's graph (or one with
// its inputs, as the step without its loss): the loss graph's values, then the learning rate
// %lr (1e-3), the step count %step (1), the loss scale (LossScaling's initial one) and its step
// count (0), and the optimizer state (zeros, as before any step).
Expected<std::vector<Array>> first_step_inputs(const ModelInstance& model, const Graph& step);
// Input `index` of first_step_inputs alone, so that a caller can encode each as it comes
// instead of holding them all in f64 (bert-large's Adam step: 1.0 G elements, 8 GB as Arrays).
Expected<Array> first_step_input(const ModelInstance& model, const Graph& step, size_t index);

struct PresetInfo {
  std::string name;         // "bert-tiny"
  std::string family;       // "bert"
  std::string description;  // architecture and default sizes, one line
};

// Every preset, in listing order (by family, small to large).
std::span<const PresetInfo> zoo_presets();

// Builds a preset's graphs. Errors: unknown preset (listing the known ones), or an option the
// preset cannot take (a sequence longer than BERT's positions, an image size not divisible by
// ViT's patch size), naming the preset and option.
Expected<ModelInstance> build_model(std::string_view preset, const ModelOptions& options = {});

// Writes the inference graph as ONNX: data inputs stay inputs, parameters and state become
// initializers. Build the model with ModelOptions::portable so that every op has an export.
Status export_inference_onnx(const ModelInstance& model, const std::string& path);

}  // namespace kiln
