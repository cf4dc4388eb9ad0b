// ONNX import (frontend/onnx_import.h) on models built here with the ONNX protobuf API: shape
// subgraphs fold away, initializers become weights or constants, input shapes and their
// overrides, errors that name what is wrong, ONNX names on values, and the semantics of
// converters the conformance suite covers thinly, against values worked out by hand.
#include "frontend/onnx_import.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/onnx_model_builder.h"
#include "interp/interpreter.h"
#include "unit/frontend/frontend_test_util.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::attr_float;
using ::kiln::testing::attr_int;
using ::kiln::testing::attr_ints;
using ::kiln::testing::attr_string;
using ::kiln::testing::attr_tensor;
using ::kiln::testing::f32;
using ::kiln::testing::i64;
using ::kiln::testing::is_error_with;
using ::kiln::testing::ModelBuilder;
using ::kiln::testing::ScratchDir;
using ::kiln::testing::write_bytes;
using P = onnx::TensorProto;

// Imports `builder`'s model, failing the test (with the message) if the import fails.
std::optional<ImportedModel> import_ok(const ModelBuilder& builder,
                                       const OnnxImportOptions& options = {}) {
  Expected<ImportedModel> model = builder.import(options);
  EXPECT_TRUE(model.has_value()) << model.status().message();
  if (!model) return std::nullopt;
  return std::move(*model);
}

// Runs the imported graph on `data` followed by the model's weights.
std::vector<Array> run(const ImportedModel& model, std::vector<Array> data) {
  for (const Array& weight : model.weights) data.push_back(weight);
  Expected<std::vector<Array>> outputs = interpret(model.graph, data);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return outputs ? std::move(*outputs) : std::vector<Array>();
}

void expect_near(const Array& actual, DType dtype, const Shape& shape,
                 const std::vector<double>& expected, double tolerance = 1e-6) {
  EXPECT_EQ(dtype_name(actual.dtype), dtype_name(dtype));
  ASSERT_EQ(actual.shape.to_string(), shape.to_string());
  ASSERT_EQ(actual.data.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual.data[i], expected[i], tolerance) << "element " << i;
  }
}

std::vector<std::string> op_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const Node* node : graph.nodes()) names.emplace_back(node->op_name());
  return names;
}

std::vector<std::string> input_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const Value* value : graph.inputs()) names.push_back(value->name());
  return names;
}

std::vector<std::string> output_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const Value* value : graph.outputs()) names.push_back(value->name());
  return names;
}

// ---- folding of shape computations ------------------------------------------------------------

// x.reshape(x.shape[0], -1) as PyTorch exports it, the first dimension taken by Gather (a
// scalar) and Unsqueeze, or by Slice.
ModelBuilder flatten_batch_model(bool gather) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3, 4});
  m.initializer("minus_one", i64({1}, {-1}));
  m.node("Shape", {"x"}, {"shape"});
  if (gather) {
    m.initializer("zero", i64({}, {0}));
    m.initializer("axes", i64({1}, {0}));
    attr_int(m.node("Gather", {"shape", "zero"}, {"batch"}), "axis", 0);
    m.node("Unsqueeze", {"batch", "axes"}, {"batch_1d"});
  } else {
    m.initializer("starts", i64({1}, {0}));
    m.initializer("ends", i64({1}, {1}));
    m.node("Slice", {"shape", "starts", "ends"}, {"batch_1d"});
  }
  attr_int(m.node("Concat", {"batch_1d", "minus_one"}, {"target"}), "axis", 0);
  m.node("Reshape", {"x", "target"}, {"y"});
  m.output("y");
  return m;
}

TEST(OnnxImportFolding, ShapeSubgraphOfAReshapeTargetFoldsToOneReshape) {
  for (bool gather : {true, false}) {
    SCOPED_TRACE(gather ? "Shape -> Gather -> Unsqueeze" : "Shape -> Slice");
    std::optional<ImportedModel> model = import_ok(flatten_batch_model(gather));
    if (!model) return;
    EXPECT_EQ(op_names(model->graph), std::vector<std::string>{"reshape"});
    EXPECT_TRUE(model->weights.empty());
    EXPECT_EQ(model->num_data_inputs, 1);
    EXPECT_EQ(model->graph.inputs().size(), 1u);
    ASSERT_EQ(model->graph.outputs().size(), 1u);
    EXPECT_EQ(model->graph.outputs()[0]->type().to_string(), "f32[2,12]");
    std::vector<double> values(24);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
    std::vector<Array> outputs = run(*model, {f32({2, 3, 4}, values)});
    ASSERT_EQ(outputs.size(), 1u);
    expect_near(outputs[0], DType::f32, Shape{2, 12}, values);
  }
}

// y = x + Expand(Cast(Range(0, x.shape[1], 1)), Shape(x)) * ConstantOfShape(Shape(x), 2): the
// whole right-hand side depends only on x's static shape.
ModelBuilder range_expand_model(int64_t rows, int64_t columns) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {rows, columns});
  m.initializer("one", i64({}, {1}));
  m.initializer("zero", i64({}, {0}));
  m.node("Shape", {"x"}, {"shape"});
  attr_int(m.node("Gather", {"shape", "one"}, {"columns"}), "axis", 0);
  m.node("Range", {"zero", "columns", "one"}, {"range"});
  attr_int(m.node("Cast", {"range"}, {"range_f"}), "to", P::FLOAT);
  m.node("Expand", {"range_f", "shape"}, {"expanded"});
  attr_tensor(m.node("ConstantOfShape", {"shape"}, {"twos"}), "value", f32({1}, {2}));
  m.node("Mul", {"expanded", "twos"}, {"offsets"});
  m.node("Add", {"x", "offsets"}, {"y"});
  m.output("y");
  return m;
}

TEST(OnnxImportFolding, ConstantOfShapeRangeExpandFoldToAnEmbeddedConstant) {
  std::optional<ImportedModel> model = import_ok(range_expand_model(2, 3));
  if (!model) return;
  EXPECT_EQ(op_names(model->graph), (std::vector<std::string>{"constant", "add"}));
  EXPECT_TRUE(model->weights.empty());
  const Node* constant = model->graph.nodes()[0];
  expect_near(constant->attrs().get_tensor("value"), DType::f32, Shape{2, 3}, {0, 2, 4, 0, 2, 4});
  // The folded tensor keeps the ONNX name of the last tensor of the chain.
  EXPECT_EQ(constant->output()->name(), "offsets");
  std::vector<Array> outputs = run(*model, {f32({2, 3}, {1, 1, 1, 5, 5, 5})});
  ASSERT_EQ(outputs.size(), 1u);
  expect_near(outputs[0], DType::f32, Shape{2, 3}, {1, 3, 5, 5, 7, 9});
}

TEST(OnnxImportFolding, LargeFoldedTensorsBecomeWeights) {
  // 4 x 5 = 20 elements, more than kEmbedElements.
  static_assert(4 * 5 > kEmbedElements);
  std::optional<ImportedModel> model = import_ok(range_expand_model(4, 5));
  if (!model) return;
  EXPECT_EQ(op_names(model->graph), std::vector<std::string>{"add"});
  EXPECT_EQ(input_names(model->graph), (std::vector<std::string>{"x", "offsets"}));
  EXPECT_EQ(model->num_data_inputs, 1);
  ASSERT_EQ(model->weights.size(), 1u);
  std::vector<double> expected;
  for (int row = 0; row < 4; ++row) {
    for (int column = 0; column < 5; ++column) expected.push_back(2.0 * column);
  }
  expect_near(model->weights[0], DType::f32, Shape{4, 5}, expected);
}

// ---- initializers -----------------------------------------------------------------------------

std::vector<double> iota(int n, double start = 0) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) values[static_cast<size_t>(i)] = start + i;
  return values;
}

// y = (x @ w1 + b) @ w2 with w1 [2,9], w2 [9,2] large and b [9] small.
ModelBuilder two_layer_model(int ir_version, bool list_initializers_as_inputs) {
  ModelBuilder m(13, ir_version);
  m.input("x", P::FLOAT, {1, 2});
  m.initializer("w2", f32({9, 2}, iota(18)));
  m.initializer("b", f32({9}, iota(9, 1)));
  m.initializer("w1", f32({2, 9}, iota(18, 100)));
  m.initializer("unused", f32({8, 8}, iota(64)));
  if (list_initializers_as_inputs) {
    m.input("w2", P::FLOAT, {9, 2}).input("b", P::FLOAT, {9}).input("w1", P::FLOAT, {2, 9});
    m.input("unused", P::FLOAT, {8, 8});
  }
  m.node("MatMul", {"x", "w1"}, {"h"});
  m.node("Add", {"h", "b"}, {"hb"});
  m.node("MatMul", {"hb", "w2"}, {"y"});
  m.output("y");
  return m;
}

// Hand-computed two_layer_model output for x = [1, -1]: x @ w1 = w1[0] - w1[1] = -9 everywhere;
// + b gives hb[k] = k - 8 for k = 0..8; y[j] = sum_k hb[k] * w2[k][j] with w2[k][j] = 2k + j.
std::vector<double> two_layer_expected() {
  std::vector<double> y(2, 0.0);
  for (int k = 0; k < 9; ++k) {
    for (int j = 0; j < 2; ++j) y[static_cast<size_t>(j)] += (k - 8) * (2.0 * k + j);
  }
  return y;
}

TEST(OnnxImportInitializers, LargeOnesBecomeWeightInputsAfterTheDataInputsSmallOnesConstants) {
  std::optional<ImportedModel> model = import_ok(two_layer_model(8, false));
  if (!model) return;
  EXPECT_EQ(model->num_data_inputs, 1);
  // Weights in order of first use; the unused initializer is not an input at all.
  EXPECT_EQ(input_names(model->graph), (std::vector<std::string>{"x", "w1", "w2"}));
  ASSERT_EQ(model->weights.size(), 2u);
  EXPECT_EQ(model->weights[0], f32({2, 9}, iota(18, 100)));
  EXPECT_EQ(model->weights[1], f32({9, 2}, iota(18)));
  // b (9 elements) is embedded.
  Value* b = model->graph.find_value("b");
  ASSERT_NE(b, nullptr);
  ASSERT_FALSE(b->is_graph_input());
  EXPECT_EQ(b->producer()->op_name(), "constant");
  EXPECT_EQ(b->producer()->attrs().get_tensor("value"), f32({9}, iota(9, 1)));
  std::vector<Array> outputs = run(*model, {f32({1, 2}, {1, -1})});
  ASSERT_EQ(outputs.size(), 1u);
  expect_near(outputs[0], DType::f32, Shape{1, 2}, two_layer_expected());
}

TEST(OnnxImportInitializers, InitializersListedAmongInputsAreWeights) {
  std::optional<ImportedModel> model = import_ok(two_layer_model(3, true));
  if (!model) return;
  EXPECT_EQ(model->num_data_inputs, 1);
  EXPECT_EQ(input_names(model->graph), (std::vector<std::string>{"x", "w1", "w2"}));
  EXPECT_EQ(model->weights.size(), 2u);
  std::vector<Array> outputs = run(*model, {f32({1, 2}, {1, -1})});
  ASSERT_EQ(outputs.size(), 1u);
  expect_near(outputs[0], DType::f32, Shape{1, 2}, two_layer_expected());
}

TEST(OnnxImportInitializers, ASharedInitializerIsOneWeight) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {20});
  m.initializer("w", f32({20}, iota(20)));
  m.node("Add", {"x", "w"}, {"a"});
  m.node("Mul", {"a", "w"}, {"y"});
  m.output("y");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  EXPECT_EQ(input_names(model->graph), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(model->weights.size(), 1u);
}

// ---- graph input shapes -----------------------------------------------------------------------

ModelBuilder symbolic_relu_model() {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {"batch", 4});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  return m;
}

TEST(OnnxImportInputShapes, SymbolicDimensionWithoutOverrideIsAnError) {
  Expected<ImportedModel> model = symbolic_relu_model().import();
  EXPECT_TRUE(is_error_with(model.status(),
                            {"test.onnx", "input 'x'", "dimension 0 is 'batch'", "--shape x="}));
}

TEST(OnnxImportInputShapes, OverrideGivesTheShape) {
  OnnxImportOptions options;
  options.input_shapes["x"] = {3, 4};
  std::optional<ImportedModel> model = import_ok(symbolic_relu_model(), options);
  if (!model) return;
  EXPECT_EQ(model->graph.inputs()[0]->type().to_string(), "f32[3,4]");
  EXPECT_EQ(model->graph.outputs()[0]->type().to_string(), "f32[3,4]");
}

TEST(OnnxImportInputShapes, OverrideMustAgreeWithTheDeclaredRankAndFixedDims) {
  OnnxImportOptions options;
  options.input_shapes["x"] = {12};
  EXPECT_TRUE(is_error_with(symbolic_relu_model().import(options).status(),
                            {"input 'x'", "rank 1", "rank 2"}));
  options.input_shapes["x"] = {3, 5};
  EXPECT_TRUE(is_error_with(symbolic_relu_model().import(options).status(),
                            {"input 'x'", "dimension 1", "fixes it to 4"}));
}

TEST(OnnxImportInputShapes, OverrideForANonInputIsAnError) {
  OnnxImportOptions options;
  options.input_shapes["x"] = {3, 4};
  options.input_shapes["y"] = {3, 4};
  EXPECT_TRUE(
      is_error_with(symbolic_relu_model().import(options).status(), {"'y'", "not an input"}));
}

TEST(OnnxImportInputShapes, NegativeOverrideIsAnError) {
  OnnxImportOptions options;
  options.input_shapes["x"] = {-3, 4};
  EXPECT_TRUE(is_error_with(symbolic_relu_model().import(options).status(), {"input 'x'"}));
}

// y = Reshape(x, shape) with the target shape a graph input, as ONNX's node tests have it.
ModelBuilder reshape_by_input_model() {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3}).input("shape", P::INT64, {2});
  m.node("Reshape", {"x", "shape"}, {"y"});
  m.output("y");
  return m;
}

TEST(OnnxImportStaticInputs, DynamicReshapeTargetNamesTheTensorToFix) {
  Expected<ImportedModel> model = reshape_by_input_model().import();
  ASSERT_FALSE(model.has_value());
  EXPECT_TRUE(is_error_with(model.status(), {std::string(kStaticInputNeeded)}));
  EXPECT_EQ(static_input_needed(model.status()), std::optional<std::string>("shape"));
}

TEST(OnnxImportStaticInputs, StaticValueReplacesTheInput) {
  OnnxImportOptions options;
  options.static_inputs["shape"] = i64({2}, {3, 2});
  std::optional<ImportedModel> model = import_ok(reshape_by_input_model(), options);
  if (!model) return;
  EXPECT_EQ(input_names(model->graph), std::vector<std::string>{"x"});
  EXPECT_EQ(model->num_data_inputs, 1);
  std::vector<Array> outputs = run(*model, {f32({2, 3}, iota(6))});
  ASSERT_EQ(outputs.size(), 1u);
  expect_near(outputs[0], DType::f32, Shape{3, 2}, iota(6));
}

TEST(OnnxImportStaticInputs, StaticValueMustHaveTheDeclaredType) {
  OnnxImportOptions options;
  options.static_inputs["shape"] = Array(DType::i32, Shape{2}, {3, 2});
  EXPECT_TRUE(is_error_with(reshape_by_input_model().import(options).status(),
                            {"static value of input 'shape'", "i32[2]", "i64[2]"}));
  options.static_inputs["shape"] = i64({3}, {3, 2, 1});
  EXPECT_TRUE(is_error_with(reshape_by_input_model().import(options).status(), {"input 'shape'"}));
  options.static_inputs.clear();
  options.static_inputs["nope"] = i64({2}, {3, 2});
  EXPECT_TRUE(
      is_error_with(reshape_by_input_model().import(options).status(), {"'nope'", "not an input"}));
}

// ---- errors -----------------------------------------------------------------------------------

TEST(OnnxImportErrors, UnsupportedOperatorNamesTheOpTheNodeAndTheOpset) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("Acos", {"x"}, {"y"}, "arc_node");
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"test.onnx", "node 'arc_node' (Acos, opset 13)",
                                                  "unsupported operator 'Acos'"}));
}

TEST(OnnxImportErrors, UnknownAttributeIsUnsupported) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  attr_int(m.node("Relu", {"x"}, {"y"}, "r"), "x", 1);
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"node 'r' (Relu", "unsupported attribute 'x'"}));
}

TEST(OnnxImportErrors, AttributeOfTheWrongTypeIsAnError) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3});
  attr_string(m.node("Softmax", {"x"}, {"y"}), "axis", "last");
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"attribute 'axis'", "STRING", "INT"}));
}

TEST(OnnxImportErrors, NodeOfAnotherDomainIsUnsupported) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("FusedGelu", {"x"}, {"y"}, "g").set_domain("com.microsoft");
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(),
                            {"node 'g'", "unsupported operator domain 'com.microsoft'"}));
}

TEST(OnnxImportErrors, OpsetOutsideTheSupportedRangeIsAnError) {
  ModelBuilder m(kMaxOnnxOpset + 1);
  m.input("x", P::FLOAT, {2});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"opset 22"}));
}

TEST(OnnxImportErrors, UndefinedInputTensorIsNamed) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("Add", {"x", "ghost"}, {"y"}, "adder");
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"node 'adder'", "'ghost'", "not defined"}));
}

TEST(OnnxImportErrors, MissingGraphOutputIsNamed) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("Relu", {"x"}, {"y"});
  m.output("z");
  EXPECT_TRUE(is_error_with(m.import().status(), {"graph output 'z'"}));
}

TEST(OnnxImportErrors, GarbageBytesAreAParseError) {
  for (std::string bytes : {std::string("\xff\xff\xff\xff\xff", 5), std::string("\x0a\x80", 2),
                            std::string("not a model at all")}) {
    Expected<ImportedModel> model = import_onnx_bytes(bytes, "", "junk.onnx");
    EXPECT_TRUE(is_error_with(model.status(), {"junk.onnx"})) << ::testing::PrintToString(bytes);
  }
  EXPECT_TRUE(is_error_with(import_onnx_bytes("", "", "empty.onnx").status(), {"no graph"}));
}

TEST(OnnxImportErrors, EveryTruncationIsACleanError) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3});
  m.initializer("w", f32({3, 4}, iota(12)));
  attr_float(m.node("LeakyRelu", {"x"}, {"h"}), "alpha", 0.5f);
  m.node("MatMul", {"h", "w"}, {"y"});
  m.output("y");
  const std::string bytes = m.bytes();
  ASSERT_TRUE(import_onnx_bytes(bytes, "", "m.onnx").has_value());
  // The opset list is serialized after the graph, so no strict prefix is a whole model.
  for (size_t length = 0; length < bytes.size(); ++length) {
    Expected<ImportedModel> model =
        import_onnx_bytes(std::string_view(bytes).substr(0, length), "", "m.onnx");
    if (model) {
      ADD_FAILURE() << "prefix of " << length << " bytes imported";
    } else {
      EXPECT_TRUE(is_error_with(model.status(), {"m.onnx: "}));
    }
  }
}

// A model whose initializer w lives in external data at `location`.
std::string external_weight_model(const std::string& location) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {20});
  onnx::TensorProto* w = m.graph().add_initializer();
  w->set_name("w");
  w->set_data_type(P::FLOAT);
  w->add_dims(20);
  w->set_data_location(P::EXTERNAL);
  onnx::StringStringEntryProto* entry = w->add_external_data();
  entry->set_key("location");
  entry->set_value(location);
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y");
  return m.bytes();
}

TEST(OnnxImportErrors, ExternalDataOutsideTheModelFolderIsRejected) {
  ScratchDir outside;
  ScratchDir folder;
  std::string weights;
  for (int i = 0; i < 20; ++i) weights.append("\x00\x00\x80\x3f", 4);  // 1.0f
  write_bytes(outside.file("w.bin"), weights);
  write_bytes(folder.file("w.bin"), weights);
  std::filesystem::create_symlink(outside.file("w.bin"), folder.path() / "link.bin");

  const std::string model_path = folder.file("model.onnx");
  write_bytes(model_path, external_weight_model("w.bin"));
  Expected<ImportedModel> inside = import_onnx_file(model_path);
  ASSERT_TRUE(inside.has_value()) << inside.status().message();
  ASSERT_EQ(inside->weights.size(), 1u);
  EXPECT_EQ(inside->weights[0], f32({20}, std::vector<double>(20, 1.0)));

  const std::string relative =
      "../" + std::filesystem::path(outside.path()).filename().string() + "/w.bin";
  for (const std::string& location : {relative, outside.file("w.bin"), std::string("link.bin")}) {
    write_bytes(model_path, external_weight_model(location));
    EXPECT_TRUE(is_error_with(import_onnx_file(model_path).status(),
                              {model_path, "initializer 'w'", location}))
        << location;
  }
}

// ---- names ------------------------------------------------------------------------------------

TEST(OnnxImportNames, IntermediateValuesCarryOnnxNames) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("Relu", {"x"}, {"hidden"});
  attr_float(m.node("LeakyRelu", {"hidden"}, {"leaky"}), "alpha", 0.1f);
  m.node("Neg", {"leaky"}, {"y"});
  m.output("y");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  const std::vector<std::pair<std::string, std::string>> producers = {
      {"hidden", "relu"}, {"leaky", "where"}, {"y", "neg"}};
  for (const auto& [name, op] : producers) {
    const Value* value = model->graph.find_value(name);
    ASSERT_NE(value, nullptr) << name;
    ASSERT_FALSE(value->is_graph_input());
    EXPECT_EQ(value->producer()->op_name(), op) << name;
  }
  EXPECT_EQ(output_names(model->graph), std::vector<std::string>{"y"});
}

TEST(OnnxImportNames, OutputsCarryOnnxNamesWhenAliasingInputsOrEachOther) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2});
  m.node("Identity", {"x"}, {"passed"});
  m.node("Relu", {"x"}, {"r"});
  m.node("Identity", {"r"}, {"r_again"});
  m.output("passed").output("r").output("r_again");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  EXPECT_EQ(output_names(model->graph), (std::vector<std::string>{"passed", "r", "r_again"}));
  std::vector<Array> outputs = run(*model, {f32({2}, {-1, 2})});
  ASSERT_EQ(outputs.size(), 3u);
  expect_near(outputs[0], DType::f32, Shape{2}, {-1, 2});
  expect_near(outputs[1], DType::f32, Shape{2}, {0, 2});
  expect_near(outputs[2], DType::f32, Shape{2}, {0, 2});
}

TEST(OnnxImportNames, OutputsKeepOnnxNamesThatLookLikeGeneratedOnes) {
  // Old PyTorch exports name tensors by number; the importer's own unnamed values must not
  // take those names. LeakyRelu becomes several Kiln nodes, the first ones unnamed.
  ModelBuilder m(13);
  m.input("0", P::FLOAT, {2});
  m.node("LeakyRelu", {"0"}, {"1"});
  m.node("LeakyRelu", {"1"}, {"2"});
  m.node("Neg", {"2"}, {"3"});
  m.output("3").output("1");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  EXPECT_EQ(input_names(model->graph), std::vector<std::string>{"0"});
  EXPECT_EQ(output_names(model->graph), (std::vector<std::string>{"3", "1"}));
  const Value* two = model->graph.find_value("2");
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->producer()->op_name(), "where");
}

// ---- extreme values: errors, never an overflow or a huge allocation ---------------------------

constexpr int64_t kHuge = int64_t{1} << 62;
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

struct ExtremeCase {
  std::string name;
  ModelBuilder model;
  std::string error;  // what the error must say; the node's name when empty
};

// A model with one node `op` on x of `dims`, its extra inputs initializers.
ExtremeCase extreme_case(const std::string& name, const std::string& op,
                         const std::vector<int64_t>& dims,
                         const std::vector<std::pair<std::string, Array>>& initializers,
                         const std::function<void(onnx::NodeProto&)>& set_attrs,
                         int num_outputs = 1) {
  ModelBuilder m(18);
  std::vector<::kiln::testing::Dim> input_dims(dims.begin(), dims.end());
  m.input("x", P::FLOAT, input_dims);
  std::vector<std::string> inputs = {"x"};
  for (const auto& [input, value] : initializers) {
    m.initializer(input, value);
    inputs.push_back(input);
  }
  std::vector<std::string> outputs;
  for (int i = 0; i < num_outputs; ++i) outputs.push_back(fmt::format("y{}", i));
  set_attrs(m.node(op, inputs, outputs, name));
  for (const std::string& output : outputs) m.output(output);
  return {name, std::move(m), ""};
}

std::vector<ExtremeCase> extreme_cases() {
  const auto none = [](onnx::NodeProto&) {};
  const Array w3 = f32({1, 1, 3}, {1, 1, 1});
  return {
      extreme_case("tile_repeats", "Tile", {4, 2}, {{"repeats", i64({2}, {kHuge, 1})}}, none),
      extreme_case("conv_transpose_strides", "ConvTranspose", {1, 1, 3}, {{"w", w3}},
                   [](onnx::NodeProto& n) { attr_ints(n, "strides", {kHuge}); }),
      extreme_case("conv_transpose_group", "ConvTranspose", {1, 1, 3}, {{"w", w3}},
                   [](onnx::NodeProto& n) { attr_int(n, "group", kHuge); }),
      extreme_case("conv_transpose_output_shape", "ConvTranspose", {1, 1, 3}, {{"w", w3}},
                   [](onnx::NodeProto& n) { attr_ints(n, "output_shape", {kHuge}); }),
      extreme_case("conv_same_dilations", "Conv", {1, 1, 5}, {{"w", w3}},
                   [](onnx::NodeProto& n) {
                     attr_string(n, "auto_pad", "SAME_UPPER");
                     attr_ints(n, "dilations", {kHuge});
                   }),
      extreme_case("conv_same_strides", "Conv", {1, 1, 5}, {{"w", w3}},
                   [](onnx::NodeProto& n) {
                     attr_string(n, "auto_pad", "SAME_LOWER");
                     attr_ints(n, "strides", {kMaxInt64});
                   }),
      extreme_case("conv_weight_rank", "Conv", {1, 1, 5}, {{"w", f32({3}, {1, 1, 1})}}, none),
      extreme_case("max_pool_ceil_pads", "MaxPool", {1, 1, 5}, {},
                   [](onnx::NodeProto& n) {
                     attr_ints(n, "kernel_shape", {2});
                     attr_ints(n, "pads", {kMaxInt64, kMaxInt64});
                     attr_int(n, "ceil_mode", 1);
                   }),
      extreme_case(
          "split_num_outputs", "Split", {7}, {},
          [](onnx::NodeProto& n) { attr_int(n, "num_outputs", kHuge); }, 2),
      extreme_case("depth_to_space_blocksize", "DepthToSpace", {1, 4, 2, 2}, {},
                   [](onnx::NodeProto& n) { attr_int(n, "blocksize", int64_t{1} << 32); }),
      extreme_case("pad_huge", "Pad", {2}, {{"pads", i64({2}, {kHuge, 0})}}, none),
      extreme_case("expand_huge", "Expand", {1}, {{"shape", i64({2}, {kHuge, kHuge})}}, none),
  };
}

// Inputs with a zero extent, whose other extents multiply past int64, are rejected as inputs
// (before Flatten or SpaceToDepth multiply them).
std::vector<ExtremeCase> zero_extent_cases() {
  constexpr int64_t kBig = int64_t{1} << 40;
  ExtremeCase flatten =
      extreme_case("flatten", "Flatten", {0, kBig, kBig}, {}, [](onnx::NodeProto&) {});
  ExtremeCase space_to_depth =
      extreme_case("space_to_depth", "SpaceToDepth", {1, kBig, 0, kBig}, {},
                   [](onnx::NodeProto& n) { attr_int(n, "blocksize", kBig); });
  flatten.error = space_to_depth.error = "input 'x'";
  return {std::move(flatten), std::move(space_to_depth)};
}

TEST(OnnxImportExtremeValues, AreErrors) {
  std::vector<ExtremeCase> cases = extreme_cases();
  for (ExtremeCase& c : zero_extent_cases()) cases.push_back(std::move(c));
  for (const ExtremeCase& c : cases) {
    const std::string error = c.error.empty() ? fmt::format("node '{}'", c.name) : c.error;
    EXPECT_TRUE(is_error_with(c.model.import().status(), {error})) << c.name;
  }
}

TEST(OnnxImportExtremeValues, RangeOfMoreThanFoldableElementsIsAnError) {
  ModelBuilder m(13);
  m.initializer("start", i64({}, {0}));
  m.initializer("limit", i64({}, {static_cast<double>(int64_t{1} << 47)}));
  m.initializer("delta", i64({}, {1}));
  m.node("Range", {"start", "limit", "delta"}, {"y"});
  m.output("y");
  EXPECT_TRUE(is_error_with(m.import().status(), {"Range would have"}));
}

// ---- converter semantics, against values worked out by hand ------------------------------------

TEST(OnnxImportSemantics, GemmWithAlphaBetaAndTransposes) {
  ModelBuilder m(13);
  m.input("a", P::FLOAT, {3, 2}).input("b", P::FLOAT, {2, 3}).input("c", P::FLOAT, {2});
  onnx::NodeProto& gemm = m.node("Gemm", {"a", "b", "c"}, {"y"});
  attr_float(gemm, "alpha", 0.5f);
  attr_float(gemm, "beta", 2.0f);
  attr_int(gemm, "transA", 1);
  attr_int(gemm, "transB", 1);
  m.output("y");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  // A^T = [[1,3,5],[2,4,6]], B^T = [[1,0],[0,1],[1,0]]: A^T B^T = [[6,3],[8,4]]; times 0.5,
  // plus 2 * [1,-1] on every row.
  std::vector<Array> outputs = run(*model, {f32({3, 2}, {1, 2, 3, 4, 5, 6}),
                                            f32({2, 3}, {1, 0, 1, 0, 1, 0}), f32({2}, {1, -1})});
  ASSERT_EQ(outputs.size(), 1u);
  expect_near(outputs[0], DType::f32, Shape{2, 2}, {5, -0.5, 6, 0});
}

TEST(OnnxImportSemantics, MatMulWithOneDimensionalOperands) {
  ModelBuilder m(13);
  m.input("v", P::FLOAT, {3}).input("w", P::FLOAT, {3});
  m.input("m", P::FLOAT, {3, 2}).input("n", P::FLOAT, {2, 3}).input("batch", P::FLOAT, {2, 3, 2});
  m.node("MatMul", {"v", "m"}, {"vm"});
  m.node("MatMul", {"n", "w"}, {"nw"});
  m.node("MatMul", {"v", "w"}, {"vw"});
  m.node("MatMul", {"v", "batch"}, {"vb"});
  m.output("vm").output("nw").output("vw").output("vb");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  std::vector<Array> outputs =
      run(*model, {f32({3}, {1, 2, 3}), f32({3}, {1, 0, -1}), f32({3, 2}, {1, 2, 3, 4, 5, 6}),
                   f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({2, 3, 2}, iota(12))});
  ASSERT_EQ(outputs.size(), 4u);
  expect_near(outputs[0], DType::f32, Shape{2}, {22, 28});
  expect_near(outputs[1], DType::f32, Shape{2}, {-2, -2});
  expect_near(outputs[2], DType::f32, Shape{}, {-2});
  // batch[0] = [[0,1],[2,3],[4,5]], batch[1] = [[6,7],[8,9],[10,11]].
  expect_near(outputs[3], DType::f32, Shape{2, 2}, {16, 22, 52, 58});
}

TEST(OnnxImportSemantics, FlattenWithNegativeAxis) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3, 4});
  attr_int(m.node("Flatten", {"x"}, {"last"}), "axis", -1);
  attr_int(m.node("Flatten", {"x"}, {"all"}), "axis", -3);
  attr_int(m.node("Flatten", {"x"}, {"end"}), "axis", 3);
  m.output("last").output("all").output("end");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  EXPECT_EQ(model->graph.outputs()[0]->type().to_string(), "f32[6,4]");
  EXPECT_EQ(model->graph.outputs()[1]->type().to_string(), "f32[1,24]");
  EXPECT_EQ(model->graph.outputs()[2]->type().to_string(), "f32[24,1]");
  ModelBuilder bad(13);
  bad.input("x", P::FLOAT, {2, 3, 4});
  attr_int(bad.node("Flatten", {"x"}, {"y"}), "axis", -4);
  bad.output("y");
  EXPECT_TRUE(is_error_with(bad.import().status(), {"axis -4"}));
}

TEST(OnnxImportSemantics, SplitOpset18NumOutputsUneven) {
  ModelBuilder m(18);
  m.input("x", P::FLOAT, {7});
  attr_int(m.node("Split", {"x"}, {"a", "b", "c"}), "num_outputs", 3);
  m.output("a").output("b").output("c");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  std::vector<Array> outputs = run(*model, {f32({7}, iota(7))});
  ASSERT_EQ(outputs.size(), 3u);
  expect_near(outputs[0], DType::f32, Shape{3}, {0, 1, 2});
  expect_near(outputs[1], DType::f32, Shape{3}, {3, 4, 5});
  expect_near(outputs[2], DType::f32, Shape{1}, {6});

  ModelBuilder mismatch(18);
  mismatch.input("x", P::FLOAT, {7});
  attr_int(mismatch.node("Split", {"x"}, {"a", "b"}), "num_outputs", 3);
  mismatch.output("a").output("b");
  EXPECT_FALSE(mismatch.import().has_value());
}

TEST(OnnxImportSemantics, PadOpset18WithAxes) {
  ModelBuilder m(18);
  m.input("x", P::FLOAT, {2, 3});
  m.initializer("pads_last", i64({2}, {1, 2}));
  m.initializer("axes_last", i64({1}, {-1}));
  // For axes [1, 0]: begins (axis 1, axis 0), then ends (axis 1, axis 0).
  m.initializer("pads_both", i64({4}, {1, 0, 0, 1}));
  m.initializer("axes_both", i64({2}, {1, 0}));
  m.initializer("nine", f32({}, {9}));
  m.node("Pad", {"x", "pads_last", "nine", "axes_last"}, {"last"});
  m.node("Pad", {"x", "pads_both", "nine", "axes_both"}, {"both"});
  m.output("last").output("both");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  std::vector<Array> outputs = run(*model, {f32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(outputs.size(), 2u);
  expect_near(outputs[0], DType::f32, Shape{2, 6}, {9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9});
  expect_near(outputs[1], DType::f32, Shape{3, 4}, {9, 1, 2, 3, 9, 4, 5, 6, 9, 9, 9, 9});
}

// ConvTranspose of x = [1,2,3] with kernel [1,1,1], stride 2: the full output (extent 7) is
// [1, 1, 1+2, 2, 2+3, 3, 3].
ModelBuilder conv_transpose_model(int64_t output_extent) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {1, 1, 3});
  m.initializer("w", f32({1, 1, 3}, {1, 1, 1}));
  onnx::NodeProto& node = m.node("ConvTranspose", {"x", "w"}, {"y"});
  attr_ints(node, "strides", {2});
  attr_ints(node, "output_shape", {output_extent});
  m.output("y");
  return m;
}

TEST(OnnxImportSemantics, ConvTransposeWithOutputShape) {
  // ONNX: total padding = 2 * (3 - 1) + 3 - output; without SAME_UPPER the start gets
  // total - total / 2 (floor division) and the end total / 2.
  const std::vector<std::pair<int64_t, std::vector<double>>> cases = {
      {7, {1, 1, 3, 2, 5, 3, 3}},     // total 0
      {6, {1, 3, 2, 5, 3, 3}},        // total 1: start 1, end 0
      {5, {1, 3, 2, 5, 3}},           // total 2: start 1, end 1
      {8, {1, 1, 3, 2, 5, 3, 3, 0}},  // total -1: start 0, end -1 (a zero appended)
  };
  for (const auto& [extent, expected] : cases) {
    SCOPED_TRACE(extent);
    std::optional<ImportedModel> model = import_ok(conv_transpose_model(extent));
    if (!model) continue;
    std::vector<Array> outputs = run(*model, {f32({1, 1, 3}, {1, 2, 3})});
    ASSERT_EQ(outputs.size(), 1u);
    expect_near(outputs[0], DType::f32, Shape{1, 1, extent}, expected);
  }
}

ModelBuilder ceil_pool_model(const std::string& op, int64_t count_include_pad) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {1, 1, 5});
  onnx::NodeProto& node = m.node(op, {"x"}, {"y"});
  attr_ints(node, "kernel_shape", {2});
  attr_ints(node, "strides", {2});
  attr_int(node, "ceil_mode", 1);
  if (op == "AveragePool") attr_int(node, "count_include_pad", count_include_pad);
  m.output("y");
  return m;
}

TEST(OnnxImportSemantics, PoolingCeilModeKeepsThePartialLastWindow) {
  // Windows {0,1}, {2,3} and the partial {4}.
  const Array x = f32({1, 1, 5}, {1, 5, 2, 4, 6});
  std::optional<ImportedModel> max_pool = import_ok(ceil_pool_model("MaxPool", 0));
  std::optional<ImportedModel> avg_pool = import_ok(ceil_pool_model("AveragePool", 0));
  if (!max_pool || !avg_pool) return;
  std::vector<Array> max_out = run(*max_pool, {x});
  std::vector<Array> avg_out = run(*avg_pool, {x});
  ASSERT_EQ(max_out.size(), 1u);
  ASSERT_EQ(avg_out.size(), 1u);
  expect_near(max_out[0], DType::f32, Shape{1, 1, 3}, {5, 4, 6});
  expect_near(avg_out[0], DType::f32, Shape{1, 1, 3}, {3, 3, 6});
  EXPECT_TRUE(is_error_with(ceil_pool_model("AveragePool", 1).import().status(),
                            {"unsupported", "ceil_mode"}));
}

// Kiln's max_pool has no dilations: a dilated one is the max of its window's strided slices.
TEST(OnnxImportSemantics, MaxPoolWithDilationsTakesEveryOtherElement) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {1, 1, 7});
  onnx::NodeProto& node = m.node("MaxPool", {"x"}, {"y"});
  attr_ints(node, "kernel_shape", {2});
  attr_ints(node, "dilations", {2});
  attr_ints(node, "pads", {1, 1});
  m.output("y");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  // Padded: [pad, 3, 1, 4, 1, 5, 9, 2, pad]; window i takes elements i and i + 2.
  std::vector<Array> out = run(*model, {f32({1, 1, 7}, {3, 1, 4, 1, 5, 9, 2})});
  ASSERT_EQ(out.size(), 1u);
  expect_near(out[0], DType::f32, Shape{1, 1, 7}, {1, 4, 1, 5, 9, 5, 9});
  // Average pooling keeps refusing them, naming what.
  ModelBuilder average(19);
  average.input("x", P::FLOAT, {1, 1, 7});
  onnx::NodeProto& averaged = average.node("AveragePool", {"x"}, {"y"});
  attr_ints(averaged, "kernel_shape", {2});
  attr_ints(averaged, "dilations", {2});
  average.output("y");
  EXPECT_TRUE(is_error_with(average.import().status(), {"average pooling with dilations"}));
}

// nn.PReLU(num_parameters=C) as older exporters wrote it: a slope [C] for [N, C, ...], per
// channel; where [C] broadcasts against the last axis, ONNX's broadcasting holds.
TEST(OnnxImportSemantics, PReluSlopeOfOnePerChannel) {
  for (const int64_t width : {3, 2}) {
    ModelBuilder m(13);
    m.input("x", P::FLOAT, {1, 2, width});
    m.initializer("slope", f32({2}, {0.5, 0.25}));
    m.node("PRelu", {"x", "slope"}, {"y"});
    m.output("y");
    std::optional<ImportedModel> model = import_ok(m);
    if (!model) return;
    std::vector<double> values(static_cast<size_t>(2 * width), -4);
    std::vector<Array> out = run(*model, {f32({1, 2, width}, values)});
    ASSERT_EQ(out.size(), 1u);
    if (width == 3) {
      expect_near(out[0], DType::f32, Shape{1, 2, 3}, {-2, -2, -2, -1, -1, -1});
    } else {
      expect_near(out[0], DType::f32, Shape{1, 2, 2}, {-2, -1, -2, -1});
    }
  }
}

// Opset 20, as PyTorch 2.9's exporter writes by default: Gelu in both forms, and Cast with
// opset 19's `saturate`.
TEST(OnnxImportSemantics, Opset20GeluAndCastWithSaturate) {
  ModelBuilder m(20);
  m.input("x", P::FLOAT, {3});
  m.node("Gelu", {"x"}, {"exact"});
  attr_string(m.node("Gelu", {"x"}, {"tanh"}), "approximate", "tanh");
  onnx::NodeProto& cast = m.node("Cast", {"x"}, {"wide"});
  attr_int(cast, "to", P::DOUBLE);
  attr_int(cast, "saturate", 1);
  m.output("exact");
  m.output("tanh");
  m.output("wide");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  const std::vector<double> x = {-1, 0.5, 2};
  std::vector<double> exact, tanh_form;
  for (double v : x) {
    exact.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    tanh_form.push_back(
        0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
  }
  std::vector<Array> out = run(*model, {f32({3}, x)});
  ASSERT_EQ(out.size(), 3u);
  expect_near(out[0], DType::f32, Shape{3}, exact);
  expect_near(out[1], DType::f32, Shape{3}, tanh_form);
  expect_near(out[2], DType::f64, Shape{3}, x);
  ModelBuilder odd(20);
  odd.input("x", P::FLOAT, {3});
  attr_string(odd.node("Gelu", {"x"}, {"y"}), "approximate", "sigmoid");
  odd.output("y");
  EXPECT_TRUE(is_error_with(odd.import().status(), {"unsupported Gelu approximate 'sigmoid'"}));
}

TEST(OnnxImportSemantics, SliceToTheInt64LimitsAsPyTorchExportsIt) {
  // x[1:] ends at INT64_MAX; x[::-2] starts at -1 and ends at INT64_MIN with step -2.
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {5});
  const auto add_i64 = [&](const std::string& name, std::vector<int64_t> values) {
    P* tensor = m.graph().add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(P::INT64);
    tensor->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t value : values) tensor->add_int64_data(value);
  };
  add_i64("one", {1});
  add_i64("minus_one", {-1});
  add_i64("max", {std::numeric_limits<int64_t>::max()});
  add_i64("min", {std::numeric_limits<int64_t>::min()});
  add_i64("zero", {0});
  add_i64("minus_two", {-2});
  m.node("Slice", {"x", "one", "max"}, {"tail"});
  m.node("Slice", {"x", "minus_one", "min", "zero", "minus_two"}, {"reversed"});
  m.output("tail").output("reversed");
  std::optional<ImportedModel> model = import_ok(m);
  if (!model) return;
  std::vector<Array> outputs = run(*model, {f32({5}, {10, 11, 12, 13, 14})});
  ASSERT_EQ(outputs.size(), 2u);
  expect_near(outputs[0], DType::f32, Shape{4}, {11, 12, 13, 14});
  expect_near(outputs[1], DType::f32, Shape{3}, {14, 12, 10});
}

// Softmax of x = [[[0, 0], [ln 3, ln 3]]] (shape [1,2,2]).
ModelBuilder softmax_model(int opset, std::optional<int64_t> axis) {
  ModelBuilder m(opset);
  m.input("x", P::DOUBLE, {1, 2, 2});
  onnx::NodeProto& node = m.node("Softmax", {"x"}, {"y"});
  if (axis) attr_int(node, "axis", *axis);
  m.output("y");
  return m;
}

TEST(OnnxImportSemantics, SoftmaxBeforeOpset13CoercesTo2d) {
  const Array x(DType::f64, Shape{1, 2, 2}, {0, 0, std::log(3.0), std::log(3.0)});
  // Opset 11, axis 1 (the default): one row of all four elements, exps 1, 1, 3, 3 over 8.
  // Opset 13, axis 1: each column pair (0, ln 3) gives 1/4, 3/4.
  // Opset 13, default axis -1: each pair (v, v) gives 1/2, 1/2.
  const std::vector<std::pair<ModelBuilder, std::vector<double>>> cases = {
      {softmax_model(11, std::nullopt), {0.125, 0.125, 0.375, 0.375}},
      {softmax_model(13, 1), {0.25, 0.25, 0.75, 0.75}},
      {softmax_model(13, std::nullopt), {0.5, 0.5, 0.5, 0.5}},
  };
  for (const auto& [builder, expected] : cases) {
    std::optional<ImportedModel> model = import_ok(builder);
    if (!model) continue;
    std::vector<Array> outputs = run(*model, {x});
    ASSERT_EQ(outputs.size(), 1u);
    expect_near(outputs[0], DType::f64, Shape{1, 2, 2}, expected, 1e-12);
  }
}

TEST(OnnxImportSemantics, ClipTakesAttributesBeforeOpset11AndInputsFrom11) {
  const Array x = f32({4}, {-3, 0, 1.5, 4});
  ModelBuilder v6(6);
  v6.input("x", P::FLOAT, {4});
  onnx::NodeProto& clip6 = v6.node("Clip", {"x"}, {"y"});
  attr_float(clip6, "min", -1);
  attr_float(clip6, "max", 2);
  v6.output("y");

  ModelBuilder v11(11);
  v11.input("x", P::FLOAT, {4});
  v11.initializer("low", f32({}, {-1})).initializer("high", f32({}, {2}));
  v11.node("Clip", {"x", "low", "high"}, {"both"});
  v11.node("Clip", {"x", "", "high"}, {"max_only"});
  v11.output("both").output("max_only");

  std::optional<ImportedModel> model6 = import_ok(v6);
  std::optional<ImportedModel> model11 = import_ok(v11);
  if (!model6 || !model11) return;
  std::vector<Array> out6 = run(*model6, {x});
  std::vector<Array> out11 = run(*model11, {x});
  ASSERT_EQ(out6.size(), 1u);
  ASSERT_EQ(out11.size(), 2u);
  expect_near(out6[0], DType::f32, Shape{4}, {-1, 0, 1.5, 2});
  expect_near(out11[0], DType::f32, Shape{4}, {-1, 0, 1.5, 2});
  expect_near(out11[1], DType::f32, Shape{4}, {-3, 0, 1.5, 2});

  ModelBuilder attr_in_11(11);
  attr_in_11.input("x", P::FLOAT, {4});
  attr_float(attr_in_11.node("Clip", {"x"}, {"y"}), "min", -1);
  attr_in_11.output("y");
  EXPECT_TRUE(is_error_with(attr_in_11.import().status(), {"unsupported attribute 'min'"}));
}

ModelBuilder lrn_model(int64_t size, float alpha, float beta) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {1, 3, 1, 1});
  onnx::NodeProto& node = m.node("LRN", {"x"}, {"y"});
  attr_int(node, "size", size);
  attr_float(node, "alpha", alpha);
  attr_float(node, "beta", beta);
  attr_float(node, "bias", 1);
  m.output("y");
  return m;
}

TEST(OnnxImportSemantics, LrnSumsSquaresOverAChannelWindow) {
  // x = [1, 2, 3] over channels, squares [1, 4, 9]; y_c = x_c / (1 + alpha / size * S_c)^beta.
  // size 3: window [c-1, c+1], S = [5, 14, 13]; alpha = 3 makes alpha / size = 1.
  // size 2: window [c, c+1] (floor((size-1)/2) before, ceil after), S = [5, 13, 9].
  const Array x = f32({1, 3, 1, 1}, {1, 2, 3});
  struct Case {
    int64_t size;
    float alpha, beta;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {3, 3, 1, {1.0 / 6, 2.0 / 15, 3.0 / 14}},
      {2, 2, 1, {1.0 / 6, 2.0 / 14, 3.0 / 10}},
      {3, 3, 0.5f, {1 / std::sqrt(6.0), 2 / std::sqrt(15.0), 3 / std::sqrt(14.0)}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.size);
    std::optional<ImportedModel> model = import_ok(lrn_model(c.size, c.alpha, c.beta));
    if (!model) continue;
    std::vector<Array> outputs = run(*model, {x});
    ASSERT_EQ(outputs.size(), 1u);
    expect_near(outputs[0], DType::f32, Shape{1, 3, 1, 1}, c.expected);
  }
}

// ONNX holds float attributes in f32; Kiln reads each as the decimal its author wrote, so an
// epsilon of 1e-5 is 1e-05 (the default a rule's batch norm matches), not 9.999999747e-06.
TEST(OnnxImport, FloatAttributesAreTheValuesTheirAuthorsWrote) {
  ModelBuilder m(13);
  m.input("x", P::FLOAT, {2, 3, 2, 2});
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    m.input(name, P::FLOAT, {3});
  }
  attr_float(m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}),
             "epsilon", 1e-5f);
  m.output("y");
  std::optional<ImportedModel> model = import_ok(m);
  ASSERT_TRUE(model.has_value());
  const Node* norm = model->graph.nodes().back();
  ASSERT_EQ(norm->op(), Op::batch_norm_infer);
  EXPECT_EQ(norm->attrs().get_float("epsilon"), 1e-5);
}

}  // namespace
}  // namespace kiln
