// Reductions and arg-reductions against hand-computed values and NumPy results.
#include <gmock/gmock.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
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

Attrs axes(std::vector<int64_t> list, bool keepdims = false) {
  return {{"axes", AttrValue(std::move(list))}, {"keepdims", keepdims}};
}

TEST(ReductionOps, SumOverEachAxisOfAMatrix) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({0})), f64({3}, {5, 7, 9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({1})), f64({2}, {6, 15})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({-1})), f64({2}, {6, 15})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({-2})), f64({3}, {5, 7, 9})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_sum, {x}, axes({1, 0})), Array::scalar(DType::f64, 21)));
}

TEST(ReductionOps, EmptyAxesReduceEverything) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}), Array::scalar(DType::f64, 21)));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({}, true)), f64({1, 1}, {21})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_mean, {x}), Array::scalar(DType::f64, 3.5)));
}

TEST(ReductionOps, KeepdimsKeepsReducedAxesAsOne) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_sum, {x}, axes({0}, true)), f64({1, 3}, {5, 7, 9})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_max, {x}, axes({-1}, true)), f64({2, 1}, {3, 6})));
}

TEST(ReductionOps, OddShapesWithSizeOneAxes) {
  // x = arange(15).reshape(3, 1, 5); expectations from NumPy.
  std::vector<double> values(15);
  for (int i = 0; i < 15; ++i) values[static_cast<size_t>(i)] = i;
  const Array x = f64({3, 1, 5}, values);
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({0, 2})), f64({1}, {105})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_sum, {x}, axes({-3})), f64({1, 5}, {15, 18, 21, 24, 27})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({2})), f64({3, 1}, {10, 35, 60})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_prod, {x}, axes({0})),
                          f64({1, 5}, {0, 66, 168, 312, 504})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_min, {x}, axes({2})), f64({3, 1}, {0, 5, 10})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_max, {x}, axes({-1, 0}, true)), f64({1, 1, 1}, {14})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_mean, {x}, axes({0, 2})), f64({1}, {7})));
  // Reducing the size-1 axis alone only drops it.
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {x}, axes({1})), f64({3, 5}, values)));
}

TEST(ReductionOps, IntegerInputsKeepTheirDtype) {
  // z from NumPy: z.sum(0), z.prod(1), z.max(0), z.min(1), z.max().
  const Array z = i32({3, 4}, {3, -1, 4, 1, 5, -9, 2, 6, 5, 3, 5, -8});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {z}, axes({0})), i32({4}, {13, -7, 11, -1})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_prod, {z}, axes({1})), i32({3}, {-12, -540, -600})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_max, {z}, axes({0})), i32({4}, {5, 3, 5, 6})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_min, {z}, axes({1})), i32({3}, {-1, -9, -8})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_max, {z}), Array::scalar(DType::i32, 6)));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {i64({3}, {1, 2, 3})}),
                          Array::scalar(DType::i64, 6)));
}

TEST(ReductionOps, MeanOfHandValues) {
  const Array x = f64({2, 2}, {1, 2, 3, 5});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_mean, {x}, axes({1})), f64({2}, {1.5, 4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_mean, {x}, axes({0})), f64({2}, {2, 3.5})));
  // f32 results are rounded to f32: mean(1, 2, 4) = 7/3.
  const Array m = eval_output(Op::reduce_mean, {f32({3}, {1, 2, 4})});
  EXPECT_EQ(m[0], static_cast<double>(static_cast<float>(7.0 / 3.0)));
}

TEST(ReductionOps, MeanTimesCountIsSum) {
  const Array x = f64({3, 5}, {0.5, -2, 3, 7, 1, 4, 4, -1, 0, 2, 9, -3, 5, 6, 1.25});
  const Array sum = eval_output(Op::reduce_sum, {x}, axes({1}));
  const Array mean = eval_output(Op::reduce_mean, {x}, axes({1}));
  EXPECT_TRUE(arrays_near(eval_output(Op::mul, {mean, Array::scalar(DType::f64, 5)}), sum));
}

TEST(ReductionOps, EmptyReducedExtents) {
  const Array empty = f64({0, 3}, {});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {empty}, axes({0})), f64({3}, {0, 0, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_prod, {empty}, axes({0})), f64({3}, {1, 1, 1})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::reduce_mean, {empty}, axes({0})), f64({3}, {kNaN, kNaN, kNaN})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_sum, {empty}), Array::scalar(DType::f64, 0)));
  // max and min have no identity: an empty reduced extent is an error.
  EXPECT_THAT(eval_error(Op::reduce_max, {empty}, axes({0})), HasSubstr("it is empty"));
  EXPECT_THAT(eval_error(Op::reduce_min, {empty}), HasSubstr("f64[0,3]"));
  // Reducing a non-empty axis of an empty array is fine: the result is empty.
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_max, {empty}, axes({1})), f64({0}, {})));
}

TEST(ReductionOps, RankZeroWithNoAxesIsTheIdentity) {
  const Array s = Array::scalar(DType::f64, 4.5);
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_min, Op::reduce_prod}) {
    EXPECT_TRUE(arrays_near(eval_output(op, {s}), s)) << op_def(op).name;
    EXPECT_TRUE(arrays_near(eval_output(op, {s}, axes({}, true)), s)) << op_def(op).name;
  }
}

TEST(ReductionOps, MaxAndMinPropagateNaN) {
  const Array x = f64({2, 3}, {1, kNaN, 3, kNaN, -kInf, 0});
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_max, {x}, axes({1})), f64({2}, {kNaN, kNaN})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_min, {x}, axes({0})), f64({3}, {kNaN, kNaN, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reduce_min, {f64({2}, {kInf, -kInf})}),
                          Array::scalar(DType::f64, -kInf)));
}

TEST(ReductionOps, AxesAreValidated) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(eval_error(Op::reduce_sum, {x}, axes({1, -1})),
              HasSubstr("attribute 'axes' lists axis 1 more than once"));
  EXPECT_THAT(eval_error(Op::reduce_sum, {x}, axes({0, 0})), HasSubstr("more than once"));
  EXPECT_THAT(eval_error(Op::reduce_mean, {x}, axes({2})),
              HasSubstr("attribute 'axes': axis 2 is out of range for rank 2"));
  EXPECT_THAT(eval_error(Op::reduce_prod, {x}, axes({-3})), HasSubstr("out of range"));
  EXPECT_THAT(eval_error(Op::reduce_sum, {Array::scalar(DType::f64, 1)}, axes({0})),
              HasSubstr("out of range for rank 0"));
}

TEST(ReductionOps, DtypesAreChecked) {
  const Array b = boolean({2}, {1, 0});
  for (Op op : {Op::reduce_sum, Op::reduce_max, Op::reduce_min, Op::reduce_prod}) {
    EXPECT_THAT(eval_error(op, {b}), HasSubstr("input 'x' must be numeric, got bool[2]"))
        << op_def(op).name;
  }
  EXPECT_THAT(eval_error(Op::reduce_mean, {i32({2}, {1, 2})}),
              HasSubstr("must be a floating type"));
}

TEST(ReductionOps, CostCountsInputElements) {
  const std::vector<TensorType> in = {{DType::f32, Shape{4, 5}}};
  const std::vector<TensorType> out = {{DType::f32, Shape{4}}};
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::argmax}) {
    const std::vector<TensorType> outputs =
        op == Op::argmax ? std::vector<TensorType>{{DType::i64, Shape{5}}} : out;
    const Cost cost = op_def(op).cost(in, outputs, Attrs{});
    EXPECT_EQ(cost.flops, 20) << op_def(op).name;
    EXPECT_EQ(cost.bytes_read, 80) << op_def(op).name;
    EXPECT_EQ(cost.bytes_written, op == Op::argmax ? 40 : 16) << op_def(op).name;
    EXPECT_EQ(op_def(op).fusion_kind, FusionKind::reduction);
  }
}

TEST(ArgReduce, ArgmaxAndArgminAlongEachAxis) {
  // Expectations from numpy.argmax / numpy.argmin.
  const Array x = f64({2, 3}, {1, 5, 2, 7, 0, 7});
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}), i64({3}, {1, 0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}, {{"axis", 1}}), i64({2}, {1, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}, {{"axis", -1}}), i64({2}, {1, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {x}, {{"axis", 1}}), i64({2}, {0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {x}, {{"axis", -2}}), i64({3}, {0, 1, 0})));
}

TEST(ArgReduce, KeepdimsKeepsTheAxisAsOne) {
  const Array x = f64({2, 3}, {1, 5, 2, 7, 0, 7});
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}, {{"axis", 1}, {"keepdims", true}}),
                          i64({2, 1}, {1, 0})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::argmin, {x}, {{"keepdims", true}}), i64({1, 3}, {0, 1, 0})));
}

TEST(ArgReduce, IntegerInputsAndOddShapes) {
  // z from NumPy: argmax(z, 0), argmin(z, 0), argmax(z, 1).
  const Array z = i32({3, 4}, {3, -1, 4, 1, 5, -9, 2, 6, 5, 3, 5, -8});
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {z}), i64({4}, {1, 2, 2, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {z}), i64({4}, {0, 1, 1, 2})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {z}, {{"axis", 1}}), i64({3}, {2, 3, 0})));
  // A size-1 axis has index 0 everywhere.
  const Array y = i64({3, 1, 2}, {4, 9, -1, 0, 2, 2});
  EXPECT_TRUE(
      arrays_near(eval_output(Op::argmax, {y}, {{"axis", 1}}), i64({3, 2}, {0, 0, 0, 0, 0, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {y}, {{"axis", 2}}), i64({3, 1}, {0, 0, 0})));
}

TEST(ArgReduce, TiesPickTheFirstOrLastIndex) {
  const Array x = f64({5}, {3, 1, 3, 1, 3});
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}), Array::scalar(DType::i64, 0)));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}, {{"select_last_index", true}}),
                          Array::scalar(DType::i64, 4)));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {x}), Array::scalar(DType::i64, 1)));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {x}, {{"select_last_index", true}}),
                          Array::scalar(DType::i64, 3)));
}

TEST(ArgReduce, NaNCountsAsTheExtremum) {
  // numpy.argmax([1, nan, 3, nan]) = numpy.argmin(...) = 1.
  const Array x = f64({4}, {1, kNaN, 3, kNaN});
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}), Array::scalar(DType::i64, 1)));
  EXPECT_TRUE(arrays_near(eval_output(Op::argmin, {x}), Array::scalar(DType::i64, 1)));
  // NaNs tie with each other, so select_last_index picks the last one.
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {x}, {{"select_last_index", true}}),
                          Array::scalar(DType::i64, 3)));
  // A NaN after a larger value still wins.
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {f64({3}, {kInf, 2, kNaN})}),
                          Array::scalar(DType::i64, 2)));
}

TEST(ArgReduce, InvalidInputsAreErrors) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(eval_error(Op::argmax, {x}, {{"axis", 2}}),
              HasSubstr("attribute 'axis': axis 2 is out of range for rank 2"));
  EXPECT_THAT(eval_error(Op::argmin, {x}, {{"axis", -3}}), HasSubstr("out of range"));
  EXPECT_THAT(eval_error(Op::argmax, {Array::scalar(DType::f64, 1)}),
              HasSubstr("out of range for rank 0"));
  EXPECT_THAT(eval_error(Op::argmax, {f64({2, 0}, {})}, {{"axis", 1}}),
              HasSubstr("cannot reduce over axis 1 of input 'x' (f64[2,0]): it is empty"));
  EXPECT_THAT(eval_error(Op::argmin, {boolean({2}, {0, 1})}), HasSubstr("must be numeric"));
  // An empty non-reduced axis is fine.
  EXPECT_TRUE(arrays_near(eval_output(Op::argmax, {f64({0, 2}, {})}, {{"axis", 1}}), i64({0}, {})));
}

}  // namespace
}  // namespace kiln
