// Gradient rules of the composites (softmax, normalizations, dropout, losses) against central
// finite differences.
#include <gtest/gtest.h>

#include <string>

#include "gradient/gradient_check.h"

namespace kiln::testing {
namespace {

TEST(CompositeGradient, SoftmaxAndLogSoftmax) {
  for (Op op : {Op::softmax, Op::log_softmax}) {
    for (int64_t axis : {-1, 0, 1}) {
      EXPECT_TRUE(op_gradients_match(op, {normal(Shape{3, 4, 2}, 1)}, {{"axis", axis}}))
          << op_def(op).name << " axis " << axis;
    }
  }
}

TEST(CompositeGradient, LayerNormInAllThreeInputs) {
  EXPECT_TRUE(op_gradients_match(
      Op::layer_norm, {normal(Shape{2, 3, 4}, 2), normal(Shape{4}, 3), normal(Shape{4}, 4)}));
  EXPECT_TRUE(op_gradients_match(
      Op::layer_norm, {normal(Shape{2, 3, 4}, 5), normal(Shape{3, 4}, 6), normal(Shape{3, 4}, 7)},
      {{"axis", 1}, {"epsilon", 0.1}}));
  EXPECT_TRUE(op_gradients_match(
      Op::layer_norm, {normal(Shape{3, 2}, 8), normal(Shape{3, 2}, 9), normal(Shape{3, 2}, 10)},
      {{"axis", 0}}));
}

// All three outputs (y, mean, var) carry gradients.
TEST(CompositeGradient, BatchNormTrainThroughEveryOutput) {
  EXPECT_TRUE(op_gradients_match(
      Op::batch_norm_train,
      {normal(Shape{4, 3, 2, 2}, 11), normal(Shape{3}, 12), normal(Shape{3}, 13)}));
  EXPECT_TRUE(op_gradients_match(
      Op::batch_norm_train, {normal(Shape{5, 2}, 14), normal(Shape{2}, 15), normal(Shape{2}, 16)},
      {{"epsilon", 0.01}}));
}

TEST(CompositeGradient, BatchNormInferInAllFiveInputs) {
  EXPECT_TRUE(op_gradients_match(
      Op::batch_norm_infer, {normal(Shape{2, 3, 4}, 17), normal(Shape{3}, 18), normal(Shape{3}, 19),
                             normal(Shape{3}, 20), uniform(Shape{3}, 0.5, 2, 21)}));
}

TEST(CompositeGradient, DropoutReusesTheMask) {
  EXPECT_TRUE(op_gradients_match(Op::dropout, {normal(Shape{4, 5}, 22)},
                                 {{"ratio", 0.3}, {"seed", 5}, {"offset", 11}}));
}

TEST(CompositeGradient, ClassLossesInEveryReduction) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    const Attrs attrs = {{"reduction", reduction}};
    EXPECT_TRUE(op_gradients_match(Op::cross_entropy,
                                   {normal(Shape{4, 5}, 23), integers(Shape{4}, 5, 24)}, attrs))
        << reduction;
    EXPECT_TRUE(op_gradients_match(
        Op::cross_entropy, {normal(Shape{2, 3, 4}, 25), integers(Shape{2, 3}, 4, 26, DType::i32)},
        attrs))
        << reduction;
    EXPECT_TRUE(op_gradients_match(Op::nll_loss,
                                   {normal(Shape{4, 5}, 27), integers(Shape{4}, 5, 28)}, attrs))
        << reduction;
    EXPECT_TRUE(op_gradients_match(
        Op::binary_cross_entropy, {normal(Shape{3, 4}, 29), uniform(Shape{3, 4}, 0, 1, 30)}, attrs))
        << reduction;
  }
}

}  // namespace
}  // namespace kiln::testing
