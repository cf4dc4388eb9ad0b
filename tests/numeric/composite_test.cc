// Composite ops (softmax, normalizations, dropout, losses) against hand-computed values,
// NumPy values and identities.
#include <gmock/gmock.h>

#include <cmath>
#include <limits>

#include "numeric/op_test_util.h"

namespace kiln {
namespace {

using testing::arrays_near;
using testing::eval_error;
using testing::eval_output;
using testing::f32;
using testing::f64;
using ::testing::HasSubstr;
using testing::i32;
using testing::i64;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sum_of(const Array& a) {
  double total = 0;
  for (double v : a.data) total += v;
  return total;
}

Array plus(const Array& a, double c) {
  Array result = a;
  for (double& v : result.data) v += c;
  return result;
}

Cost cost_of(Op op, const std::vector<TensorType>& inputs, const Attrs& attrs = {}) {
  const OpDef& def = op_def(op);
  Expected<Attrs> canonical = canonicalize_attrs(def, attrs);
  EXPECT_TRUE(canonical.has_value());
  Expected<std::vector<TensorType>> outputs = infer_types(def, inputs, *canonical);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return def.cost(inputs, *outputs, *canonical);
}

// ---------------------------------------------------------------------------------------------

TEST(SoftmaxOp, HandValues) {
  // exp(ln k) = k, so the result is [1, 2, 3] / 6.
  const Array x = f64({3}, {0, std::log(2.0), std::log(3.0)});
  EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {x}), f64({3}, {1.0 / 6, 2.0 / 6, 3.0 / 6})));
}

TEST(SoftmaxOp, ShiftInvariant) {
  const Array x = f64({3, 5}, {1, -2, 0.5, 3, 0, -1, 4, 2, 2, -7, 0.25, 0.125, 9, -3, 1});
  for (double shift : {-50.0, 3.5, 700.0}) {
    EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {plus(x, shift)}),
                            eval_output(Op::softmax, {x}), 1e-15, 1e-12))
        << "shift " << shift;
  }
}

TEST(SoftmaxOp, NoOverflowAtLargeLogits) {
  const Array x = f64({2, 2}, {1000, 1000 + std::log(3.0), 1000, -1000});
  EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {x}), f64({2, 2}, {0.25, 0.75, 1, 0})));
}

TEST(SoftmaxOp, SlicesSumToOneAlongEveryAxis) {
  Array x(DType::f64, Shape{2, 3, 5});
  for (int64_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i)) * 4;
  const int64_t extents[] = {2, 3, 5};
  for (int axis = 0; axis < 3; ++axis) {
    const Array y = eval_output(Op::softmax, {x}, {{"axis", axis}});
    EXPECT_NEAR(sum_of(y), static_cast<double>(x.size() / extents[axis]), 1e-12) << axis;
  }
  // Along axis 1 of [2, 3, 5] each of the 10 columns sums to 1.
  const Array y = eval_output(Op::softmax, {x}, {{"axis", 1}});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t k = 0; k < 5; ++k) {
      EXPECT_NEAR(y[b * 15 + k] + y[b * 15 + 5 + k] + y[b * 15 + 10 + k], 1.0, 1e-15);
    }
  }
}

TEST(SoftmaxOp, NegativeAxisCountsFromTheEnd) {
  const Array x = f64({2, 3}, {1, -2, 0.5, 3, 0, -1});
  // From NumPy: softmax over axis 0 (columns).
  const Array expected = f64({2, 3}, {0.11920292202211755, 0.11920292202211755, 0.8175744761936437,
                                      0.8807970779778823, 0.8807970779778823, 0.18242552380635632});
  EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {x}, {{"axis", -2}}), expected, 1e-15));
  EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {x}, {{"axis", 0}}), expected, 1e-15));
  // From NumPy: softmax over the last axis (the default).
  EXPECT_TRUE(
      arrays_near(eval_output(Op::softmax, {x}),
                  f64({2, 3}, {0.6037488961486258, 0.03005888756957402, 0.3661922162818002,
                               0.9362395518765058, 0.0466126225779739, 0.01714782554552039}),
                  1e-15));
}

TEST(SoftmaxOp, SizeOneAxisGivesOnes) {
  const Array x = f64({3, 1}, {-5, 0, 800});
  EXPECT_TRUE(arrays_near(eval_output(Op::softmax, {x}), f64({3, 1}, {1, 1, 1})));
}

TEST(SoftmaxOp, F32ResultIsRoundedToF32) {
  const Array y = eval_output(Op::softmax, {f32({3}, {0, 1, 2})});
  ASSERT_EQ(y.dtype, DType::f32);
  for (double v : y.data) EXPECT_EQ(v, static_cast<double>(static_cast<float>(v)));
  EXPECT_NEAR(y[0], 1 / (1 + std::exp(1.0) + std::exp(2.0)), 1e-7);
}

TEST(SoftmaxOp, NaNSpreadsToItsSlice) {
  const Array y = eval_output(Op::softmax, {f64({2, 2}, {kNaN, 0, 0, 0})});
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_TRUE(arrays_near(Array(DType::f64, {2}, {y[2], y[3]}), f64({2}, {0.5, 0.5})));
}

TEST(SoftmaxOp, RejectsIntegerInputAndBadAxis) {
  EXPECT_THAT(eval_error(Op::softmax, {i32({2}, {1, 2})}),
              HasSubstr("input 'x' must be a floating type, got i32[2]"));
  EXPECT_THAT(eval_error(Op::softmax, {f64({2}, {1, 2})}, {{"axis", 1}}),
              HasSubstr("attribute 'axis': axis 1 is out of range for rank 1"));
  EXPECT_THAT(eval_error(Op::softmax, {f64({2, 2}, {1, 2, 3, 4})}, {{"axis", -3}}),
              HasSubstr("axis -3"));
  EXPECT_NE(eval_error(Op::softmax, {Array::scalar(DType::f64, 1)}), "");  // no axis to use
}

// ---------------------------------------------------------------------------------------------

TEST(LogSoftmaxOp, HandValues) {
  const Array x = f64({3}, {0, std::log(2.0), std::log(3.0)});
  EXPECT_TRUE(arrays_near(eval_output(Op::log_softmax, {x}),
                          f64({3}, {-std::log(6.0), std::log(2.0 / 6), std::log(0.5)}), 1e-15));
}

TEST(LogSoftmaxOp, ExpOfItIsSoftmax) {
  Array x(DType::f64, Shape{2, 3, 4});
  for (int64_t i = 0; i < x.size(); ++i) x[i] = 5 * std::cos(1.7 * static_cast<double>(i));
  for (int axis : {0, 1, -1}) {
    Array e = eval_output(Op::log_softmax, {x}, {{"axis", axis}});
    for (double& v : e.data) v = std::exp(v);
    EXPECT_TRUE(arrays_near(e, eval_output(Op::softmax, {x}, {{"axis", axis}}), 1e-15, 1e-13))
        << axis;
  }
}

TEST(LogSoftmaxOp, StaysFiniteWhereSoftmaxUnderflows) {
  // log_softmax([1000, 0]) = [0 - log(1 + e^-1000), -1000 - log(1 + e^-1000)] = [0, -1000].
  EXPECT_TRUE(
      arrays_near(eval_output(Op::log_softmax, {f64({2}, {1000, 0})}), f64({2}, {0, -1000})));
}

TEST(LogSoftmaxOp, NegativeAxisMatchesNumPy) {
  const Array x = f64({2, 3}, {1, -2, 0.5, 3, 0, -1});
  // From NumPy: log of softmax over axis 0.
  EXPECT_TRUE(
      arrays_near(eval_output(Op::log_softmax, {x}, {{"axis", -2}}),
                  f64({2, 3}, {-2.1269280110429727, -2.1269280110429727, -0.2014132779827524,
                               -0.12692801104297263, -0.12692801104297263, -1.7014132779827524}),
                  1e-15, 1e-14));
}

TEST(LogSoftmaxOp, RejectsIntegerInputAndBadAxis) {
  EXPECT_THAT(eval_error(Op::log_softmax, {i64({2}, {1, 2})}), HasSubstr("input 'x'"));
  EXPECT_THAT(eval_error(Op::log_softmax, {f64({1, 2}, {1, 2})}, {{"axis", 2}}),
              HasSubstr("attribute 'axis'"));
}

TEST(LogSoftmaxOp, CostCountsFlopsPerElementAndBytesOnce) {
  const Cost cost = cost_of(Op::log_softmax, {{DType::f32, Shape{4, 10}}});
  EXPECT_EQ(cost.flops, 5 * 40);
  EXPECT_EQ(cost.bytes_read, 160);
  EXPECT_EQ(cost.bytes_written, 160);
}

// ---------------------------------------------------------------------------------------------

TEST(LayerNormOp, HandValuesWithoutEpsilon) {
  // Mean 2.5, population variance 1.25, so y = (x - 2.5) / sqrt(1.25).
  const Array x = f64({4}, {1, 2, 3, 4});
  const double s = std::sqrt(1.25);
  const Array y = eval_output(Op::layer_norm, {x, f64({4}, {1, 1, 1, 1}), f64({4}, {0, 0, 0, 0})},
                              {{"epsilon", 0.0}});
  EXPECT_TRUE(arrays_near(y, f64({4}, {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}), 1e-15));
  // Scale and bias apply per normalized element after normalizing.
  const Array scaled = eval_output(
      Op::layer_norm, {x, f64({4}, {2, -1, 0, 4}), f64({4}, {1, 1, 5, -2})}, {{"epsilon", 0.0}});
  EXPECT_TRUE(arrays_near(scaled, f64({4}, {1 - 3 / s, 1 + 0.5 / s, 5, -2 + 6 / s}), 1e-15));
}

TEST(LayerNormOp, DefaultEpsilonIsAddedToTheVariance) {
  // Rows [0, 2] and [5, 5]: variance 1 and 0.
  const Array x = f64({2, 2}, {0, 2, 5, 5});
  const Array y = eval_output(Op::layer_norm, {x, f64({2}, {1, 1}), f64({2}, {0, 0.5})});
  const double k = 1 / std::sqrt(1 + 1e-5);
  EXPECT_TRUE(arrays_near(y, f64({2, 2}, {-k, k + 0.5, 0, 0.5}), 1e-15));
}

TEST(LayerNormOp, AxisNormalizesTrailingDimsTogether) {
  const Array x = f64({2, 2, 3}, {0, -0.5, -2, 1.5, 1, -0.5, 3, 2.5, 1, 4.5, 4, 2.5});
  const Array scale = f64({2, 3}, {1, 2, 0.5, 1, -1, 3});
  const Array bias = f64({2, 3}, {0, 1, 0, -1, 0, 2});
  // From NumPy, normalizing over axes (1, 2) with epsilon 1e-5.
  const Array expected =
      f64({2, 2, 3},
          {0.07352117607346854, 0.2647882392653146, -0.8454935248448883, 0.3969023453959022,
           -0.955775288955091, 0.8971823588979719, 0.07352117607346867, 0.2647882392653148,
           -0.8454935248448882, 0.3969023453959024, -0.9557752889550911, 0.8971823588979722});
  EXPECT_TRUE(arrays_near(eval_output(Op::layer_norm, {x, scale, bias}, {{"axis", 1}}), expected,
                          1e-14, 1e-13));
  EXPECT_TRUE(arrays_near(eval_output(Op::layer_norm, {x, scale, bias}, {{"axis", -2}}), expected,
                          1e-14, 1e-13));
}

TEST(LayerNormOp, AxisZeroNormalizesEverything) {
  const Array x = f64({2, 2}, {1, 2, 3, 4});
  const Array y =
      eval_output(Op::layer_norm, {x, f64({2, 2}, {1, 1, 1, 1}), f64({2, 2}, {0, 0, 0, 0})},
                  {{"axis", 0}, {"epsilon", 0.0}});
  const double s = std::sqrt(1.25);
  EXPECT_TRUE(arrays_near(y, f64({2, 2}, {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}), 1e-15));
}

TEST(LayerNormOp, SizeOneNormalizedDimGivesTheBias) {
  const Array x = f32({3, 1}, {-4, 0, 9});
  const Array y = eval_output(Op::layer_norm, {x, f32({1}, {3}), f32({1}, {0.5})});
  EXPECT_TRUE(arrays_near(y, f32({3, 1}, {0.5, 0.5, 0.5})));
}

TEST(LayerNormOp, RejectsBadShapesDtypesAndAttributes) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  const Array v3 = f64({3}, {1, 1, 1});
  EXPECT_THAT(eval_error(Op::layer_norm, {x, f64({2}, {1, 1}), v3}),
              HasSubstr("input 'scale' must have shape [3]"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, f64({2, 3}, {1, 1, 1, 1, 1, 1}), v3}),
              HasSubstr("input 'scale' must have shape [3]"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, v3, f64({3}, {0, 0, 0})}, {{"axis", 0}}),
              HasSubstr("input 'scale' must have shape [2,3]"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, v3, f32({3}, {0, 0, 0})}),
              HasSubstr("inputs 'x' (f64[2,3]) and 'bias' (f32[3]) must have the same dtype"));
  EXPECT_THAT(eval_error(Op::layer_norm, {i32({2}, {1, 2}), i32({2}, {1, 1}), i32({2}, {0, 0})}),
              HasSubstr("input 'x' must be a floating type"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, v3, v3}, {{"epsilon", -1.0}}),
              HasSubstr("attribute 'epsilon' must be finite and non-negative"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, v3, v3}, {{"epsilon", kNaN}}),
              HasSubstr("attribute 'epsilon'"));
  EXPECT_THAT(eval_error(Op::layer_norm, {x, v3, v3}, {{"axis", 2}}),
              HasSubstr("attribute 'axis'"));
}

// ---------------------------------------------------------------------------------------------

TEST(BatchNormOps, TrainHandValues) {
  // x [N=2, C=2]: channel 0 holds {1, 3} (mean 2, var 1), channel 1 {10, 30} (mean 20, var 100).
  const Array x = f64({2, 2}, {1, 10, 3, 30});
  const Attrs no_eps = {{"epsilon", 0.0}};
  const Array one = f64({2}, {1, 1});
  const Array zero = f64({2}, {0, 0});
  EXPECT_TRUE(arrays_near(eval_output(Op::batch_norm_train, {x, one, zero}, no_eps),
                          f64({2, 2}, {-1, -1, 1, 1})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::batch_norm_train, {x, one, zero}, no_eps, 1), f64({2}, {2, 20})));
  EXPECT_TRUE(arrays_near(eval_output(Op::batch_norm_train, {x, one, zero}, no_eps, 2),
                          f64({2}, {1, 100})));
  const Array y =
      eval_output(Op::batch_norm_train, {x, f64({2}, {2, 3}), f64({2}, {0.5, -1})}, no_eps);
  EXPECT_TRUE(arrays_near(y, f64({2, 2}, {-1.5, -4, 2.5, 2})));
}

TEST(BatchNormOps, TrainOnRank4MatchesNumPy) {
  const Array x = f64({2, 3, 1, 2}, {1, 4, -2, 0, 5, 5, 2, 2, 3, -1, 0.5, 7});
  const Array scale = f64({3}, {1, 0.5, 2});
  const Array bias = f64({3}, {0, 1, -1});
  const Attrs attrs = {{"epsilon", 1e-3}};
  // From NumPy: statistics over axes (0, 2, 3).
  EXPECT_TRUE(arrays_near(
      eval_output(Op::batch_norm_train, {x, scale, bias}, attrs),
      f64({2, 3, 1, 2},
          {-1.146595993686855, 1.6052343911615972, 0.46555386017094513, 1.0, -0.4751823817934786,
           -0.4751823817934786, -0.229319198737371, -0.229319198737371, 1.8016692097435822,
           0.7327769300854725, -4.253869232880433, 1.2042339964673898}),
      1e-14, 1e-13));
  EXPECT_TRUE(arrays_near(eval_output(Op::batch_norm_train, {x, scale, bias}, attrs, 1),
                          f64({3}, {2.25, 0, 4.375})));
  EXPECT_TRUE(arrays_near(eval_output(Op::batch_norm_train, {x, scale, bias}, attrs, 2),
                          f64({3}, {1.1875, 3.5, 5.671875})));
}

TEST(BatchNormOps, InferHandValues) {
  // x [1, 2, 2]; channel 0: (x - 1) / 2; channel 1: (x - 2) / 0.5 * 2 + 1.
  const Array x = f64({1, 2, 2}, {3, 5, 2, 3});
  const Array y =
      eval_output(Op::batch_norm_infer,
                  {x, f64({2}, {1, 2}), f64({2}, {0, 1}), f64({2}, {1, 2}), f64({2}, {4, 0.25})},
                  {{"epsilon", 0.0}});
  EXPECT_TRUE(arrays_near(y, f64({1, 2, 2}, {1, 2, 1, 5})));
  // The default epsilon 1e-5 is added to the variance.
  const Array d = eval_output(Op::batch_norm_infer, {f64({1, 1}, {3}), f64({1}, {1}), f64({1}, {0}),
                                                     f64({1}, {1}), f64({1}, {4})});
  EXPECT_TRUE(arrays_near(d, f64({1, 1}, {2 / std::sqrt(4 + 1e-5)}), 1e-15));
}

TEST(BatchNormOps, InferWithBatchStatisticsReproducesTrain) {
  const Array x = f32({3, 2, 3}, {0.5, -1, 2, 7, 3, 3, -4, 0.25, 1, 1, 2, -2, 6, 5, -9, 0, 10, 2});
  const Array scale = f32({2}, {1.5, -0.5});
  const Array bias = f32({2}, {0.25, 2});
  const Attrs attrs = {{"epsilon", 0.01}};
  const Array mean = eval_output(Op::batch_norm_train, {x, scale, bias}, attrs, 1);
  const Array var = eval_output(Op::batch_norm_train, {x, scale, bias}, attrs, 2);
  EXPECT_TRUE(arrays_near(eval_output(Op::batch_norm_infer, {x, scale, bias, mean, var}, attrs),
                          eval_output(Op::batch_norm_train, {x, scale, bias}, attrs), 1e-6, 1e-6));
}

TEST(BatchNormOps, RejectBadShapesDtypesAndEpsilon) {
  const Array x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  const Array c3 = f64({3}, {1, 1, 1});
  EXPECT_THAT(eval_error(Op::batch_norm_train, {f64({3}, {1, 2, 3}), c3, c3}),
              HasSubstr("input 'x' must have rank at least 2, got f64[3]"));
  EXPECT_THAT(eval_error(Op::batch_norm_train, {x, f64({2}, {1, 1}), c3}),
              HasSubstr("input 'scale' must have shape [3]"));
  EXPECT_THAT(eval_error(Op::batch_norm_train, {x, c3, f32({3}, {1, 1, 1})}),
              HasSubstr("'bias' (f32[3]) must have the same dtype"));
  EXPECT_THAT(eval_error(Op::batch_norm_train, {x, c3, c3}, {{"epsilon", -0.5}}),
              HasSubstr("attribute 'epsilon'"));
  EXPECT_THAT(eval_error(Op::batch_norm_infer, {x, c3, c3, c3, f64({3, 1}, {1, 1, 1})}),
              HasSubstr("input 'var' must have shape [3]"));
  EXPECT_THAT(eval_error(Op::batch_norm_infer, {x, c3, c3, f64({2}, {0, 0}), c3}),
              HasSubstr("input 'mean' must have shape [3]"));
  EXPECT_THAT(eval_error(Op::batch_norm_infer, {i64({1, 1}, {1}), i64({1}, {1}), i64({1}, {1}),
                                                i64({1}, {1}), i64({1}, {1})}),
              HasSubstr("input 'x' must be a floating type"));
  EXPECT_THAT(eval_error(Op::batch_norm_infer, {x, c3, c3, c3, c3}, {{"epsilon", kNaN}}),
              HasSubstr("attribute 'epsilon'"));
}

TEST(BatchNormOps, TrainCostCountsTheInputNotOnlyTheStatistics) {
  const Cost cost =
      cost_of(Op::batch_norm_train,
              {{DType::f32, Shape{8, 4, 5}}, {DType::f32, Shape{4}}, {DType::f32, Shape{4}}});
  EXPECT_EQ(cost.flops, 8 * 160);
  EXPECT_EQ(cost.bytes_read, 4 * (160 + 8));
  EXPECT_EQ(cost.bytes_written, 4 * (160 + 8));
}

// ---------------------------------------------------------------------------------------------

TEST(DropoutOp, RatioZeroIsTheIdentity) {
  const Array x = f64({2, 3}, {1, -2, 3.5, 0, kNaN, 1e300});
  EXPECT_TRUE(arrays_near(eval_output(Op::dropout, {x}, {{"ratio", 0.0}, {"seed", 9}}), x, 0, 0));
}

TEST(DropoutOp, KeptFractionIsOneMinusRatio) {
  const Array x(DType::f32, Shape{100, 1000}, std::vector<double>(100000, 1.0));
  const Array y = eval_output(Op::dropout, {x}, {{"ratio", 0.3}, {"seed", 1234}});
  int64_t kept = 0;
  for (double v : y.data) kept += v != 0 ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(kept) / 100000, 0.7, 0.01);
}

TEST(DropoutOp, SameSeedSameMaskOtherSeedsDiffer) {
  const Array x(DType::f64, Shape{64}, std::vector<double>(64, 1.0));
  const Array a = eval_output(Op::dropout, {x}, {{"seed", 5}});
  EXPECT_EQ(a, eval_output(Op::dropout, {x}, {{"seed", 5}}));
  EXPECT_NE(a, eval_output(Op::dropout, {x}, {{"seed", 6}}));
  EXPECT_NE(a, eval_output(Op::dropout, {x}, {{"seed", -5}}));
}

TEST(DropoutOp, KeptValuesAreScaledByOneOverKeepProbability) {
  Array x(DType::f64, Shape{7, 9});
  for (int64_t i = 0; i < x.size(); ++i) x[i] = 1.5 + static_cast<double>(i);
  const Array y = eval_output(Op::dropout, {x}, {{"ratio", 0.75}, {"seed", 3}});
  int64_t kept = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0) continue;
    ++kept;
    EXPECT_DOUBLE_EQ(y[i], x[i] * 4);
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.size());
}

TEST(DropoutOp, ASeedInputReplacesTheSeedAttribute) {
  const Array x(DType::f64, Shape{64}, std::vector<double>(64, 1.0));
  for (int64_t seed : {int64_t{5}, int64_t{-5}, (int64_t{1} << 52) + 3}) {
    const Array given = Array::scalar(DType::i64, static_cast<double>(seed));
    EXPECT_EQ(eval_output(Op::dropout, {x, given}, {{"seed", 99}, {"offset", 4}}),
              eval_output(Op::dropout, {x}, {{"seed", seed}, {"offset", 4}}))
        << seed;
  }
  EXPECT_NE(eval_error(Op::dropout, {x, Array::scalar(DType::i32, 1)}), "");
  EXPECT_NE(eval_error(Op::dropout, {x, Array(DType::i64, Shape{1})}), "");
}

TEST(DropoutOp, OffsetShiftsTheCounter) {
  // Element i of dropout(x, offset=k) is kept iff element i + k of dropout(x', offset=0) is.
  const Array ones(DType::f64, Shape{3, 10}, std::vector<double>(30, 1.0));
  const Array longer(DType::f64, Shape{50}, std::vector<double>(50, 1.0));
  const Array reference = eval_output(Op::dropout, {longer}, {{"seed", 77}});
  for (int64_t k : {1, 7, 20}) {
    const Array y = eval_output(Op::dropout, {ones}, {{"seed", 77}, {"offset", k}});
    for (int64_t i = 0; i < y.size(); ++i) {
      EXPECT_EQ(y[i] != 0, reference[i + k] != 0) << "offset " << k << " element " << i;
    }
  }
}

TEST(DropoutOp, MaskMatchesTheSplitMixFormula) {
  // Uniforms u = (mix(seed ^ mix(offset + i)) >> 40) * 2^-24 computed separately with a short
  // Python script (integers masked to 64 bits):
  //   seed 42, offset 0:   .303 .495 .116 .264 .555 .785 .185 .432
  //   seed -1, offset -3:  .594 .005 .387 .179 .646 .984 .256 .486
  //   seed 7, offset 100:  .091 .991 .695 .633 .992 .008 .661 .609
  const Array x = f64({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_TRUE(arrays_near(eval_output(Op::dropout, {x}, {{"seed", 42}}),
                          f64({8}, {0, 0, 0, 0, 10, 12, 0, 0})));
  const Array ones = f64({2, 4}, {1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::dropout, {ones}, {{"seed", -1}, {"offset", -3}}),
                          f64({2, 4}, {2, 0, 0, 0, 2, 2, 0, 0})));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::dropout, {ones}, {{"seed", 7}, {"offset", 100}, {"ratio", 0.6}}),
                  f64({2, 4}, {0, 2.5, 2.5, 2.5, 2.5, 0, 2.5, 2.5}), 1e-15));
}

TEST(DropoutOp, DroppedNaNBecomesZero) {
  // seed 42: elements 0..3 are dropped at ratio 0.5 (see MaskMatchesTheSplitMixFormula).
  const Array y = eval_output(Op::dropout, {f32({2}, {kNaN, kNaN})}, {{"seed", 42}});
  EXPECT_TRUE(arrays_near(y, f32({2}, {0, 0})));
}

TEST(DropoutOp, RejectsRatioOutsideZeroOneAndIntegers) {
  const Array x = f64({2}, {1, 2});
  EXPECT_THAT(eval_error(Op::dropout, {x}, {{"ratio", 1.0}}),
              HasSubstr("attribute 'ratio' must be in [0, 1), got 1"));
  EXPECT_THAT(eval_error(Op::dropout, {x}, {{"ratio", -0.1}}), HasSubstr("attribute 'ratio'"));
  EXPECT_THAT(eval_error(Op::dropout, {x}, {{"ratio", kNaN}}), HasSubstr("attribute 'ratio'"));
  EXPECT_THAT(eval_error(Op::dropout, {i32({2}, {1, 2})}), HasSubstr("input 'x'"));
}

// ---------------------------------------------------------------------------------------------

TEST(CrossEntropyOp, UniformLogitsGiveLogOfClassCount) {
  // One position (labels are a scalar): logsumexp([0, 0]) - 0 = ln 2.
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {f64({2}, {0, 0}), i64({}, {1})}),
                          Array::scalar(DType::f64, std::log(2.0))));
}

TEST(CrossEntropyOp, ReductionsOnHandValues) {
  // Rows [0, ln 3], [0, ln 3], [ln 2, ln 2]: each has logsumexp ln 4, so the losses are
  // ln 4 - ln 3, ln 4 - 0 and ln 4 - ln 2.
  const Array logits =
      f64({3, 2}, {0, std::log(3.0), 0, std::log(3.0), std::log(2.0), std::log(2.0)});
  const Array labels = i32({3}, {1, 0, 0});
  const double l0 = std::log(4.0 / 3);
  const double l1 = std::log(4.0);
  const double l2 = std::log(2.0);
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {logits, labels}, {{"reduction", "none"}}),
                          f64({3}, {l0, l1, l2}), 1e-15));
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {logits, labels}, {{"reduction", "sum"}}),
                          Array::scalar(DType::f64, l0 + l1 + l2), 1e-15));
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {logits, labels}),
                          Array::scalar(DType::f64, (l0 + l1 + l2) / 3), 1e-15));
}

TEST(CrossEntropyOp, NoOverflowAtLogits1000) {
  EXPECT_TRUE(
      arrays_near(eval_output(Op::cross_entropy, {f64({1, 2}, {1000, 1000}), i64({1}, {0})}),
                  Array::scalar(DType::f64, std::log(2.0))));
  // The wrong class far below: loss = 2000 + log(1 + e^-2000) = 2000.
  EXPECT_TRUE(
      arrays_near(eval_output(Op::cross_entropy, {f32({1, 2}, {1000, -1000}), i64({1}, {1})}),
                  Array::scalar(DType::f32, 2000)));
}

TEST(CrossEntropyOp, Rank3LogitsMatchNumPy) {
  const Array logits = f64({2, 2, 3}, {0.5, -1, 2, 1, 1, 1, -3, 0, 0.25, 10, -10, 0});
  const Array labels = i64({2, 2}, {2, 0, 1, 0});
  // From NumPy: logsumexp over the last axis minus the labelled logit.
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {logits, labels}, {{"reduction", "none"}}),
                          f64({2, 2}, {0.24131129665715711, 1.0986122886681096, 0.84750319004374342,
                                       4.5400960276609226e-05}),
                          1e-15, 1e-11));
  EXPECT_TRUE(arrays_near(eval_output(Op::cross_entropy, {logits, labels}),
                          Array::scalar(DType::f64, 0.5468680440823217), 1e-15, 1e-13));
}

TEST(CrossEntropyOp, EqualsNllLossOfLogSoftmax) {
  const Array logits = f64({4, 3}, {0.5, -1, 2, 7, 3, 3, -4, 0.1, 1, 1, 2, -2});
  const Array labels = i32({4}, {0, 2, 1, 2});
  const Array log_probs = eval_output(Op::log_softmax, {logits});
  for (const char* reduction : {"none", "sum", "mean"}) {
    EXPECT_TRUE(arrays_near(
        eval_output(Op::cross_entropy, {logits, labels}, {{"reduction", reduction}}),
        eval_output(Op::nll_loss, {log_probs, labels}, {{"reduction", reduction}}), 1e-14, 1e-14))
        << reduction;
  }
}

TEST(CrossEntropyOp, LabelOutsideClassRangeIsAnError) {
  const Array logits = f64({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_THAT(eval_error(Op::cross_entropy, {logits, i64({2}, {0, 3})}),
              HasSubstr("input 'labels': label 3 at position 1 is outside [0, 3)"));
  EXPECT_THAT(eval_error(Op::cross_entropy, {logits, i32({2}, {-1, 0})}),
              HasSubstr("label -1 at position 0"));
}

TEST(CrossEntropyOp, RejectsBadShapesDtypesAndReduction) {
  const Array logits = f64({2, 3}, {0, 1, 2, 3, 4, 5});
  EXPECT_THAT(eval_error(Op::cross_entropy, {logits, i64({3}, {0, 0, 0})}),
              HasSubstr("input 'labels' must have shape [2] (f64[2,3] without its class axis), "
                        "got i64[3]"));
  EXPECT_THAT(eval_error(Op::cross_entropy, {logits, f64({2}, {0, 0})}),
              HasSubstr("input 'labels' must be i32 or i64"));
  EXPECT_THAT(eval_error(Op::cross_entropy, {i32({2, 3}, {0, 1, 2, 3, 4, 5}), i64({2}, {0, 0})}),
              HasSubstr("input 'logits' must be a floating type"));
  EXPECT_THAT(eval_error(Op::cross_entropy, {Array::scalar(DType::f64, 1), i64({}, {0})}),
              HasSubstr("input 'logits' must have rank at least 1"));
  EXPECT_THAT(
      eval_error(Op::cross_entropy, {logits, i64({2}, {0, 0})}, {{"reduction", "max"}}),
      HasSubstr("attribute 'reduction' must be \"mean\", \"sum\" or \"none\", got \"max\""));
}

TEST(CrossEntropyOp, CostCountsLogitsNotTheScalarOutput) {
  const Cost cost =
      cost_of(Op::cross_entropy, {{DType::f32, Shape{16, 10}}, {DType::i64, Shape{16}}});
  EXPECT_EQ(cost.flops, 4 * 160);
  EXPECT_EQ(cost.bytes_read, 4 * 160 + 8 * 16);
  EXPECT_EQ(cost.bytes_written, 4);
}

// ---------------------------------------------------------------------------------------------

TEST(BinaryCrossEntropyOp, HandValues) {
  // sigmoid(0) = 1/2 whatever the target; sigmoid(ln 3) = 3/4, so the loss is -ln(3/4) for
  // target 1 and -ln(1/4) for target 0.
  const double ln3 = std::log(3.0);
  const Array z = f64({4}, {0, 0, ln3, ln3});
  const Array t = f64({4}, {0, 0.7, 1, 0});
  EXPECT_TRUE(arrays_near(
      eval_output(Op::binary_cross_entropy, {z, t}, {{"reduction", "none"}}),
      f64({4}, {std::log(2.0), std::log(2.0), std::log(4.0 / 3), std::log(4.0)}), 1e-15));
}

TEST(BinaryCrossEntropyOp, ReductionsMatchNumPy) {
  const Array z = f64({3}, {-2, 0.5, 3});
  const Array t = f64({3}, {0, 0.25, 1});
  // From NumPy, with the naive formula -(t log s + (1 - t) log(1 - s)), s = sigmoid(z).
  EXPECT_TRUE(arrays_near(eval_output(Op::binary_cross_entropy, {z, t}, {{"reduction", "none"}}),
                          f64({3}, {0.12692801104297252, 0.8490769841801067, 0.04858735157374191}),
                          1e-15, 1e-14));
  EXPECT_TRUE(arrays_near(eval_output(Op::binary_cross_entropy, {z, t}, {{"reduction", "sum"}}),
                          Array::scalar(DType::f64, 1.024592346796821), 1e-15, 1e-14));
  EXPECT_TRUE(arrays_near(eval_output(Op::binary_cross_entropy, {z, t}),
                          Array::scalar(DType::f64, 0.341530782265607), 1e-15, 1e-14));
}

TEST(BinaryCrossEntropyOp, StableAtLargeLogits) {
  // Confidently right: loss log(1 + e^-1000) = 0; confidently wrong: 1000.
  const Array z = f32({2, 2}, {1000, -1000, 1000, -1000});
  const Array t = f32({2, 2}, {1, 0, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::binary_cross_entropy, {z, t}, {{"reduction", "none"}}),
                          f32({2, 2}, {0, 0, 1000, 1000})));
}

TEST(BinaryCrossEntropyOp, RejectsMismatchedInputs) {
  const Array z = f64({2}, {0, 1});
  EXPECT_THAT(eval_error(Op::binary_cross_entropy, {z, f64({2, 1}, {0, 1})}),
              HasSubstr("inputs 'logits' (f64[2]) and 'targets' (f64[2,1]) must have the same "
                        "shape"));
  EXPECT_THAT(eval_error(Op::binary_cross_entropy, {z, f32({2}, {0, 1})}),
              HasSubstr("must have the same dtype"));
  EXPECT_THAT(eval_error(Op::binary_cross_entropy, {i32({2}, {0, 1}), i32({2}, {0, 1})}),
              HasSubstr("input 'logits' must be a floating type"));
  EXPECT_THAT(eval_error(Op::binary_cross_entropy, {z, z}, {{"reduction", "avg"}}),
              HasSubstr("attribute 'reduction'"));
}

// ---------------------------------------------------------------------------------------------

TEST(NllLossOp, PicksTheLabelledLogProbability) {
  const Array log_probs = f64({2, 3}, {-1, -2, -3, -0.5, -0.25, -4});
  const Array labels = i64({2}, {2, 0});
  EXPECT_TRUE(arrays_near(eval_output(Op::nll_loss, {log_probs, labels}, {{"reduction", "none"}}),
                          f64({2}, {3, 0.5})));
  EXPECT_TRUE(arrays_near(eval_output(Op::nll_loss, {log_probs, labels}, {{"reduction", "sum"}}),
                          Array::scalar(DType::f64, 3.5)));
  EXPECT_TRUE(
      arrays_near(eval_output(Op::nll_loss, {log_probs, labels}), Array::scalar(DType::f64, 1.75)));
}

TEST(NllLossOp, RankOneAndRankThreeInputs) {
  EXPECT_TRUE(arrays_near(eval_output(Op::nll_loss, {f32({4}, {-1, -2, -3, -4}), i32({}, {3})}),
                          Array::scalar(DType::f32, 4)));
  const Array log_probs = f64({2, 1, 2}, {-0.5, -1.5, -2, -0.125});
  EXPECT_TRUE(arrays_near(
      eval_output(Op::nll_loss, {log_probs, i64({2, 1}, {1, 1})}, {{"reduction", "none"}}),
      f64({2, 1}, {1.5, 0.125})));
}

TEST(NllLossOp, LabelOutsideClassRangeIsAnError) {
  const Array log_probs = f64({2, 2}, {-1, -1, -1, -1});
  EXPECT_THAT(eval_error(Op::nll_loss, {log_probs, i32({2}, {0, 2})}),
              HasSubstr("label 2 at position 1 is outside [0, 2)"));
  EXPECT_THAT(eval_error(Op::nll_loss, {log_probs, i64({2}, {-4, 0})}), HasSubstr("label -4"));
}

TEST(NllLossOp, RejectsBadShapesAndDtypes) {
  const Array log_probs = f64({2, 2}, {-1, -1, -1, -1});
  EXPECT_THAT(eval_error(Op::nll_loss, {log_probs, i32({2, 1}, {0, 0})}),
              HasSubstr("input 'labels' must have shape [2]"));
  EXPECT_THAT(eval_error(Op::nll_loss, {log_probs, testing::boolean({2}, {0, 0})}),
              HasSubstr("input 'labels' must be i32 or i64"));
  EXPECT_THAT(eval_error(Op::nll_loss, {i64({2}, {0, 0}), i64({}, {0})}),
              HasSubstr("input 'log_probs' must be a floating type"));
}

TEST(NllLossOp, NoneKeepsLabelShapeAndCostCountsPositions) {
  const Cost cost = cost_of(Op::nll_loss, {{DType::f64, Shape{5, 7}}, {DType::i32, Shape{5}}},
                            {{"reduction", "none"}});
  EXPECT_EQ(cost.flops, 2 * 5);
  EXPECT_EQ(cost.bytes_read, 8 * 35 + 4 * 5);
  EXPECT_EQ(cost.bytes_written, 8 * 5);
}

}  // namespace
}  // namespace kiln
