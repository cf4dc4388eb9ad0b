// The ATen importer (frontend/aten_import.h): the JSON form, argument reading, metadata checks
// and errors. The converters' semantics are checked against PyTorch itself by the Python
// package's tests (tests/python/test_aten_ops.py); here the interpreter checks a few by hand.
#include "frontend/aten_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;

Array f32(Shape shape, std::vector<double> values) {
  return Array(DType::f32, std::move(shape), std::move(values));
}

// The import's error (ok when it imports).
Status import_status(const std::string& text) { return import_aten_graph(text).status(); }

// A graph of the given inputs, nodes and outputs (JSON fragments).
std::string graph_json(const std::string& inputs, const std::string& nodes,
                       const std::string& outputs) {
  return R"({"format": "kiln-aten-1", "name": "g", "inputs": [)" + inputs + R"(], "nodes": [)" +
         nodes + R"(], "outputs": [)" + outputs + "]}";
}

const std::string kX = R"({"name": "x", "dtype": "f32", "shape": [2, 3]})";
const std::string kW = R"({"name": "w", "dtype": "f32", "shape": [4, 3]})";
const std::string kB = R"({"name": "b", "dtype": "f32", "shape": [4]})";

// relu(x @ w.T + b), as AOTAutograd writes nn.Linear + ReLU.
const std::string kLinearRelu =
    graph_json(kX + "," + kW + "," + kB,
               R"({"name": "t", "target": "aten.t.default", "args": {"self": {"tensor": "w"}},
        "outputs": [{"dtype": "f32", "shape": [3, 4]}]},
       {"name": "addmm", "target": "aten.addmm.default",
        "args": {"self": {"tensor": "b"}, "mat1": {"tensor": "x"}, "mat2": {"tensor": "t"},
                 "beta": 1, "alpha": 1},
        "outputs": [{"dtype": "f32", "shape": [2, 4]}]},
       {"name": "relu", "target": "aten.relu.default", "args": {"self": {"tensor": "addmm"}},
        "outputs": [{"dtype": "f32", "shape": [2, 4]}]})",
               R"({"tensor": "relu"})");

// One node of `target` with `args` and one f32[2, 3] result, on input x.
std::string one_node(const std::string& target, const std::string& args,
                     const std::string& result = R"({"dtype": "f32", "shape": [2, 3]})") {
  return graph_json(kX,
                    R"({"name": "n", "target": ")" + target + R"(", "args": )" + args +
                        R"(, "outputs": [)" + result + "]}",
                    R"({"tensor": "n"})");
}

TEST(AtenImport, ALinearLayerWithReluComputesItsValues) {
  Expected<Graph> graph = import_aten_graph(kLinearRelu);
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  ASSERT_EQ(graph->inputs().size(), 3u);
  EXPECT_EQ(graph->inputs()[1]->name(), "w");
  const Array x = f32({2, 3}, {1, -2, 0.5, 3, 0, -1});
  const Array w = f32({4, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1});
  const Array b = f32({4}, {0.5, 0, -1, 2});
  Expected<std::vector<Array>> y = interpret(*graph, std::vector<Array>{x, w, b});
  ASSERT_TRUE(y.has_value()) << y.status().message();
  const std::vector<double> expected = {1.5, 0, 0, 1.5, 3.5, 0, 0, 4};
  for (int64_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ((*y)[0][i], expected[i]) << i;
}

TEST(AtenImport, LayerNormGivesItsStatisticsAsResults) {
  const std::string text =
      graph_json(kX,
                 R"({"name": "ln", "target": "aten.native_layer_norm.default",
          "args": {"input": {"tensor": "x"}, "normalized_shape": [3], "weight": null,
                   "bias": null, "eps": 1e-5},
          "outputs": [{"dtype": "f32", "shape": [2, 3]}, {"dtype": "f32", "shape": [2, 1]},
                      {"dtype": "f32", "shape": [2, 1]}]})",
                 R"({"tensor": "ln"}, {"tensor": "ln", "index": 1}, {"tensor": "ln", "index": 2})");
  Expected<Graph> graph = import_aten_graph(text);
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  Expected<std::vector<Array>> y =
      interpret(*graph, std::vector<Array>{f32({2, 3}, {1, 2, 3, 0, 0, 6})});
  ASSERT_TRUE(y.has_value()) << y.status().message();
  EXPECT_DOUBLE_EQ((*y)[1][0], 2);
  EXPECT_DOUBLE_EQ((*y)[1][1], 2);
  EXPECT_NEAR((*y)[2][0], 1 / std::sqrt(2.0 / 3 + 1e-5), 1e-6);
  EXPECT_NEAR((*y)[0][2], 1 / std::sqrt(2.0 / 3 + 1e-5), 1e-6);  // (3 - 2) / sqrt(var + eps)
  EXPECT_NEAR((*y)[0][5], 4 / std::sqrt(8 + 1e-5), 1e-6);        // (6 - 2) / sqrt(var + eps)
}

TEST(AtenImport, ANumberWhereTheSchemaSaysTensorIsAConstant) {
  // 1 - x, as decompositions write sub.Tensor(1, x).
  Expected<Graph> graph = import_aten_graph(
      one_node("aten.sub.Tensor", R"({"self": 1, "other": {"tensor": "x"}, "alpha": 1})"));
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  Expected<std::vector<Array>> y =
      interpret(*graph, std::vector<Array>{f32({2, 3}, {1, 2, 3, 0, 0.5, 6})});
  ASSERT_TRUE(y.has_value()) << y.status().message();
  EXPECT_DOUBLE_EQ((*y)[0][1], -1);
  EXPECT_DOUBLE_EQ((*y)[0][4], 0.5);
}

TEST(AtenImport, AnInputReturnedAsItIsBecomesAnOutputOfItsOwn) {
  Expected<Graph> graph = import_aten_graph(graph_json(kX, "", R"({"tensor": "x"})"));
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  ASSERT_EQ(graph->outputs().size(), 1u);
  EXPECT_FALSE(graph->outputs()[0]->is_graph_input());
}

TEST(AtenImport, MaskedGradientsOfAConvolutionAreNotBuilt) {
  const std::string text = graph_json(
      R"({"name": "dy", "dtype": "f32", "shape": [1, 2, 3, 3]},
         {"name": "x", "dtype": "f32", "shape": [1, 1, 5, 5]},
         {"name": "w", "dtype": "f32", "shape": [2, 1, 3, 3]})",
      R"({"name": "cb", "target": "aten.convolution_backward.default",
          "args": {"grad_output": {"tensor": "dy"}, "input": {"tensor": "x"},
                   "weight": {"tensor": "w"}, "bias_sizes": [2], "stride": [1, 1],
                   "padding": [0, 0], "dilation": [1, 1], "transposed": false,
                   "output_padding": [0, 0], "groups": 1,
                   "output_mask": [false, true, true]},
          "outputs": [null, {"dtype": "f32", "shape": [2, 1, 3, 3]},
                      {"dtype": "f32", "shape": [2]}]})",
      R"({"tensor": "cb", "index": 1}, {"tensor": "cb", "index": 2})");
  Expected<Graph> graph = import_aten_graph(text);
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  for (const Node* node : graph->nodes()) EXPECT_NE(node->op(), Op::conv_grad_data);
}

// Two dropouts of x: (output, mask) each.
std::string two_dropouts(const std::string& inputs) {
  const std::string node = R"({"name": "NAME", "target": "aten.native_dropout.default",
        "args": {"input": {"tensor": "x"}, "p": 0.5, "train": null},
        "outputs": [{"dtype": "f32", "shape": [2, 3]}, {"dtype": "bool", "shape": [2, 3]}]})";
  std::string first = node, second = node;
  first.replace(first.find("NAME"), 4, "d1");
  second.replace(second.find("NAME"), 4, "d2");
  return graph_json(inputs, first + "," + second,
                    R"({"tensor": "d1"}, {"tensor": "d1", "index": 1}, {"tensor": "d2"},
                       {"tensor": "d2", "index": 1})");
}

TEST(AtenImport, DropoutDrawsFromASeedInputEachOpFromItsOwnCounters) {
  Expected<Graph> graph = import_aten_graph(two_dropouts(kX));
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  ASSERT_EQ(graph->inputs().size(), 2u);
  EXPECT_EQ(graph->inputs()[1]->name(), kAtenRngSeedInput);
  const Array x = f32({2, 3}, {1, -2, 0.5, 3, 4, -1});
  std::vector<std::vector<Array>> runs;
  for (double seed : {1.0, 2.0, 1.0}) {
    Expected<std::vector<Array>> y =
        interpret(*graph, std::vector<Array>{x, Array::scalar(DType::i64, seed)});
    ASSERT_TRUE(y.has_value()) << y.status().message();
    for (int d = 0; d < 2; ++d) {
      const Array& out = (*y)[static_cast<size_t>(2 * d)];
      const Array& mask = (*y)[static_cast<size_t>(2 * d + 1)];
      for (int64_t i = 0; i < x.size(); ++i) EXPECT_EQ(out[i], mask[i] != 0 ? x[i] * 2 : 0);
    }
    runs.push_back(std::move(*y));
  }
  EXPECT_EQ(runs[0], runs[2]);  // the same seed draws the same masks
  EXPECT_NE(runs[0][1], runs[1][1]);
  EXPECT_NE(runs[0][1], runs[0][3]);  // the two ops draw different masks
  // An input of the seed input's name is refused, not confused with it.
  const std::string taken = R"({"name": "x", "dtype": "f32", "shape": [2, 3]},
                               {"name": "rng_seed", "dtype": "i64", "shape": []})";
  EXPECT_TRUE(is_error_with(import_status(two_dropouts(taken)), {"'rng_seed'"}));
}

TEST(AtenImport, ErrorsNameTheNodeTheOpAndWhatIsWrong) {
  EXPECT_TRUE(is_error_with(import_status(one_node("aten.fancy.default", "{}")),
                            {"node 'n' (aten.fancy.default): Kiln has no converter"}));
  // An argument no converter reads is never dropped silently.
  EXPECT_TRUE(is_error_with(
      import_status(one_node("aten.relu.default", R"({"self": {"tensor": "x"}, "new": 1})")),
      {"argument(s) new are not read"}));
  EXPECT_TRUE(is_error_with(import_status(one_node("aten.relu.default", "{}")),
                            {"argument 'self' is missing"}));
  EXPECT_TRUE(
      is_error_with(import_status(one_node("aten.relu.default", R"({"self": {"tensor": "y"}})")),
                    {"refers to 'y', which is not defined"}));
  EXPECT_TRUE(is_error_with(import_status(one_node("aten.relu.default", R"({"self": "x"})")),
                            {"argument 'self' must be a tensor, got a string"}));
  // A converter whose result differs from PyTorch's metadata fails the import.
  EXPECT_TRUE(
      is_error_with(import_status(one_node("aten.relu.default", R"({"self": {"tensor": "x"}})",
                                           R"({"dtype": "f32", "shape": [3, 2]})")),
                    {"result 0 converts to f32[2,3], but PyTorch gives f32[3,2]"}));
  EXPECT_TRUE(is_error_with(
      import_status(one_node("aten._softmax.default",
                             R"({"self": {"tensor": "x"}, "dim": 1, "half_to_float": true})")),
      {"argument half_to_float = true is not supported"}));
  EXPECT_TRUE(is_error_with(import_status("{"), {"not valid JSON"}));
  // Fields of the wrong kind are errors, not exceptions.
  EXPECT_TRUE(is_error_with(import_status(R"({"format": 1})"), {"not an ATen graph"}));
  EXPECT_TRUE(is_error_with(
      import_status(one_node("aten.relu.default", R"({"self": {"tensor": "x", "index": "0"}})")),
      {"a tensor's 'index' must be an int"}));
  EXPECT_TRUE(is_error_with(
      import_status(graph_json(kX, R"({"name": 3, "target": [], "args": {}, "outputs": []})",
                               R"({"tensor": "x"})")),
      {"node '?' (?): a node needs a string 'name' and 'target'"}));
  EXPECT_TRUE(is_error_with(import_status(R"({"format": "other"})"), {"not an ATen graph"}));
}

TEST(AtenImport, ListsTheOpsItConverts) {
  const std::vector<std::string> ops = supported_aten_ops();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_NE(std::find(ops.begin(), ops.end(), "aten.addmm.default"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "aten.convolution_backward.default"), ops.end());
}

}  // namespace
}  // namespace kiln
