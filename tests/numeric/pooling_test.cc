// Pooling ops and their gradients against hand-computed windows, the adjoint identity of
// avg_pool_grad, and central finite differences for max_pool_grad.
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "numeric/op_test_util.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;
using testing::arrays_near;
using testing::eval_error;
using testing::eval_output;
using testing::f32;
using testing::f64;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An f64 array of `shape` with uniform values in [-1, 1).
Array random_array(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (double& v : values) v = dist(rng);
  return f64(shape, std::move(values));
}

// An f64 array of `shape` whose values are distinct and at least 0.09 apart: a shuffled
// 0.1-spaced grid with jitter below 0.01.
Array distinct_array(const Shape& shape, std::mt19937& rng) {
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  std::iota(values.begin(), values.end(), 0.0);
  std::shuffle(values.begin(), values.end(), rng);
  std::uniform_real_distribution<double> jitter(0.0, 0.01);
  for (double& v : values) v = 0.1 * v - 1.0 + jitter(rng);
  return f64(shape, std::move(values));
}

double dot(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape, b.shape);
  double sum = 0;
  for (int64_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// Type inference only, for shapes too large to allocate.
std::string infer_error(Op op, std::vector<TensorType> inputs, const Attrs& attrs) {
  const OpDef& def = op_def(op);
  Expected<Attrs> canonical = canonicalize_attrs(def, attrs);
  if (!canonical) return canonical.status().message();
  Expected<std::vector<TensorType>> types = infer_types(def, inputs, *canonical);
  return types ? std::string() : types.status().message();
}

struct PoolConfig {
  Shape x;
  Attrs attrs;
};

// Window configurations over 1 to 3 spatial dims, with strides, pads and odd sizes.
std::vector<PoolConfig> pool_configs() {
  return {
      {{1, 1, 5}, {{"kernel", {2}}}},
      {{2, 3, 7}, {{"kernel", {3}}, {"strides", {2}}, {"pads", {1, 2}}}},
      {{1, 1, 1}, {{"kernel", {2}}, {"pads", {1, 1}}}},
      {{1, 2, 5, 4}, {{"kernel", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 2, 1}}}},
      {{2, 1, 6, 6}, {{"kernel", {2, 2}}, {"strides", {2, 2}}}},
      {{1, 1, 3, 1}, {{"kernel", {3, 1}}, {"pads", {2, 0, 1, 0}}, {"strides", {3, 1}}}},
      {{1, 2, 3, 4, 5}, {{"kernel", {2, 3, 2}}, {"strides", {1, 2, 2}}, {"pads", {1, 1, 0, 0, 1, 1}}}},
  };
}

// ---------------------------------------------------------------------------------- max_pool

TEST(MaxPoolOp, OneDimensionalWindowsByHand) {
  const Array x = f64({1, 1, 5}, {1, 3, 2, 5, 4});
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2}}}),
                          f64({1, 1, 4}, {3, 3, 5, 5})));
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2}}, {"strides", {2}}}),
                          f64({1, 1, 2}, {3, 5})));
  // Padded [P,1,3,2,5,4,P], windows at 0, 2, 4.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::max_pool, {x}, {{"kernel", {2}}, {"strides", {2}}, {"pads", {1, 1}}}),
      f64({1, 1, 3}, {1, 3, 5})));
}

TEST(MaxPoolOp, PaddingNeverWins) {
  // With zero padding the first and last windows would give 0.
  const Array x = f64({1, 1, 3}, {-1, -2, -3});
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2}}, {"pads", {1, 1}}}),
                          f64({1, 1, 4}, {-1, -1, -2, -3})));
  const Array inf = f64({1, 1, 2}, {-kInf, -kInf});
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {inf}, {{"kernel", {2}}, {"pads", {1, 1}}}),
                          f64({1, 1, 3}, {-kInf, -kInf, -kInf})));
}

TEST(MaxPoolOp, TwoDimensionalByHand) {
  const Array x = f64({1, 1, 3, 3}, {1, 9, 2, 3, 4, 8, 7, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2, 2}}}),
                          f64({1, 1, 2, 2}, {9, 9, 7, 8})));
  // End pads only: windows {0,1}x{0,1}, {0,1}x{2,P}, {2,P}x{0,1}, {2,P}x{2,P}.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::max_pool, {x},
                  {{"kernel", {2, 2}}, {"strides", {2, 2}}, {"pads", {0, 0, 1, 1}}}),
      f64({1, 1, 2, 2}, {9, 8, 7, 6})));
  // A 3x1 kernel takes column maxima.
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {3, 1}}}),
                          f64({1, 1, 1, 3}, {7, 9, 8})));
}

TEST(MaxPoolOp, ThreeDimensional) {
  std::vector<double> values(12);
  std::iota(values.begin(), values.end(), 1.0);
  // x[d][h][w] = 6d + 3h + w + 1; each window's maximum is its last corner.
  const Array x = f64({1, 1, 2, 2, 3}, values);
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2, 2, 2}}}),
                          f64({1, 1, 1, 1, 2}, {11, 12})));
}

TEST(MaxPoolOp, BatchAndChannelsArePooledIndependently) {
  const Array x = f64({2, 2, 3}, {1, 2, 3, 6, 5, 4, 0, -1, 0, 7, 7, 7});
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {x}, {{"kernel", {2}}}),
                          f64({2, 2, 2}, {2, 3, 6, 5, 0, 0, 7, 7})));
}

TEST(MaxPoolOp, NaNPropagatesAndF32IsKept) {
  const Array y = eval_output(Op::max_pool, {f64({1, 1, 4}, {1, kNaN, 3, 4})}, {{"kernel", {2}}});
  EXPECT_TRUE(arrays_near(y, f64({1, 1, 3}, {kNaN, kNaN, 4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool, {f32({1, 1, 2}, {0.5, -1})}, {{"kernel", {2}}}),
                          f32({1, 1, 1}, {0.5})));
}

TEST(MaxPoolOp, RejectsBadInputsAndAttributes) {
  const Array x = f64({1, 1, 4}, {1, 2, 3, 4});
  EXPECT_THAT(eval_error(Op::max_pool, {x}), HasSubstr("'kernel'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2, 2}}}), HasSubstr("1 entries"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {0}}}), HasSubstr("'kernel'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2}}, {"strides", {0}}}),
              HasSubstr("'strides'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2}}, {"strides", {1, 1}}}),
              HasSubstr("'strides'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2}}, {"pads", {1}}}),
              HasSubstr("2 entries"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2}}, {"pads", {-1, 0}}}),
              HasSubstr("'pads'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {2}}, {"pads", {0, 2}}}),
              HasSubstr("smaller than 'kernel'"));
  EXPECT_THAT(eval_error(Op::max_pool, {x}, {{"kernel", {5}}}), HasSubstr("output would be empty"));
  EXPECT_EQ(eval_error(Op::max_pool, {x}, {{"kernel", {5}}, {"pads", {1, 0}}}), "");
  EXPECT_THAT(eval_error(Op::max_pool, {testing::i32({1, 1, 2}, {1, 2})}, {{"kernel", {1}}}),
              HasSubstr("floating"));
  EXPECT_THAT(eval_error(Op::max_pool, {f64({2, 2}, {1, 2, 3, 4})}, {{"kernel", {1}}}),
              HasSubstr("rank 3, 4 or 5"));
  EXPECT_THAT(eval_error(Op::max_pool, {f64({1, 1, 0}, {})}, {{"kernel", {2}}, {"pads", {1, 1}}}),
              HasSubstr("empty spatial dim"));
}

TEST(MaxPoolOp, HugeAttributesAreErrorsNotOverflow) {
  const TensorType x{DType::f32, Shape{1, 1, 1, 1}};
  const int64_t k = int64_t{1} << 30;
  EXPECT_THAT(infer_error(Op::max_pool, {x}, {{"kernel", {k, k}}, {"pads", {k - 1, k - 1, 0, 0}}}),
              HasSubstr("2^48"));
  EXPECT_THAT(infer_error(Op::max_pool, {x}, {{"kernel", {1, int64_t{1} << 62}}}),
              HasSubstr("'kernel'"));
  EXPECT_THAT(infer_error(Op::max_pool, {x}, {{"kernel", {1, 1}}, {"strides", {1, INT64_MAX}}}),
              HasSubstr("'strides'"));
}

// ---------------------------------------------------------------------------------- avg_pool

TEST(AvgPoolOp, OneDimensionalWithBothPadCounts) {
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool, {x}, {{"kernel", {3}}}),
                          f64({1, 1, 3}, {2, 3, 4})));
  // Edge windows [P,1,2] and [4,5,P]: divided by 2 real elements by default, by 3 otherwise.
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool, {x}, {{"kernel", {3}}, {"pads", {1, 1}}}),
                          f64({1, 1, 5}, {1.5, 2, 3, 4, 4.5})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::avg_pool, {x},
                  {{"kernel", {3}}, {"pads", {1, 1}}, {"count_include_pad", true}}),
      f64({1, 1, 5}, {1, 2, 3, 4, 3})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::avg_pool, {f64({1, 1, 4}, {1, 2, 3, 4})}, {{"kernel", {2}}, {"strides", {2}}}),
      f64({1, 1, 2}, {1.5, 3.5})));
}

TEST(AvgPoolOp, TwoDimensionalCornersAndEdges) {
  const Array x = f64({1, 1, 2, 2}, {1, 2, 3, 4});
  const Attrs padded = {{"kernel", {2, 2}}, {"pads", {1, 1, 1, 1}}};
  // Corner windows hold 1 real element, edge windows 2, the centre 4.
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool, {x}, padded),
                          f64({1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4})));
  Attrs include = padded;
  include.set("count_include_pad", true);
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool, {x}, include),
                          f64({1, 1, 3, 3}, {0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1})));
}

TEST(AvgPoolOp, ThreeDimensionalAndF32) {
  const Array x = f32({1, 1, 2, 1, 2}, {1, 2, 3, 5});
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool, {x}, {{"kernel", {2, 1, 2}}}),
                          f32({1, 1, 1, 1, 1}, {2.75})));
}

TEST(AvgPoolOp, RejectsBadAttributes) {
  const Array x = f64({1, 1, 4}, {1, 2, 3, 4});
  EXPECT_THAT(eval_error(Op::avg_pool, {x}, {{"kernel", {2}}, {"pads", {2, 0}}}),
              HasSubstr("smaller than 'kernel'"));
  EXPECT_THAT(eval_error(Op::avg_pool, {x}, {{"kernel", {2}}, {"count_include_pad", 1}}),
              HasSubstr("count_include_pad"));
  EXPECT_THAT(eval_error(Op::avg_pool, {x}, {{"kernel", {}}}), HasSubstr("'kernel'"));
}

// ------------------------------------------------------------------------------- pool grads

TEST(PoolGradOps, AvgPoolGradIsTheAdjointOfAvgPool) {
  std::mt19937 rng(5);
  for (bool include_pad : {false, true}) {
    for (const PoolConfig& c : pool_configs()) {
      SCOPED_TRACE(c.x.to_string() + (include_pad ? " include_pad" : ""));
      Attrs attrs = c.attrs;
      attrs.set("count_include_pad", include_pad);
      const Array x = random_array(c.x, rng);
      const Array y = eval_output(Op::avg_pool, {x}, attrs);
      const Array g = random_array(y.shape, rng);
      attrs.set("input_shape", c.x.dims());
      const Array dx = eval_output(Op::avg_pool_grad, {g}, attrs);
      ASSERT_EQ(dx.shape, c.x);
      const double forward = dot(y, g);
      EXPECT_NEAR(dot(x, dx), forward, 1e-12 * (1 + std::fabs(forward)));
    }
  }
}

TEST(PoolGradOps, AvgPoolGradByHand) {
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool_grad, {f64({1, 1, 2}, {2, 4})},
                                      {{"kernel", {2}}, {"strides", {2}}, {"input_shape", {1, 1, 4}}}),
                          f64({1, 1, 4}, {1, 1, 2, 2})));
  // Windows [P,0], [0,1], [1,P] over a 2-element input.
  const Array g = f64({1, 1, 3}, {1, 2, 3});
  const Attrs attrs = {{"kernel", {2}}, {"pads", {1, 1}}, {"input_shape", {1, 1, 2}}};
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool_grad, {g}, attrs), f64({1, 1, 2}, {2, 4})));
  Attrs include = attrs;
  include.set("count_include_pad", true);
  EXPECT_TRUE(arrays_near(eval_output(Op::avg_pool_grad, {g}, include),
                          f64({1, 1, 2}, {1.5, 2.5})));
}

// d/dx sum(max_pool(x) * g), by central differences; max_pool is linear near inputs whose
// values are distinct, so the differences are exact up to rounding.
TEST(PoolGradOps, MaxPoolGradMatchesFiniteDifferences) {
  std::mt19937 rng(6);
  const double h = 1e-3;
  for (const PoolConfig& c : pool_configs()) {
    SCOPED_TRACE(c.x.to_string());
    const Array x = distinct_array(c.x, rng);
    const Array g = random_array(eval_output(Op::max_pool, {x}, c.attrs).shape, rng);
    const Array dx = eval_output(Op::max_pool_grad, {x, g}, c.attrs);
    ASSERT_EQ(dx.shape, c.x);
    for (int64_t i = 0; i < x.size(); ++i) {
      Array plus = x;
      Array minus = x;
      plus[i] += h;
      minus[i] -= h;
      const double numeric = (dot(eval_output(Op::max_pool, {plus}, c.attrs), g) -
                              dot(eval_output(Op::max_pool, {minus}, c.attrs), g)) /
                             (2 * h);
      EXPECT_NEAR(dx[i], numeric, 1e-9) << "element " << i;
    }
  }
}

TEST(PoolGradOps, MaxPoolGradByHand) {
  // Maxima at positions 1, 1, 3, 3.
  const Array x = f64({1, 1, 5}, {1, 3, 2, 5, 4});
  EXPECT_TRUE(arrays_near(
      eval_output(Op::max_pool_grad, {x, f64({1, 1, 4}, {1, 2, 3, 4})}, {{"kernel", {2}}}),
      f64({1, 1, 5}, {0, 3, 0, 7, 0})));
  // Padding never wins, so the edge windows route to the edge elements.
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool_grad,
                                      {f64({1, 1, 3}, {-1, -2, -3}), f64({1, 1, 4}, {1, 2, 3, 4})},
                                      {{"kernel", {2}}, {"pads", {1, 1}}}),
                          f64({1, 1, 3}, {3, 3, 4})));
}

TEST(PoolGradOps, MaxPoolGradTiesGoToTheFirstElementInRowMajorWindowOrder) {
  // Windows [2,2], [2,2], [2,1]: each tie goes to the window's first element.
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool_grad,
                                      {f64({1, 1, 4}, {2, 2, 2, 1}), f64({1, 1, 3}, {1, 10, 100})},
                                      {{"kernel", {2}}}),
                          f64({1, 1, 4}, {1, 10, 100, 0})));
  // In 2-D, (0, 1) comes before (1, 0).
  EXPECT_TRUE(arrays_near(eval_output(Op::max_pool_grad,
                                      {f64({1, 1, 2, 2}, {0, 3, 3, 0}), f64({1, 1, 1, 1}, {5})},
                                      {{"kernel", {2, 2}}}),
                          f64({1, 1, 2, 2}, {0, 5, 0, 0})));
}

TEST(PoolGradOps, RejectInconsistentShapes) {
  const Array x = f64({1, 1, 4}, {1, 2, 3, 4});
  const Array g = f64({1, 1, 3}, {1, 2, 3});
  EXPECT_EQ(eval_error(Op::max_pool_grad, {x, g}, {{"kernel", {2}}}), "");
  EXPECT_THAT(eval_error(Op::max_pool_grad, {x, g}, {{"kernel", {3}}}), HasSubstr("grad_out"));
  EXPECT_THAT(eval_error(Op::max_pool_grad, {x, f32({1, 1, 3}, {1, 2, 3})}, {{"kernel", {2}}}),
              HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::avg_pool_grad, {g}, {{"kernel", {2}}}), HasSubstr("input_shape"));
  EXPECT_THAT(eval_error(Op::avg_pool_grad, {g}, {{"kernel", {2}}, {"input_shape", {1, 1, 5}}}),
              HasSubstr("grad_out"));
  EXPECT_THAT(eval_error(Op::avg_pool_grad, {g}, {{"kernel", {2}}, {"input_shape", {1, 1, -4}}}),
              HasSubstr("attribute 'input_shape'"));
  EXPECT_THAT(eval_error(Op::avg_pool_grad, {g}, {{"kernel", {2}}, {"input_shape", {1, 4}}}),
              HasSubstr("attribute 'input_shape'"));
  EXPECT_THAT(eval_error(Op::avg_pool_grad, {testing::i64({1, 1, 3}, {1, 2, 3})},
                         {{"kernel", {2}}, {"input_shape", {1, 1, 4}}}),
              HasSubstr("floating"));
}

}  // namespace
}  // namespace kiln
