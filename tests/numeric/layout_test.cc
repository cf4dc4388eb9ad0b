// Layout and data-movement ops against hand-computed values, NumPy results pasted as literals,
// and identities (an op undone by its inverse, gather/scatter_add adjointness).
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gmock/gmock.h>

#include "numeric/op_test_util.h"

namespace kiln {
namespace {

using testing::arrays_near;
using testing::eval_error;
using testing::eval_op;
using testing::eval_output;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i32;
using testing::i64;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// 0, 1, ..., n-1 as f64 with the given shape.
Array arange(Shape shape) {
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  return f64(std::move(shape), std::move(values));
}

// Uniform values in [-1, 1) from a fixed seed.
Array random_f64(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (double& v : values) v = dist(rng);
  return f64(std::move(shape), std::move(values));
}

double dot(const Array& a, const Array& b) {
  double sum = 0;
  for (int64_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// ---- constant -------------------------------------------------------------------------------

TEST(ConstantOp, ProducesTheAttributeTensor) {
  const Array value = i32({2, 3}, {1, -2, 3, -4, 5, -6});
  EXPECT_TRUE(arrays_near(eval_output(Op::constant, {}, {{"value", value}}), value, 0, 0));
  const Array scalar = Array::scalar(DType::f64, 2.5);
  EXPECT_TRUE(arrays_near(eval_output(Op::constant, {}, {{"value", scalar}}), scalar, 0, 0));
  const Array empty = f32({0, 4}, {});
  EXPECT_TRUE(arrays_near(eval_output(Op::constant, {}, {{"value", empty}}), empty));
}

TEST(ConstantOp, RequiresValueAndTakesNoInputs) {
  EXPECT_THAT(eval_error(Op::constant, {}), HasSubstr("requires attribute 'value'"));
  EXPECT_NE(eval_error(Op::constant, {f64({1}, {1})}, {{"value", f64({1}, {1})}}), "");
}

// ---- reshape --------------------------------------------------------------------------------

TEST(ReshapeOp, KeepsRowMajorOrder) {
  const Array x = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::reshape, {x}, {{"shape", {3, 2}}}),
                          i64({3, 2}, {1, 2, 3, 4, 5, 6}), 0, 0));
  EXPECT_TRUE(arrays_near(eval_output(Op::reshape, {x}, {{"shape", {1, 6, 1}}}),
                          i64({1, 6, 1}, {1, 2, 3, 4, 5, 6}), 0, 0));
}

TEST(ReshapeOp, MinusOneIsInferredFromTheElementCount) {
  const Array x = arange({2, 3, 4});
  EXPECT_EQ(eval_output(Op::reshape, {x}, {{"shape", {4, -1}}}).shape, Shape({4, 6}));
  EXPECT_EQ(eval_output(Op::reshape, {x}, {{"shape", {-1}}}).shape, Shape({24}));
  EXPECT_EQ(eval_output(Op::reshape, {x}, {{"shape", {2, -1, 3}}}).shape, Shape({2, 4, 3}));
}

TEST(ReshapeOp, ZeroIsAZeroExtentNotACopy) {
  // Unlike ONNX, 0 does not copy the input's extent.
  EXPECT_EQ(eval_output(Op::reshape, {f32({0, 3}, {})}, {{"shape", {0, 5}}}).shape, Shape({0, 5}));
  EXPECT_NE(eval_error(Op::reshape, {arange({2, 3})}, {{"shape", {0, 3}}}), "");
}

TEST(ReshapeOp, ToAndFromScalars) {
  EXPECT_TRUE(arrays_near(eval_output(Op::reshape, {f64({1, 1}, {7})}, {{"shape", {}}}),
                          Array::scalar(DType::f64, 7)));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reshape, {Array::scalar(DType::f64, 7)}, {{"shape", {1, 1, 1}}}),
                  f64({1, 1, 1}, {7})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::reshape, {Array::scalar(DType::f64, 7)}, {{"shape", {-1}}}), f64({1}, {7})));
}

TEST(ReshapeOp, RejectsBadShapes) {
  const Array x = arange({2, 3});
  EXPECT_THAT(eval_error(Op::reshape, {x}, {{"shape", {-1, -1}}}), HasSubstr("at most one -1"));
  EXPECT_THAT(eval_error(Op::reshape, {x}, {{"shape", {-2, -3}}}), HasSubstr("negative"));
  EXPECT_THAT(eval_error(Op::reshape, {x}, {{"shape", {4, 2}}}),
              HasSubstr("has 8 elements but input 'x' (f64[2,3]) has 6"));
  EXPECT_THAT(eval_error(Op::reshape, {x}, {{"shape", {4, -1}}}), HasSubstr("cannot hold"));
  // As NumPy: -1 next to a zero extent is ambiguous.
  EXPECT_NE(eval_error(Op::reshape, {f32({0, 3}, {})}, {{"shape", {0, -1}}}), "");
  EXPECT_THAT(
      eval_error(Op::reshape, {x}, {{"shape", {int64_t{1} << 40, int64_t{1} << 40}}}),
      HasSubstr("attribute 'shape': shape [1099511627776,1099511627776] has more than 2^48"));
  EXPECT_THAT(eval_error(Op::reshape, {x}, {{"shape", {kInt64Max, -1}}}), HasSubstr("2^48"));
}

// ---- transpose ------------------------------------------------------------------------------

TEST(TransposeOp, SwapsMatrixAxes) {
  const Array x = i32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::transpose, {x}, {{"perm", {1, 0}}}),
                          i32({3, 2}, {1, 4, 2, 5, 3, 6}), 0, 0));
}

TEST(TransposeOp, PermutesRank3AsNumPy) {
  // np.arange(24).reshape(2,3,4).transpose(1,2,0)
  EXPECT_TRUE(arrays_near(eval_output(Op::transpose, {arange({2, 3, 4})}, {{"perm", {1, 2, 0}}}),
                          f64({3, 4, 2}, {0, 12, 1, 13, 2, 14, 3, 15, 4,  16, 5,  17,
                                          6, 18, 7, 19, 8, 20, 9, 21, 10, 22, 11, 23})));
}

TEST(TransposeOp, EmptyPermReversesTheAxes) {
  // np.arange(6).reshape(2,1,3).transpose()
  EXPECT_TRUE(arrays_near(eval_output(Op::transpose, {arange({2, 1, 3})}),
                          f64({3, 1, 2}, {0, 3, 1, 4, 2, 5})));
  const Array scalar = Array::scalar(DType::f64, 4);
  EXPECT_TRUE(arrays_near(eval_output(Op::transpose, {scalar}), scalar));
}

TEST(TransposeOp, InversePermutationUndoesIt) {
  const Array x = random_f64({3, 1, 4, 2}, 7);
  const Array y = eval_output(Op::transpose, {x}, {{"perm", {2, 0, 3, 1}}});
  EXPECT_EQ(y.shape, Shape({4, 3, 2, 1}));
  EXPECT_TRUE(arrays_near(eval_output(Op::transpose, {y}, {{"perm", {1, 3, 0, 2}}}), x, 0, 0));
}

TEST(TransposeOp, RejectsNonPermutations) {
  const Array x = arange({2, 3, 4});
  EXPECT_THAT(eval_error(Op::transpose, {x}, {{"perm", {0, 1}}}),
              HasSubstr("attribute 'perm' must be a permutation of 0..2"));
  EXPECT_NE(eval_error(Op::transpose, {x}, {{"perm", {0, 1, 1}}}), "");
  EXPECT_NE(eval_error(Op::transpose, {x}, {{"perm", {0, 1, 3}}}), "");
  EXPECT_NE(eval_error(Op::transpose, {x}, {{"perm", {0, 1, -1}}}), "");
}

// ---- broadcast_to ---------------------------------------------------------------------------

TEST(BroadcastToOp, RepeatsSizeOneAndMissingAxes) {
  EXPECT_TRUE(arrays_near(eval_output(Op::broadcast_to, {f64({3}, {1, 2, 3})}, {{"shape", {2, 3}}}),
                          f64({2, 3}, {1, 2, 3, 1, 2, 3})));
  EXPECT_TRUE(arrays_near(eval_output(Op::broadcast_to, {f64({2, 1}, {1, 2})}, {{"shape", {2, 3}}}),
                          f64({2, 3}, {1, 1, 1, 2, 2, 2})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::broadcast_to, {f64({1, 2}, {5, 6})}, {{"shape", {2, 3, 2}}}),
                  f64({2, 3, 2}, {5, 6, 5, 6, 5, 6, 5, 6, 5, 6, 5, 6})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::broadcast_to, {Array::scalar(DType::i64, 9)}, {{"shape", {2, 2}}}),
      i64({2, 2}, {9, 9, 9, 9}), 0, 0));
  const Array b = testing::boolean({2}, {1, 0});
  EXPECT_TRUE(arrays_near(eval_output(Op::broadcast_to, {b}, {{"shape", {2, 2}}}),
                          testing::boolean({2, 2}, {1, 0, 1, 0}), 0, 0));
  EXPECT_EQ(eval_output(Op::broadcast_to, {f64({1}, {1})}, {{"shape", {0, 4}}}).shape,
            Shape({0, 4}));
}

TEST(BroadcastToOp, RejectsShapesItCannotReachExactly) {
  EXPECT_THAT(eval_error(Op::broadcast_to, {arange({3})}, {{"shape", {4}}}),
              HasSubstr("input 'x' (f64[3]) cannot be broadcast to attribute 'shape' [4]"));
  EXPECT_NE(eval_error(Op::broadcast_to, {arange({2, 3})}, {{"shape", {3}}}), "");
  EXPECT_NE(eval_error(Op::broadcast_to, {arange({3})}, {{"shape", {1}}}), "");
  EXPECT_THAT(eval_error(Op::broadcast_to, {arange({3})}, {{"shape", {-1, 3}}}),
              HasSubstr("attribute 'shape'"));
}

// ---- slice ----------------------------------------------------------------------------------

TEST(SliceOp, TakesAHalfOpenRange) {
  EXPECT_TRUE(arrays_near(eval_output(Op::slice, {arange({10})}, {{"starts", {2}}, {"ends", {7}}}),
                          f64({5}, {2, 3, 4, 5, 6})));
}

TEST(SliceOp, NegativeStartsAndEndsCountFromTheEnd) {
  EXPECT_TRUE(
      arrays_near(eval_output(Op::slice, {arange({10})}, {{"starts", {-3}}, {"ends", {-1}}}),
                  f64({2}, {7, 8})));
}

TEST(SliceOp, PositiveAndNegativeSteps) {
  // NumPy: a[1:10:3], a[8:1:-2], a[-1:-2**63:-1] with a = np.arange(10).
  const Array a = arange({10});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::slice, {a}, {{"starts", {1}}, {"ends", {10}}, {"steps", {3}}}),
                  f64({3}, {1, 4, 7})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::slice, {a}, {{"starts", {8}}, {"ends", {1}}, {"steps", {-2}}}),
                  f64({4}, {8, 6, 4, 2})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::slice, {a}, {{"starts", {-1}}, {"ends", {kInt64Min}}, {"steps", {-1}}}),
      f64({10}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0})));
}

TEST(SliceOp, HugeBoundsAndStepsAreClampedWithoutOverflow) {
  const Array a = arange({10});
  EXPECT_TRUE(arrays_near(eval_output(Op::slice, {a}, {{"starts", {3}}, {"ends", {kInt64Max}}}),
                          f64({7}, {3, 4, 5, 6, 7, 8, 9})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::slice, {a}, {{"starts", {4}}, {"ends", {kInt64Max}}, {"steps", {kInt64Max}}}),
      f64({1}, {4})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::slice, {a},
                  {{"starts", {kInt64Max}}, {"ends", {kInt64Min}}, {"steps", {kInt64Min}}}),
      f64({1}, {9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::slice, {a}, {{"starts", {kInt64Min}}, {"ends", {2}}}),
                          f64({2}, {0, 1})));
}

TEST(SliceOp, EmptyResults) {
  const Array a = arange({5});
  EXPECT_EQ(eval_output(Op::slice, {a}, {{"starts", {4}}, {"ends", {2}}}).shape, Shape({0}));
  EXPECT_EQ(eval_output(Op::slice, {a}, {{"starts", {20}}, {"ends", {30}}}).shape, Shape({0}));
  // As NumPy a[-100:-100:-1]: a start before the first element stays there for a backward
  // slice.
  EXPECT_EQ(
      eval_output(Op::slice, {a}, {{"starts", {-100}}, {"ends", {-100}}, {"steps", {-1}}}).shape,
      Shape({0}));
  EXPECT_EQ(
      eval_output(Op::slice, {f64({0}, {})}, {{"starts", {0}}, {"ends", {3}}, {"steps", {-1}}})
          .shape,
      Shape({0}));
}

TEST(SliceOp, AxesSelectWhichDimensionsAreSliced) {
  // NumPy, m = np.arange(12).reshape(3,4): m[:,1:3], m[1:3,0:4:2], m[::-1,-1:-5:-3].
  const Array m = arange({3, 4});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::slice, {m}, {{"starts", {1}}, {"ends", {3}}, {"axes", {-1}}}),
                  f64({3, 2}, {1, 2, 5, 6, 9, 10})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::slice, {m},
                  {{"starts", {0, 1}}, {"ends", {4, 3}}, {"axes", {1, 0}}, {"steps", {2, 1}}}),
      f64({2, 2}, {4, 6, 8, 10})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::slice, {m},
                  {{"starts", {-1, -1}}, {"ends", {kInt64Min, -5}}, {"steps", {-1, -3}}}),
      f64({3, 2}, {11, 8, 7, 4, 3, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::slice, {m}, {{"starts", {}}, {"ends", {}}}), m));
}

TEST(SliceOp, KeepsIntegerDtype) {
  EXPECT_TRUE(arrays_near(eval_output(Op::slice, {i32({1, 4}, {5, 6, 7, 8})},
                                      {{"starts", {1}}, {"ends", {3}}, {"axes", {1}}}),
                          i32({1, 2}, {6, 7}), 0, 0));
}

TEST(SliceOp, RejectsInvalidAttributes) {
  const Array m = arange({3, 4});
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0}}, {"ends", {1}}, {"steps", {0}}}),
              HasSubstr("must not contain 0"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0, 0}}, {"ends", {1, 1}}, {"axes", {1, -1}}}),
              HasSubstr("names axis 1 twice"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0}}, {"ends", {1}}, {"axes", {2}}}),
              HasSubstr("attribute 'axes': axis 2 is out of range for rank 2"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0, 1, 2}}, {"ends", {1, 2, 3}}}),
              HasSubstr("out of range"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0}}, {"ends", {1, 2}}}),
              HasSubstr("must have the same length"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0}}, {"ends", {1}}, {"axes", {0, 1}}}),
              HasSubstr("attribute 'axes'"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"starts", {0}}, {"ends", {1}}, {"steps", {1, 1}}}),
              HasSubstr("attribute 'steps'"));
  EXPECT_THAT(eval_error(Op::slice, {m}, {{"ends", {1}}}), HasSubstr("'starts'"));
}

// ---- concat ---------------------------------------------------------------------------------

TEST(ConcatOp, JoinsAlongTheFirstAxis) {
  EXPECT_TRUE(arrays_near(
      eval_output(Op::concat, {f64({1, 2}, {1, 2}), f64({2, 2}, {3, 4, 5, 6})}, {{"axis", 0}}),
      f64({3, 2}, {1, 2, 3, 4, 5, 6})));
}

TEST(ConcatOp, NegativeAxisAndEmptyInputs) {
  EXPECT_TRUE(arrays_near(
      eval_output(Op::concat,
                  {i64({2, 1}, {1, 2}), i64({2, 0}, {}), i64({2, 3}, {3, 4, 5, 6, 7, 8})},
                  {{"axis", -1}}),
      i64({2, 4}, {1, 3, 4, 5, 2, 6, 7, 8}), 0, 0));
}

TEST(ConcatOp, MiddleAxisAsNumPy) {
  // np.concatenate([np.arange(6).reshape(2,1,3), 10 + np.arange(12).reshape(2,2,3)], axis=1)
  Array b = arange({2, 2, 3});
  for (double& v : b.data) v += 10;
  EXPECT_TRUE(arrays_near(
      eval_output(Op::concat, {arange({2, 1, 3}), b}, {{"axis", 1}}),
      f64({2, 3, 3}, {0, 1, 2, 10, 11, 12, 13, 14, 15, 3, 4, 5, 16, 17, 18, 19, 20, 21})));
}

TEST(ConcatOp, SingleInputIsIdentity) {
  const Array x = random_f64({2, 3}, 3);
  EXPECT_TRUE(arrays_near(eval_output(Op::concat, {x}, {{"axis", 1}}), x, 0, 0));
}

TEST(ConcatOp, RejectsMismatchedInputs) {
  EXPECT_THAT(eval_error(Op::concat, {f64({2}, {1, 2}), f32({2}, {1, 2})}, {{"axis", 0}}),
              HasSubstr("must have the same dtype"));
  EXPECT_THAT(eval_error(Op::concat, {arange({2, 3}), arange({2, 3, 1})}, {{"axis", 0}}),
              HasSubstr("input 'inputs[1]' (f64[2,3,1])"));
  EXPECT_THAT(eval_error(Op::concat, {arange({2, 3}), arange({3, 3})}, {{"axis", 1}}),
              HasSubstr("every dimension except axis 1"));
  EXPECT_THAT(eval_error(Op::concat, {arange({2, 3})}, {{"axis", 2}}),
              HasSubstr("attribute 'axis'"));
  EXPECT_NE(eval_error(Op::concat, {Array::scalar(DType::f64, 1)}, {{"axis", 0}}), "");
  EXPECT_NE(eval_error(Op::concat, {}, {{"axis", 0}}), "");
}

// ---- split ----------------------------------------------------------------------------------

TEST(SplitOp, CutsIntoTheGivenSizes) {
  Expected<std::vector<Array>> parts = eval_op(Op::split, {arange({5})}, {{"sizes", {2, 3}}});
  ASSERT_TRUE(parts.has_value()) << parts.status().message();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_TRUE(arrays_near((*parts)[0], f64({2}, {0, 1})));
  EXPECT_TRUE(arrays_near((*parts)[1], f64({3}, {2, 3, 4})));
}

TEST(SplitOp, NegativeAxisAndZeroSizes) {
  const Array x = i32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Expected<std::vector<Array>> parts =
      eval_op(Op::split, {x}, {{"axis", -1}, {"sizes", {1, 0, 3}}});
  ASSERT_TRUE(parts.has_value()) << parts.status().message();
  ASSERT_EQ(parts->size(), 3u);
  EXPECT_TRUE(arrays_near((*parts)[0], i32({2, 1}, {1, 5}), 0, 0));
  EXPECT_TRUE(arrays_near((*parts)[1], i32({2, 0}, {}), 0, 0));
  EXPECT_TRUE(arrays_near((*parts)[2], i32({2, 3}, {2, 3, 4, 6, 7, 8}), 0, 0));
}

TEST(SplitOp, ConcatUndoesIt) {
  const Array x = random_f64({3, 5, 2}, 11);
  Expected<std::vector<Array>> parts = eval_op(Op::split, {x}, {{"axis", 1}, {"sizes", {2, 1, 2}}});
  ASSERT_TRUE(parts.has_value()) << parts.status().message();
  EXPECT_TRUE(arrays_near(eval_output(Op::concat, *parts, {{"axis", 1}}), x, 0, 0));
  Expected<std::vector<Array>> whole = eval_op(Op::split, {x}, {{"sizes", {3}}});
  ASSERT_TRUE(whole.has_value()) << whole.status().message();
  EXPECT_TRUE(arrays_near((*whole)[0], x, 0, 0));
}

TEST(SplitOp, RejectsSizesThatDoNotTile) {
  const Array x = arange({3, 4});
  EXPECT_THAT(eval_error(Op::split, {x}, {{"sizes", {1, 1}}}), HasSubstr("sum to 3"));
  EXPECT_THAT(eval_error(Op::split, {x}, {{"sizes", {5, -2}}}), HasSubstr("non-negative"));
  EXPECT_NE(eval_error(Op::split, {x}, {{"sizes", {kInt64Max, 1}}}), "");
  EXPECT_NE(eval_error(Op::split, {x}, {{"sizes", {2, kInt64Max, kInt64Min}}}), "");
  EXPECT_THAT(eval_error(Op::split, {x}, {{"sizes", std::vector<int64_t>{}}}),
              HasSubstr("at least one"));
  EXPECT_THAT(eval_error(Op::split, {x}, {{"axis", -3}, {"sizes", {3}}}),
              HasSubstr("attribute 'axis'"));
}

// ---- pad ------------------------------------------------------------------------------------

TEST(PadOp, PadsBothEndsWithZeroByDefault) {
  EXPECT_TRUE(arrays_near(eval_output(Op::pad, {f64({2}, {1, 2})}, {{"pads", {1, 2}}}),
                          f64({5}, {0, 1, 2, 0, 0})));
}

TEST(PadOp, UsesTheOnnxLayoutAndValue) {
  // pads = [begin_0, begin_1, end_0, end_1]: one row on top, one column on the right.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::pad, {f64({2, 2}, {1, 2, 3, 4})}, {{"pads", {1, 0, 0, 1}}, {"value", 9.0}}),
      f64({3, 3}, {9, 9, 9, 1, 2, 9, 3, 4, 9})));
}

TEST(PadOp, NegativePadsCrop) {
  const Array a = arange({5});
  EXPECT_TRUE(arrays_near(eval_output(Op::pad, {a}, {{"pads", {-1, -2}}}), f64({2}, {1, 2})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::pad, {a}, {{"pads", {-1, 2}}}), f64({6}, {1, 2, 3, 4, 0, 0})));
  EXPECT_EQ(eval_output(Op::pad, {a}, {{"pads", {-2, -3}}}).shape, Shape({0}));
  // Cropping more than the data holds leaves only padding.
  EXPECT_TRUE(arrays_near(eval_output(Op::pad, {a}, {{"pads", {-7, 4}}, {"value", -1.0}}),
                          f64({2}, {-1, -1})));
}

TEST(PadOp, ValueIsRoundedToTheDtype) {
  EXPECT_TRUE(arrays_near(eval_output(Op::pad, {i32({1}, {5})}, {{"pads", {1, 1}}, {"value", 2.7}}),
                          i32({3}, {2, 5, 2}), 0, 0));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::pad, {testing::boolean({1}, {0})}, {{"pads", {0, 1}}, {"value", 0.5}}),
      testing::boolean({2}, {0, 1}), 0, 0));
  const Array scalar = Array::scalar(DType::f64, 3);
  EXPECT_TRUE(
      arrays_near(eval_output(Op::pad, {scalar}, {{"pads", std::vector<int64_t>{}}}), scalar));
}

TEST(PadOp, RejectsBadPads) {
  const Array x = arange({2, 3});
  EXPECT_THAT(eval_error(Op::pad, {x}, {{"pads", {1, 1}}}), HasSubstr("2 * rank = 4"));
  EXPECT_THAT(eval_error(Op::pad, {x}, {{"pads", {0, -2, 0, -2}}}),
              HasSubstr("crops axis 1 of input 'x' (f64[2,3]) to a negative extent"));
  EXPECT_THAT(eval_error(Op::pad, {arange({2})}, {{"pads", {kInt64Max, kInt64Min}}}),
              HasSubstr("2^48"));
  EXPECT_THAT(eval_error(Op::pad, {arange({2})}, {{"pads", {int64_t{1} << 48, 0}}}),
              HasSubstr("2^48"));
}

// ---- gather ---------------------------------------------------------------------------------

TEST(GatherOp, TakesRowsAlongAxisZero) {
  EXPECT_TRUE(arrays_near(eval_output(Op::gather, {arange({3, 2}), i64({2}, {2, 0})}),
                          f64({2, 2}, {4, 5, 0, 1})));
}

TEST(GatherOp, IndexShapeReplacesTheAxis) {
  // np.take(np.arange(6).reshape(2,3), [[0,2],[1,1]], axis=1)
  EXPECT_TRUE(arrays_near(
      eval_output(Op::gather, {arange({2, 3}), i32({2, 2}, {0, 2, 1, 1})}, {{"axis", 1}}),
      f64({2, 2, 2}, {0, 2, 1, 1, 3, 5, 4, 4})));
  // A scalar index removes the axis.
  EXPECT_TRUE(arrays_near(eval_output(Op::gather, {arange({3, 2}), Array::scalar(DType::i64, 1)}),
                          f64({2}, {2, 3})));
  EXPECT_EQ(eval_output(Op::gather, {arange({3, 2}), i64({0}, {})}).shape, Shape({0, 2}));
}

TEST(GatherOp, NegativeIndicesCountFromTheEnd) {
  const Array data = i64({2, 3}, {10, 20, 30, 40, 50, 60});
  EXPECT_TRUE(arrays_near(eval_output(Op::gather, {data, i32({2}, {-1, -3})}, {{"axis", -1}}),
                          i64({2, 2}, {30, 10, 60, 40}), 0, 0));
}

TEST(GatherOp, RejectsBadIndicesAndAxes) {
  const Array data = arange({2, 3});
  EXPECT_THAT(eval_error(Op::gather, {data, i64({2}, {0, 3})}, {{"axis", 1}}),
              HasSubstr("index 3 is out of range for axis 1 of input 'data' (f64[2,3])"));
  EXPECT_THAT(eval_error(Op::gather, {data, i64({1}, {-4})}, {{"axis", 1}}), HasSubstr("-4"));
  EXPECT_THAT(eval_error(Op::gather, {data, f32({1}, {0})}), HasSubstr("input 'indices'"));
  EXPECT_THAT(eval_error(Op::gather, {data, i64({1}, {0})}, {{"axis", 2}}),
              HasSubstr("attribute 'axis'"));
  EXPECT_NE(eval_error(Op::gather, {Array::scalar(DType::f64, 1), i64({1}, {0})}), "");
}

// ---- scatter_add ----------------------------------------------------------------------------

TEST(ScatterAddOp, DuplicateIndicesAccumulate) {
  EXPECT_TRUE(arrays_near(eval_output(Op::scatter_add, {f64({4}, {1, 1, 1, 1}), i64({3}, {1, 3, 1}),
                                                        f64({3}, {10, 20, 30})}),
                          f64({4}, {1, 41, 1, 21})));
}

TEST(ScatterAddOp, AddsAlongAnInnerAxisWithNegativeIndices) {
  // Column 2 receives updates[:, 0] and column 0 receives updates[:, 1].
  const Array data = i32({2, 3}, {1, 1, 1, 1, 1, 1});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::scatter_add, {data, i64({2}, {-1, 0}), i32({2, 2}, {1, 2, 3, 4})},
                              {{"axis", 1}}),
                  i32({2, 3}, {3, 1, 2, 5, 1, 4}), 0, 0));
}

TEST(ScatterAddOp, IsTheAdjointOfGather) {
  struct Case {
    Shape data;
    Shape indices;
    int64_t axis;
  };
  const std::vector<Case> cases = {
      {{3, 4, 5}, {2, 3}, 1}, {{3, 4, 5}, {7}, -1}, {{6}, {}, 0}, {{2, 1, 3}, {4}, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const int axis = static_cast<int>(c.axis < 0 ? c.axis + c.data.rank() : c.axis);
    const int64_t extent = c.data.dim(axis);
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int64_t> pick(-extent, extent - 1);
    std::vector<double> idx(static_cast<size_t>(c.indices.num_elements()));
    for (double& v : idx) v = static_cast<double>(pick(rng));
    const Array indices = i64(c.indices, idx);
    const Array x = random_f64(c.data, seed++);
    const Array gathered = eval_output(Op::gather, {x, indices}, {{"axis", c.axis}});
    const Array u = random_f64(gathered.shape, seed++);
    const Array scattered =
        eval_output(Op::scatter_add, {Array(DType::f64, c.data), indices, u}, {{"axis", c.axis}});
    EXPECT_NEAR(dot(gathered, u), dot(x, scattered), 1e-12) << c.data.to_string();
  }
}

TEST(ScatterAddOp, RejectsMismatchedInputs) {
  const Array data = arange({2, 3});
  EXPECT_THAT(eval_error(Op::scatter_add, {data, i64({1}, {0}), arange({2, 3})}),
              HasSubstr("input 'updates' (f64[2,3]) must have shape [1,3]"));
  EXPECT_THAT(eval_error(Op::scatter_add, {data, i64({1}, {0}), arange({2, 3})}, {{"axis", 1}}),
              HasSubstr("must have shape [2,1]"));
  EXPECT_THAT(eval_error(Op::scatter_add, {data, i64({1}, {0}), f32({1, 3}, {1, 2, 3})}),
              HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::scatter_add, {data, i64({1}, {2}), arange({1, 3})}),
              HasSubstr("index 2 is out of range"));
  EXPECT_THAT(eval_error(Op::scatter_add, {data, f64({1}, {0}), arange({1, 3})}),
              HasSubstr("input 'indices'"));
}

// ---- one_hot --------------------------------------------------------------------------------

TEST(OneHotOp, AppendsTheNewAxisByDefault) {
  EXPECT_TRUE(arrays_near(eval_output(Op::one_hot, {i64({3}, {0, 2, 1})}, {{"depth", 3}}),
                          f32({3, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::one_hot, {Array::scalar(DType::i32, 1)}, {{"depth", 2}}),
                          f32({2}, {0, 1})));
}

TEST(OneHotOp, NegativeIndicesWrapAndOutOfRangeGivesAnOffRow) {
  EXPECT_TRUE(arrays_near(eval_output(Op::one_hot, {i32({4}, {-1, 3, -4, -3})}, {{"depth", 3}}),
                          f32({4, 3}, {0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0})));
}

TEST(OneHotOp, AxisPlacesTheNewAxis) {
  EXPECT_TRUE(arrays_near(eval_output(Op::one_hot, {i64({2}, {0, 2})}, {{"depth", 3}, {"axis", 0}}),
                          f32({3, 2}, {1, 0, 0, 0, 0, 1})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::one_hot, {i64({2}, {0, 2})}, {{"depth", 3}, {"axis", -2}}),
                  f32({3, 2}, {1, 0, 0, 0, 0, 1})));
  // NumPy: (idx[:, None, :] == np.arange(3)[None, :, None]) with idx = [[0,1],[2,0]].
  EXPECT_TRUE(arrays_near(
      eval_output(Op::one_hot, {i64({2, 2}, {0, 1, 2, 0})}, {{"depth", 3}, {"axis", 1}}),
      f32({2, 3, 2}, {1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0})));
}

TEST(OneHotOp, OnOffValuesAndDtype) {
  EXPECT_TRUE(arrays_near(
      eval_output(Op::one_hot, {i64({2}, {1, 0})},
                  {{"depth", 2}, {"dtype", DType::i32}, {"on_value", 5.0}, {"off_value", -1.5}}),
      i32({2, 2}, {-1, 5, 5, -1}), 0, 0));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::one_hot, {i64({1}, {0})}, {{"depth", 2}, {"dtype", DType::boolean}}),
      testing::boolean({1, 2}, {1, 0}), 0, 0));
}

TEST(OneHotOp, RejectsBadAttributes) {
  const Array idx = i64({2}, {0, 1});
  EXPECT_THAT(eval_error(Op::one_hot, {idx}, {{"depth", 0}}),
              HasSubstr("attribute 'depth' must be positive, got 0"));
  EXPECT_THAT(eval_error(Op::one_hot, {idx}, {{"depth", 2}, {"axis", 2}}),
              HasSubstr("attribute 'axis'"));
  EXPECT_NE(eval_error(Op::one_hot, {idx}, {{"depth", 2}, {"axis", -3}}), "");
  EXPECT_THAT(eval_error(Op::one_hot, {f32({1}, {0})}, {{"depth", 2}}),
              HasSubstr("input 'indices'"));
  EXPECT_THAT(eval_error(Op::one_hot, {idx}, {{"depth", int64_t{1} << 48}}), HasSubstr("2^48"));
}

// ---- iota -----------------------------------------------------------------------------------

TEST(IotaOp, CountsAlongTheAxis) {
  EXPECT_TRUE(
      arrays_near(eval_output(Op::iota, {}, {{"shape", {5}}}), i64({5}, {0, 1, 2, 3, 4}), 0, 0));
  EXPECT_TRUE(arrays_near(eval_output(Op::iota, {}, {{"shape", {2, 3}}}),
                          i64({2, 3}, {0, 0, 0, 1, 1, 1}), 0, 0));
  EXPECT_TRUE(arrays_near(eval_output(Op::iota, {}, {{"shape", {2, 3}}, {"axis", -1}}),
                          i64({2, 3}, {0, 1, 2, 0, 1, 2}), 0, 0));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::iota, {}, {{"shape", {2, 1, 3}}, {"axis", 2}, {"dtype", DType::f32}}),
      f32({2, 1, 3}, {0, 1, 2, 0, 1, 2})));
  EXPECT_EQ(eval_output(Op::iota, {}, {{"shape", {3, 0}}}).shape, Shape({3, 0}));
}

TEST(IotaOp, RejectsScalarsAndBadAxes) {
  EXPECT_THAT(eval_error(Op::iota, {}, {{"shape", std::vector<int64_t>{}}}),
              HasSubstr("rank at least 1"));
  EXPECT_THAT(eval_error(Op::iota, {}, {{"shape", {2, 3}}, {"axis", 2}}),
              HasSubstr("attribute 'axis'"));
  EXPECT_THAT(eval_error(Op::iota, {}, {{"shape", {2, -3}}}), HasSubstr("negative dimension"));
}

// ---- fill -----------------------------------------------------------------------------------

TEST(FillOp, EveryElementIsTheValue) {
  EXPECT_TRUE(
      arrays_near(eval_output(Op::fill, {}, {{"shape", {2, 2}}}), f32({2, 2}, {0, 0, 0, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::fill, {}, {{"shape", {3}}, {"value", -1.25}}),
                          f32({3}, {-1.25, -1.25, -1.25})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::fill, {},
                  {{"shape", std::vector<int64_t>{}}, {"value", 4.0}, {"dtype", DType::f64}}),
      Array::scalar(DType::f64, 4)));
}

TEST(FillOp, ValueIsRoundedToTheDtype) {
  EXPECT_TRUE(arrays_near(
      eval_output(Op::fill, {}, {{"shape", {2}}, {"value", 2.5}, {"dtype", DType::i32}}),
      i32({2}, {2, 2}), 0, 0));
  // float(np.float16(0.1)) = 0.0999755859375
  const Array h =
      eval_output(Op::fill, {}, {{"shape", {1}}, {"value", 0.1}, {"dtype", DType::f16}});
  EXPECT_EQ(h.dtype, DType::f16);
  EXPECT_EQ(h[0], 0.0999755859375);
  EXPECT_TRUE(arrays_near(
      eval_output(Op::fill, {}, {{"shape", {1}}, {"value", 0.5}, {"dtype", DType::boolean}}),
      testing::boolean({1}, {1}), 0, 0));
}

TEST(FillOp, RejectsBadShapes) {
  EXPECT_THAT(eval_error(Op::fill, {}, {{"shape", {-1}}}), HasSubstr("attribute 'shape'"));
  EXPECT_THAT(eval_error(Op::fill, {}, {{"shape", {int64_t{1} << 30, int64_t{1} << 30}}}),
              HasSubstr("2^48"));
  EXPECT_THAT(eval_error(Op::fill, {}), HasSubstr("requires attribute 'shape'"));
}

}  // namespace
}  // namespace kiln
