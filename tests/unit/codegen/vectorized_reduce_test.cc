// Vectorized reductions (loop/schedule.h: `vectorize` of a reduction variable) compiled: the
// emitter keeps partial results in vector lanes and combines them at the end, so a floating
// sum or product is reassociated. Row i reduces its first i elements, so the extents cover
// the empty range, fewer terms than lanes, exactly one block of lanes and blocks with a tail.
// Integer sums and every minimum and maximum must be exact (NaN included, in a lane or in
// the tail); floating sums and products must be within the rounding error any order of
// summation can make, n * eps * sum |term|.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "loop/stmt.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;

constexpr int64_t kRows = 40, kCols = 48;

double epsilon(DType dtype) {
  switch (dtype) {
    case DType::f64: return std::numeric_limits<double>::epsilon();
    case DType::f32: return std::numeric_limits<float>::epsilon();
    default: return 1.0 / 1024;  // f16's
  }
}

// out_op[i] = vectorized op(k, 0, i, x[i, k]) for each op.
Kernel row_reductions(DType dtype, const std::vector<ReduceOp>& ops) {
  const Buffer x = Buffer::param("x", dtype, {kRows, kCols});
  std::vector<Buffer> params = {x};
  std::vector<Stmt> stores;
  const Expr i = var("i");
  for (size_t o = 0; o < ops.size(); ++o) {
    params.push_back(Buffer::param("out" + std::to_string(o), dtype, {kRows}));
    stores.push_back(store(params.back(), i,
                           reduce(ops[o], "k", 0, i, load(x, i * kCols + var("k")),
                                  /*vectorized=*/true)));
  }
  return Kernel{"rows", params, for_loop("i", 0, kRows, block(std::move(stores)))};
}

std::vector<std::vector<double>> run(const Kernel& kernel, std::vector<double> x) {
  testing::TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  Expected<CompiledKernels> compiled = compile_kernels({&kernel, 1}, options);
  EXPECT_TRUE(compiled.has_value()) << compiled.status().message();
  if (!compiled) return {};
  std::vector<std::vector<double>> args = testing::random_args(kernel, 7);
  args[0] = std::move(x);
  return testing::run_compiled(compiled->function(0), kernel, args);
}

TEST(VectorizedReduce, FloatSumsAreWithinReassociationErrorAndExtremaExact) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::max, ReduceOp::min,
                                       ReduceOp::prod};
    std::vector<double> x(static_cast<size_t>(kRows * kCols));
    for (size_t n = 0; n < x.size(); ++n) {
      // Near 1, so that products stay in range; signed, so that sums cancel.
      x[n] = round_to_dtype(std::sin(static_cast<double>(n) * 0.7) * 0.2 +
                                (n % 3 == 0 ? -1.0 : 1.0),
                            dtype);
    }
    x[20 * kCols + 5] = std::nan("");   // inside a block of lanes
    x[35 * kCols + 33] = std::nan("");  // in the tail: 35 = 2 * 16 + 3
    const std::vector<std::vector<double>> out = run(row_reductions(dtype, ops), x);
    ASSERT_EQ(out.size(), 5u);
    for (int64_t i = 0; i < kRows; ++i) {
      SCOPED_TRACE("row " + std::to_string(i));
      double sum = 0, magnitude = 0, product = 1;
      double largest = -std::numeric_limits<double>::infinity();
      double smallest = std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t k = 0; k < i; ++k) {
        const double v = x[static_cast<size_t>(i * kCols + k)];
        nan = nan || std::isnan(v);
        sum += v;
        magnitude += std::fabs(v);
        product *= v;
        largest = std::max(largest, v);
        smallest = std::min(smallest, v);
      }
      const auto row = static_cast<size_t>(i);
      if (nan) {
        for (size_t o = 1; o <= 4; ++o) EXPECT_TRUE(std::isnan(out[o][row])) << o;
        continue;
      }
      const double bound = static_cast<double>(i + 1) * epsilon(dtype);
      EXPECT_NEAR(out[1][row], sum, bound * magnitude + 1e-300);
      EXPECT_EQ(out[2][row], largest);
      EXPECT_EQ(out[3][row], smallest);
      EXPECT_NEAR(out[4][row], product, bound * std::fabs(product) * 2 + 1e-300);
    }
  }
}

// A mask of bools beside floats: 64 lanes (loop/schedule.h: reduction_lanes), so the rows
// of up to 39 terms are all tail; 100 terms fill one block of lanes and leave a tail.
TEST(VectorizedReduce, MaskedSumsOfFloats) {
  constexpr int64_t kTerms = 100;
  const Buffer mask = Buffer::param("mask", DType::boolean, {kTerms});
  const Buffer x = Buffer::param("x", DType::f32, {kTerms});
  const Buffer out = Buffer::param("out", DType::f32, {1});
  const Expr k = var("k");
  const Kernel kernel{"masked",
                      {mask, x, out},
                      store(out, 0,
                            reduce(ReduceOp::sum, "k", 0, kTerms,
                                   select(load(mask, k), load(x, k), make_float(0)),
                                   /*vectorized=*/true))};
  testing::TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  Expected<CompiledKernels> compiled = compile_kernels({&kernel, 1}, options);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  std::vector<std::vector<double>> args = testing::random_args(kernel, 3);
  double expected = 0, magnitude = 0;
  for (int64_t n = 0; n < kTerms; ++n) {
    const auto i = static_cast<size_t>(n);
    if (args[0][i] != 0) expected += args[1][i];
    magnitude += std::fabs(args[1][i]);
  }
  const std::vector<std::vector<double>> result =
      testing::run_compiled(compiled->function(0), kernel, args);
  EXPECT_NEAR(result[2][0], expected, static_cast<double>(kTerms) * epsilon(DType::f32) * magnitude);
}

TEST(VectorizedReduce, IntegerReductionsAreExact) {
  for (DType dtype : {DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<double> x(static_cast<size_t>(kRows * kCols));
    for (size_t n = 0; n < x.size(); ++n) x[n] = static_cast<double>((n * 37) % 101) - 50;
    const std::vector<std::vector<double>> out =
        run(row_reductions(dtype, {ReduceOp::sum, ReduceOp::max, ReduceOp::min}), x);
    ASSERT_EQ(out.size(), 4u);
    for (int64_t i = 0; i < kRows; ++i) {
      double sum = 0;
      double largest = dtype == DType::i32 ? std::numeric_limits<int32_t>::min()
                                           : static_cast<double>(std::numeric_limits<int64_t>::min());
      double smallest = dtype == DType::i32 ? std::numeric_limits<int32_t>::max()
                                            : static_cast<double>(std::numeric_limits<int64_t>::max());
      for (int64_t k = 0; k < i; ++k) {
        const double v = x[static_cast<size_t>(i * kCols + k)];
        sum += v;
        largest = std::max(largest, v);
        smallest = std::min(smallest, v);
      }
      const auto row = static_cast<size_t>(i);
      EXPECT_EQ(out[1][row], sum) << "row " << i;
      EXPECT_EQ(out[2][row], largest) << "row " << i;
      EXPECT_EQ(out[3][row], smallest) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
