// Decomposition of each composite into primitives: the printed result (no composite left) and
// the outputs before and after, by the reference interpreter on random inputs; and the sharing
// that makes it worth doing: decomposed, a layer norm's statistics and the same statistics
// written out by hand (as a gradient rule writes them) become one computation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "passes/common_subexpressions.h"
#include "passes/dead_code.h"
#include "passes/decompose.h"
#include "unit/passes/pass_test_util.h"

namespace kiln {
namespace {

// Decomposes every composite of `text`'s graph, which must keep its outputs, and checks that
// `composite` is gone; returns the printed result.
std::string decomposed(const std::string& text, const std::string& composite) {
  const std::string result = print_graph(rewrite_keeping_outputs(text, decompose_all_composites));
  EXPECT_EQ(result.find(" " + composite + "("), std::string::npos) << result;
  return result;
}

TEST(Decompose, Softmax) {
  decomposed(R"(graph @g(%x: f32[3,5]) {
  %y = softmax(%x) {axis = 0} : f32[3,5]
  return %y
})", "softmax");
}

TEST(Decompose, LogSoftmax) {
  decomposed(R"(graph @g(%x: f32[3,5]) {
  %y = log_softmax(%x) : f32[3,5]
  return %y
})", "log_softmax");
}

TEST(Decompose, LayerNormOverTwoAxes) {
  decomposed(R"(graph @g(%x: f32[2,3,4], %s: f32[3,4], %b: f32[3,4]) {
  %y = layer_norm(%x, %s, %b) {axis = 1, epsilon = 0.001} : f32[2,3,4]
  return %y
})", "layer_norm");
}

TEST(Decompose, BatchNormTrainAllThreeOutputs) {
  decomposed(R"(graph @g(%x: f32[2,3,4,4], %s: f32[3], %b: f32[3]) {
  %y, %m, %v = batch_norm_train(%x, %s, %b) : f32[2,3,4,4], f32[3], f32[3]
  return %y, %m, %v
})", "batch_norm_train");
}

TEST(Decompose, CrossEntropyEachReduction) {
  for (const std::string reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    const std::string type = reduction == "none" ? "f32[2,3]" : "f32[]";
    decomposed(R"(graph @g(%x: f32[2,3,5], %l: i64[2,3]) {
  %loss = cross_entropy(%x, %l) {reduction = ")" + reduction + R"("} : )" + type + R"(
  return %loss
})", "cross_entropy");
  }
}

TEST(Decompose, CrossEntropyOfOnePosition) {
  decomposed(R"(graph @g(%x: f32[5], %l: i64[]) {
  %loss = cross_entropy(%x, %l) : f32[]
  return %loss
})", "cross_entropy");
}

TEST(Decompose, NllLoss) {
  decomposed(R"(graph @g(%x: f32[4,5], %l: i64[4]) {
  %p = log_softmax(%x) : f32[4,5]
  %loss = nll_loss(%p, %l) {reduction = "sum"} : f32[]
  return %loss
})", "nll_loss");
}

TEST(Decompose, BinaryCrossEntropy) {
  decomposed(R"(graph @g(%z: f32[3,4], %t: f32[3,4]) {
  %loss = binary_cross_entropy(%z, %t) : f32[]
  return %loss
})", "binary_cross_entropy");
}

TEST(Decompose, LayerNormSharesItsStatisticsWithTheSameWrittenOut) {
  // %v is what layer_norm's gradient rule recomputes; decomposed, it is the layer norm's own.
  Graph graph = parse(R"(graph @g(%x: f32[4,8], %s: f32[8], %b: f32[8]) {
  %y = layer_norm(%x, %s, %b) : f32[4,8]
  %m = mean(%x) {axes = [1], keepdims = true} : f32[4,1]
  %c = sub(%x, %m) : f32[4,8]
  %sq = mul(%c, %c) : f32[4,8]
  %v = mean(%sq) {axes = [1], keepdims = true} : f32[4,1]
  return %y, %v
})");
  ASSERT_TRUE(decompose_all_composites(graph));
  eliminate_common_subexpressions(graph);
  eliminate_dead_code(graph);
  int means = 0;
  for (const Node* node : graph.nodes()) means += node->op() == Op::reduce_mean;
  EXPECT_EQ(means, 2) << print_graph(graph);  // the mean and the variance, once each
}

}  // namespace
}  // namespace kiln
