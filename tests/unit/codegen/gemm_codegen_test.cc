// Gemm statements compiled to OpenBLAS calls: hand-built kernels against the loop-IR evaluator,
// and matmul groups (lower_group, with and without epilogues) against the graph interpreter.
// BLAS sums in its own order, so results agree within the dtype's tolerance (relative 1e-4
// for f32 plus an absolute term growing with K), not bit for bit. Random inputs come from a
// printed seed; KILN_CODEGEN_SEED replays another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/cpu/kernel_compiler.h"
#include "interp/interpreter.h"
#include "ir/builder.h"
#include "loop/evaluator.h"
#include "loop/lower_group.h"
#include "loop/printer.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;
using testing::random_args;
using testing::run_compiled;
using testing::TempDir;

uint64_t seed() {
  const char* text = std::getenv("KILN_CODEGEN_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : 20240611;
}

// |actual - expected| <= rtol * |expected| + atol * depth, for every element.
::testing::AssertionResult all_close(const std::vector<double>& actual,
                                     const std::vector<double>& expected, DType dtype,
                                     int64_t depth) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << actual.size() << " vs " << expected.size();
  }
  const double tolerance = dtype == DType::f64 ? 1e-12 : 1e-4;
  const double atol = tolerance * 0.1 * static_cast<double>(std::max<int64_t>(depth, 1));
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!(std::fabs(actual[i] - expected[i]) <= tolerance * std::fabs(expected[i]) + atol)) {
      return ::testing::AssertionFailure()
             << fmt::format("element {}: {} vs {} (seed {})", i, actual[i], expected[i],
                            seed());
    }
  }
  return ::testing::AssertionSuccess();
}

Expected<CompiledKernels> compile(const std::vector<Kernel>& kernels, const TempDir& cache) {
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  return compile_kernels(kernels, options);
}

// c[b] (+)= op(a[b]) * op(b[b]) for every batch b of a parallel loop, on sub-blocks of larger
// buffers: offsets depend on the loop variable and leading dimensions exceed the widths.
Kernel batched_gemm(DType dtype, bool ta, bool tb, bool accumulate, int64_t k) {
  const int64_t batches = 3, m = 5, n = 4, pad = 2;
  const int64_t a_rows = ta ? k : m, a_cols = (ta ? m : k) + pad;
  const int64_t b_rows = tb ? n : k, b_cols = (tb ? k : n) + pad;
  Buffer a = Buffer::param("a", dtype, {batches, a_rows, a_cols});
  Buffer b = Buffer::param("b", dtype, {batches, b_rows, b_cols});
  Buffer c = Buffer::param("c", dtype, {batches, m, n + pad});
  const Expr i = var("batch");
  // Member by member: GCC 12 warns (wrongly) that a designated initializer's nested Expr may
  // be used uninitialized here.
  GemmArgs args;
  args.a = {a, i * (a_rows * a_cols) + 1, a_cols};
  args.b = {b, i * (b_rows * b_cols), b_cols};
  args.c = {c, i * (m * (n + pad)) + pad, n + pad};
  args.transpose_a = ta;
  args.transpose_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  Stmt body = gemm(std::move(args));
  return Kernel{"batched", {a, b, c}, for_loop("batch", 0, batches, ForKind::parallel, body)};
}

TEST(GemmCodegen, CompiledGemmsMatchTheEvaluator) {
  std::vector<Kernel> kernels;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int variant = 0; variant < 8; ++variant) {
      kernels.push_back(batched_gemm(dtype, variant & 1, variant & 2, variant & 4, 7));
    }
    kernels.push_back(batched_gemm(dtype, false, false, false, 0));  // stores zeros
    kernels.push_back(batched_gemm(dtype, true, false, true, 0));    // leaves c
  }
  TempDir cache;
  Expected<CompiledKernels> compiled = compile(kernels, cache);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(print(kernels[i]));
    std::vector<std::vector<double>> expected = random_args(kernels[i], seed() + i);
    const std::vector<std::vector<double>> actual =
        run_compiled(compiled->function(i), kernels[i], expected);
    ASSERT_TRUE(run_kernel(kernels[i], expected).is_ok());
    for (size_t p = 0; p < expected.size(); ++p) {
      EXPECT_TRUE(all_close(actual[p], expected[p], kernels[i].params[0].dtype(), 7)) << p;
    }
  }
}

// A product deep for its width (depth at least twice the columns, 2^22 multiply-adds), which
// the prelude runs as oneDNN's matmul primitive (kiln_gemm_prefers_matmul), on regions with
// dense or padded leading dimensions (`pad` more than the width; oneDNN picks other kernels
// for the two), transposed or not, overwriting or accumulating.
Kernel deep_gemm(bool ta, bool tb, bool accumulate, int64_t pad) {
  const int64_t m = 256, n = 16, k = 1024;
  const int64_t a_cols = (ta ? m : k) + pad, b_cols = (tb ? k : n) + pad;
  Buffer a = Buffer::param("a", DType::f32, {ta ? k : m, a_cols});
  Buffer b = Buffer::param("b", DType::f32, {tb ? n : k, b_cols});
  Buffer c = Buffer::param("c", DType::f32, {m, n + pad});
  GemmArgs args;
  args.a = {a, Expr(0), a_cols};
  args.b = {b, Expr(0), b_cols};
  args.c = {c, Expr(pad), n + pad};
  args.transpose_a = ta;
  args.transpose_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  return Kernel{"deep", {a, b, c}, gemm(std::move(args))};
}

TEST(GemmCodegen, DeepProductsThroughTheMatmulPrimitiveMatchTheEvaluator) {
  std::vector<Kernel> kernels;
  for (int variant = 0; variant < 16; ++variant) {
    kernels.push_back(deep_gemm(variant & 1, variant & 2, variant & 4, variant & 8 ? 3 : 0));
  }
  TempDir cache;
  Expected<CompiledKernels> compiled = compile(kernels, cache);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  for (size_t i = 0; i < kernels.size(); ++i) {
    SCOPED_TRACE(print(kernels[i]));
    std::vector<std::vector<double>> expected = random_args(kernels[i], seed() + 100 + i);
    const std::vector<std::vector<double>> actual =
        run_compiled(compiled->function(i), kernels[i], expected);
    ASSERT_TRUE(run_kernel(kernels[i], expected).is_ok());
    for (size_t p = 0; p < expected.size(); ++p) {
      EXPECT_TRUE(all_close(actual[p], expected[p], DType::f32, 1024)) << p;
    }
  }
}

TEST(GemmCodegen, KernelsCallOpenBlasNotTheReferenceBlas) {
  TempDir cache;
  const std::vector<Kernel> kernels = {batched_gemm(DType::f32, false, false, false, 3)};
  Expected<CompiledKernels> compiled = compile(kernels, cache);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("libopenblas"), std::string::npos);
  EXPECT_EQ(text.find("/blas/libblas.so"), std::string::npos);  // Debian's reference BLAS
}

// --- Matmul groups, compiled, against the interpreter ------------------------------------

std::vector<Array> random_inputs(const Graph& graph, uint64_t salt) {
  std::mt19937_64 rng(seed() + salt);
  std::vector<Array> inputs;
  for (const Value* value : graph.inputs()) {
    Array array(value->dtype(), value->shape());
    for (double& v : array.data) v = std::uniform_real_distribution<double>(-2, 2)(rng);
    array.round_to_dtype();
    inputs.push_back(std::move(array));
  }
  return inputs;
}

// Lowers every node of `graph`, compiles the kernel, runs it and compares each graph output
// with the interpreter.
void expect_compiled_group_matches(const Graph& graph, int64_t depth,
                                   const LowerGroupOptions& options = {}) {
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes(), options);
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  SCOPED_TRACE(print(lowered->kernel));
  ASSERT_NE(print(lowered->kernel).find("gemm("), std::string::npos);
  TempDir cache;
  Expected<CompiledKernels> compiled = compile({lowered->kernel}, cache);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();

  const std::vector<Array> inputs = random_inputs(graph, static_cast<uint64_t>(depth));
  std::vector<std::vector<double>> args;
  for (const Value* value : lowered->inputs) {
    const auto it = std::find(graph.inputs().begin(), graph.inputs().end(), value);
    ASSERT_NE(it, graph.inputs().end());
    args.push_back(inputs[static_cast<size_t>(it - graph.inputs().begin())].data);
  }
  for (size_t p = args.size(); p < lowered->kernel.params.size(); ++p) {
    args.emplace_back(static_cast<size_t>(lowered->kernel.params[p].flat_size()), -12345.0);
  }
  const std::vector<std::vector<double>> actual =
      run_compiled(compiled->function(0), lowered->kernel, args);
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected.has_value()) << expected.status().message();
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    const auto it =
        std::find(lowered->outputs.begin(), lowered->outputs.end(), graph.outputs()[o]);
    ASSERT_NE(it, lowered->outputs.end());
    const size_t param =
        lowered->inputs.size() + static_cast<size_t>(it - lowered->outputs.begin());
    EXPECT_TRUE(all_close(actual[param], (*expected)[o].data, (*expected)[o].dtype, depth))
        << "output " << o;
  }
}

struct MatmulCase {
  std::vector<int64_t> a, b;
  bool transpose_a = false, transpose_b = false;
};

TEST(GemmCodegen, MatmulGroupsMatchTheInterpreter) {
  const std::vector<MatmulCase> cases = {
      {{1, 1}, {1, 1}},
      {{7, 5}, {5, 3}},
      {{5, 7}, {5, 3}, true, false},
      {{7, 5}, {3, 5}, false, true},
      {{5, 7}, {3, 5}, true, true},
      {{2, 3, 4, 5}, {5, 6}},
      {{3, 1, 4, 5}, {2, 5, 6}},
      {{33, 300}, {300, 17}},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const MatmulCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} {} x {}", dtype_name(dtype), Shape(c.a).to_string(),
                               Shape(c.b).to_string()));
      Graph graph;
      GraphBuilder b(graph);
      graph.set_outputs({b.matmul(b.input("a", dtype, Shape(c.a)), b.input("b", dtype, Shape(c.b)),
                                  c.transpose_a, c.transpose_b)});
      const int64_t depth = c.transpose_a ? c.a[c.a.size() - 2] : c.a.back();
      expect_compiled_group_matches(graph, depth);
    }
  }
}

TEST(GemmCodegen, BiasReluEpilogueMatchesTheInterpreter) {
  // Small blocks with a tail (7 rows in blocks of 3), one block, the default rule on a wide
  // matrix (150 x 4096), and a batch of three matrices whose 15 rows are cut in blocks of 3.
  const struct {
    int64_t m, k, n, rows;
    int64_t batch = 1;
  } shapes[] = {{7, 5, 3, 3}, {7, 5, 3, 0}, {150, 16, 4096, 0}, {5, 4, 6, 3, 3}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(fmt::format("{}x{}x{}x{} rows {}", s.batch, s.m, s.k, s.n, s.rows));
    Graph graph;
    GraphBuilder b(graph);
    // A batch of matrices times one w is one gemm over all their rows, blocks straddling them.
    const Shape x_shape = s.batch == 1 ? Shape{s.m, s.k} : Shape{s.batch, s.m, s.k};
    Value* y = b.matmul(b.input("x", DType::f32, x_shape), b.input("w", DType::f32, {s.k, s.n}));
    graph.set_outputs({b.relu(b.add(y, b.input("bias", DType::f32, {s.n})))});
    expect_compiled_group_matches(graph, s.k, LowerGroupOptions{.gemm_block_rows = s.rows});
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
