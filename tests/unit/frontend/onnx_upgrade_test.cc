// Models below opset 11 (frontend/onnx_import.h): upgraded by ONNX's version converter before
// import, so that what old opsets wrote imports as today's ops: Add's legacy broadcast
// attribute (opset 6), BatchNormalization with `spatial` (opset 8), PRelu's slope (opset 7);
// and a legacy broadcast at an axis, which the converter refuses, read as written, with an
// opset-6 Gemm and MatMul beside it.
// Each upgraded model is run by the interpreter and compared with the values the old op
// defines, computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "common/onnx_model_builder.h"
#include "frontend/onnx_import.h"
#include "interp/interpreter.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::attr_float;
using ::kiln::testing::attr_int;
using ::kiln::testing::f32;
using ::kiln::testing::is_error_with;
using ::kiln::testing::ModelBuilder;
using P = onnx::TensorProto;

// `count` values 0.5, -1.25, 2, ... (varied signs and magnitudes).
std::vector<double> ramp(int count) {
  std::vector<double> values;
  for (int i = 0; i < count; ++i) values.push_back((i % 7 - 3) * 0.625 + i * 0.01);
  return values;
}

// The model's one output on `data`, its weights appended; checks that it was upgraded from
// `opset` (0: imported as written).
Array run_upgraded(const ModelBuilder& builder, int opset, std::vector<Array> data) {
  Expected<ImportedModel> model = builder.import();
  EXPECT_TRUE(model.has_value()) << model.status().message();
  if (!model) return {};
  EXPECT_EQ(model->upgraded_from, opset);
  if (opset != 0) {
    EXPECT_EQ(model->opset, kUpgradeBelowOpset);
  }
  for (const Array& weight : model->weights) data.push_back(weight);
  Expected<std::vector<Array>> outputs = interpret(model->graph, data);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return outputs ? (*outputs)[0] : Array();
}

TEST(OnnxUpgrade, AddWithTheLegacyBroadcastAttribute) {
  ModelBuilder m(6, 3);
  m.input("a", P::FLOAT, {2, 3, 4}).input("b", P::FLOAT, {4});
  attr_int(m.node("Add", {"a", "b"}, {"y"}), "broadcast", 1);
  m.output("y", P::FLOAT, {2, 3, 4});
  const Array a = f32({2, 3, 4}, ramp(24));
  const Array b = f32({4}, {10, 20, 30, 40});
  const Array y = run_upgraded(m, 6, {a, b});
  ASSERT_EQ(y.shape, Shape({2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(y[i], a[i] + b[i % 4]) << i;
}

// A channel bias on [N, C, W] (axis 1): ONNX's converter refuses it (its check compares B
// with A's dims from 0, not from `axis`), so the importer reads the old form as written.
TEST(OnnxUpgrade, AMulAtALegacyAxisIsReadAsWritten) {
  ModelBuilder m(6, 3);
  m.input("a", P::FLOAT, {2, 3, 4}).input("b", P::FLOAT, {3});
  onnx::NodeProto& mul = m.node("Mul", {"a", "b"}, {"y"});
  attr_int(mul, "broadcast", 1);
  attr_int(mul, "axis", 1);
  m.output("y", P::FLOAT, {2, 3, 4});
  const Array a = f32({2, 3, 4}, ramp(24));
  const Array b = f32({3}, {10, 20, 30});
  const Array y = run_upgraded(m, 0, {a, b});
  ASSERT_EQ(y.shape, Shape({2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(y[i], a[i] * b[(i / 4) % 3]) << i;
}

// The same refused model with an opset-6 Gemm (`broadcast`) and MatMul, as a classifier of the
// time wrote them: read as written, C broadcast when allowed and of the product's shape else.
TEST(OnnxUpgrade, AGemmAndMatMulOfOpset6InARefusedModelAreReadAsWritten) {
  for (const int64_t broadcast : {1, 0}) {
    ModelBuilder m(6, 3);
    m.input("a", P::FLOAT, {2, 3, 4}).input("b", P::FLOAT, {3});
    m.input("x", P::FLOAT, {2, 4}).input("w", P::FLOAT, {4, 3});
    if (broadcast != 0) {
      m.input("c", P::FLOAT, {3});
    } else {
      m.input("c", P::FLOAT, {2, 3});
    }
    m.input("v", P::FLOAT, {3, 2});
    onnx::NodeProto& mul = m.node("Mul", {"a", "b"}, {"scaled"});
    attr_int(mul, "broadcast", 1);
    attr_int(mul, "axis", 1);
    onnx::NodeProto& gemm = m.node("Gemm", {"x", "w", "c"}, {"g"});
    attr_int(gemm, "broadcast", broadcast);
    attr_float(gemm, "beta", 2);
    m.node("MatMul", {"g", "v"}, {"y"});
    m.output("y", P::FLOAT, {2, 2});
    m.output("scaled", P::FLOAT, {2, 3, 4});
    const Array x = f32({2, 4}, ramp(8));
    const Array w = f32({4, 3}, ramp(12));
    const Array c = broadcast ? f32({3}, {1, -2, 3}) : f32({2, 3}, {1, -2, 3, 4, 5, -6});
    const Array v = f32({3, 2}, ramp(6));
    const Array a = f32({2, 3, 4}, ramp(24));
    const Array y = run_upgraded(m, 0, {a, f32({3}, {1, 2, 3}), x, w, c, v});
    ASSERT_EQ(y.shape, Shape({2, 2}));
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        double want = 0;
        for (int64_t k = 0; k < 3; ++k) {
          double g = 2 * c[broadcast ? k : i * 3 + k];
          for (int64_t l = 0; l < 4; ++l) g += x[i * 4 + l] * w[l * 3 + k];
          want += g * v[k * 2 + j];
        }
        EXPECT_NEAR(y[i * 2 + j], want, 1e-5) << i << "," << j;
      }
    }
  }
}

TEST(OnnxUpgrade, BatchNormalizationOfOpset8) {
  ModelBuilder m(8, 3);
  m.input("x", P::FLOAT, {2, 3, 2, 2});
  const Array scale = f32({3}, {1.5, 0.5, 2});
  const Array bias = f32({3}, {0.1, -0.2, 0.3});
  const Array mean = f32({3}, {0.25, -0.5, 1});
  const Array var = f32({3}, {1, 4, 0.25});
  // Before IR version 4, every initializer is also a graph input.
  for (const auto& [name, value] : {std::pair{"scale", scale}, std::pair{"bias", bias},
                                    std::pair{"mean", mean}, std::pair{"var", var}}) {
    m.input(name, P::FLOAT, {3}).initializer(name, value);
  }
  onnx::NodeProto& bn = m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"});
  attr_float(bn, "epsilon", 1e-5f);
  attr_int(bn, "spatial", 1);
  m.output("y", P::FLOAT, {2, 3, 2, 2});
  const Array x = f32({2, 3, 2, 2}, ramp(24));
  const Array y = run_upgraded(m, 8, {x});
  ASSERT_EQ(y.shape, Shape({2, 3, 2, 2}));
  for (int64_t i = 0; i < 24; ++i) {
    const int64_t c = (i / 4) % 3;
    const double want = (x[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * scale[c] + bias[c];
    EXPECT_NEAR(y[i], want, 1e-5) << i;
  }
}

TEST(OnnxUpgrade, PReluOfOpset7) {
  ModelBuilder m(7, 3);
  m.input("x", P::FLOAT, {2, 3, 2});
  const Array slope = f32({3, 1}, {0.1, 0.2, 0.3});
  m.input("slope", P::FLOAT, {3, 1}).initializer("slope", slope);
  m.node("PRelu", {"x", "slope"}, {"y"});
  m.output("y", P::FLOAT, {2, 3, 2});
  const Array x = f32({2, 3, 2}, ramp(12));
  const Array y = run_upgraded(m, 7, {x});
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(y[i], x[i] >= 0 ? x[i] : x[i] * slope[(i / 2) % 3]) << i;
  }
}

// A model neither the converter nor the importer can take: the error says both why.
TEST(OnnxUpgrade, AnOpNeitherCanTakeIsAnErrorSayingWhy) {
  ModelBuilder m(8, 3);
  m.input("x", P::FLOAT, {2});
  m.node("NoSuchOp", {"x"}, {"y"});
  m.output("y");
  const Status status = m.import().status();
  EXPECT_TRUE(is_error_with(status, {"test.onnx", "version converter could not upgrade it from "
                                                  "opset 8 to 11", "NoSuchOp"}))
      << status.message();
}

}  // namespace
}  // namespace kiln
