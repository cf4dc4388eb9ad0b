// Gradient rules of the layout and data-movement ops against central finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "gradient/gradient_check.h"
#include "ir/builder.h"

namespace kiln::testing {
namespace {

TEST(LayoutGradient, Reshape) {
  EXPECT_TRUE(op_gradients_match(Op::reshape, {normal(Shape{2, 3, 4}, 1)}, {{"shape", {4, -1}}}));
  EXPECT_TRUE(op_gradients_match(Op::reshape, {normal(Shape{6}, 2)}, {{"shape", {1, 2, 3}}}));
}

TEST(LayoutGradient, Transpose) {
  EXPECT_TRUE(
      op_gradients_match(Op::transpose, {normal(Shape{2, 3, 4}, 3)}, {{"perm", {2, 0, 1}}}));
  EXPECT_TRUE(op_gradients_match(Op::transpose, {normal(Shape{2, 3, 4}, 4)}));
}

TEST(LayoutGradient, BroadcastToSumsOverBroadcastAxes) {
  EXPECT_TRUE(
      op_gradients_match(Op::broadcast_to, {normal(Shape{3, 1}, 5)}, {{"shape", {2, 3, 4}}}));
  EXPECT_TRUE(op_gradients_match(Op::broadcast_to, {normal(Shape{}, 6)}, {{"shape", {2, 2}}}));
  EXPECT_TRUE(op_gradients_match(Op::broadcast_to, {normal(Shape{2, 3}, 7)}, {{"shape", {2, 3}}}));
}

TEST(LayoutGradient, SliceWithStepsAndNegativeBounds) {
  const Array x = normal(Shape{4, 5, 3}, 8);
  const std::vector<Attrs> slices = {
      {{"starts", {1}}, {"ends", {3}}},
      {{"starts", {0, 1}}, {"ends", {4, 5}}, {"axes", {0, 1}}, {"steps", {2, 3}}},
      {{"starts", {-1}}, {"ends", {-6}}, {"axes", {1}}, {"steps", {-2}}},
      {{"starts", {-2, 0}}, {"ends", {100, 2}}, {"axes", {-1, 0}}},
      {{"starts", {3}}, {"ends", {3}}, {"axes", {1}}},
  };
  for (const Attrs& attrs : slices) EXPECT_TRUE(op_gradients_match(Op::slice, {x}, attrs));
}

TEST(LayoutGradient, ConcatAndSplit) {
  EXPECT_TRUE(op_gradients_match(
      Op::concat,
      {normal(Shape{2, 1, 3}, 9), normal(Shape{2, 4, 3}, 10), normal(Shape{2, 2, 3}, 11)},
      {{"axis", 1}}));
  EXPECT_TRUE(op_gradients_match(Op::concat, {normal(Shape{3}, 12)}, {{"axis", 0}}));
  EXPECT_TRUE(op_gradients_match(Op::split, {normal(Shape{2, 6}, 13)},
                                 {{"axis", -1}, {"sizes", {1, 2, 3}}}));
}

// Outputs of split that do not reach the loss contribute zeros.
TEST(LayoutGradient, SplitWithUnusedPieces) {
  GraphBuilder b("split");
  Value* x = b.input("x", DType::f64, {2, 6});
  std::vector<Value*> pieces = b.split(x, 1, {1, 2, 3});
  b.output(b.tanh(pieces.size() == 3 ? pieces[1] : nullptr));
  EXPECT_TRUE(gradients_match(b.finish(), {normal(Shape{2, 6}, 14)}));
}

TEST(LayoutGradient, PadAndCrop) {
  const Array x = normal(Shape{3, 4}, 15);
  EXPECT_TRUE(op_gradients_match(Op::pad, {x}, {{"pads", {1, 0, 2, 3}}, {"value", 0.5}}));
  EXPECT_TRUE(op_gradients_match(Op::pad, {x}, {{"pads", {-1, 2, 0, -2}}}));
}

TEST(LayoutGradient, GatherWithRepeatedIndices) {
  const Array data = normal(Shape{5, 3}, 16);
  EXPECT_TRUE(op_gradients_match(Op::gather, {data, integers(Shape{2, 4}, 5, 17)}));
  EXPECT_TRUE(
      op_gradients_match(Op::gather, {data, integers(Shape{4}, 3, 18, DType::i32)}, {{"axis", 1}}));
  EXPECT_TRUE(op_gradients_match(Op::gather, {data, integers(Shape{}, 5, 19)}));
}

TEST(LayoutGradient, ScatterAdd) {
  EXPECT_TRUE(op_gradients_match(
      Op::scatter_add,
      {normal(Shape{5, 3}, 20), integers(Shape{4}, 5, 21), normal(Shape{4, 3}, 22)}));
  EXPECT_TRUE(op_gradients_match(
      Op::scatter_add,
      {normal(Shape{2, 4}, 23), integers(Shape{2, 3}, 4, 24), normal(Shape{2, 2, 3}, 25)},
      {{"axis", 1}}));
}

}  // namespace
}  // namespace kiln::testing
