// Random well-typed expressions compiled into kernels agree exactly with the loop-IR
// evaluator: integer (floor division and remainder by negative and zero divisors), bool and
// float arithmetic (sqrt, floor, ceil, abs, min, max, %, casts through i32, f16 and bf16,
// reductions, lets, selects). Math functions with libm rounding differences are left to
// kernels_test.cc, so every comparison here is bit-exact.
//
// The seed is printed with every failure; set KILN_CODEGEN_SEED to replay another one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;

uint64_t test_seed() {
  const char* text = std::getenv("KILN_CODEGEN_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : 20240611;
}

// Expressions over i64 variables x, y, z, an f32 variable f and an i64 buffer `table`.
// Products have a leaf operand, reductions at most 3 terms and float-to-integer casts are
// reduced modulo 7, so integer values stay far from overflow (undefined in the IR).
class ExprGenerator {
 public:
  explicit ExprGenerator(uint64_t seed) : rng_(seed) {}

  static Buffer table() { return Buffer::param("table", DType::i64, {5}); }

  Expr int_expr(int depth) {
    if (depth == 0 || chance(0.2)) return int_leaf();
    switch (pick(13)) {
      case 0: return int_expr(depth - 1) + int_expr(depth - 1);
      case 1: return int_expr(depth - 1) - int_expr(depth - 1);
      case 2: return int_expr(depth - 1) * int_leaf();
      case 3: return int_expr(depth - 1) / divisor(depth);
      case 4: return int_expr(depth - 1) % divisor(depth);
      case 5: return min(int_expr(depth - 1), int_expr(depth - 1));
      case 6: return max(int_expr(depth - 1), int_expr(depth - 1));
      case 7: return select(bool_expr(depth - 1), int_expr(depth - 1), int_expr(depth - 1));
      case 8: return cast(DType::i64, bool_expr(depth - 1));
      case 9: return load(table(), int_expr(depth - 1) % 5);
      case 10: return bind_let(depth, [&] { return int_expr(depth - 1); });
      case 11:
        return cast(DType::i64, cast(chance(0.5) ? DType::i32 : DType::i64, float_expr(depth - 1))) %
               7;
      default: return bind_reduce(depth, [&] { return int_expr(depth - 1); });
    }
  }

  Expr bool_expr(int depth) {
    if (depth == 0 || chance(0.1)) return make_bool(chance(0.5));
    static constexpr BinaryOp kComparisons[] = {BinaryOp::eq, BinaryOp::ne, BinaryOp::lt,
                                                BinaryOp::le, BinaryOp::gt, BinaryOp::ge};
    switch (pick(6)) {
      case 0: return bool_expr(depth - 1) && bool_expr(depth - 1);
      case 1: return bool_expr(depth - 1) || bool_expr(depth - 1);
      case 2: return !bool_expr(depth - 1);
      case 3: return binary(kComparisons[pick(6)], float_expr(depth - 1), float_expr(depth - 1));
      default: return binary(kComparisons[pick(6)], int_expr(depth - 1), int_expr(depth - 1));
    }
  }

  Expr float_expr(int depth) {
    if (depth == 0 || chance(0.2)) {
      return chance(0.5) ? var("f", DType::f32) : make_float(pick_float(), DType::f32);
    }
    static constexpr Intrinsic kCalls[] = {Intrinsic::sqrt, Intrinsic::floor, Intrinsic::ceil,
                                           Intrinsic::abs};
    static constexpr DType kNarrow[] = {DType::f16, DType::bf16, DType::f64};
    switch (pick(12)) {
      case 0: return float_expr(depth - 1) + float_expr(depth - 1);
      case 1: return float_expr(depth - 1) - float_expr(depth - 1);
      case 2: return float_expr(depth - 1) * float_expr(depth - 1);
      case 3: return float_expr(depth - 1) / float_expr(depth - 1);
      case 4: return min(float_expr(depth - 1), float_expr(depth - 1));
      case 5: return max(float_expr(depth - 1), float_expr(depth - 1));
      case 6: return float_expr(depth - 1) % float_expr(depth - 1);
      case 7: return cast(DType::f32, int_expr(depth - 1));
      case 8: return call(kCalls[pick(4)], {float_expr(depth - 1)});
      case 9: return select(bool_expr(depth - 1), float_expr(depth - 1), float_expr(depth - 1));
      case 10: return cast(DType::f32, cast(kNarrow[pick(3)], float_expr(depth - 1)));
      default: return bind_reduce(depth, [&] { return float_expr(depth - 1); });
    }
  }

 private:
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  int64_t pick_int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  double pick_float() {
    static constexpr double kValues[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.25, -7.5, 1e30};
    return kValues[pick(9)];
  }

  Expr int_leaf() {
    if (chance(0.4)) return make_int(pick_int(-8, 8));
    return var(scope_[static_cast<size_t>(pick(static_cast<int>(scope_.size())))]);
  }

  // Usually a small constant (zero and negatives included), sometimes an expression.
  Expr divisor(int depth) { return chance(0.8) ? make_int(pick_int(-5, 5)) : int_expr(depth - 1); }

  template <typename Body>
  Expr bind_let(int depth, Body&& body) {
    Expr value = int_expr(depth - 1);
    const std::string name = fresh("t");
    scope_.push_back(name);
    Expr result = let(name, value, body());
    scope_.pop_back();
    return result;
  }

  template <typename Body>
  Expr bind_reduce(int depth, Body&& body) {
    static constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::min, ReduceOp::max,
                                        ReduceOp::prod};
    const ReduceOp op = kOps[pick(4)];
    Expr min = chance(0.7) ? make_int(pick_int(-2, 2)) : int_expr(depth - 1);
    // Empty integer min/max reductions are the type's extremes, which would overflow.
    Expr extent = make_int(pick_int(op == ReduceOp::sum ? -1 : 1, 3));
    const std::string name = fresh("r");
    scope_.push_back(name);
    Expr result = reduce(op, name, min, extent, body());
    scope_.pop_back();
    return result;
  }

  std::string fresh(const std::string& prefix) { return prefix + std::to_string(next_name_++); }

  std::mt19937_64 rng_;
  std::vector<std::string> scope_ = {"x", "y", "z"};
  int next_name_ = 0;
};

constexpr int64_t kLanes = 16;       // loop iterations: one value of x, y, z, f each
constexpr int64_t kPerType = 20;     // expressions of each type per kernel
constexpr int kKernels = 4;

// for i: let x = xs[i], y = ys[i], z = zs[i], f = fs[i] in ints[e, i] = ..., floats[e, i] =
// ..., bools[e, i] = ... for kPerType random expressions e of each type.
Kernel random_kernel(ExprGenerator& gen, int index) {
  Buffer xs = Buffer::param("xs", DType::i64, {kLanes}), ys = Buffer::param("ys", DType::i64, {kLanes});
  Buffer zs = Buffer::param("zs", DType::i64, {kLanes}), fs = Buffer::param("fs", DType::f32, {kLanes});
  Buffer ints = Buffer::param("ints", DType::i64, {kPerType, kLanes});
  Buffer floats = Buffer::param("floats", DType::f32, {kPerType, kLanes});
  Buffer bools = Buffer::param("bools", DType::boolean, {kPerType, kLanes});
  Expr i = var("i");
  std::vector<Stmt> stores;
  for (int64_t e = 0; e < kPerType; ++e) {
    stores.push_back(store(ints, {make_int(e), i}, gen.int_expr(4)));
    stores.push_back(store(floats, {make_int(e), i}, gen.float_expr(4)));
    stores.push_back(store(bools, {make_int(e), i}, gen.bool_expr(4)));
  }
  Stmt body = let_stmt(
      "x", load(xs, i),
      let_stmt("y", load(ys, i),
               let_stmt("z", load(zs, i), let_stmt("f", load(fs, i), block(stores)))));
  // Alternate loop kinds: each iteration is independent.
  const ForKind kind = index % 2 == 0 ? ForKind::parallel : ForKind::vectorized;
  return Kernel{.name = "random" + std::to_string(index),
                .params = {xs, ys, zs, fs, ExprGenerator::table(), ints, floats, bools},
                .body = for_loop("i", 0, kLanes, kind, body)};
}

TEST(CpuCodegenRandom, ExpressionsMatchTheEvaluatorExactly) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (KILN_CODEGEN_SEED replays)");
  ExprGenerator gen(seed);
  std::vector<Kernel> kernels;
  for (int k = 0; k < kKernels; ++k) kernels.push_back(random_kernel(gen, k));

  testing::TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  options.kernels_per_unit = 1;  // four units, compiled in parallel
  Expected<CompiledKernels> compiled = compile_kernels(kernels, options);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  ASSERT_EQ(compiled->units(), kKernels);

  std::mt19937_64 rng(seed);
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<std::vector<double>> args = testing::random_args(kernels[k], seed + k);
    for (size_t p = 0; p < 3; ++p) {
      for (double& v : args[p]) v = static_cast<double>(static_cast<int64_t>(rng() % 41) - 20);
    }
    for (double& v : args[3]) v = static_cast<double>(static_cast<int64_t>(rng() % 81) - 40) / 8;
    args[4] = {-3, 0, 2, 7, 11};
    testing::expect_same_as_evaluator(compiled->function(k), kernels[k], args);
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
