// Unary ops against hand-computed values and identities.
#include <cmath>
#include <limits>
#include <numbers>

#include "numeric/op_test_util.h"

namespace kiln {
namespace {

using testing::arrays_near;
using testing::eval_error;
using testing::eval_output;
using testing::f32;
using testing::f64;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(UnaryOps, ArithmeticOnHandValues) {
  const Array x = f64({5}, {-2.5, -1, 0, 0.5, 4});
  EXPECT_TRUE(arrays_near(eval_output(Op::neg, {x}), f64({5}, {2.5, 1, 0, -0.5, -4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::abs, {x}), f64({5}, {2.5, 1, 0, 0.5, 4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::relu, {x}), f64({5}, {0, 0, 0, 0.5, 4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::sign, {x}), f64({5}, {-1, -1, 0, 1, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::identity, {x}), x));
  const Array y = f64({4}, {0.25, 1, 4, 16});
  EXPECT_TRUE(arrays_near(eval_output(Op::sqrt, {y}), f64({4}, {0.5, 1, 2, 4})));
  EXPECT_TRUE(arrays_near(eval_output(Op::rsqrt, {y}), f64({4}, {2, 1, 0.5, 0.25})));
  EXPECT_TRUE(arrays_near(eval_output(Op::reciprocal, {y}), f64({4}, {4, 1, 0.25, 0.0625})));
}

TEST(UnaryOps, IntegerInputsKeepTheirDtype) {
  const Array x = testing::i32({3}, {-3, 0, 7});
  EXPECT_TRUE(arrays_near(eval_output(Op::neg, {x}), testing::i32({3}, {3, 0, -7})));
  EXPECT_TRUE(arrays_near(eval_output(Op::relu, {x}), testing::i32({3}, {0, 0, 7})));
  EXPECT_NE(eval_error(Op::exp, {x}), "");  // exp needs a floating input
}

TEST(UnaryOps, TranscendentalKnownValues) {
  const double e = std::numbers::e;
  EXPECT_TRUE(arrays_near(eval_output(Op::exp, {f64({3}, {0, 1, -1})}), f64({3}, {1, e, 1 / e})));
  EXPECT_TRUE(arrays_near(eval_output(Op::log, {f64({3}, {1, e, 0})}), f64({3}, {0, 1, -kInf})));
  EXPECT_TRUE(arrays_near(eval_output(Op::sin, {f64({2}, {0, std::numbers::pi / 2})}),
                          f64({2}, {0, 1})));
  EXPECT_TRUE(arrays_near(eval_output(Op::cos, {f64({2}, {0, std::numbers::pi})}),
                          f64({2}, {1, -1})));
  // tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6
  EXPECT_TRUE(arrays_near(eval_output(Op::tanh, {f64({1}, {std::log(2.0)})}), f64({1}, {0.6})));
  // sigmoid(ln 3) = 3 / 4
  EXPECT_TRUE(arrays_near(eval_output(Op::sigmoid, {f64({2}, {std::log(3.0), 0})}),
                          f64({2}, {0.75, 0.5})));
  // erf(0.5) and erf(1) from tables (Abramowitz & Stegun 7.1).
  EXPECT_TRUE(arrays_near(eval_output(Op::erf, {f64({3}, {0, 0.5, 1})}),
                          f64({3}, {0, 0.5204998778130465, 0.8427007929497149}), 1e-15));
}

TEST(UnaryOps, GeluBothForms) {
  // Exact: x * Phi(x); Phi(1) = 0.8413447460685429, Phi(-1) = 1 - Phi(1).
  const Array x = f64({3}, {-1, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::gelu, {x}),
                          f64({3}, {-0.15865525393145707, 0, 0.8413447460685429}), 1e-15));
  // Tanh form at x = 1: 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768.
  EXPECT_TRUE(arrays_near(eval_output(Op::gelu, {x}, {{"approximate", "tanh"}}),
                          f64({3}, {-0.15880800939172324, 0, 0.8411919906082768}), 1e-15));
  EXPECT_NE(eval_error(Op::gelu, {x}, {{"approximate", "fast"}}), "");
}

TEST(UnaryOps, RoundingFamilies) {
  const Array x = f64({6}, {-1.5, -0.5, 0.5, 1.5, 2.5, 2.7});
  EXPECT_TRUE(arrays_near(eval_output(Op::floor, {x}), f64({6}, {-2, -1, 0, 1, 2, 2})));
  EXPECT_TRUE(arrays_near(eval_output(Op::ceil, {x}), f64({6}, {-1, -0, 1, 2, 3, 3})));
  // Half to even, as ONNX Round and NumPy.
  EXPECT_TRUE(arrays_near(eval_output(Op::round, {x}), f64({6}, {-2, -0, 0, 2, 2, 3})));
}

TEST(UnaryOps, NotOnBool) {
  const Array b = testing::boolean({3}, {1, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::logical_not, {b}), testing::boolean({3}, {0, 1, 0})));
  EXPECT_NE(eval_error(Op::logical_not, {f64({1}, {1})}), "");
}

TEST(UnaryOps, CastRoundsTruncatesAndSaturates) {
  const Array x = f64({6}, {-2.7, -0.5, 0, 1.9, 3e10, kNaN});
  EXPECT_TRUE(arrays_near(eval_output(Op::cast, {x}, {{"to", DType::i32}}),
                          testing::i32({6}, {-2, 0, 0, 1, 2147483647, 0})));
  EXPECT_TRUE(arrays_near(eval_output(Op::cast, {x}, {{"to", DType::boolean}}),
                          testing::boolean({6}, {1, 1, 0, 1, 1, 1})));
  // f16 has 11 significand bits: 1 + 2^-11 rounds to 1 (tie to even), 1 + 3 * 2^-11 to
  // 1 + 2^-9; 65520 overflows to infinity.
  const Array h = f64({3}, {1 + std::ldexp(1.0, -11), 1 + 3 * std::ldexp(1.0, -11), 65520});
  EXPECT_TRUE(arrays_near(eval_output(Op::cast, {h}, {{"to", DType::f16}}),
                          Array(DType::f16, {3}, {1, 1 + std::ldexp(1.0, -9), kInf}), 0, 0));
  // bf16 keeps 8 significand bits: 1 + 2^-8 ties to 1, 1 + 3 * 2^-8 to 1 + 2^-6.
  const Array b = f64({2}, {1 + std::ldexp(1.0, -8), 1 + 3 * std::ldexp(1.0, -8)});
  EXPECT_TRUE(arrays_near(eval_output(Op::cast, {b}, {{"to", DType::bf16}}),
                          Array(DType::bf16, {2}, {1, 1 + std::ldexp(1.0, -6)}), 0, 0));
  // f32 results are rounded to f32: representable as float, and close to 1/3.
  const double third = eval_output(Op::exp, {f32({1}, {-std::log(3.0)})})[0];
  EXPECT_EQ(third, static_cast<double>(static_cast<float>(third)));
  EXPECT_NEAR(third, 1.0 / 3.0, 1e-7);
}

TEST(UnaryOps, NaNPropagates) {
  const Array x = f64({1}, {kNaN});
  for (Op op : {Op::neg, Op::abs, Op::exp, Op::tanh, Op::sign, Op::erf, Op::gelu}) {
    EXPECT_TRUE(std::isnan(eval_output(op, {x})[0])) << op_def(op).name;
  }
}

}  // namespace
}  // namespace kiln
