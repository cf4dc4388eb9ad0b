// Gradient rules of the contractions (matmul, conv and its gradients, spmm) and the pooling
// ops against central finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "gradient/gradient_check.h"

namespace kiln::testing {
namespace {

TEST(ContractionGradient, MatmulWithEveryTransposeFlag) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Array a = normal(ta ? Shape{4, 3} : Shape{3, 4}, 1);
      const Array b = normal(tb ? Shape{5, 4} : Shape{4, 5}, 2);
      EXPECT_TRUE(
          op_gradients_match(Op::matmul, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}))
          << "transpose_a=" << ta << " transpose_b=" << tb;
    }
  }
}

TEST(ContractionGradient, MatmulWithBatchedAndBroadcastOperands) {
  EXPECT_TRUE(op_gradients_match(Op::matmul, {normal(Shape{2, 3, 4}, 3), normal(Shape{4, 2}, 4)}));
  EXPECT_TRUE(op_gradients_match(Op::matmul,
                                 {normal(Shape{2, 1, 3, 4}, 5), normal(Shape{3, 2, 4}, 6)},
                                 {{"transpose_b", true}}));
  EXPECT_TRUE(op_gradients_match(Op::matmul, {normal(Shape{1, 4, 3}, 7), normal(Shape{2, 4, 1}, 8)},
                                 {{"transpose_a", true}}));
}

// A grouped, strided, padded, dilated 2-d conv; a 1-d and a 3-d one.
const Attrs kConv2d = {
    {"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}, {"dilations", {1, 2}}, {"groups", 2}};

TEST(ContractionGradient, Conv) {
  EXPECT_TRUE(op_gradients_match(
      Op::conv, {normal(Shape{2, 4, 5, 5}, 9), normal(Shape{6, 2, 3, 3}, 10)}, kConv2d));
  EXPECT_TRUE(op_gradients_match(Op::conv, {normal(Shape{2, 3, 7}, 11), normal(Shape{4, 3, 3}, 12)},
                                 {{"strides", {2}}, {"pads", {1, 2}}, {"dilations", {2}}}));
  EXPECT_TRUE(op_gradients_match(
      Op::conv, {normal(Shape{1, 2, 3, 3, 3}, 13), normal(Shape{2, 2, 2, 2, 2}, 14)}));
}

// The conv gradients are differentiable in turn (second order).
TEST(ContractionGradient, ConvGradDataAndWeight) {
  Attrs data_attrs = kConv2d;
  data_attrs.set("input_shape", {2, 4, 5, 5});
  EXPECT_TRUE(op_gradients_match(Op::conv_grad_data,
                                 {normal(Shape{2, 6, 3, 2}, 15), normal(Shape{6, 2, 3, 3}, 16)},
                                 data_attrs));
  Attrs weight_attrs = kConv2d;
  weight_attrs.set("weight_shape", {6, 2, 3, 3});
  EXPECT_TRUE(op_gradients_match(Op::conv_grad_weight,
                                 {normal(Shape{2, 4, 5, 5}, 17), normal(Shape{2, 6, 3, 2}, 18)},
                                 weight_attrs));
}

// A = [[a, 0, 0, b], [0, 0, 0, 0], [0, c, d, e]] in CSR: M = 3, K = 4.
TEST(ContractionGradient, SpmmInValuesAndDense) {
  const Array row_ptr(DType::i64, Shape{4}, {0, 2, 2, 5});
  const Array cols(DType::i32, Shape{5}, {0, 3, 1, 2, 3});
  const Array values = normal(Shape{5}, 19);
  EXPECT_TRUE(op_gradients_match(Op::spmm, {row_ptr, cols, values, normal(Shape{4, 2}, 20)}));
  EXPECT_TRUE(op_gradients_match(Op::spmm, {row_ptr, cols, values, normal(Shape{3, 2}, 21)},
                                 {{"transpose", true}, {"num_cols", 4}}));
}

TEST(PoolingGradient, MaxPoolWithoutTies) {
  EXPECT_TRUE(
      op_gradients_match(Op::max_pool, {distinct(Shape{2, 2, 5, 5}, 22)},
                         {{"kernel", {2, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 0, 1}}}));
  EXPECT_TRUE(op_gradients_match(Op::max_pool, {distinct(Shape{2, 3, 7}, 23)},
                                 {{"kernel", {3}}, {"strides", {2}}}));
}

const Attrs kAvgPool = {{"kernel", {3, 2}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 0}}};

TEST(PoolingGradient, AvgPoolAndItsGradient) {
  for (bool include_pad : {false, true}) {
    Attrs attrs = kAvgPool;
    attrs.set("count_include_pad", include_pad);
    EXPECT_TRUE(op_gradients_match(Op::avg_pool, {normal(Shape{2, 2, 5, 5}, 24)}, attrs))
        << "count_include_pad=" << include_pad;
    attrs.set("input_shape", {2, 2, 5, 5});
    EXPECT_TRUE(op_gradients_match(Op::avg_pool_grad, {normal(Shape{2, 2, 3, 3}, 25)}, attrs))
        << "count_include_pad=" << include_pad;
  }
}

}  // namespace
}  // namespace kiln::testing
