// The fusion rules (fusion/rules.h): which edges each rule allows, the reasons edges are cut,
// and disabling a rule by name; and convexity (fusion/reachability.h).
#include "fusion/rules.h"

#include <gtest/gtest.h>

#include "fusion/reachability.h"
#include "ir/builder.h"

namespace kiln::fusion {
namespace {

// The verdict on the edge into the node computing `consumer` from the node computing `producer`.
EdgeVerdict verdict(const Value* producer, const Value* consumer,
                    const std::set<std::string>& disabled = {}) {
  return classify_edge(*producer->producer(), *consumer->producer(), disabled);
}

TEST(FusionRules, ElementwiseProducersAreInlined) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 8});
  Value* e = b.exp(x);
  Value* s = b.sum(e, {1});
  EXPECT_EQ(verdict(e, b.neg(e)).rule, "inline-producer");
  EXPECT_EQ(verdict(e, s).rule, "inline-producer");  // a reduction reads the inlined exp
  Value* t = b.transpose(x, {1, 0});
  EXPECT_EQ(verdict(t, b.relu(t)).rule, "inline-producer");
}

TEST(FusionRules, ProducersOfOverlappingWindowsAreNotInlined) {
  // Windows that tile the input read each element once; 3x3 windows at stride 2 read it 2.25
  // times, and an inlined producer would be evaluated as often.
  Graph graph;
  GraphBuilder b(graph);
  Value* r = b.relu(b.input("x", DType::f32, {1, 2, 8, 8}));
  EXPECT_EQ(verdict(r, b.max_pool(r, {2, 2}, {2, 2})).rule, "inline-producer");
  const EdgeVerdict overlap = verdict(r, b.max_pool(r, {3, 3}, {2, 2}));
  EXPECT_FALSE(overlap.fusible);
  EXPECT_NE(overlap.reason.find("2.25 times per element"), std::string::npos) << overlap.reason;
  EXPECT_FALSE(verdict(r, b.avg_pool(r, {3, 3})).fusible);  // stride 1: 9 times
}

TEST(FusionRules, ReductionsStitchWithElementwiseAndReductionConsumers) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 8});
  Value* m = b.mean(x, {1}, /*keepdims=*/true);
  EXPECT_EQ(verdict(m, b.sub(x, m)).rule, "stitch-reduction");
  EXPECT_EQ(verdict(m, b.sum(m, {0})).rule, "stitch-reduction");
  const EdgeVerdict layout = verdict(m, b.transpose(m, {1, 0}));
  EXPECT_FALSE(layout.fusible);
  EXPECT_NE(layout.reason.find("layout change"), std::string::npos) << layout.reason;
}

TEST(FusionRules, MatmulTakesElementwiseEpiloguesOfItsShape) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("a", DType::f32, {4, 8}), b.input("w", DType::f32, {8, 3}));
  EXPECT_EQ(verdict(y, b.add(y, b.input("bias", DType::f32, {3}))).rule, "matmul-epilogue");
  EXPECT_FALSE(verdict(y, b.sum(y, {1})).fusible);
  EXPECT_FALSE(verdict(y, b.transpose(y, {1, 0})).fusible);
  Value* i = b.matmul(b.input("p", DType::i32, {2, 2}), b.input("q", DType::i32, {2, 2}));
  EXPECT_NE(
      verdict(i, b.neg(i)).reason.find("floating matmuls, convs and conv_grad_datas only"),
      std::string::npos);
}

TEST(FusionRules, ConvAndItsDataGradientTakeElementwiseEpiloguesOfTheirShape) {
  // Each image's block of a conv or conv_grad_data is complete after its gemm (or col2im);
  // conv_grad_weight sums over every image into one output, so nothing can run on a block.
  Graph graph;
  GraphBuilder b(graph);
  Value* image = b.input("image", DType::f32, {2, 2, 5, 5});
  Value* kernel = b.input("k", DType::f32, {4, 2, 3, 3});
  Value* conv = b.apply1(Op::conv, {image, kernel});
  EXPECT_EQ(verdict(conv, b.relu(conv)).rule, "conv-epilogue");
  EXPECT_EQ(verdict(conv, b.add(conv, b.input("bias", DType::f32, {4, 1, 1}))).rule,
            "conv-epilogue");
  EXPECT_FALSE(verdict(conv, b.sum(conv, {1})).fusible);
  Value* grad_data = b.apply1(Op::conv_grad_data, {conv, kernel},
                              {{"input_shape", std::vector<int64_t>{2, 2, 5, 5}}});
  EXPECT_EQ(verdict(grad_data, b.neg(grad_data)).rule, "conv-epilogue");
  Value* grad_weight = b.apply1(Op::conv_grad_weight, {image, conv},
                                {{"weight_shape", std::vector<int64_t>{4, 2, 3, 3}}});
  EXPECT_FALSE(verdict(grad_weight, b.neg(grad_weight)).fusible);
  Value* half = b.apply1(Op::conv, {b.cast(image, DType::f16), b.cast(kernel, DType::f16)});
  EXPECT_EQ(verdict(half, b.relu(half)).rule, "conv-epilogue");
  Value* wide = b.apply1(Op::conv, {b.cast(image, DType::f64), b.cast(kernel, DType::f64)});
  EXPECT_EQ(verdict(wide, b.relu(wide)).rule, "conv-epilogue");
}

TEST(FusionRules, OperandsOfContractionsAndOpaqueOpsAreCut) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.relu(b.input("x", DType::f32, {4, 8}));
  const EdgeVerdict operand = verdict(x, b.matmul(x, b.input("w", DType::f32, {8, 3})));
  EXPECT_FALSE(operand.fusible);
  EXPECT_NE(operand.reason.find("operand of the contraction"), std::string::npos);
  Value* image = b.relu(b.input("image", DType::f32, {1, 2, 5, 5}));
  const EdgeVerdict image_operand =
      verdict(image, b.apply1(Op::conv, {image, b.input("k", DType::f32, {2, 2, 3, 3})}));
  EXPECT_NE(image_operand.reason.find("operand of the contraction"), std::string::npos);
  Value* pooled = b.apply1(Op::max_pool, {image}, {{"kernel", {2, 2}}});
  Value* grad = b.apply1(Op::max_pool_grad, {image, b.relu(pooled)}, {{"kernel", {2, 2}}});
  EXPECT_NE(verdict(grad, b.neg(grad)).reason.find("opaque"), std::string::npos);
}

TEST(FusionRules, DisabledRulesCutTheirEdges) {
  Graph graph;
  GraphBuilder b(graph);
  Value* e = b.exp(b.input("x", DType::f32, {4}));
  const EdgeVerdict disabled = verdict(e, b.neg(e), {"inline-producer"});
  EXPECT_FALSE(disabled.fusible);
  EXPECT_EQ(disabled.reason, "rule 'inline-producer' is disabled");
  EXPECT_EQ(fusion_rules().size(), 6u);
}

TEST(Reachability, ConvexGroupsHaveNoPathOutAndBackIn) {
  // a -> b -> d, a -> c -> d: {a, d} is not convex (b and c lie between), {a, b, c, d} is.
  Graph graph;
  GraphBuilder b(graph);
  Value* a = b.exp(b.input("x", DType::f32, {4}));
  Value* p = b.neg(a);
  Value* q = b.abs(a);
  Value* d = b.add(p, q);
  const Reachability reach(graph);
  const auto at = [&](const Value* v) { return reach.index(v->producer()); };
  EXPECT_TRUE(reach.reaches(at(a), at(d)));
  EXPECT_FALSE(reach.reaches(at(d), at(a)));
  EXPECT_FALSE(reach.reaches(at(p), at(q)));
  EXPECT_FALSE(reach.is_convex(std::vector<int>{at(a), at(d)}));
  EXPECT_FALSE(reach.is_convex(std::vector<int>{at(a), at(p), at(d)}));
  EXPECT_TRUE(reach.is_convex(std::vector<int>{at(a), at(p), at(q), at(d)}));
  EXPECT_TRUE(reach.is_convex(std::vector<int>{at(p), at(q)}));  // unrelated: convex
}

}  // namespace
}  // namespace kiln::fusion
