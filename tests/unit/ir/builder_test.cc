// Tests GraphBuilder (ir/builder.h): a whole transformer encoder layer written with it (checked
// by the verifier, its output shapes, and properties of its numbers under the interpreter), the
// convenience methods, and the first-error behaviour.
#include "ir/builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/verifier.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::contains_all;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 8;
constexpr int64_t kHidden = 32;
constexpr int64_t kHeads = 4;
constexpr int64_t kHeadDim = kHidden / kHeads;
constexpr int64_t kFfn = 64;

// One post-norm transformer encoder layer, as in BERT:
//   h = layer_norm(x + attention(x)),  y = layer_norm(h + W2 gelu(W1 h + b1) + b2)
// with multi-head scaled dot-product self-attention. Outputs: y [batch, seq, hidden] and the
// attention probabilities [batch, heads, seq, seq].
Expected<Graph> build_encoder_layer() {
  GraphBuilder b("encoder_layer");
  const DType f32 = DType::f32;
  Value* x = b.input("x", f32, {kBatch, kSeq, kHidden});
  Value* wq = b.input("wq", f32, {kHidden, kHidden});
  Value* bq = b.input("bq", f32, {kHidden});
  Value* wk = b.input("wk", f32, {kHidden, kHidden});
  Value* bk = b.input("bk", f32, {kHidden});
  Value* wv = b.input("wv", f32, {kHidden, kHidden});
  Value* bv = b.input("bv", f32, {kHidden});
  Value* wo = b.input("wo", f32, {kHidden, kHidden});
  Value* bo = b.input("bo", f32, {kHidden});
  Value* ln1_scale = b.input("ln1_scale", f32, {kHidden});
  Value* ln1_bias = b.input("ln1_bias", f32, {kHidden});
  Value* w1 = b.input("w1", f32, {kHidden, kFfn});
  Value* b1 = b.input("b1", f32, {kFfn});
  Value* w2 = b.input("w2", f32, {kFfn, kHidden});
  Value* b2 = b.input("b2", f32, {kHidden});
  Value* ln2_scale = b.input("ln2_scale", f32, {kHidden});
  Value* ln2_bias = b.input("ln2_bias", f32, {kHidden});

  // [batch, seq, hidden] <-> [batch, heads, seq, head_dim]
  auto split_heads = [&](Value* t) {
    return b.transpose(b.reshape(t, {kBatch, kSeq, kHeads, kHeadDim}), {0, 2, 1, 3});
  };
  auto merge_heads = [&](Value* t) {
    return b.reshape(b.transpose(t, {0, 2, 1, 3}), {kBatch, kSeq, kHidden});
  };

  Value* q = split_heads(b.linear(x, wq, bq));
  Value* k = split_heads(b.linear(x, wk, bk));
  Value* v = split_heads(b.linear(x, wv, bv));
  Value* scores = b.mul_scalar(b.matmul(q, k, /*transpose_a=*/false, /*transpose_b=*/true),
                               1.0 / std::sqrt(static_cast<double>(kHeadDim)));
  Value* probs = b.softmax(scores);
  Value* attention = b.linear(merge_heads(b.matmul(probs, v)), wo, bo);
  Value* h = b.layer_norm(b.add(x, attention), ln1_scale, ln1_bias);
  Value* ffn = b.linear(b.gelu(b.linear(h, w1, b1)), w2, b2);
  Value* y = b.layer_norm(b.add(h, ffn), ln2_scale, ln2_bias);
  b.output(y);
  b.output(probs);
  return b.finish();
}

Array& input_named(const Graph& graph, std::vector<Array>& inputs, std::string_view name) {
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    if (graph.inputs()[i]->name() == name) return inputs[i];
  }
  ADD_FAILURE() << "no input " << name;
  return inputs.at(0);
}

// Standard-normal inputs, with each weight matrix scaled by 1/sqrt(fan in) as a trained model's
// would be, so that attention is neither uniform nor one-hot.
std::vector<Array> encoder_inputs(const Graph& graph, uint64_t seed) {
  std::vector<Array> inputs = random_inputs(graph, {.seed = seed});
  for (const char* name : {"wq", "wk", "wv", "wo", "w1", "w2"}) {
    Array& w = input_named(graph, inputs, name);
    const double scale = 1.0 / std::sqrt(static_cast<double>(w.shape.dim(0)));
    for (double& e : w.data) e *= scale;
    w.round_to_dtype();
  }
  return inputs;
}

std::vector<Array> run(const Graph& graph, const std::vector<Array>& inputs) {
  Expected<std::vector<Array>> outputs = interpret(graph, inputs);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return outputs ? *outputs : std::vector<Array>{};
}

TEST(BuilderTransformer, VerifiesAndHasTheExpectedOutputTypes) {
  Expected<Graph> g = build_encoder_layer();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  const Status status = verify(*g);
  EXPECT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(g->inputs().size(), 17u);
  ASSERT_EQ(g->outputs().size(), 2u);
  EXPECT_EQ(g->outputs()[0]->type(), (TensorType{DType::f32, Shape{kBatch, kSeq, kHidden}}));
  EXPECT_EQ(g->outputs()[1]->type(), (TensorType{DType::f32, Shape{kBatch, kHeads, kSeq, kSeq}}));
}

TEST(BuilderTransformer, GivesFiniteNonConstantOutputsOnRandomInputs) {
  Expected<Graph> g = build_encoder_layer();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    const std::vector<Array> outputs = run(*g, encoder_inputs(*g, seed));
    ASSERT_EQ(outputs.size(), 2u);
    for (const Array& out : outputs) {
      for (double e : out.data) ASSERT_TRUE(std::isfinite(e)) << e;
      EXPECT_NE(*std::min_element(out.data.begin(), out.data.end()),
                *std::max_element(out.data.begin(), out.data.end()));
    }
  }
}

TEST(BuilderTransformer, AttentionRowsAreProbabilityDistributions) {
  Expected<Graph> g = build_encoder_layer();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  const std::vector<Array> outputs = run(*g, encoder_inputs(*g, 7));
  ASSERT_EQ(outputs.size(), 2u);
  const Array& probs = outputs[1];
  ASSERT_EQ(probs.size(), kBatch * kHeads * kSeq * kSeq);
  for (int64_t row = 0; row < kBatch * kHeads * kSeq; ++row) {
    double sum = 0;
    for (int64_t j = 0; j < kSeq; ++j) {
      const double p = probs[row * kSeq + j];
      EXPECT_GE(p, 0.0);
      EXPECT_LE(p, 1.0);
      sum += p;
    }
    // Each of the kSeq f32 roundings is off by at most 2^-24 relative.
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << row;
  }
}

TEST(BuilderTransformer, FinalLayerNormRowsHaveZeroMeanAndUnitVariance) {
  Expected<Graph> g = build_encoder_layer();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  std::vector<Array> inputs = encoder_inputs(*g, 11);
  for (double& e : input_named(*g, inputs, "ln2_scale").data) e = 1;
  for (double& e : input_named(*g, inputs, "ln2_bias").data) e = 0;
  const std::vector<Array> outputs = run(*g, inputs);
  ASSERT_EQ(outputs.size(), 2u);
  const Array& y = outputs[0];
  for (int64_t row = 0; row < kBatch * kSeq; ++row) {
    double mean = 0;
    for (int64_t j = 0; j < kHidden; ++j) mean += y[row * kHidden + j];
    mean /= kHidden;
    double variance = 0;
    for (int64_t j = 0; j < kHidden; ++j) {
      variance += (y[row * kHidden + j] - mean) * (y[row * kHidden + j] - mean);
    }
    variance /= kHidden;
    EXPECT_NEAR(mean, 0.0, 1e-6) << "row " << row;
    // var / (var + epsilon) with epsilon 1e-5 and rows of variance about 1, then f32 rounding.
    EXPECT_NEAR(variance, 1.0, 1e-4) << "row " << row;
  }
}

TEST(BuilderTransformer, PermutingTheSequencePermutesTheOutputs) {
  // Without positional information, self-attention is permutation-equivariant: reversing the
  // positions of x reverses the rows of y and both axes of each attention matrix.
  Expected<Graph> g = build_encoder_layer();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  const std::vector<Array> inputs = encoder_inputs(*g, 5);
  std::vector<Array> reversed_inputs = inputs;
  Array& reversed_x = input_named(*g, reversed_inputs, "x");
  const Array original_x = reversed_x;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t s = 0; s < kSeq; ++s) {
      for (int64_t j = 0; j < kHidden; ++j) {
        reversed_x[(b * kSeq + s) * kHidden + j] =
            original_x[(b * kSeq + (kSeq - 1 - s)) * kHidden + j];
      }
    }
  }
  const std::vector<Array> outputs = run(*g, inputs);
  const std::vector<Array> reversed = run(*g, reversed_inputs);
  ASSERT_EQ(outputs.size(), 2u);
  ASSERT_EQ(reversed.size(), 2u);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t s = 0; s < kSeq; ++s) {
      for (int64_t j = 0; j < kHidden; ++j) {
        ASSERT_NEAR(reversed[0][(b * kSeq + s) * kHidden + j],
                    outputs[0][(b * kSeq + (kSeq - 1 - s)) * kHidden + j], 1e-5);
      }
    }
    for (int64_t head = 0; head < kHeads; ++head) {
      const int64_t base = (b * kHeads + head) * kSeq * kSeq;
      for (int64_t i = 0; i < kSeq; ++i) {
        for (int64_t j = 0; j < kSeq; ++j) {
          ASSERT_NEAR(reversed[1][base + i * kSeq + j],
                      outputs[1][base + (kSeq - 1 - i) * kSeq + (kSeq - 1 - j)], 1e-6);
        }
      }
    }
  }
}

TEST(BuilderConvenience, MulScalarMultipliesInTheOperandsDtype) {
  for (DType dtype : {DType::f64, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    GraphBuilder b;
    Value* x = b.input("x", dtype, {3});
    Value* y = b.mul_scalar(x, 0.25);
    ASSERT_NE(y, nullptr) << b.status().message();
    EXPECT_EQ(y->type(), x->type());
    b.output(y);
    Expected<Graph> g = b.finish();
    ASSERT_TRUE(g.has_value()) << g.status().message();
    const std::vector<Array> out = run(*g, {Array(dtype, Shape{3}, {4.0, -1.0, 6.5})});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], Array(dtype, Shape{3}, {1.0, -0.25, 1.625}));
  }
}

TEST(BuilderConvenience, LinearMultipliesTheLastAxisAndAddsTheBias) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f64, {1, 2, 3});
  Value* w = b.input("w", DType::f64, {3, 2});
  Value* bias = b.input("bias", DType::f64, {2});
  b.output(b.linear(x, w, bias));
  b.output(b.linear(x, w));
  Expected<Graph> g = b.finish();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  const Array x_value(DType::f64, Shape{1, 2, 3}, {1, 2, 3, 4, 5, 6});
  const Array w_value(DType::f64, Shape{3, 2}, {1, 0, 0, 1, 1, 1});
  const Array bias_value(DType::f64, Shape{2}, {10, 20});
  const std::vector<Array> out = run(*g, {x_value, w_value, bias_value});
  ASSERT_EQ(out.size(), 2u);
  // Row (1,2,3) -> (1+3, 2+3) = (4, 5); row (4,5,6) -> (10, 11).
  EXPECT_EQ(out[1], Array(DType::f64, Shape{1, 2, 2}, {4, 5, 10, 11}));
  EXPECT_EQ(out[0], Array(DType::f64, Shape{1, 2, 2}, {14, 25, 20, 31}));
}

TEST(BuilderErrors, FirstErrorIsKeptAndLaterCallsReturnNull) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f32, {2, 3});
  Value* w = b.input("w", DType::f32, {4, 5});
  Value* good = b.relu(x);
  ASSERT_NE(good, nullptr);
  EXPECT_EQ(b.matmul(x, w), nullptr);  // k = 3 against 4
  EXPECT_FALSE(b.ok());

  // Every later call returns nullptr, even those that would succeed or fail differently.
  EXPECT_EQ(b.relu(good), nullptr);
  EXPECT_EQ(b.input("y", DType::f32, {2}), nullptr);
  EXPECT_EQ(b.reshape(x, {7}), nullptr);
  EXPECT_EQ(b.mul_scalar(x, 2.0), nullptr);
  EXPECT_TRUE(b.split(x, 1, {1, 2}).empty());
  b.output(good);

  Expected<Graph> g = b.finish();
  ASSERT_FALSE(g.has_value());
  EXPECT_TRUE(contains_all(g.status().message(), {"op 'matmul'", "f32[2,3]", "f32[4,5]"}));
  EXPECT_EQ(g.status().message(), b.status().message());
}

TEST(BuilderErrors, ABadAttributeIsRecordedWithItsOp) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f32, {2, 3});
  EXPECT_EQ(b.transpose(x, {0, 0}), nullptr);
  EXPECT_TRUE(contains_all(b.status().message(), {"op 'transpose'", "perm"}));
}

TEST(BuilderErrors, AnInvalidInputShapeIsRecordedWithTheInputName) {
  GraphBuilder b;
  EXPECT_EQ(b.input("x", DType::f32, {2, -1}), nullptr);
  EXPECT_TRUE(contains_all(b.status().message(), {"input 'x'", "negative dimension -1"}));
}

TEST(BuilderErrors, ANullInputWithoutAnEarlierErrorIsAnError) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f32, {2});
  EXPECT_EQ(b.add(x, nullptr), nullptr);
  EXPECT_TRUE(contains_all(b.status().message(), {"op 'add'", "input 1 is null"}));
  EXPECT_FALSE(b.finish().has_value());
}

TEST(BuilderErrors, AValueOfAnotherBuilderIsAnError) {
  GraphBuilder first("first");
  GraphBuilder second("second");
  Value* x = first.input("x", DType::f32, {2});
  Value* y = second.input("y", DType::f32, {2});

  EXPECT_EQ(second.add(y, x), nullptr);
  EXPECT_TRUE(contains_all(second.status().message(), {"op 'add'", "input 1", "graph 'second'"}));

  first.output(y);
  EXPECT_FALSE(first.ok());
  EXPECT_TRUE(contains_all(first.status().message(), {"graph 'first'", "output 0"}));
  EXPECT_FALSE(first.finish().has_value());
}

TEST(BuilderErrors, ApplyOneOnAMultiOutputOpIsAnError) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f32, {4});
  EXPECT_EQ(b.apply1(Op::split, {x}, {{"axis", 0}, {"sizes", {2, 2}}}), nullptr);
  EXPECT_TRUE(contains_all(b.status().message(), {"op 'split'", "2 outputs"}));
}

TEST(BuilderFinish, RequiresAnOutput) {
  GraphBuilder b("nothing");
  b.relu(b.input("x", DType::f32, {2}));
  Expected<Graph> g = b.finish();
  ASSERT_FALSE(g.has_value());
  EXPECT_TRUE(contains_all(g.status().message(), {"graph 'nothing'", "no outputs"}));
}

TEST(BuilderFinish, ReturnsTheOutputsInDeclaredOrder) {
  GraphBuilder b("ordered");
  Value* x = b.input("x", DType::f32, {2});
  Value* r = b.relu(x);
  Value* e = b.exp(x);
  b.output(e);
  b.output(x);
  b.output(r);
  Expected<Graph> g = b.finish();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  EXPECT_EQ(g->name(), "ordered");
  EXPECT_EQ(g->outputs(), (std::vector<Value*>{e, x, r}));
  const Status status = verify(*g);
  EXPECT_TRUE(status.is_ok()) << status.message();
}

}  // namespace
}  // namespace kiln
