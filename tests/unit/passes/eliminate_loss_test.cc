// Loss elimination on IR text: the loss output and the nodes only it needed go, every other
// output keeps its value; steps it cannot apply to are refused with a reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/printer.h"
#include "passes/eliminate_loss.h"
#include "unit/passes/pass_test_util.h"

namespace kiln {
namespace {

// A binary cross-entropy step by hand: the loss, and an SGD update from its gradient
// (sigmoid(z) - t) / n, which never reads the loss.
constexpr const char* kStep = R"(graph @step(%z: f32[4], %t: f32[4], %w: f32[4]) {
  %loss = binary_cross_entropy(%z, %t) : f32[]
  %s = sigmoid(%z) : f32[4]
  %d = sub(%s, %t) : f32[4]
  %n = constant() {value = tensor<f32[]>[0.25]} : f32[]
  %g = mul(%d, %n) : f32[4]
  %w.next = sub(%w, %g) : f32[4]
  return %loss, %w.next
})";

TEST(EliminateLoss, DropsTheLossAndWhatOnlyItNeeded) {
  Graph step = parse(kStep);
  const std::vector<Array> before = evaluate(step);
  Expected<int> removed = eliminate_loss(step);
  ASSERT_TRUE(removed) << removed.status().message();
  EXPECT_EQ(*removed, 1);
  const std::string text = print_graph(step);
  EXPECT_EQ(text.find("binary_cross_entropy"), std::string::npos) << text;
  EXPECT_NE(text.find("return %w.next"), std::string::npos) << text;
  const std::vector<Array> after = evaluate(step);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].data, before[1].data);  // the same nodes on the same inputs
}

TEST(EliminateLoss, KeepsWhatTheOtherOutputsShare) {
  // The softmax feeds both the loss and the gradient: it stays.
  Graph step = parse(R"(graph @step(%x: f32[2,3]) {
  %p = softmax(%x) : f32[2,3]
  %l = log(%p) : f32[2,3]
  %loss = sum(%l) : f32[]
  %g = mul(%p, %x) : f32[2,3]
  return %loss, %g
})");
  Expected<int> removed = eliminate_loss(step);
  ASSERT_TRUE(removed) << removed.status().message();
  EXPECT_EQ(*removed, 2);
  EXPECT_NE(print_graph(step).find("softmax(%x)"), std::string::npos);
}

TEST(EliminateLoss, RefusesAStepWithoutAScalarLossFirst) {
  Graph only_loss = parse(R"(graph @g(%x: f32[3]) {
  %loss = sum(%x) : f32[]
  return %loss
})");
  Expected<int> result = eliminate_loss(only_loss);
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("1 output(s)"), std::string::npos)
      << result.status().message();

  Graph not_scalar = parse(R"(graph @g(%x: f32[3]) {
  %y = exp(%x) : f32[3]
  %z = relu(%x) : f32[3]
  return %y, %z
})");
  result = eliminate_loss(not_scalar);
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("not a floating scalar loss"), std::string::npos)
      << result.status().message();
  EXPECT_EQ(not_scalar.outputs().size(), 2u);  // untouched
}

}  // namespace
}  // namespace kiln
