// Fuzzes the ONNX importer (frontend/onnx_import.h) with mutations of valid models: a sample of
// the model.onnx files of ONNX's node tests (../shared/onnx-node-tests/node, when present) and
// models built here that cover the importer's folding, weights and external data. Mutations
// work on the bytes (truncation, bit flips, bytes inserted, deleted, duplicated, spliced from
// another model) and on the structure through the protobuf API (dimensions made huge, negative
// or symbolic, element types changed, nodes dropped or duplicated, tensors renamed, attributes
// given wrong types and extreme values, raw_data shorter than its dims need, external data
// pointing outside the model's folder, other opsets, op types and domains).
//
// Whatever the bytes, import_onnx_bytes must return (never crash, hang or trip a sanitizer)
// and an error must name the model; a model it accepts must verify, have one weight per weight
// input of the right type, and run in the reference interpreter when it is small.
//
// Deterministic: mutations come from KILN_FUZZ_SEED (a fixed seed when unset), printed first.
// The run stops after KILN_FUZZ_ITERATIONS mutants or KILN_FUZZ_SECONDS seconds, whichever
// comes first; a failure names the iteration, so replaying the same seed with enough
// iterations reproduces it. KILN_FUZZ_VERBOSE=1 prints each mutant's mutations before its
// import, which names the mutant behind a crash.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/onnx_model_builder.h"
#include "common/small_graph.h"
#include "frontend/onnx_import.h"
#include "frontend/tensor_io.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/verifier.h"
#include "unit/frontend/frontend_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::kiln::testing::attr_float;
using ::kiln::testing::attr_int;
using ::kiln::testing::attr_ints;
using ::kiln::testing::attr_string;
using ::kiln::testing::attr_tensor;
using ::kiln::testing::f32;
using ::kiln::testing::i64;
using ::kiln::testing::ModelBuilder;
using P = onnx::TensorProto;

constexpr uint64_t kDefaultSeed = 20240612;
constexpr uint64_t kDefaultIterations = 1'000'000;
constexpr uint64_t kDefaultSeconds = 15;
// Every this-many-th node test (in name order) is in the corpus.
constexpr size_t kNodeTestStride = 3;
constexpr std::string_view kSource = "fuzz.onnx";
// The external data file the built models read, in the fuzz run's model folder.
constexpr std::string_view kWeightsFile = "weights.bin";
constexpr int64_t kWeightsFileFloats = 64;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::strtoull(text, nullptr, 10) : fallback;
}

struct CorpusModel {
  std::string name;
  onnx::ModelProto model;
};

// ---- the corpus --------------------------------------------------------------------------------

// A node test's model, with the graph inputs that the import needs static (a Reshape's shape,
// passed as an input as the node tests do) turned into initializers holding the case's test
// data, so that mutants get past the first such node.
std::optional<onnx::ModelProto> node_test_model(const fs::path& case_dir) {
  onnx::ModelProto model;
  if (!model.ParseFromString(testing::read_bytes((case_dir / "model.onnx").string()))) {
    return std::nullopt;
  }
  std::vector<NamedArray> inputs;
  for (int i = 0;; ++i) {
    const fs::path path = case_dir / "test_data_set_0" / fmt::format("input_{}.pb", i);
    if (!fs::exists(path)) break;
    Expected<NamedArray> input = read_tensor_proto_file(path.string());
    if (input) inputs.push_back(std::move(*input));
  }
  for (size_t attempt = 0; attempt <= inputs.size(); ++attempt) {
    Expected<ImportedModel> imported =
        import_onnx_bytes(model.SerializeAsString(), case_dir.string(), kSource);
    if (imported) break;
    const std::optional<std::string> needed = static_input_needed(imported.status());
    auto input = std::find_if(inputs.begin(), inputs.end(), [&](const NamedArray& named) {
      return needed && named.name == *needed;
    });
    if (input == inputs.end()) break;
    *model.mutable_graph()->add_initializer() = tensor_proto_from_array(input->name, input->array);
    auto* graph_inputs = model.mutable_graph()->mutable_input();
    for (int i = 0; i < graph_inputs->size(); ++i) {
      if (graph_inputs->Get(i).name() == *needed) graph_inputs->DeleteSubrange(i, 1);
    }
  }
  return model;
}

std::vector<CorpusModel> node_test_corpus() {
  std::vector<CorpusModel> corpus;
  const std::optional<fs::path> suite = testing::onnx_node_tests_dir();
  if (!suite) return corpus;
  std::vector<fs::path> cases;
  for (const fs::directory_entry& entry : fs::directory_iterator(*suite)) {
    if (fs::exists(entry.path() / "model.onnx")) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  for (size_t i = 0; i < cases.size(); i += kNodeTestStride) {
    if (std::optional<onnx::ModelProto> model = node_test_model(cases[i])) {
      corpus.push_back({cases[i].filename().string(), std::move(*model)});
    }
  }
  return corpus;
}

std::vector<double> iota(int64_t n) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = 0.25 * static_cast<double>(i);
  return values;
}

// Models for what the node tests lack: real weights (embedded and as weight inputs), shape
// subgraphs to fold, external data, and several converters in one graph.
std::vector<CorpusModel> built_corpus() {
  std::vector<CorpusModel> corpus;
  {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {2, 8});
    m.initializer("w1", f32({16, 8}, iota(128))).initializer("b1", f32({16}, iota(16)));
    m.initializer("w2", f32({16, 4}, iota(64))).initializer("b2", f32({4}, iota(4)));
    onnx::NodeProto& gemm = m.node("Gemm", {"x", "w1", "b1"}, {"h"}, "fc1");
    attr_int(gemm, "transB", 1);
    attr_float(gemm, "alpha", 0.5f);
    m.node("Relu", {"h"}, {"r"});
    m.node("Gemm", {"r", "w2", "b2"}, {"logits"}, "fc2");
    attr_int(m.node("Softmax", {"logits"}, {"y"}), "axis", -1);
    m.output("y").output("logits");
    corpus.push_back({"built_mlp", m.proto()});
  }
  {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {1, 2, 6, 6});
    m.initializer("w", f32({4, 2, 3, 3}, iota(72))).initializer("scale", f32({4}, iota(4)));
    m.initializer("bias", f32({4}, iota(4))).initializer("mean", f32({4}, iota(4)));
    m.initializer("var", f32({4}, {1, 2, 3, 4}));
    onnx::NodeProto& conv = m.node("Conv", {"x", "w"}, {"c"});
    attr_ints(conv, "pads", {1, 1, 1, 1});
    attr_ints(conv, "strides", {1, 1});
    m.node("BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"bn"});
    onnx::NodeProto& pool = m.node("MaxPool", {"bn"}, {"p"});
    attr_ints(pool, "kernel_shape", {2, 2});
    attr_ints(pool, "strides", {2, 2});
    attr_int(pool, "ceil_mode", 1);
    onnx::NodeProto& lrn = m.node("LRN", {"p"}, {"n"});
    attr_int(lrn, "size", 3);
    m.node("GlobalAveragePool", {"n"}, {"g"});
    m.node("Flatten", {"g"}, {"y"});
    m.output("y");
    corpus.push_back({"built_cnn", m.proto()});
  }
  {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {2, 3, 4});
    m.initializer("zero", i64({}, {0})).initializer("one", i64({}, {1}));
    m.initializer("axes", i64({1}, {0})).initializer("minus_one", i64({1}, {-1}));
    m.node("Shape", {"x"}, {"shape"});
    attr_int(m.node("Gather", {"shape", "zero"}, {"batch"}), "axis", 0);
    m.node("Unsqueeze", {"batch", "axes"}, {"batch_1d"});
    attr_int(m.node("Concat", {"batch_1d", "minus_one"}, {"target"}), "axis", 0);
    m.node("Reshape", {"x", "target"}, {"flat"});
    m.node("Shape", {"flat"}, {"flat_shape"});
    attr_int(m.node("Gather", {"flat_shape", "one"}, {"columns"}), "axis", 0);
    m.node("Range", {"zero", "columns", "one"}, {"range"});
    attr_int(m.node("Cast", {"range"}, {"range_f"}), "to", P::FLOAT);
    m.node("Expand", {"range_f", "flat_shape"}, {"expanded"});
    attr_tensor(m.node("ConstantOfShape", {"flat_shape"}, {"twos"}), "value", f32({1}, {2}));
    m.node("Mul", {"expanded", "twos"}, {"offsets"});
    m.node("Add", {"flat", "offsets"}, {"y"});
    m.output("y");
    corpus.push_back({"built_shape_folding", m.proto()});
  }
  {
    ModelBuilder m(18);
    m.input("x", P::FLOAT, {2, 7});
    m.initializer("pads", i64({2}, {1, 2})).initializer("pad_axes", i64({1}, {-1}));
    m.initializer("value", f32({}, {9})).initializer("starts", i64({1}, {1}));
    m.initializer("ends", i64({1}, {100})).initializer("slice_axes", i64({1}, {1}));
    m.initializer("steps", i64({1}, {2})).initializer("repeats", i64({2}, {2, 1}));
    m.node("Transpose", {"x"}, {"t"});
    onnx::NodeProto& split = m.node("Split", {"x"}, {"a", "b", "c"});
    attr_int(split, "axis", 1);
    attr_int(split, "num_outputs", 3);
    attr_int(m.node("Concat", {"c", "a", "b"}, {"cat"}), "axis", 1);
    m.node("Pad", {"cat", "pads", "value", "pad_axes"}, {"padded"});
    m.node("Slice", {"padded", "starts", "ends", "slice_axes", "steps"}, {"sliced"});
    m.node("Tile", {"sliced", "repeats"}, {"tiled"});
    m.node("Clip", {"tiled", "", "value"}, {"y"}, "clip");
    m.output("y").output("t");
    corpus.push_back({"built_layout", m.proto()});
  }
  {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {1, 4, 3});
    m.input("labels", P::INT64, {1, 4}).input("z", P::FLOAT, {1, 4, 2, 2});
    m.initializer("w", f32({4, 2, 3}, iota(24))).initializer("gamma", f32({3}, {1, 2, 3}));
    onnx::NodeProto& deconv = m.node("ConvTranspose", {"x", "w"}, {"d"});
    attr_ints(deconv, "strides", {2});
    attr_ints(deconv, "output_shape", {6});
    attr_int(m.node("LayerNormalization", {"x", "gamma"}, {"ln"}), "axis", -1);
    onnx::NodeProto& avg = m.node("AveragePool", {"ln"}, {"avg"});
    attr_ints(avg, "kernel_shape", {2});
    attr_ints(avg, "pads", {1, 1});
    attr_int(avg, "count_include_pad", 1);
    onnx::NodeProto& argmax = m.node("ArgMax", {"d"}, {"am"});
    attr_int(argmax, "axis", 2);
    attr_int(argmax, "keepdims", 0);
    m.node("SoftmaxCrossEntropyLoss", {"avg", "labels"}, {"loss"});
    onnx::NodeProto& d2s = m.node("DepthToSpace", {"z"}, {"space"});
    attr_int(d2s, "blocksize", 2);
    attr_string(d2s, "mode", "CRD");
    m.output("d").output("am").output("loss").output("space");
    corpus.push_back({"built_nn", m.proto()});
  }
  {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {4, 16});
    onnx::TensorProto* w = m.graph().add_initializer();
    w->set_name("w");
    w->set_data_type(P::FLOAT);
    w->add_dims(16);
    w->add_dims(4);
    w->set_data_location(P::EXTERNAL);
    const std::vector<std::pair<std::string, std::string>> entries = {
        {"location", std::string(kWeightsFile)}, {"offset", "0"}, {"length", "256"}};
    for (const auto& [key, value] : entries) {
      onnx::StringStringEntryProto* entry = w->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    m.node("MatMul", {"x", "w"}, {"y"});
    m.output("y");
    corpus.push_back({"built_external_data", m.proto()});
  }
  return corpus;
}

// ---- checks ------------------------------------------------------------------------------------

struct Outcome {
  bool imported = false;
  bool interpreted = false;
};

// Imports `bytes` and checks what the importer promises about the result.
Outcome check_model(std::string_view bytes, const std::string& base_dir, uint64_t seed) {
  Outcome outcome;
  Expected<ImportedModel> model = import_onnx_bytes(bytes, base_dir, kSource);
  if (!model) {
    EXPECT_TRUE(model.status().message().starts_with(fmt::format("{}: ", kSource)))
        << model.status().message();
    return outcome;
  }
  outcome.imported = true;
  const Graph& graph = model->graph;
  EXPECT_TRUE(verify(graph).is_ok()) << verify(graph).message();
  const size_t num_inputs = graph.inputs().size();
  const auto num_data = static_cast<size_t>(model->num_data_inputs);
  EXPECT_EQ(num_data + model->weights.size(), num_inputs);
  if (num_data + model->weights.size() != num_inputs) return outcome;
  for (size_t i = num_data; i < num_inputs; ++i) {
    EXPECT_EQ(model->weights[i - num_data].type(), graph.inputs()[i]->type()) << "weight " << i;
  }
  if (!testing::small_enough_to_interpret(graph)) return outcome;
  std::vector<Array> arguments = random_inputs(graph, {.seed = seed});
  for (size_t i = num_data; i < num_inputs; ++i) arguments[i] = model->weights[i - num_data];
  InterpreterOptions options;
  options.max_live_elements = int64_t{1} << 16;
  Expected<std::vector<Array>> results = interpret(graph, arguments, options);
  if (!results) return outcome;  // a data-dependent error, such as an index out of range
  outcome.interpreted = true;
  EXPECT_EQ(results->size(), graph.outputs().size());
  for (size_t i = 0; i < std::min(results->size(), graph.outputs().size()); ++i) {
    EXPECT_EQ((*results)[i].type(), graph.outputs()[i]->type()) << "output " << i;
  }
  return outcome;
}

// ---- mutations ---------------------------------------------------------------------------------

const std::vector<int64_t>& special_ints() {
  constexpr int64_t k31 = int64_t{1} << 31, k40 = int64_t{1} << 40, k48 = int64_t{1} << 48;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  static const std::vector<int64_t> values = {0,    1,   -1,       2,    3,    -2,      4,
                                              7,    16,  1 << 16,  k31,  -k31, k31 - 1, k40,
                                              -k40, k48, kMax / 2, kMax, kMin};
  return values;
}

const std::vector<float>& special_floats() {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kMax = std::numeric_limits<float>::max();
  static const std::vector<float> values = {0.0f,  -0.0f, 1.0f, -1.0f, 0.5f, 1e-30f,
                                            1e30f, kMax,  kInf, -kInf, kNan};
  return values;
}

const std::vector<std::string>& special_strings() {
  static const std::vector<std::string> values = {
      "",     "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID",
      "DCR",  "CRD",    "constant",   "edge",       "reflect",
      "mean", "sum",    "none",       "\xff",       std::string(1, '\0')};
  return values;
}

// External data locations: inside the folder, outside it in every way, and malformed.
const std::vector<std::string>& special_locations() {
  static const std::vector<std::string> values = {std::string(kWeightsFile),
                                                  "../weights.bin",
                                                  "sub/../../weights.bin",
                                                  "/etc/passwd",
                                                  "escape.bin",
                                                  "sub",
                                                  "missing.bin",
                                                  "",
                                                  ".",
                                                  "sub/inner.bin",
                                                  std::string("w\0b", 3),
                                                  "//weights.bin"};
  return values;
}

const std::vector<std::string>& special_byte_counts() {
  static const std::vector<std::string> values = {
      "0",  "4", "-1", "abc", "", "99999999999", "18446744073709551615", "9223372036854775807",
      "256"};
  return values;
}

class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<CorpusModel>& corpus) : rng_(seed), corpus_(corpus) {
    for (const CorpusModel& entry : corpus) {
      const onnx::GraphProto& graph = entry.model.graph();
      for (const onnx::NodeProto& node : graph.node()) {
        op_types_.insert(node.op_type());
        for (const std::string& name : node.output()) names_.insert(name);
      }
      for (const onnx::ValueInfoProto& input : graph.input()) names_.insert(input.name());
    }
    op_types_.insert({"Acos", "If", "Loop", "Scan", "", "\xff"});
    names_.insert({"", "ghost"});
  }

  // The mutant's bytes; `log` says which mutations made it, for a failure message.
  std::string mutate(const onnx::ModelProto& original, std::string& log) {
    std::string bytes;
    if (below(2) == 0) {
      onnx::ModelProto model = original;
      const int count = static_cast<int>(below(3)) + 1;
      for (int i = 0; i < count; ++i) mutate_structure(model, log);
      bytes = model.SerializeAsString();
      if (below(8) != 0) return bytes;
    } else {
      bytes = original.SerializeAsString();
    }
    const int count = static_cast<int>(below(3)) + 1;
    for (int i = 0; i < count; ++i) mutate_bytes(bytes, log);
    return bytes;
  }

 private:
  uint64_t below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  template <typename T>
  const T& pick(const std::vector<T>& values) {
    return values[below(values.size())];
  }
  template <typename T>
  const T& pick(const std::set<T>& values) {
    return *std::next(values.begin(), static_cast<ptrdiff_t>(below(values.size())));
  }
  int index(int size) { return static_cast<int>(below(static_cast<uint64_t>(size))); }

  void mutate_bytes(std::string& bytes, std::string& log) {
    const size_t at = below(bytes.size() + 1);
    switch (below(6)) {
      case 0:
        log += fmt::format(" truncate@{}", at);
        bytes.resize(at);
        return;
      case 1: {
        if (bytes.empty()) return;
        const size_t byte = below(bytes.size());
        const int bit = static_cast<int>(below(8));
        log += fmt::format(" flip@{}.{}", byte, bit);
        bytes[byte] = static_cast<char>(bytes[byte] ^ (1 << bit));
        return;
      }
      case 2: {
        const char byte = static_cast<char>(below(256));
        log += fmt::format(" byte@{}={:02X}", at, static_cast<unsigned char>(byte));
        bytes.insert(at, 1, byte);
        return;
      }
      case 3: {
        const size_t length = std::min<size_t>(below(16) + 1, bytes.size() - at);
        log += fmt::format(" delete@{}+{}", at, length);
        bytes.erase(at, length);
        return;
      }
      case 4: {
        if (bytes.empty()) return;
        const size_t from = below(bytes.size());
        const size_t length = std::min<size_t>(below(32) + 1, bytes.size() - from);
        log += fmt::format(" dup@{}+{}->{}", from, length, at);
        bytes.insert(at, bytes.substr(from, length));
        return;
      }
      default: {
        const size_t which = below(corpus_.size());
        const std::string other = corpus_[which].model.SerializeAsString();
        const size_t from = below(other.size());
        const size_t length = std::min<size_t>(below(64) + 1, other.size() - from);
        log += fmt::format(" splice#{}@{}+{}->{}", which, from, length, at);
        bytes.insert(at, other.substr(from, length));
        return;
      }
    }
  }

  // A tensor with data in it: an initializer or a tensor attribute.
  P* pick_tensor(onnx::GraphProto& graph) {
    std::vector<P*> tensors;
    for (P& tensor : *graph.mutable_initializer()) tensors.push_back(&tensor);
    for (onnx::NodeProto& node : *graph.mutable_node()) {
      for (onnx::AttributeProto& attr : *node.mutable_attribute()) {
        if (attr.has_t()) tensors.push_back(attr.mutable_t());
      }
    }
    return tensors.empty() ? nullptr : tensors[below(tensors.size())];
  }

  onnx::NodeProto* pick_node(onnx::GraphProto& graph) {
    return graph.node_size() == 0 ? nullptr : graph.mutable_node(index(graph.node_size()));
  }

  onnx::AttributeProto* pick_attr(onnx::GraphProto& graph) {
    onnx::NodeProto* node = pick_node(graph);
    if (node == nullptr || node->attribute_size() == 0) return nullptr;
    return node->mutable_attribute(index(node->attribute_size()));
  }

  void mutate_tensor(P& tensor, std::string& log) {
    switch (below(4)) {
      case 0: {  // dims
        const int64_t value = pick(special_ints());
        if (tensor.dims_size() == 0 || below(4) == 0) {
          tensor.add_dims(value);
        } else {
          tensor.set_dims(index(tensor.dims_size()), value);
        }
        log += fmt::format(" tensor_dim={}", value);
        return;
      }
      case 1: {  // data type
        const int32_t type = static_cast<int32_t>(below(26)) - 1;
        log += fmt::format(" tensor_type={}", type);
        tensor.set_data_type(type);
        return;
      }
      case 2: {  // raw_data shorter than the dims need (or typed data one value short)
        log += " tensor_short";
        if (tensor.has_raw_data()) {
          tensor.mutable_raw_data()->resize(below(tensor.raw_data().size()));
        } else if (tensor.float_data_size() > 0) {
          tensor.mutable_float_data()->RemoveLast();
        } else if (tensor.int64_data_size() > 0) {
          tensor.mutable_int64_data()->RemoveLast();
        } else if (tensor.int32_data_size() > 0) {
          tensor.mutable_int32_data()->RemoveLast();
        }
        return;
      }
      default: {  // external data
        const std::string& location = pick(special_locations());
        log += fmt::format(" external={:?}", location);
        tensor.set_data_location(P::EXTERNAL);
        if (below(2) == 0) tensor.clear_raw_data();
        tensor.clear_external_data();
        auto add = [&](const std::string& key, const std::string& value) {
          onnx::StringStringEntryProto* entry = tensor.add_external_data();
          entry->set_key(key);
          entry->set_value(value);
        };
        add("location", location);
        if (below(2) == 0) add("offset", pick(special_byte_counts()));
        if (below(2) == 0) add("length", pick(special_byte_counts()));
        return;
      }
    }
  }

  void mutate_attr_value(onnx::AttributeProto& attr, std::string& log) {
    log += fmt::format(" attr_value:{}", attr.name());
    switch (attr.type()) {
      case onnx::AttributeProto::INT:
        attr.set_i(pick(special_ints()));
        return;
      case onnx::AttributeProto::FLOAT:
        attr.set_f(pick(special_floats()));
        return;
      case onnx::AttributeProto::STRING:
        attr.set_s(pick(special_strings()));
        return;
      case onnx::AttributeProto::INTS:
        if (attr.ints_size() == 0 || below(4) == 0) {
          attr.add_ints(pick(special_ints()));
        } else if (below(4) == 0) {
          attr.mutable_ints()->RemoveLast();
        } else {
          attr.set_ints(index(attr.ints_size()), pick(special_ints()));
        }
        return;
      case onnx::AttributeProto::FLOATS:
        attr.add_floats(pick(special_floats()));
        return;
      case onnx::AttributeProto::TENSOR:
        mutate_tensor(*attr.mutable_t(), log);
        return;
      default:
        attr.set_i(pick(special_ints()));
        return;
    }
  }

  void mutate_structure(onnx::ModelProto& model, std::string& log) {
    onnx::GraphProto& graph = *model.mutable_graph();
    switch (below(17)) {
      case 0: {  // a graph input's dimension
        if (graph.input_size() == 0) return;
        onnx::ValueInfoProto& input = *graph.mutable_input(index(graph.input_size()));
        onnx::TensorShapeProto* shape =
            input.mutable_type()->mutable_tensor_type()->mutable_shape();
        if (shape->dim_size() == 0 || below(4) == 0) {
          shape->add_dim()->set_dim_value(pick(special_ints()));
          log += " input_dim_added";
          return;
        }
        onnx::TensorShapeProto::Dimension* dim = shape->mutable_dim(index(shape->dim_size()));
        if (below(4) == 0) {
          dim->set_dim_param("n");
          log += " input_dim_symbolic";
        } else {
          const int64_t value = pick(special_ints());
          dim->set_dim_value(value);
          log += fmt::format(" input_dim={}", value);
        }
        return;
      }
      case 1: {  // a graph input's element type, or its type dropped
        if (graph.input_size() == 0) return;
        onnx::ValueInfoProto& input = *graph.mutable_input(index(graph.input_size()));
        if (below(4) == 0) {
          input.mutable_type()->mutable_sequence_type();
          log += " input_sequence";
        } else {
          const int32_t type = static_cast<int32_t>(below(26)) - 1;
          input.mutable_type()->mutable_tensor_type()->set_elem_type(type);
          log += fmt::format(" input_type={}", type);
        }
        return;
      }
      case 2:
      case 3: {
        if (P* tensor = pick_tensor(graph)) mutate_tensor(*tensor, log);
        return;
      }
      case 4: {  // drop a node
        if (graph.node_size() == 0) return;
        const int at = index(graph.node_size());
        log += fmt::format(" drop_node@{}", at);
        graph.mutable_node()->DeleteSubrange(at, 1);
        return;
      }
      case 5: {  // duplicate a node, the copy anywhere
        if (graph.node_size() == 0) return;
        const int from = index(graph.node_size());
        const int to = index(graph.node_size() + 1);
        log += fmt::format(" dup_node@{}->{}", from, to);
        *graph.add_node() = graph.node(from);
        for (int i = graph.node_size() - 1; i > to; --i) {
          graph.mutable_node()->SwapElements(i, i - 1);
        }
        return;
      }
      case 6: {  // rename a node input
        onnx::NodeProto* node = pick_node(graph);
        if (node == nullptr || node->input_size() == 0) return;
        const std::string& name = pick(names_);
        log += fmt::format(" rename_input={:?}", name);
        node->set_input(index(node->input_size()), name);
        return;
      }
      case 7: {  // rename or drop node outputs
        onnx::NodeProto* node = pick_node(graph);
        if (node == nullptr) return;
        if (node->output_size() == 0 || below(4) == 0) {
          log += " clear_outputs";
          node->clear_output();
          return;
        }
        const std::string& name = pick(names_);
        log += fmt::format(" rename_output={:?}", name);
        node->set_output(index(node->output_size()), name);
        return;
      }
      case 8: {  // an attribute of the wrong type
        onnx::AttributeProto* attr = pick_attr(graph);
        if (attr == nullptr) return;
        const auto type = static_cast<onnx::AttributeProto::AttributeType>(below(15));
        log += fmt::format(" attr_type:{}={}", attr->name(), static_cast<int>(type));
        attr->set_type(type);
        return;
      }
      case 9:
      case 10: {  // an attribute value at the edges
        if (onnx::AttributeProto* attr = pick_attr(graph)) mutate_attr_value(*attr, log);
        return;
      }
      case 11: {  // an attribute of another node (of any model) added
        onnx::NodeProto* node = pick_node(graph);
        const onnx::GraphProto& other = corpus_[below(corpus_.size())].model.graph();
        if (node == nullptr || other.node_size() == 0) return;
        const onnx::NodeProto& donor = other.node(index(other.node_size()));
        if (donor.attribute_size() == 0) return;
        const onnx::AttributeProto& attr = donor.attribute(index(donor.attribute_size()));
        log += fmt::format(" attr_added:{}", attr.name());
        *node->add_attribute() = attr;
        return;
      }
      case 12: {  // another opset
        onnx::OperatorSetIdProto* entry = model.opset_import_size() == 0
                                              ? model.add_opset_import()
                                              : model.mutable_opset_import(0);
        const std::vector<int64_t> versions = {0,  -1, 1,  5,  6,  7,  10,
                                               11, 12, 13, 17, 18, 19, int64_t{1} << 40};
        const int64_t version = pick(versions);
        log += fmt::format(" opset={}", version);
        entry->set_version(version);
        if (below(8) == 0) entry->set_domain("ai.onnx");
        return;
      }
      case 13: {  // another op type or domain
        onnx::NodeProto* node = pick_node(graph);
        if (node == nullptr) return;
        if (below(4) == 0) {
          const std::vector<std::string> domains = {"", "ai.onnx", "com.microsoft", "ai.onnx.ml"};
          node->set_domain(pick(domains));
          log += fmt::format(" domain={:?}", node->domain());
        } else {
          node->set_op_type(pick(op_types_));
          log += fmt::format(" op_type={:?}", node->op_type());
        }
        return;
      }
      case 14: {  // node inputs added or removed
        onnx::NodeProto* node = pick_node(graph);
        if (node == nullptr) return;
        if (node->input_size() > 0 && below(2) == 0) {
          log += " input_removed";
          node->mutable_input()->RemoveLast();
        } else {
          const std::string& name = pick(names_);
          log += fmt::format(" input_added={:?}", name);
          node->add_input(name);
        }
        return;
      }
      case 15: {  // graph outputs removed, duplicated or renamed
        if (graph.output_size() == 0) return;
        const int at = index(graph.output_size());
        switch (below(3)) {
          case 0:
            log += fmt::format(" output_removed@{}", at);
            graph.mutable_output()->DeleteSubrange(at, 1);
            return;
          case 1:
            log += fmt::format(" output_dup@{}", at);
            *graph.add_output() = graph.output(at);
            return;
          default:
            graph.mutable_output(at)->set_name(pick(names_));
            log += fmt::format(" output_renamed={:?}", graph.output(at).name());
            return;
        }
      }
      default: {  // initializers listed among the inputs, as IR version 3 does
        if (graph.initializer_size() == 0) return;
        const P& tensor = graph.initializer(index(graph.initializer_size()));
        log += fmt::format(" init_as_input={:?}", tensor.name());
        onnx::ValueInfoProto* input = graph.add_input();
        input->set_name(tensor.name());
        onnx::TypeProto::Tensor* type = input->mutable_type()->mutable_tensor_type();
        type->set_elem_type(tensor.data_type());
        for (int64_t dim : tensor.dims()) type->mutable_shape()->add_dim()->set_dim_value(dim);
        return;
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<CorpusModel>& corpus_;
  std::set<std::string> op_types_;
  std::set<std::string> names_;
};

// The model folder of the fuzz run: the external data file the built models read, a subfolder,
// and a symlink to a file outside.
struct ModelFolder {
  testing::ScratchDir dir;
  testing::ScratchDir outside;

  ModelFolder() {
    std::string floats;
    for (int64_t i = 0; i < kWeightsFileFloats; ++i) floats.append("\x00\x00\x80\x3f", 4);
    testing::write_bytes(dir.file(kWeightsFile), floats);
    fs::create_directory(dir.path() / "sub");
    testing::write_bytes(dir.file("sub/inner.bin"), floats);
    testing::write_bytes(outside.file("secret.bin"), floats);
    fs::create_symlink(outside.file("secret.bin"), dir.path() / "escape.bin");
  }
};

TEST(OnnxImportFuzz, CorpusModelsImport) {
  ModelFolder folder;
  for (const CorpusModel& entry : built_corpus()) {
    Expected<ImportedModel> model =
        import_onnx_bytes(entry.model.SerializeAsString(), folder.dir.path().string(), kSource);
    EXPECT_TRUE(model.has_value()) << entry.name << ": " << model.status().message();
  }
}

TEST(OnnxImportFuzz, MutatedModelsFailCleanlyOrImportToValidGraphs) {
  const uint64_t seed = env_or("KILN_FUZZ_SEED", kDefaultSeed);
  const uint64_t iterations = env_or("KILN_FUZZ_ITERATIONS", kDefaultIterations);
  const std::chrono::seconds budget(env_or("KILN_FUZZ_SECONDS", kDefaultSeconds));
  const bool verbose = env_or("KILN_FUZZ_VERBOSE", 0) != 0;
  std::vector<CorpusModel> corpus = built_corpus();
  const size_t num_built = corpus.size();
  for (CorpusModel& entry : node_test_corpus()) corpus.push_back(std::move(entry));
  ModelFolder folder;
  const std::string base_dir = folder.dir.path().string();

  // Printed first, so that a crash can be replayed too.
  std::printf("[ fuzz     ] KILN_FUZZ_SEED=%llu, %zu built models and %zu node tests\n",
              static_cast<unsigned long long>(seed), num_built, corpus.size() - num_built);
  std::fflush(stdout);
  Mutator mutator(seed, corpus);
  std::mt19937_64 pick(seed ^ 0x9E3779B97F4A7C15u);
  const auto start = std::chrono::steady_clock::now();
  uint64_t done = 0;
  uint64_t imported = 0;
  uint64_t interpreted = 0;
  for (; done < iterations && std::chrono::steady_clock::now() - start < budget; ++done) {
    const size_t source = pick() % corpus.size();
    std::string log;
    const std::string mutant = mutator.mutate(corpus[source].model, log);
    if (verbose) {
      std::fprintf(stderr, "[ fuzz     ] %llu %s:%s\n", static_cast<unsigned long long>(done),
                   corpus[source].name.c_str(), log.c_str());
    }
    const Outcome outcome = check_model(mutant, base_dir, seed + done);
    imported += outcome.imported;
    interpreted += outcome.interpreted;
    if (HasFailure()) {
      ADD_FAILURE() << "replay with KILN_FUZZ_SEED=" << seed << ": iteration " << done << ", model "
                    << corpus[source].name << ", mutations" << log;
      break;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ fuzz     ] %llu mutants in %.1f s: %llu imported, %llu interpreted\n",
              static_cast<unsigned long long>(done), seconds,
              static_cast<unsigned long long>(imported),
              static_cast<unsigned long long>(interpreted));
  // Mutants that still import must occur, or the checks on imported graphs never run.
  EXPECT_GT(imported, 0u) << "seed " << seed;
}

}  // namespace
}  // namespace kiln
