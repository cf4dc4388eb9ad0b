// Contraction ops (matmul, conv and its gradients, spmm) against hand-computed values, NumPy
// results and identities (transposes, identity matrices, adjoint identities of the gradients).
#include <gmock/gmock.h>

#include <cstdint>
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
using testing::i32;
using testing::i64;

// An f64 array of `shape` with uniform values in [-1, 1).
Array random_array(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (double& v : values) v = dist(rng);
  return f64(shape, std::move(values));
}

double dot(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape, b.shape);
  double sum = 0;
  for (int64_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// The transpose of a 2-D array.
Array transposed(const Array& m) {
  const int64_t rows = m.shape.dim(0);
  const int64_t cols = m.shape.dim(1);
  Array t(m.dtype, Shape{cols, rows});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = m[i * cols + j];
  }
  return t;
}

// The 2-D matrix at leading index `index` of a rank-3 array.
Array matrix_at(const Array& a, int64_t index) {
  const int64_t rows = a.shape.dim(1);
  const int64_t cols = a.shape.dim(2);
  const auto begin = a.data.begin() + index * rows * cols;
  return f64({rows, cols}, std::vector<double>(begin, begin + rows * cols));
}

// Type inference only, for shapes too large to allocate.
std::string infer_error(Op op, std::vector<TensorType> inputs, const Attrs& attrs) {
  const OpDef& def = op_def(op);
  Expected<Attrs> canonical = canonicalize_attrs(def, attrs);
  if (!canonical) return canonical.status().message();
  Expected<std::vector<TensorType>> types = infer_types(def, inputs, *canonical);
  return types ? std::string() : types.status().message();
}

// ----------------------------------------------------------------------------------- matmul

TEST(MatmulOp, TwoByThreeTimesThreeByTwoByHand) {
  const Array a = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  const Array b = f64({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {a, b}), f64({2, 2}, {58, 64, 139, 154})));
}

TEST(MatmulOp, DegenerateShapes) {
  // k = 1: an outer product.
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {f64({3, 1}, {1, 2, 3}), f64({1, 2}, {4, 5})}),
                          f64({3, 2}, {4, 5, 8, 10, 12, 15})));
  // m = n = 1: an inner product.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::matmul, {f64({1, 3}, {1, 2, 3}), f64({3, 1}, {4, 5, 6})}), f64({1, 1}, {32})));
  // k = 0: an empty sum is zero.
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {f64({2, 0}, {}), f64({0, 3}, {})}),
                          f64({2, 3}, {0, 0, 0, 0, 0, 0})));
}

TEST(MatmulOp, IdentityMatrixLeavesTheOtherOperandUnchanged) {
  std::mt19937 rng(1);
  const Array eye3 = f64({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  const Array a = random_array({3, 5}, rng);
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {eye3, a}), a));
  const Array b = random_array({7, 3}, rng);
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {b, eye3}), b));
}

TEST(MatmulOp, TransposeFlagsGiveTheTransposedProduct) {
  std::mt19937 rng(2);
  const Array a = random_array({3, 5}, rng);
  const Array b = random_array({5, 4}, rng);
  const Array ab = eval_output(Op::matmul, {a, b});
  // (AB)^T = B^T A^T, with both transposes done by the flags.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::matmul, {b, a}, {{"transpose_a", true}, {"transpose_b", true}}),
      transposed(ab)));
  // Each flag alone undoes a transpose of the stored operand.
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {transposed(a), b}, {{"transpose_a", true}}),
                          ab));
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {a, transposed(b)}, {{"transpose_b", true}}),
                          ab));
}

TEST(MatmulOp, TransposeFlagsByHand) {
  const Array a = f64({2, 2}, {1, 2, 3, 4});
  const Array b = f64({2, 2}, {5, 6, 7, 8});
  // A^T B = [[1,3],[2,4]] [[5,6],[7,8]].
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {a, b}, {{"transpose_a", true}}),
                          f64({2, 2}, {26, 30, 38, 44})));
  // A B^T = [[1,2],[3,4]] [[5,7],[6,8]].
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {a, b}, {{"transpose_b", true}}),
                          f64({2, 2}, {17, 23, 39, 53})));
}

TEST(MatmulOp, BatchDimsBroadcastLikeNumPy) {
  std::mt19937 rng(3);
  const Array a = random_array({2, 1, 3, 2}, rng);  // batch [2, 1]
  const Array b = random_array({4, 2, 5}, rng);     // batch [4]
  const Array out = eval_output(Op::matmul, {a, b});
  ASSERT_EQ(out.shape, (Shape{2, 4, 3, 5}));
  const Array a3 = f64({2, 3, 2}, a.data);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      const Array expected = eval_output(Op::matmul, {matrix_at(a3, i), matrix_at(b, j)});
      const Array out3 = f64({8, 3, 5}, out.data);
      EXPECT_TRUE(arrays_near(matrix_at(out3, i * 4 + j), expected)) << i << "," << j;
    }
  }
}

TEST(MatmulOp, RankTwoOperandBroadcastsAgainstABatchByHand) {
  const Array a = f64({2, 2}, {1, 0, 0, 2});                  // diag(1, 2)
  const Array b = f64({2, 2, 1}, {3, 4, 5, 6});               // two column vectors
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {a, b}), f64({2, 2, 1}, {3, 8, 5, 12})));
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {b, f64({1, 1}, {10})}),
                          f64({2, 2, 1}, {30, 40, 50, 60})));
}

TEST(MatmulOp, IntegerDtypesAccumulateExactly) {
  EXPECT_TRUE(arrays_near(eval_output(Op::matmul, {i32({1, 2}, {3, -4}), i32({2, 1}, {5, 6})}),
                          i32({1, 1}, {-9})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::matmul, {i64({2, 1}, {1000000, 2}), i64({1, 1}, {3000000})}),
      i64({2, 1}, {3000000000000, 6000000})));
}

TEST(MatmulOp, FloatResultIsRoundedToTheOutputDtype) {
  const Array out = eval_output(Op::matmul, {f32({1, 1}, {1.0 / 3.0}), f32({1, 1}, {3})});
  EXPECT_EQ(out.dtype, DType::f32);
  EXPECT_EQ(out[0], static_cast<double>(static_cast<float>(out[0])));
}

TEST(MatmulOp, MismatchedContractedDimShowsBothShapes) {
  const std::string error =
      eval_error(Op::matmul, {f64({2, 3}, {1, 2, 3, 4, 5, 6}), f64({2, 2}, {1, 2, 3, 4})});
  EXPECT_THAT(error, HasSubstr("f64[2,3]"));
  EXPECT_THAT(error, HasSubstr("f64[2,2]"));
  // With transpose_a the same operands do contract.
  EXPECT_EQ(eval_error(Op::matmul, {f64({3, 2}, {1, 2, 3, 4, 5, 6}), f64({3, 1}, {1, 2, 3})},
                       {{"transpose_a", true}}),
            "");
  EXPECT_THAT(eval_error(Op::matmul, {f64({3, 2}, {1, 2, 3, 4, 5, 6}), f64({3, 1}, {1, 2, 3})},
                         {{"transpose_b", true}}),
              HasSubstr("transpose_b=true"));
}

TEST(MatmulOp, RejectsBadOperands) {
  const Array m = f64({2, 2}, {1, 2, 3, 4});
  EXPECT_THAT(eval_error(Op::matmul, {f64({2}, {1, 2}), m}), HasSubstr("input 'a'"));
  EXPECT_THAT(eval_error(Op::matmul, {m, f64({2}, {1, 2})}), HasSubstr("input 'b'"));
  EXPECT_THAT(eval_error(Op::matmul, {m, f32({2, 2}, {1, 2, 3, 4})}), HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::matmul, {testing::boolean({1, 1}, {1}), testing::boolean({1, 1}, {1})}),
              HasSubstr("numeric"));
  EXPECT_THAT(eval_error(Op::matmul, {Array(DType::f64, {2, 2, 2}), Array(DType::f64, {3, 2, 2})}),
              HasSubstr("cannot be broadcast"));
}

// ------------------------------------------------------------------------------------- conv

TEST(ConvOp, OneDimensionalIsCrossCorrelationWithoutKernelFlip) {
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  const Array w = f64({1, 1, 3}, {1, 0, -1});
  // y[i] = x[i] - x[i + 2]; a flipped kernel would give +2.
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}), f64({1, 1, 3}, {-2, -2, -2})));
}

TEST(ConvOp, StridesAndPadsByHand) {
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  const Array w = f64({1, 1, 3}, {1, 0, -1});
  // Padded input [0,1,2,3,4,5,0]; windows start at 0, 2, 4.
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}, {{"strides", {2}}, {"pads", {1, 1}}}),
                          f64({1, 1, 3}, {-2, -2, 4})));
  // Begin and end pads are independent: padded [0,0,1,2,3,4,5], y[i] = p[i] - p[i + 2].
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}, {{"pads", {2, 0}}}),
                          f64({1, 1, 5}, {-1, -2, -2, -2, -2})));
  // Stride 2 over 6 elements with a 3-kernel: windows at 0 and 2, element 5 is never read.
  EXPECT_TRUE(arrays_near(
      eval_output(Op::conv, {f64({1, 1, 6}, {1, 2, 3, 4, 5, 6}), w}, {{"strides", {2}}}),
      f64({1, 1, 2}, {-2, -2})));
}

TEST(ConvOp, DilationSpacesKernelTaps) {
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  // Kernel [1, 1] with dilation 2: y[i] = x[i] + x[i + 2].
  EXPECT_TRUE(arrays_near(
      eval_output(Op::conv, {x, f64({1, 1, 2}, {1, 1})}, {{"dilations", {2}}}),
      f64({1, 1, 3}, {4, 6, 8})));
}

TEST(ConvOp, TwoDimensionalByHand) {
  const Array x = f64({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Array w = f64({1, 1, 2, 2}, {1, 2, 3, 4});
  // y00 = 1*1 + 2*2 + 4*3 + 5*4 = 37, and each step right adds 10, each step down 30.
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}), f64({1, 1, 2, 2}, {37, 47, 67, 77})));
}

TEST(ConvOp, ThreeDimensionalSumsTheWholeVolume) {
  const Array x = f64({1, 1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Array w = f64({1, 1, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}), f64({1, 1, 1, 1, 1}, {36})));
}

TEST(ConvOp, ChannelsAndBatchByHand) {
  // N = 2, C = 2, O = 2, kernel 2.
  const Array x = f64({2, 2, 3}, {1, 2, 3, 4, 5, 6, /* n=1 */ 0, 1, 0, 1, 0, 1});
  const Array w = f64({2, 2, 2}, {1, 0, 0, 1, /* o=1 */ 1, 1, -1, -1});
  // o=0: x0[i] + x1[i+1]; o=1: x0[i] + x0[i+1] - x1[i] - x1[i+1].
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}),
                          f64({2, 2, 2}, {6, 8, -6, -6, /* n=1 */ 0, 2, 0, 0})));
}

TEST(ConvOp, GroupsConvolveChannelGroupsSeparately) {
  // C = 4, groups = 2, O = 2: output 0 sees channels 0-1, output 1 sees channels 2-3.
  const Array x = f64({1, 4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Array w = f64({2, 2, 1}, {1, 10, 100, 1000});
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}, {{"groups", 2}}),
                          f64({1, 2, 2}, {31, 42, 7500, 8600})));
  // Depthwise: groups = C = O.
  const Array depthwise = eval_output(Op::conv, {x, f64({4, 1, 1}, {1, 2, 3, 4})}, {{"groups", 4}});
  EXPECT_TRUE(arrays_near(depthwise, f64({1, 4, 2}, {1, 2, 6, 8, 15, 18, 28, 32})));
}

TEST(ConvOp, AllAttributesTogetherMatchNumPy) {
  // x [1,4,5,4], w [2,2,2,3], groups 2, strides [2,1], pads [1,0,0,2], dilations [1,2]; the
  // expected output was computed separately with NumPy (np.pad + strided slices + einsum).
  const Array x = f64(
      {1, 4, 5, 4},
      {3,  1,  1,  3, 1, 2, 2, -2, -3, -1, -2, 3,  3,  -3, 0,  2,  -3, 2,  -3, 0,
       2,  -1, -1, -2, 2, -2, 3, 0, 0,  0,  1,  0,  0,  3,  2,  2,  1,  1,  -1, 3,
       0,  -2, 2,  -2, 3, 1, -3, -3, 0,  -3, -3, 0,  3,  0,  2,  3,  2,  1,  0,  0,
       -2, 0,  -1, -2, 3, -3, -3, -2, 3,  1,  3,  -2, 2,  -1, 0,  -3, 1,  2,  1,  -2});
  const Array w = f64({2, 2, 2, 3}, {0, -1, 2, 2, -2, 0, 2, 2, 1, 1, -2, 1,
                                     0, -2, -1, 0, 1, 0, 1, 2, 1, -1, 1, 0});
  const Attrs attrs = {
      {"strides", {2, 1}}, {"pads", {1, 0, 0, 2}}, {"dilations", {1, 2}}, {"groups", 2}};
  EXPECT_TRUE(arrays_near(eval_output(Op::conv, {x, w}, attrs),
                          f64({1, 2, 3, 2}, {8, -1, 4, -10, 7, 7, 3, -4, 0, -4, -2, -17})));
}

TEST(ConvOp, F32ResultIsF32) {
  const Array y = eval_output(Op::conv, {f32({1, 1, 2}, {1.0 / 3.0, 1}), f32({1, 1, 1}, {3})});
  EXPECT_EQ(y.dtype, DType::f32);
  EXPECT_EQ(y[0], static_cast<double>(static_cast<float>(y[0])));
}

TEST(ConvOp, RejectsBadInputs) {
  const Array x = f64({1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Array w = f64({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(eval_error(Op::conv, {x, w}), "");
  EXPECT_THAT(eval_error(Op::conv, {i32({1, 1, 2}, {1, 2}), i32({1, 1, 1}, {1})}),
              HasSubstr("floating"));
  EXPECT_THAT(eval_error(Op::conv, {x, f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}),
              HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::conv, {f64({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), w}),
              HasSubstr("rank 3, 4 or 5"));
  EXPECT_THAT(eval_error(Op::conv, {Array(DType::f64, {1, 1, 1, 1, 1, 1}),
                                    Array(DType::f64, {1, 1, 1, 1, 1, 1})}),
              HasSubstr("rank 3, 4 or 5"));
  EXPECT_THAT(eval_error(Op::conv, {x, f64({2, 2, 2, 1}, {1, 2, 3, 4, 5, 6, 7, 8})}),
              HasSubstr("same rank"));
  // w.shape[1] must be C / groups.
  EXPECT_THAT(eval_error(Op::conv, {x, f64({2, 1, 2}, {1, 2, 3, 4})}),
              HasSubstr("C / groups = 2 / 1"));
  EXPECT_THAT(eval_error(Op::conv, {x, f64({3, 1, 1}, {1, 2, 3})}, {{"groups", 2}}),
              HasSubstr("must divide"));
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"groups", 0}}), HasSubstr("'groups'"));
  EXPECT_THAT(eval_error(Op::conv, {x, f64({2, 2, 0}, {})}), HasSubstr("empty kernel"));
}

TEST(ConvOp, RejectsBadAttributes) {
  const Array x = f64({1, 1, 4}, {1, 2, 3, 4});
  const Array w = f64({1, 1, 2}, {1, 1});
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"strides", {0}}}), HasSubstr("'strides'"));
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"strides", {1, 1}}}), HasSubstr("1 entries"));
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"dilations", {0}}}), HasSubstr("'dilations'"));
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"pads", {1}}}), HasSubstr("2 entries"));
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"pads", {-1, 0}}}), HasSubstr("'pads'"));
  // Dilated kernel extent 2 * (2 - 1) + 1 = 3 fits; 4 * 1 + 1 = 5 does not.
  EXPECT_EQ(eval_error(Op::conv, {x, w}, {{"dilations", {2}}}), "");
  EXPECT_THAT(eval_error(Op::conv, {x, w}, {{"dilations", {4}}}), HasSubstr("output would be empty"));
  EXPECT_EQ(eval_error(Op::conv, {x, w}, {{"dilations", {4}}, {"pads", {0, 1}}}), "");
}

TEST(ConvOp, HugeAttributesAreErrorsNotOverflow) {
  const TensorType x{DType::f32, Shape{1, 1, int64_t{1} << 40}};
  const TensorType w{DType::f32, Shape{1, 1, int64_t{1} << 20}};
  const int64_t big = int64_t{1} << 48;
  EXPECT_THAT(infer_error(Op::conv, {x, w}, {{"dilations", {big}}}),
              HasSubstr("output would be empty"));
  EXPECT_THAT(infer_error(Op::conv, {x, w}, {{"pads", {big, big}}}), HasSubstr("2^48"));
  EXPECT_THAT(infer_error(Op::conv, {x, w}, {{"pads", {int64_t{1} << 62, 0}}}),
              HasSubstr("'pads'"));
  EXPECT_THAT(infer_error(Op::conv, {x, w}, {{"strides", {INT64_MAX}}}), HasSubstr("'strides'"));
}

// ------------------------------------------------------------------------------- conv grads

struct ConvConfig {
  Shape x;
  Shape w;
  Attrs attrs;
};

// <conv(x, w), g> == <x, conv_grad_data(g, w)> == <w, conv_grad_weight(x, g)>.
TEST(ConvGradOps, AdjointIdentitiesHoldOverManyConfigurations) {
  const std::vector<ConvConfig> configs = {
      {{1, 1, 5}, {1, 1, 3}, {}},
      {{2, 3, 7}, {4, 3, 2}, {{"strides", {2}}}},
      {{1, 2, 8}, {3, 2, 3}, {{"strides", {3}}, {"pads", {2, 1}}}},
      {{2, 4, 9}, {6, 2, 3}, {{"dilations", {2}}, {"groups", 2}, {"pads", {0, 3}}}},
      {{1, 3, 1}, {3, 1, 1}, {{"groups", 3}}},
      {{1, 1, 2}, {1, 1, 3}, {{"pads", {1, 1}}, {"strides", {2}}}},
      {{1, 1, 5, 5}, {1, 1, 3, 3}, {}},
      {{2, 2, 7, 5}, {3, 2, 3, 2}, {{"strides", {2, 1}}, {"pads", {1, 0, 1, 2}}}},
      {{1, 4, 6, 7}, {4, 2, 2, 3},
       {{"strides", {1, 2}}, {"dilations", {2, 1}}, {"groups", 2}, {"pads", {0, 1, 1, 0}}}},
      {{1, 3, 5, 3}, {3, 1, 3, 1}, {{"groups", 3}, {"strides", {2, 3}}, {"pads", {1, 1, 0, 0}}}},
      {{1, 2, 1, 9}, {2, 2, 1, 3}, {{"dilations", {1, 3}}, {"strides", {1, 2}}}},
      {{1, 2, 3, 4, 5}, {2, 1, 2, 2, 3},
       {{"groups", 2}, {"strides", {1, 2, 2}}, {"pads", {0, 1, 1, 1, 0, 0}}}},
  };
  std::mt19937 rng(4);
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(i);
    const ConvConfig& c = configs[i];
    const Array x = random_array(c.x, rng);
    const Array w = random_array(c.w, rng);
    const Array y = eval_output(Op::conv, {x, w}, c.attrs);
    const Array g = random_array(y.shape, rng);
    Attrs data_attrs = c.attrs;
    data_attrs.set("input_shape", c.x.dims());
    Attrs weight_attrs = c.attrs;
    weight_attrs.set("weight_shape", c.w.dims());
    const Array dx = eval_output(Op::conv_grad_data, {g, w}, data_attrs);
    const Array dw = eval_output(Op::conv_grad_weight, {x, g}, weight_attrs);
    ASSERT_EQ(dx.shape, c.x);
    ASSERT_EQ(dw.shape, c.w);
    const double forward = dot(y, g);
    EXPECT_NEAR(dot(x, dx), forward, 1e-12 * (1 + std::fabs(forward)));
    EXPECT_NEAR(dot(w, dw), forward, 1e-12 * (1 + std::fabs(forward)));
  }
}

TEST(ConvGradOps, GradDataByHand) {
  // dx[j] = sum_i g[i] w[j - i]: [1,0,-1] + 2 [0,1,0,-1] + 3 [0,0,1,0,-1] (shifted).
  const Array g = f64({1, 1, 3}, {1, 2, 3});
  const Array w = f64({1, 1, 3}, {1, 0, -1});
  EXPECT_TRUE(arrays_near(eval_output(Op::conv_grad_data, {g, w}, {{"input_shape", {1, 1, 5}}}),
                          f64({1, 1, 5}, {1, 2, 2, -2, -3})));
}

TEST(ConvGradOps, GradDataLeavesUnreadInputsAtZero) {
  // Input lengths 5 and 6 both give 2 outputs with kernel 3, stride 2; element 5 is unread.
  const Array g = f64({1, 1, 2}, {1, 10});
  const Array w = f64({1, 1, 3}, {1, 2, 3});
  EXPECT_TRUE(arrays_near(
      eval_output(Op::conv_grad_data, {g, w}, {{"strides", {2}}, {"input_shape", {1, 1, 6}}}),
      f64({1, 1, 6}, {1, 2, 13, 20, 30, 0})));
  EXPECT_TRUE(arrays_near(
      eval_output(Op::conv_grad_data, {g, w}, {{"strides", {2}}, {"input_shape", {1, 1, 5}}}),
      f64({1, 1, 5}, {1, 2, 13, 20, 30})));
}

TEST(ConvGradOps, GradWeightByHand) {
  // dw[k] = sum_i g[i] x[i + k].
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  const Array g = f64({1, 1, 3}, {1, 2, 3});
  EXPECT_TRUE(arrays_near(eval_output(Op::conv_grad_weight, {x, g}, {{"weight_shape", {1, 1, 3}}}),
                          f64({1, 1, 3}, {14, 20, 26})));
  // With pads [1, 0] the padded input p is [0,1,2,3,4,5], the output has 4 elements and
  // dw[k] = p[k] + p[k + 3].
  const Array g4 = f64({1, 1, 4}, {1, 0, 0, 1});
  EXPECT_TRUE(arrays_near(eval_output(Op::conv_grad_weight, {x, g4},
                                      {{"weight_shape", {1, 1, 3}}, {"pads", {1, 0}}}),
                          f64({1, 1, 3}, {3, 5, 7})));
}

TEST(ConvGradOps, RejectInconsistentShapes) {
  const Array g = f64({1, 1, 3}, {1, 2, 3});
  const Array w = f64({1, 1, 3}, {1, 0, -1});
  const Array x = f64({1, 1, 5}, {1, 2, 3, 4, 5});
  EXPECT_THAT(eval_error(Op::conv_grad_data, {g, w}), HasSubstr("input_shape"));
  EXPECT_THAT(eval_error(Op::conv_grad_data, {g, w}, {{"input_shape", {1, 1, 6}}}),
              HasSubstr("grad_out"));
  EXPECT_THAT(eval_error(Op::conv_grad_data, {g, w}, {{"input_shape", {1, 1, -5}}}),
              HasSubstr("attribute 'input_shape'"));
  EXPECT_THAT(eval_error(Op::conv_grad_data, {g, w}, {{"input_shape", {1, 5}}}),
              HasSubstr("attribute 'input_shape'"));
  EXPECT_THAT(eval_error(Op::conv_grad_data, {g, w}, {{"input_shape", {1, 2, 5}}}),
              HasSubstr("C / groups"));
  EXPECT_THAT(eval_error(Op::conv_grad_data, {f32({1, 1, 3}, {1, 2, 3}), w},
                         {{"input_shape", {1, 1, 5}}}),
              HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::conv_grad_weight, {x, g}), HasSubstr("weight_shape"));
  EXPECT_THAT(eval_error(Op::conv_grad_weight, {x, g}, {{"weight_shape", {1, 1, 2}}}),
              HasSubstr("grad_out"));
  EXPECT_THAT(eval_error(Op::conv_grad_weight, {x, g}, {{"weight_shape", {2, 1, 3}}}),
              HasSubstr("grad_out"));
  EXPECT_THAT(eval_error(Op::conv_grad_weight, {x, g}, {{"weight_shape", {1, 1, 3, 1}}}),
              HasSubstr("same rank"));
  EXPECT_THAT(eval_error(Op::conv_grad_weight, {x, g}, {{"weight_shape", {1, 1, 3}}, {"strides", {0}}}),
              HasSubstr("'strides'"));
}

// ------------------------------------------------------------------------------------- spmm

TEST(SpmmOp, MatchesTheDenseProductByHand) {
  // A = [[1, 0, 2], [0, 0, 0], [0, 3, 0]] in CSR; D = [[1, 2], [3, 4], [5, 6]].
  const Array row_ptr = i64({4}, {0, 2, 2, 3});
  const Array cols = i64({3}, {0, 2, 1});
  const Array values = f64({3}, {1, 2, 3});
  const Array dense = f64({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::spmm, {row_ptr, cols, values, dense}),
                          f64({3, 2}, {11, 14, 0, 0, 9, 12})));
}

TEST(SpmmOp, RectangularWithI32IndicesAndF32Values) {
  // A = [[0, 0, 0, 4], [-1, 0, 0.5, 0]] (M = 2, K = 4); D = [[1], [2], [3], [4]].
  const Array out = eval_output(Op::spmm, {i32({3}, {0, 1, 3}), i32({3}, {3, 0, 2}),
                                           f32({3}, {4, -1, 0.5}), f32({4, 1}, {1, 2, 3, 4})});
  EXPECT_TRUE(arrays_near(out, f32({2, 1}, {16, 0.5})));
}

TEST(SpmmOp, DuplicateColumnEntriesAdd) {
  EXPECT_TRUE(arrays_near(eval_output(Op::spmm, {i64({2}, {0, 2}), i64({2}, {1, 1}),
                                                 f64({2}, {1, 2}), f64({2, 1}, {5, 7})}),
                          f64({1, 1}, {21})));
}

TEST(SpmmOp, NoNonzerosGivesZeros) {
  EXPECT_TRUE(arrays_near(eval_output(Op::spmm, {i64({3}, {0, 0, 0}), i64({0}, {}), f64({0}, {}),
                                                 f64({2, 3}, {1, 2, 3, 4, 5, 6})}),
                          f64({2, 3}, {0, 0, 0, 0, 0, 0})));
}

TEST(SpmmOp, TransposedMatchesTheDenseProductByHand) {
  // A as in MatchesTheDenseProductByHand: A^T = [[1, 0, 0], [0, 0, 3], [2, 0, 0]].
  const Array row_ptr = i64({4}, {0, 2, 2, 3});
  const Array cols = i64({3}, {0, 2, 1});
  const Array values = f64({3}, {1, 2, 3});
  const Array dense = f64({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(arrays_near(eval_output(Op::spmm, {row_ptr, cols, values, dense},
                                      {{"transpose", true}, {"num_cols", 3}}),
                          f64({3, 2}, {1, 2, 15, 18, 2, 4})));
}

TEST(SpmmOp, TransposedRectangular) {
  // A = [[0, 0, 0, 4], [-1, 0, 0.5, 0]] (M = 2, K = 4); A^T [4, 2] times D = [[1], [2]].
  const Array out = eval_output(Op::spmm,
                                {i32({3}, {0, 1, 3}), i32({3}, {3, 0, 2}), f64({3}, {4, -1, 0.5}),
                                 f64({2, 1}, {1, 2})},
                                {{"transpose", true}, {"num_cols", 4}});
  EXPECT_TRUE(arrays_near(out, f64({4, 1}, {-2, 0, 1, 4})));
}

TEST(SpmmOp, NumColsMustDescribeTheSparseMatrix) {
  const Array row_ptr = i64({3}, {0, 1, 2});
  const Array cols = i64({2}, {0, 2});
  const Array values = f64({2}, {1, 2});
  const Array dense = f64({3, 1}, {1, 2, 3});
  EXPECT_EQ(eval_error(Op::spmm, {row_ptr, cols, values, dense}, {{"num_cols", 3}}), "");
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, dense}, {{"num_cols", 5}}),
              HasSubstr("attribute 'num_cols' is 5 but input 'dense' f64[3,1] has 3 rows"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, dense}, {{"num_cols", -2}}),
              HasSubstr("attribute 'num_cols' must be >= 0 or -1, got -2"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, f64({2, 1}, {1, 2})},
                         {{"transpose", true}}),
              HasSubstr("attribute 'num_cols' must be >= 0 with transpose, got -1"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, dense},
                         {{"transpose", true}, {"num_cols", 3}}),
              HasSubstr("input 'dense' f64[3,1] must have M = 2 rows"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, f64({2, 1}, {1, 2})},
                         {{"transpose", true}, {"num_cols", 2}}),
              HasSubstr("outside [0, 2) (attribute 'num_cols')"));
}

TEST(SpmmOp, RejectsMalformedCsrData) {
  const Array values = f64({2}, {1, 2});
  const Array dense = f64({3, 1}, {1, 2, 3});
  const Array cols = i64({2}, {0, 2});
  EXPECT_THAT(eval_error(Op::spmm, {i64({3}, {1, 1, 2}), cols, values, dense}),
              HasSubstr("start at 0"));
  EXPECT_THAT(eval_error(Op::spmm, {i64({4}, {0, 2, 1, 2}), cols, values, dense}),
              HasSubstr("non-decreasing"));
  EXPECT_THAT(eval_error(Op::spmm, {i64({3}, {0, 1, 3}), cols, values, dense}),
              HasSubstr("end at nnz = 2"));
  EXPECT_THAT(eval_error(Op::spmm, {i64({3}, {0, 1, 2}), i64({2}, {0, 3}), values, dense}),
              HasSubstr("outside [0, 3)"));
  EXPECT_THAT(eval_error(Op::spmm, {i64({3}, {0, 1, 2}), i64({2}, {-1, 0}), values, dense}),
              HasSubstr("outside [0, 3)"));
}

TEST(SpmmOp, RejectsBadTypes) {
  const Array row_ptr = i64({3}, {0, 1, 2});
  const Array cols = i64({2}, {0, 2});
  const Array values = f64({2}, {1, 2});
  const Array dense = f64({3, 1}, {1, 2, 3});
  EXPECT_EQ(eval_error(Op::spmm, {row_ptr, cols, values, dense}), "");
  EXPECT_THAT(eval_error(Op::spmm, {f64({3}, {0, 1, 2}), cols, values, dense}),
              HasSubstr("input 'row_ptr'"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, f64({2}, {0, 2}), values, dense}),
              HasSubstr("input 'col_indices'"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, i64({2}, {1, 2}), dense}),
              HasSubstr("input 'values'"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, f32({3, 1}, {1, 2, 3})}),
              HasSubstr("same dtype"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, cols, values, f64({3}, {1, 2, 3})}),
              HasSubstr("input 'dense'"));
  EXPECT_THAT(eval_error(Op::spmm, {row_ptr, i64({3}, {0, 1, 2}), values, dense}),
              HasSubstr("same length"));
  EXPECT_THAT(eval_error(Op::spmm, {i64({0}, {}), i64({0}, {}), f64({0}, {}), dense}),
              HasSubstr("M + 1"));
}

}  // namespace
}  // namespace kiln
