// Gradient rules of the elementwise ops (unary, binary with broadcasting, where) against
// central finite differences.
#include <gtest/gtest.h>

#include "gradient/gradient_check.h"

namespace kiln::testing {
namespace {

const Shape kShapes[] = {Shape{}, Shape{5}, Shape{2, 1, 3}};

// Operand shapes that broadcast: stretched size-1 dims, added leading dims, scalars.
const std::pair<Shape, Shape> kBroadcastPairs[] = {
    {Shape{2, 3}, Shape{2, 3}}, {Shape{3, 1, 5}, Shape{4, 5}}, {Shape{}, Shape{2, 3}},
    {Shape{4, 1}, Shape{1}},    {Shape{1}, Shape{2, 1, 3}},
};

TEST(UnaryGradient, SmoothOpsOnNormalInputs) {
  for (Op op : {Op::neg, Op::exp, Op::tanh, Op::sigmoid, Op::erf, Op::sin, Op::cos, Op::identity}) {
    for (const Shape& shape : kShapes) {
      EXPECT_TRUE(op_gradients_match(op, {normal(shape, 1)}))
          << op_def(op).name << " " << shape.to_string();
    }
  }
}

TEST(UnaryGradient, OpsOfPositiveInputs) {
  for (Op op : {Op::log, Op::sqrt, Op::rsqrt, Op::reciprocal}) {
    for (const Shape& shape : kShapes) {
      EXPECT_TRUE(op_gradients_match(op, {uniform(shape, 0.5, 2, 2)}))
          << op_def(op).name << " " << shape.to_string();
    }
  }
}

TEST(UnaryGradient, KinkedOpsAwayFromTheKink) {
  for (Op op : {Op::relu, Op::abs}) {
    for (const Shape& shape : kShapes) {
      EXPECT_TRUE(op_gradients_match(op, {away_from_zero(shape, 3)}))
          << op_def(op).name << " " << shape.to_string();
    }
  }
}

TEST(UnaryGradient, GeluInBothForms) {
  for (const char* form : {"none", "tanh"}) {
    EXPECT_TRUE(op_gradients_match(Op::gelu, {normal(Shape{3, 4}, 4)}, {{"approximate", form}}))
        << form;
  }
}

// Their gradient is zero away from the jumps (0.25 k + 0.1 is never within 0.1 of an integer,
// a half-integer or zero).
TEST(UnaryGradient, PiecewiseConstantOpsPassZero) {
  for (Op op : {Op::floor, Op::ceil, Op::round, Op::sign}) {
    EXPECT_TRUE(op_gradients_match(op, {distinct(Shape{3, 4}, 5, 0.1)})) << op_def(op).name;
  }
}

TEST(UnaryGradient, CastBetweenEqualFloatingTypes) {
  EXPECT_TRUE(op_gradients_match(Op::cast, {normal(Shape{2, 3}, 6)}, {{"to", DType::f64}}));
}

TEST(BinaryGradient, ArithmeticWithBroadcasting) {
  for (const auto& [a, b] : kBroadcastPairs) {
    for (Op op : {Op::add, Op::sub, Op::mul}) {
      EXPECT_TRUE(op_gradients_match(op, {normal(a, 7), normal(b, 8)}))
          << op_def(op).name << " " << a.to_string() << " " << b.to_string();
    }
    EXPECT_TRUE(op_gradients_match(Op::div, {normal(a, 9), away_from_zero(b, 10)}))
        << "div " << a.to_string() << " " << b.to_string();
    EXPECT_TRUE(op_gradients_match(Op::pow, {uniform(a, 0.5, 2, 11), normal(b, 12)}))
        << "pow " << a.to_string() << " " << b.to_string();
  }
}

// Operands drawn from disjoint grids never tie.
TEST(BinaryGradient, MaxAndMinWithBroadcasting) {
  for (const auto& [a, b] : kBroadcastPairs) {
    for (Op op : {Op::max, Op::min}) {
      EXPECT_TRUE(op_gradients_match(op, {distinct(a, 13), distinct(b, 14, 0.125)}))
          << op_def(op).name << " " << a.to_string() << " " << b.to_string();
    }
  }
}

TEST(BinaryGradient, ModInBothSignConventions) {
  for (bool fmod : {false, true}) {
    for (const auto& [a, b] : kBroadcastPairs) {
      EXPECT_TRUE(
          op_gradients_match(Op::mod, {normal(a, 15), away_from_zero(b, 16)}, {{"fmod", fmod}}))
          << "fmod=" << fmod << " " << a.to_string() << " " << b.to_string();
    }
  }
}

TEST(BinaryGradient, WhereWithBroadcastingOperands) {
  const Array condition = integers(Shape{3, 1, 5}, 2, 17, DType::boolean);
  EXPECT_TRUE(
      op_gradients_match(Op::where, {condition, normal(Shape{4, 5}, 18), normal(Shape{1}, 19)}));
  EXPECT_TRUE(op_gradients_match(Op::where, {integers(Shape{2, 3}, 2, 20, DType::boolean),
                                             normal(Shape{2, 3}, 21), normal(Shape{}, 22)}));
}

}  // namespace
}  // namespace kiln::testing
