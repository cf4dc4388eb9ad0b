// The mixed-precision policy pass: which ops run low, which in f32, which follow; casts shared
// and kept off the graph's signature; the policy graph close to the f32 graph on random inputs;
// and the pass idempotent.
#include "passes/precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "unit/passes/pass_test_util.h"

namespace kiln {
namespace {

// A transformer feed-forward block with a softmax head: a matmul and its bias, gelu, a second
// matmul, a residual add to the f32 input, a layer norm and a softmax over a scaled product.
constexpr const char* kBlock = R"(graph @block(%x: f32[8,32], %w1: f32[32,64], %b1: f32[64],
                                          %w2: f32[64,32], %g: f32[32], %beta: f32[32]) {
  %h = matmul(%x, %w1) : f32[8,64]
  %hb = add(%h, %b1) : f32[8,64]
  %a = gelu(%hb) : f32[8,64]
  %y = matmul(%a, %w2) : f32[8,32]
  %r = add(%x, %y) : f32[8,32]
  %n = layer_norm(%r, %g, %beta) : f32[8,32]
  %s = matmul(%n, %n) {transpose_b = true} : f32[8,8]
  %c = constant() {value = tensor<f32[]>[0.125]} : f32[]
  %sc = mul(%s, %c) : f32[8,8]
  %p = softmax(%sc) : f32[8,8]
  return %p, %a
})";

DType dtype_of(const Graph& graph, const std::string& name) {
  const Value* value = graph.find_value(name);
  EXPECT_NE(value, nullptr) << name;
  return value != nullptr ? value->dtype() : DType::boolean;
}

TEST(Precision, ContractionsRunLowTheirBiasFollowsAndSoftmaxAndLayerNormStayF32) {
  Graph graph = parse(kBlock);
  Expected<PrecisionSummary> summary = apply_precision(graph, Precision::bf16);
  ASSERT_TRUE(summary) << summary.status().message();
  ASSERT_TRUE(verify(graph).is_ok()) << print_graph(graph);
  const std::string text = print_graph(graph);
  EXPECT_EQ(dtype_of(graph, "h"), DType::bf16) << text;
  EXPECT_EQ(dtype_of(graph, "hb"), DType::bf16) << text;      // the bias is cast down to it
  EXPECT_EQ(dtype_of(graph, "a.bf16"), DType::bf16) << text;  // renamed: %a is its f32 cast
  EXPECT_EQ(dtype_of(graph, "y"), DType::bf16) << text;
  EXPECT_EQ(dtype_of(graph, "r"), DType::f32) << text;  // an f32 stream plus a bf16 branch
  EXPECT_EQ(dtype_of(graph, "n"), DType::f32) << text;
  EXPECT_EQ(dtype_of(graph, "s"), DType::bf16) << text;
  EXPECT_EQ(dtype_of(graph, "sc"), DType::f32) << text;  // only a softmax reads it
  EXPECT_EQ(dtype_of(graph, "p"), DType::f32) << text;
  // The signature is the f32 graph's: %a is cast back under its own name.
  for (const Value* value : graph.inputs()) EXPECT_EQ(value->dtype(), DType::f32);
  ASSERT_EQ(graph.outputs().size(), 2u);
  EXPECT_EQ(graph.outputs()[1]->name(), "a");
  EXPECT_EQ(graph.outputs()[1]->dtype(), DType::f32);
  EXPECT_EQ(summary->low_precision_nodes, 5) << text;  // h, hb, a, y, s
  // %n feeds both operands of %s through one cast.
  int casts_of_n = 0;
  for (const Node* node : graph.nodes()) {
    if (node->op() == Op::cast && node->input(0)->name() == "n") ++casts_of_n;
  }
  EXPECT_EQ(casts_of_n, 1) << text;
}

TEST(Precision, ThePolicyGraphIsCloseToTheF32GraphAndTheSecondPassChangesNothing) {
  Graph graph = parse(kBlock);
  const std::vector<Array> before = evaluate(graph);
  ASSERT_TRUE(apply_precision(graph, Precision::bf16));
  const std::vector<Array> after = evaluate(graph);
  ASSERT_EQ(after.size(), before.size());
  for (size_t o = 0; o < before.size(); ++o) {
    ASSERT_EQ(after[o].type(), before[o].type());
    for (int64_t i = 0; i < before[o].size(); ++i) {
      EXPECT_NEAR(after[o][i], before[o][i], 0.05 * (1 + std::fabs(before[o][i])))
          << "output " << o << " element " << i;
    }
  }
  const std::string once = print_graph(graph);
  Expected<PrecisionSummary> again = apply_precision(graph, Precision::bf16);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(again->casts_inserted, 0);
  EXPECT_EQ(print_graph(graph), once);
}

TEST(Precision, Fp16CastsToHalfAndFp32AndTf32ChangeNoDtype) {
  Graph half = parse(kBlock);
  ASSERT_TRUE(apply_precision(half, Precision::fp16));
  EXPECT_EQ(dtype_of(half, "h"), DType::f16);
  for (Precision precision : {Precision::fp32, Precision::tf32}) {
    Graph graph = parse(kBlock);
    const std::string text = print_graph(graph);
    Expected<PrecisionSummary> summary = apply_precision(graph, precision);
    ASSERT_TRUE(summary);
    EXPECT_EQ(summary->casts_inserted, 0);
    EXPECT_EQ(print_graph(graph), text);
  }
}

TEST(Precision, SumsRunInF32AndF64AndIntegersAreLeftAlone) {
  Graph graph = parse(R"(graph @g(%x: bf16[4,8], %d: f64[4,4], %i: i64[4]) {
  %s = sum(%x) {axes = [1]} : bf16[4]
  %m = reduce_max(%x) {axes = [1]} : bf16[4]
  %e = matmul(%d, %d) : f64[4,4]
  %j = add(%i, %i) : i64[4]
  return %s, %m, %e, %j
})");
  ASSERT_TRUE(apply_precision(graph, Precision::bf16));
  const std::string text = print_graph(graph);
  EXPECT_EQ(dtype_of(graph, "s.f32"), DType::f32) << text;  // cast back to bf16 as the output %s
  EXPECT_EQ(dtype_of(graph, "m"), DType::bf16) << text;     // a maximum is exact in any dtype
  EXPECT_EQ(dtype_of(graph, "e"), DType::f64) << text;
  EXPECT_EQ(dtype_of(graph, "j"), DType::i64) << text;
  EXPECT_EQ(graph.outputs()[0]->dtype(), DType::bf16);
}

TEST(Precision, AnUpdateOfF32StateFromALowGradientComputesInF32) {
  // A weight gradient from a contraction, and Adam's second moment of it: squared in f16, a
  // gradient below 2.4e-4 would vanish, and the update divide by the root of zero.
  Graph graph = parse(R"(graph @g(%x: f32[4,8], %dy: f32[4,16], %v: f32[8,16]) {
  %grad = matmul(%x, %dy) {transpose_a = true} : f32[8,16]
  %square = mul(%grad, %grad) : f32[8,16]
  %c = constant() {value = tensor<f32[]>[0.001]} : f32[]
  %scaled = mul(%square, %c) : f32[8,16]
  %v.next = add(%v, %scaled) : f32[8,16]
  return %v.next
})");
  ASSERT_TRUE(apply_precision(graph, Precision::fp16));
  const std::string text = print_graph(graph);
  EXPECT_EQ(dtype_of(graph, "grad"), DType::f16) << text;
  EXPECT_EQ(dtype_of(graph, "square"), DType::f32) << text;
  EXPECT_EQ(dtype_of(graph, "scaled"), DType::f32) << text;
}

// fp16's loss scaling in a whole step: the gradient unscaled by a scale of 65536 (infinite in
// f16), tested for overflow, and the verdict keeping an f64 step count. An output of f64 (or of
// any dtype but a low one) demands f32 as an f32 one does: the unscaling divides in f32.
TEST(Precision, AnUnscalingWhoseVerdictReachesAnF64OutputComputesInF32) {
  Graph graph = parse(R"(graph @g(%x: f32[4,8], %dy: f32[4,16], %scale: f32[], %m: f32[8,16],
                                  %count: f64[]) {
  %grad = matmul(%x, %dy) {transpose_a = true} : f32[8,16]
  %unscaled = div(%grad, %scale) : f32[8,16]
  %m.next = add(%m, %unscaled) : f32[8,16]
  %magnitude = abs(%unscaled) : f32[8,16]
  %largest = reduce_max(%magnitude) {axes = [0, 1]} : f32[]
  %inf = constant() {value = tensor<f32[]>[inf]} : f32[]
  %finite = less(%largest, %inf) : bool[]
  %one = constant() {value = tensor<f64[]>[1.0]} : f64[]
  %taken = add(%count, %one) : f64[]
  %count.next = where(%finite, %taken, %count) : f64[]
  return %m.next, %count.next
})");
  ASSERT_TRUE(apply_precision(graph, Precision::fp16));
  const std::string text = print_graph(graph);
  EXPECT_EQ(dtype_of(graph, "grad"), DType::f16) << text;
  EXPECT_EQ(dtype_of(graph, "unscaled"), DType::f32) << text;
  EXPECT_EQ(dtype_of(graph, "magnitude"), DType::f32) << text;
  EXPECT_EQ(text.find("%scale.f16"), std::string::npos) << "the scale is never rounded to f16";
}

TEST(Precision, NamesParseAndUnknownOnesAreRefused) {
  for (Precision precision : kAllPrecisions) {
    Expected<Precision> parsed = parse_precision(precision_name(precision));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, precision);
  }
  Expected<Precision> bad = parse_precision("int8");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("fp32, tf32, bf16 or fp16"), std::string::npos);
}

}  // namespace
}  // namespace kiln
