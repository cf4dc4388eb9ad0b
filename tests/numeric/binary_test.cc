// Binary ops and `where` against hand-computed values, NumPy results and identities.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "numeric/op_test_util.h"

namespace kiln {
namespace {

using testing::arrays_near;
using testing::boolean;
using testing::eval_error;
using testing::eval_output;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i32;
using testing::i64;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(BinaryOps, ArithmeticOnHandValues) {
  const Array a = f64({2, 3}, {1, -2, 3.5, 0, 8, -6});
  const Array b = f64({2, 3}, {4, 0.5, -1, 2, -8, 3});
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {a, b}), f64({2, 3}, {5, -1.5, 2.5, 2, 0, -3})));
  EXPECT_TRUE(arrays_near(eval_output(Op::sub, {a, b}), f64({2, 3}, {-3, -2.5, 4.5, -2, 16, -9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::mul, {a, b}), f64({2, 3}, {4, -1, -3.5, 0, -64, -18})));
  EXPECT_TRUE(arrays_near(eval_output(Op::div, {a, b}), f64({2, 3}, {0.25, -4, -3.5, 0, -1, -2})));
}

TEST(BinaryOps, SubtractionUndoesAddition) {
  const Array a = f64({5}, {0.125, -3, 7.5, 1e3, -0.5});
  const Array b = f64({5}, {2, 0.25, -1.5, 4, 16});
  const Array sum = eval_output(Op::add, {a, b});
  EXPECT_TRUE(arrays_near(eval_output(Op::sub, {sum, b}), a));
  const Array product = eval_output(Op::mul, {a, b});
  EXPECT_TRUE(arrays_near(eval_output(Op::div, {product, b}), a));
}

TEST(BinaryOps, BroadcastsLikeNumPy) {
  // a: [2,1,3], b: [4,1] -> [2,4,3]; values from NumPy (a + b).
  const Array a = f64({2, 1, 3}, {0, 1, 2, 13, 14, 15});
  const Array b = f64({4, 1}, {100, 200, 300, 400});
  const Array expected =
      f64({2, 4, 3}, {100, 101, 102, 200, 201, 202, 300, 301, 302, 400, 401, 402,
                      113, 114, 115, 213, 214, 215, 313, 314, 315, 413, 414, 415});
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {a, b}), expected));
  // Broadcasting is symmetric for add.
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {b, a}), expected));
}

TEST(BinaryOps, ScalarAndSizeOneOperandsBroadcast) {
  const Array x = f64({3}, {1, 2, 3});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::mul, {x, Array::scalar(DType::f64, 2)}), f64({3}, {2, 4, 6})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::sub, {Array::scalar(DType::f64, 10), x}), f64({3}, {9, 8, 7})));
  EXPECT_TRUE(arrays_near(eval_output(Op::sub, {f64({1, 1}, {10}), x}), f64({1, 3}, {9, 8, 7})));
  // Scalar with scalar stays rank 0.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::add, {Array::scalar(DType::f64, 1), Array::scalar(DType::f64, 2)}),
      Array::scalar(DType::f64, 3)));
  // Zero-size dims broadcast against 1 and give empty results.
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {f64({0, 1}, {}), x}), f64({0, 3}, {})));
}

TEST(BinaryOps, IncompatibleShapesAreAnError) {
  const std::string error =
      eval_error(Op::add, {f64({2, 3}, {1, 2, 3, 4, 5, 6}), f64({2}, {1, 2})});
  EXPECT_THAT(error, HasSubstr("cannot be broadcast"));
  EXPECT_THAT(error, HasSubstr("f64[2,3]"));
  EXPECT_THAT(error, HasSubstr("f64[2]"));
}

TEST(BinaryOps, BroadcastResultTooLargeIsAnError) {
  const OpDef& def = op_def(Op::add);
  const std::vector<TensorType> types = {{DType::f32, Shape{int64_t{1} << 30, 1}},
                                         {DType::f32, Shape{1, int64_t{1} << 30}}};
  Expected<Attrs> attrs = canonicalize_attrs(def, {});
  ASSERT_TRUE(attrs.has_value());
  Expected<std::vector<TensorType>> result = infer_types(def, types, *attrs);
  ASSERT_FALSE(result.has_value());
  EXPECT_THAT(result.status().message(), HasSubstr("2^48"));
}

TEST(BinaryOps, DtypesMustMatch) {
  EXPECT_THAT(eval_error(Op::add, {f32({1}, {1}), f64({1}, {1})}),
              HasSubstr("must have the same dtype"));
  EXPECT_THAT(eval_error(Op::less, {i32({1}, {1}), i64({1}, {1})}),
              HasSubstr("must have the same dtype"));
}

TEST(BinaryOps, ArithmeticRejectsBool) {
  const Array t = boolean({2}, {1, 0});
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min, Op::mod}) {
    EXPECT_THAT(eval_error(op, {t, t}), HasSubstr("must be numeric")) << op_def(op).name;
  }
}

TEST(BinaryOps, IntegerArithmeticKeepsTheDtype) {
  const Array a = i64({4}, {7, -3, 100, 0});
  const Array b = i64({4}, {2, 5, -4, 9});
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {a, b}), i64({4}, {9, 2, 96, 9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::mul, {a, b}), i64({4}, {14, -15, -400, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::max, {a, b}), i64({4}, {7, 5, 100, 9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::min, {a, b}), i64({4}, {2, -3, -4, 0})));
}

TEST(BinaryOps, IntegerDivisionTruncatesTowardZero) {
  // As C and ONNX (NumPy's // would floor: -7 // 2 = -4).
  EXPECT_TRUE(
      arrays_near(eval_output(Op::div, {i32({5}, {-7, 7, -7, 7, 6}), i32({5}, {2, 2, -2, -2, 3})}),
                  i32({5}, {-3, 3, 3, -3, 2})));
  // Exact near 2^53: (2^53 - 1) / 2 = 2^52 - 1 remainder 1.
  const double big = 9007199254740991;
  EXPECT_TRUE(arrays_near(eval_output(Op::div, {i64({2}, {big, -big}), i64({1}, {2})}),
                          i64({2}, {4503599627370495, -4503599627370495}), 0, 0));
}

TEST(BinaryOps, IntegerDivisionByZeroIsAnError) {
  EXPECT_EQ(eval_error(Op::div, {i32({3}, {1, 2, 3}), i32({3}, {1, 0, 1})}),
            "integer division by zero");
  EXPECT_EQ(eval_error(Op::div, {i64({2}, {1, 2}), Array::scalar(DType::i64, 0)}),
            "integer division by zero");
}

TEST(BinaryOps, FloatDivisionByZeroFollowsIeee) {
  EXPECT_TRUE(arrays_near(eval_output(Op::div, {f64({3}, {1, -1, 0}), f64({1}, {0})}),
                          f64({3}, {kInf, -kInf, kNaN})));
}

TEST(BinaryOps, ModTakesTheDivisorSignByDefault) {
  // Values from numpy.mod.
  const Array a = i32({6}, {-7, 7, -7, 7, 0, -6});
  const Array b = i32({6}, {3, 3, -3, -3, 5, -3});
  EXPECT_TRUE(arrays_near(eval_output(Op::mod, {a, b}), i32({6}, {2, 1, -1, -2, 0, 0})));
  const Array x = f64({6}, {-5.5, 7.5, 5.5, -7.5, -1, 1});
  const Array y = f64({6}, {2, -2, 2, -2, kInf, -kInf});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::mod, {x, y}), f64({6}, {0.5, -0.5, 1.5, -1.5, kInf, -kInf})));
}

TEST(BinaryOps, FmodTakesTheDividendSign) {
  // Values from numpy.fmod.
  const Array a = i64({6}, {-7, 7, -7, 7, 0, -6});
  const Array b = i64({6}, {3, 3, -3, -3, 5, -3});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::mod, {a, b}, {{"fmod", true}}), i64({6}, {-1, 1, -1, 1, 0, 0})));
  const Array x = f64({6}, {-5.5, 7.5, 5.5, -7.5, -1, 1});
  const Array y = f64({6}, {2, -2, 2, -2, kInf, -kInf});
  EXPECT_TRUE(arrays_near(eval_output(Op::mod, {x, y}, {{"fmod", true}}),
                          f64({6}, {-1.5, 1.5, 1.5, -1.5, -1, 1})));
}

TEST(BinaryOps, ModIdentityWithTruncatingDivision) {
  // With fmod=true, a == trunc(a / b) * b + mod(a, b) for integers.
  const Array a = i32({4}, {-17, 17, -17, 17});
  const Array b = i32({4}, {5, 5, -5, -5});
  const Array q = eval_output(Op::div, {a, b});
  const Array r = eval_output(Op::mod, {a, b}, {{"fmod", true}});
  EXPECT_TRUE(arrays_near(eval_output(Op::add, {eval_output(Op::mul, {q, b}), r}), a));
}

TEST(BinaryOps, ModByZero) {
  EXPECT_EQ(eval_error(Op::mod, {i32({2}, {1, 2}), i32({2}, {0, 1})}), "integer modulo by zero");
  EXPECT_EQ(eval_error(Op::mod, {i32({1}, {1}), i32({1}, {0})}, {{"fmod", true}}),
            "integer modulo by zero");
  EXPECT_TRUE(arrays_near(eval_output(Op::mod, {f64({2}, {1, -2}), f64({1}, {0})}),
                          f64({2}, {kNaN, kNaN})));
  EXPECT_TRUE(arrays_near(eval_output(Op::mod, {f64({1}, {1}), f64({1}, {0})}, {{"fmod", true}}),
                          f64({1}, {kNaN})));
}

TEST(BinaryOps, PowOnFloats) {
  const Array a = f64({5}, {2, 4, 0, -8, 3});
  const Array b = f64({5}, {10, 0.5, 0, 1.0 / 3, -2});
  // A negative base with a non-integer exponent is NaN, as IEEE pow.
  EXPECT_TRUE(arrays_near(eval_output(Op::pow, {a, b}), f64({5}, {1024, 2, 1, kNaN, 1.0 / 9})));
  EXPECT_THAT(eval_error(Op::pow, {i32({1}, {2}), i32({1}, {3})}),
              HasSubstr("must be a floating type"));
}

TEST(BinaryOps, MaxMinPropagateNaN) {
  const Array a = f64({4}, {kNaN, 1, 3, -kInf});
  const Array b = f64({4}, {1, kNaN, 2, -1});
  EXPECT_TRUE(arrays_near(eval_output(Op::max, {a, b}), f64({4}, {kNaN, kNaN, 3, -1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::min, {a, b}), f64({4}, {kNaN, kNaN, 2, -kInf})));
}

TEST(BinaryOps, ComparisonsReturnBool) {
  const Array a = f64({5}, {1, 2, 3, kNaN, -kInf});
  const Array b = f64({5}, {2, 2, 2, kNaN, -kInf});
  EXPECT_TRUE(arrays_near(eval_output(Op::equal, {a, b}), boolean({5}, {0, 1, 0, 0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::less, {a, b}), boolean({5}, {1, 0, 0, 0, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::less_equal, {a, b}), boolean({5}, {1, 1, 0, 0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::greater, {a, b}), boolean({5}, {0, 0, 1, 0, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::greater_equal, {a, b}), boolean({5}, {0, 1, 1, 0, 1})));
}

TEST(BinaryOps, ComparisonsAcceptIntegersAndBoolAndBroadcast) {
  // [2,1] against [3] -> [2,3].
  const Array a = i32({2, 1}, {1, 3});
  const Array b = i32({3}, {0, 1, 2});
  EXPECT_TRUE(arrays_near(eval_output(Op::greater, {a, b}), boolean({2, 3}, {1, 0, 0, 1, 1, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::equal, {a, b}), boolean({2, 3}, {0, 1, 0, 0, 0, 0})));
  // Bool orders false < true.
  const Array p = boolean({4}, {0, 0, 1, 1});
  const Array q = boolean({4}, {0, 1, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::equal, {p, q}), boolean({4}, {1, 0, 0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::less, {p, q}), boolean({4}, {0, 1, 0, 0})));
}

TEST(BinaryOps, LogicalOpsFollowTruthTables) {
  const Array p = boolean({4}, {0, 0, 1, 1});
  const Array q = boolean({4}, {0, 1, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::logical_and, {p, q}), boolean({4}, {0, 0, 0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::logical_or, {p, q}), boolean({4}, {0, 1, 1, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::logical_xor, {p, q}), boolean({4}, {0, 1, 1, 0})));
  // Broadcasting a scalar.
  EXPECT_TRUE(arrays_near(eval_output(Op::logical_xor, {p, Array::scalar(DType::boolean, 1)}),
                          boolean({4}, {1, 1, 0, 0})));
}

TEST(BinaryOps, LogicalOpsRequireBool) {
  const Array x = i32({2}, {0, 1});
  EXPECT_THAT(eval_error(Op::logical_and, {x, x}), HasSubstr("must be bool"));
  EXPECT_THAT(eval_error(Op::logical_or, {boolean({1}, {1}), f32({1}, {1})}),
              HasSubstr("must have the same dtype"));
}

TEST(BinaryOps, F32ResultsAreRoundedToF32) {
  const Array r = eval_output(Op::div, {f32({1}, {1}), f32({1}, {3})});
  EXPECT_EQ(r[0], static_cast<double>(1.0f / 3.0f));
}

TEST(BinaryOps, CostCountsOutputElements) {
  const std::vector<TensorType> in = {{DType::f32, Shape{2, 3}}, {DType::f32, Shape{3}}};
  const std::vector<TensorType> out = {{DType::f32, Shape{2, 3}}};
  const Cost add = op_def(Op::add).cost(in, out, Attrs{});
  EXPECT_EQ(add.flops, 6);
  EXPECT_EQ(add.bytes_read, 24 + 12);
  EXPECT_EQ(add.bytes_written, 24);
  EXPECT_EQ(op_def(Op::pow).cost(in, out, Attrs{}).flops, 60);
  EXPECT_EQ(op_def(Op::add).fusion_kind, FusionKind::broadcast);
}

TEST(WhereOp, SelectsWithThreeWayBroadcasting) {
  // condition [2,1], x [1,3], y scalar -> [2,3].
  const Array condition = boolean({2, 1}, {1, 0});
  const Array x = f64({1, 3}, {1, 2, 3});
  const Array y = Array::scalar(DType::f64, -1);
  EXPECT_TRUE(
      arrays_near(eval_output(Op::where, {condition, x, y}), f64({2, 3}, {1, 2, 3, -1, -1, -1})));
  // condition [3] against x [2,1] and y [1]: x and y both broadcast.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::where, {boolean({3}, {0, 1, 0}), i32({2, 1}, {7, 8}), i32({1}, {0})}),
      i32({2, 3}, {0, 7, 0, 0, 8, 0})));
}

TEST(WhereOp, ComplementaryConditionsSwapTheBranches) {
  const Array condition = boolean({5}, {1, 0, 0, 1, 1});
  const Array x = f64({5}, {1, 2, 3, 4, 5});
  const Array y = f64({5}, {-1, -2, -3, -4, -5});
  const Array not_condition = eval_output(Op::logical_not, {condition});
  const Array picked = eval_output(Op::where, {condition, x, y});
  EXPECT_TRUE(arrays_near(eval_output(Op::where, {not_condition, y, x}), picked));
  EXPECT_TRUE(arrays_near(picked, f64({5}, {1, -2, -3, 4, 5})));
}

TEST(WhereOp, AcceptsBoolBranches) {
  EXPECT_TRUE(arrays_near(
      eval_output(Op::where, {boolean({2}, {1, 0}), boolean({2}, {0, 0}), boolean({2}, {1, 1})}),
      boolean({2}, {0, 1})));
}

TEST(WhereOp, ChecksTypesAndShapes) {
  EXPECT_THAT(eval_error(Op::where, {f32({1}, {1}), f32({1}, {1}), f32({1}, {2})}),
              HasSubstr("input 'condition' must be bool"));
  EXPECT_THAT(eval_error(Op::where, {boolean({1}, {1}), f32({1}, {1}), f64({1}, {2})}),
              HasSubstr("inputs 'x' (f32[1]) and 'y' (f64[1]) must have the same dtype"));
  const std::string error =
      eval_error(Op::where, {boolean({2}, {1, 0}), f32({3}, {1, 2, 3}), f32({1}, {0})});
  EXPECT_THAT(error, HasSubstr("cannot be broadcast"));
  EXPECT_THAT(error, HasSubstr("'condition' (bool[2])"));
}

}  // namespace
}  // namespace kiln
