// The loop-IR evaluator: kernels computed by hand, the integer semantics, and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "loop/evaluator.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using ::kiln::testing::is_error_with;

Scalar eval(const Expr& e) {
  Expected<Scalar> value = evaluate(e, {});
  EXPECT_TRUE(value.has_value()) << value.status().message();
  return value.has_value() ? *value : Scalar(int64_t{-999});
}

TEST(LoopEvaluator, RunsAMatmulWithAReduction) {
  const Buffer a = Buffer::param("a", DType::f32, {2, 3});
  const Buffer b = Buffer::param("b", DType::f32, {3, 2});
  const Buffer c = Buffer::param("c", DType::f32, {2, 2});
  const Expr i = var("i"), j = var("j"), k = var("k");
  const Kernel kernel{
      "matmul",
      {a, b, c},
      for_loop("i", 0, 2, ForKind::parallel,
               for_loop("j", 0, 2,
                        store(c, {i, j}, sum("k", 0, 3, load(a, {i, k}) * load(b, {k, j})))))};
  std::vector<std::vector<double>> args = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {0, 0, 0, 0}};
  Status status = run_kernel(kernel, args);
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(args[2], (std::vector<double>{58, 64, 139, 154}));
}

TEST(LoopEvaluator, RunsLocalAllocationsAndStridedParameters) {
  // out[i] = x[i, 0] + x[i, 1] for a column-major x, through a local buffer.
  const Buffer x = Buffer::param("x", DType::f64, {3, 2}, {1, 3});
  const Buffer out = Buffer::param("out", DType::f64, {3});
  const Buffer t = Buffer::local("t", DType::f64, 2);
  const Expr i = var("i"), j = var("j");
  const Kernel kernel{
      "k",
      {x, out},
      for_loop(
          "i", 0, 3,
          allocate(t, block({for_loop("j", 0, 2, ForKind::unrolled, store(t, j, load(x, {i, j}))),
                             store(out, i, load(t, 0) + load(t, 1))})))};
  std::vector<std::vector<double>> args = {{1, 2, 3, 10, 20, 30}, {0, 0, 0}};
  ASSERT_TRUE(run_kernel(kernel, args).is_ok());
  EXPECT_EQ(args[1], (std::vector<double>{11, 22, 33}));
}

TEST(LoopEvaluator, IntegerDivisionAndModuloFloor) {
  EXPECT_EQ(eval(make_int(-7) / 2), Scalar(int64_t{-4}));
  EXPECT_EQ(eval(make_int(-7) % 2), Scalar(int64_t{1}));
  EXPECT_EQ(eval(make_int(7) / -2), Scalar(int64_t{-4}));
  EXPECT_EQ(eval(make_int(7) % -2), Scalar(int64_t{-1}));
  EXPECT_EQ(eval(make_int(-8) / 2), Scalar(int64_t{-4}));
  EXPECT_EQ(eval(make_int(5) / 0), Scalar(int64_t{0}));
  EXPECT_EQ(eval(make_int(5) % 0), Scalar(int64_t{0}));
  EXPECT_EQ(eval(make_float(-7, DType::f64) % make_float(2, DType::f64)), Scalar(1.0));
}

TEST(LoopEvaluator, RoundsToTheExpressionType) {
  // 1 + 2^-30 is 1 in f32 but not in f64.
  const double tiny = std::ldexp(1.0, -30);
  EXPECT_EQ(eval(make_float(1) + make_float(tiny)), Scalar(1.0));
  EXPECT_EQ(eval(make_float(1, DType::f64) + make_float(tiny, DType::f64)), Scalar(1.0 + tiny));
  EXPECT_EQ(eval(make_int(2147483647, DType::i32) + make_int(1, DType::i32)),
            Scalar(int64_t{-2147483648}));
  EXPECT_EQ(eval(cast(DType::i32, make_float(-2.7))), Scalar(int64_t{-2}));
  EXPECT_EQ(eval(cast(DType::i32, make_int(int64_t{1} << 40))), Scalar(int64_t{2147483647}));
  EXPECT_EQ(eval(cast(DType::boolean, make_float(0.5))), Scalar(int64_t{1}));
}

TEST(LoopEvaluator, ReductionsOverEmptyRangesGiveTheIdentity) {
  EXPECT_EQ(eval(sum("k", 0, 0, make_float(1))), Scalar(0.0));
  EXPECT_EQ(eval(reduce(ReduceOp::max, "k", 0, -3, make_float(1))), Scalar(-INFINITY));
  EXPECT_EQ(eval(reduce(ReduceOp::prod, "k", 1, 3, var("k"))), Scalar(int64_t{6}));
  EXPECT_EQ(eval(reduce(ReduceOp::min, "k", -2, 5, var("k") * var("k"))), Scalar(int64_t{0}));
}

TEST(LoopEvaluator, ReportsOutOfBoundsAccessesAndBadArguments) {
  const Buffer a = Buffer::param("a", DType::f32, {4});
  const Kernel kernel{"k", {a}, for_loop("i", 0, 5, store(a, var("i"), make_float(1)))};
  std::vector<std::vector<double>> args = {{0, 0, 0, 0}};
  EXPECT_TRUE(is_error_with(run_kernel(kernel, args),
                            {"kernel 'k'", "store to a[i] is out of bounds: index 4, size 4"}));
  std::vector<std::vector<double>> short_args = {{0, 0}};
  EXPECT_TRUE(
      is_error_with(run_kernel(kernel, short_args), {"buffer 'a' needs 4 elements, given 2"}));
  const Kernel unverified{"k", {a}, store(a, 0, make_float(1, DType::f64))};
  EXPECT_TRUE(is_error_with(run_kernel(unverified, args), {"a store of f64"}));
}

TEST(LoopEvaluator, UninitialisedLocalMemoryReadsAsNaN) {
  const Buffer out = Buffer::param("out", DType::f32, {1});
  const Buffer t = Buffer::local("t", DType::f32, 1);
  const Kernel kernel{"k", {out}, allocate(t, store(out, 0, load(t, 0)))};
  std::vector<std::vector<double>> args = {{0}};
  ASSERT_TRUE(run_kernel(kernel, args).is_ok());
  EXPECT_TRUE(std::isnan(args[0][0]));
}

}  // namespace
}  // namespace kiln::loop
