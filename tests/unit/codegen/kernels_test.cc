// Hand-built kernels covering every loop-IR node, compiled (all in one call, so the
// translation units compile in parallel) and run on the same inputs as the loop-IR evaluator:
// integer, bool and arithmetic float results must agree exactly, math functions within a few
// units in the last place (the compiled code calls libm in the value's own type).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;
using testing::expect_same_as_evaluator;
using testing::random_args;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  explicit Case(Kernel k, std::vector<std::vector<double>> in = {}, int64_t ulps = 0)
      : kernel(std::move(k)), inputs(std::move(in)), max_ulps(ulps) {}
  Kernel kernel;
  // Values for the leading parameters; the others get random values.
  std::vector<std::vector<double>> inputs;
  int64_t max_ulps = 0;
};

Expr f32(double value) { return make_float(value, DType::f32); }

Case elementwise() {
  Buffer a = Buffer::param("a", DType::f32, {6, 20}), b = Buffer::param("b", DType::f32, {6, 20});
  Buffer out = Buffer::param("out", DType::f32, {6, 20});
  Expr i = var("i"), j = var("j");
  Expr x = load(a, {i, j}), y = load(b, {i, j});
  Stmt body = for_loop("i", 0, 6, ForKind::parallel,
                       for_loop("j", 0, 20, ForKind::vectorized,
                                store(out, {i, j}, x * y + x - y / 3.0)));
  return Case(Kernel{.name = "elementwise", .params = {a, b, out}, .body = body});
}

// Every reduction op, an empty range, a window starting at the loop variable, a reduction
// nested in another and a row of -0.0 (whose sum is -0.0).
Case reductions() {
  Buffer a = Buffer::param("a", DType::f32, {5, 7});
  Buffer sums = Buffer::param("sums", DType::f32, {5}), prods = Buffer::param("prods", DType::f32, {5});
  Buffer mins = Buffer::param("mins", DType::f32, {5}), maxs = Buffer::param("maxs", DType::f32, {5});
  Buffer empty = Buffer::param("empty", DType::f32, {5}), window = Buffer::param("window", DType::f32, {5});
  Buffer nested = Buffer::param("nested", DType::f32, {5});
  Expr i = var("i"), k = var("k"), l = var("l");
  Expr x = load(a, {i, k});
  Stmt body = for_loop(
      "i", 0, 5,
      block({store(sums, i, sum("k", 0, 7, x)),
             store(prods, i, reduce(ReduceOp::prod, "k", 0, 7, x)),
             store(mins, i, reduce(ReduceOp::min, "k", 0, 7, x)),
             store(maxs, i, reduce(ReduceOp::max, "k", 0, 7, x)),
             store(empty, i, reduce(ReduceOp::min, "k", 0, i - 2, x) + sum("k", 0, i - 2, x)),
             store(window, i, sum("k", i, 3, x)),
             store(nested, i,
                   sum("k", 0, 7, reduce(ReduceOp::max, "l", k, 7 - k, load(a, {i, l})) * x))}));
  std::vector<double> values(35, 0.5);
  for (size_t n = 0; n < values.size(); ++n) values[n] = std::sin(static_cast<double>(n)) * 3;
  for (size_t n = 0; n < 7; ++n) values[n] = -0.0;
  for (double& v : values) v = round_to_dtype(v, DType::f32);
  return Case(Kernel{.name = "reductions",
                     .params = {a, sums, prods, mins, maxs, empty, window, nested},
                     .body = body},
          {values});
}

Case matmul() {
  Buffer a = Buffer::param("a", DType::f32, {6, 9}), b = Buffer::param("b", DType::f32, {9, 5});
  Buffer c = Buffer::param("c", DType::f32, {6, 5});
  Expr i = var("i"), j = var("j"), k = var("k");
  Stmt body = for_loop(
      "i", 0, 6, ForKind::parallel,
      for_loop("j", 0, 5, ForKind::vectorized,
               store(c, {i, j}, sum("k", 0, 9, load(a, {i, k}) * load(b, {k, j})))));
  return Case(Kernel{.name = "matmul", .params = {a, b, c}, .body = body});
}

Case nested_lets() {
  Buffer x = Buffer::param("x", DType::f64, {10}), out = Buffer::param("out", DType::f64, {10});
  Expr i = var("i"), s = var("s", DType::f64), u = var("u", DType::f64), w = var("w", DType::f64);
  Stmt body = for_loop(
      "i", 0, 10,
      let_stmt("s", load(x, i) * 2.0,
               store(out, i, let("u", s + 1.0, let("w", u * u, w - s) / u))));
  return Case(Kernel{.name = "lets", .params = {x, out}, .body = body});
}

// A softmax row through a local buffer written in one loop and read in the next; a second,
// large local buffer takes the heap path.
Case two_phases() {
  Buffer a = Buffer::param("a", DType::f32, {4, 16}), out = Buffer::param("out", DType::f32, {4, 16});
  Buffer tmp = Buffer::local("tmp", DType::f32, 16);
  Buffer big = Buffer::local("big", DType::f32, 6000);
  Expr i = var("i"), j = var("j"), k = var("k");
  Stmt body = for_loop(
      "i", 0, 4, ForKind::parallel,
      allocate(tmp, allocate(big, block({
          for_loop("j", 0, 16, store(tmp, j, call(Intrinsic::exp, {load(a, {i, j})}))),
          for_loop("j", 0, 16, store(big, j * 300, load(tmp, j) / sum("k", 0, 16, load(tmp, k)))),
          for_loop("j", 0, 16, store(out, {i, j}, load(big, j * 300))),
      }))));
  return Case(Kernel{.name = "two_phases", .params = {a, out}, .body = body}, {}, 4);
}

// A row's statistic stored just before a vectorized loop over the row, which reads it, a
// one-element scale and (under a select) a per-row value at the same element in every
// iteration: the emitter reads all three once before the loop (emitter_test.cc).
Case invariant_loads() {
  Buffer x = Buffer::param("x", DType::f32, {5, 24}), scale = Buffer::param("scale", DType::f32, {1});
  Buffer side = Buffer::param("side", DType::f32, {5});
  Buffer norm = Buffer::param("norm", DType::f32, {5}), out = Buffer::param("out", DType::f32, {5, 24});
  Expr i = var("i"), j = var("j"), k = var("k");
  Expr row_sum = sum("k", 0, 24, load(x, {i, k}) * load(x, {i, k}));
  Expr scaled = load(x, {i, j}) * load(scale, make_int(0)) / (load(norm, i) + f32(1.0));
  Stmt body = for_loop(
      "i", 0, 5, ForKind::parallel,
      block({store(norm, i, row_sum),
             for_loop("j", 0, 24, ForKind::vectorized,
                      store(out, {i, j}, scaled + select(j < 3, load(side, i), f32(0.5))))}));
  return Case(Kernel{.name = "invariant_loads", .params = {x, scale, side, norm, out}, .body = body});
}

Case branches() {
  Buffer x = Buffer::param("x", DType::i64, {12});
  Buffer out = Buffer::param("out", DType::i64, {12}), marks = Buffer::param("marks", DType::i64, {12});
  Expr i = var("i"), v = load(x, i);
  Stmt body = for_loop(
      "i", 0, 12,
      block({if_then_else(v > 0, store(out, i, v * 2), store(out, i, -v)),
             if_then_else(v % 3 == 0, store(marks, i, make_int(1)))}));
  return Case(Kernel{.name = "branches", .params = {x, out, marks}, .body = body});
}

Case floor_division(DType type) {
  const double lo = type == DType::i64 ? -9223372036854775808.0 : -2147483648.0;
  const double hi = type == DType::i64 ? 9007199254740992.0 : 2147483647.0;
  Buffer x = Buffer::param("x", type, {10}), y = Buffer::param("y", type, {8});
  Buffer q = Buffer::param("q", type, {10, 8}), r = Buffer::param("r", type, {10, 8});
  Expr i = var("i"), j = var("j");
  Expr a = load(x, i), b = load(y, j);
  Stmt body = for_loop("i", 0, 10, for_loop("j", 0, 8, block({store(q, {i, j}, a / b),
                                                               store(r, {i, j}, a % b)})));
  return Case(Kernel{.name = "floor_division", .params = {x, y, q, r}, .body = body},
          {{-7, 7, -8, 8, 0, -1, 1, lo, hi, -hi}, {2, -2, 3, -3, 0, -1, 1, 5}});
}

// Float-to-integer casts truncate and saturate (NaN is 0); casts to narrower floats round;
// i64-to-i32 saturates; everything to bool is `!= 0`.
Case casts() {
  const std::vector<double> floats = {
      kNaN, kInf, -kInf, 1e300, -1e300, 9.3e18, -9.3e18, 9223372036854775808.0,
      -9223372036854775808.0, 2147483647.5, 2147483648.0, -2147483648.7, -2147483649.0, -0.5,
      0.5, -0.0, 1.5, 65504, 65519.99, 65520, 1e-8, 3.0000001, 1e-40, -2.5};
  const std::vector<double> ints = {-4611686018427387904.0, -3000000000, -2147483649, -5, 0, 7,
                                    2147483648, 16777217, 16777219, 1152921504606846976.0};
  const int64_t nf = static_cast<int64_t>(floats.size()), ni = static_cast<int64_t>(ints.size());
  Buffer fin = Buffer::param("fin", DType::f64, {nf}), iin = Buffer::param("iin", DType::i64, {ni});
  std::vector<Buffer> params = {fin, iin};
  std::vector<Stmt> stores;
  const auto cast_all = [&](const Buffer& from, int64_t n, DType to) {
    Buffer out = Buffer::param("out" + std::to_string(params.size()), to, {n});
    params.push_back(out);
    stores.push_back(for_loop("i", 0, n, store(out, var("i"), cast(to, load(from, var("i"))))));
  };
  for (DType to : {DType::i32, DType::i64, DType::boolean, DType::f32, DType::f16, DType::bf16}) {
    cast_all(fin, nf, to);
  }
  for (DType to : {DType::i32, DType::f64, DType::f32, DType::f16, DType::bf16, DType::boolean}) {
    cast_all(iin, ni, to);
  }
  // Chains through the narrow types: f64 -> f16 -> f32 -> i32, f64 -> bf16 -> i64.
  Buffer chain = Buffer::param("chain", DType::i32, {nf});
  Buffer chain2 = Buffer::param("chain2", DType::i64, {nf});
  params.push_back(chain);
  params.push_back(chain2);
  Expr v = load(fin, var("i"));
  stores.push_back(for_loop(
      "i", 0, nf,
      block({store(chain, var("i"), cast(DType::i32, cast(DType::f32, cast(DType::f16, v)))),
             store(chain2, var("i"), cast(DType::i64, cast(DType::bf16, v)))})));
  return Case(Kernel{.name = "casts", .params = params, .body = block(stores)},
          {floats, ints});
}

// Vectorized, and serial: GCC compiles the scalar form apart (the minss / maxss idiom).
Case min_max(ForKind kind) {
  const std::vector<double> a = {kNaN, 1, kNaN, 0.0, -0.0, -kInf, 2, -3, 0.0};
  const std::vector<double> b = {1, kNaN, kNaN, -0.0, 0.0, kInf, 2, 5, 0.0};
  const int64_t n = static_cast<int64_t>(a.size());
  Buffer x = Buffer::param("x", DType::f32, {n}), y = Buffer::param("y", DType::f32, {n});
  Buffer lo = Buffer::param("lo", DType::f32, {n}), hi = Buffer::param("hi", DType::f32, {n});
  Buffer ilo = Buffer::param("ilo", DType::i64, {n}), ihi = Buffer::param("ihi", DType::i32, {n});
  Expr i = var("i"), u = load(x, i), v = load(y, i);
  Stmt body = for_loop(
      "i", 0, n, kind,
      block({store(lo, i, min(u, v)), store(hi, i, max(u, v)),
             store(ilo, i, min(i * 3 - 10, 4 - i)),
             store(ihi, i, max(cast(DType::i32, i) - 4, make_int(0, DType::i32)))}));
  return Case(Kernel{.name = "min_max", .params = {x, y, lo, hi, ilo, ihi}, .body = body},
          {a, b});
}

// Every intrinsic of `type` on edge values and a sweep.
Case intrinsics(DType type, int64_t max_ulps) {
  std::vector<double> xs = {-kInf, -100, -20, -2.5, -1, -0.5, -0.0, 0.0, 1e-30, 0.25, 0.5, 1, 2,
                            3.7, 10, 80, 100, kInf, kNaN};
  for (int n = -16; n <= 16; ++n) xs.push_back(n * 0.37);
  std::vector<double> ys = {2, -1, 0.5, 3, 0, -0.5, 1.5, -2};
  for (double& x : xs) x = round_to_dtype(x, type);
  const int64_t n = static_cast<int64_t>(xs.size()), m = static_cast<int64_t>(ys.size());
  constexpr Intrinsic kUnary[] = {Intrinsic::abs,  Intrinsic::exp,     Intrinsic::log,
                                  Intrinsic::sqrt, Intrinsic::rsqrt,   Intrinsic::tanh,
                                  Intrinsic::erf,  Intrinsic::sigmoid, Intrinsic::sin,
                                  Intrinsic::cos,  Intrinsic::floor,   Intrinsic::ceil};
  constexpr int64_t kCount = std::size(kUnary);
  Buffer x = Buffer::param("x", type, {n}), y = Buffer::param("y", type, {m});
  Buffer out = Buffer::param("out", type, {kCount, n}), pow = Buffer::param("pow", type, {n, m});
  Expr i = var("i"), j = var("j");
  std::vector<Stmt> stores;
  for (int64_t f = 0; f < kCount; ++f) {
    stores.push_back(store(out, {make_int(f), i}, call(kUnary[f], {load(x, i)})));
  }
  stores.push_back(
      for_loop("j", 0, m, store(pow, {i, j}, call(Intrinsic::pow, {load(x, i), load(y, j)}))));
  return Case(Kernel{.name = "intrinsics", .params = {x, y, out, pow},
                     .body = for_loop("i", 0, n, block(stores))},
          {xs, ys},
          max_ulps);
}

Case logic() {
  Buffer a = Buffer::param("a", DType::boolean, {16}), b = Buffer::param("b", DType::boolean, {16});
  Buffer x = Buffer::param("x", DType::i32, {16}), y = Buffer::param("y", DType::f32, {16});
  Buffer out = Buffer::param("out", DType::boolean, {16}), pick = Buffer::param("pick", DType::i32, {16});
  Expr i = var("i"), p = load(a, i), q = load(b, i), u = load(x, i), v = load(y, i);
  Stmt body = for_loop(
      "i", 0, 16,
      block({store(out, i, (p && !q) || (cast(DType::f32, u) < v) || (p == (u >= 0))),
             store(pick, i, select(p != q, call(Intrinsic::abs, {u}) * u, u % make_int(7, DType::i32)))}));
  return Case(Kernel{.name = "logic", .params = {a, b, x, y, out, pick}, .body = body});
}

Case float_modulo(DType type) {
  const std::vector<double> a = {7.5, -7.5, 7.5, -7.5, 1, 0, -0.0, kInf, 3, 5.25, 1e-3};
  const std::vector<double> b = {2, 2, -2, -2, 0, 3, 3, 2, kInf, 0.5, 7};
  const int64_t n = static_cast<int64_t>(a.size());
  Buffer x = Buffer::param("x", type, {n}), y = Buffer::param("y", type, {n});
  Buffer out = Buffer::param("out", type, {n});
  Expr i = var("i");
  return Case(Kernel{.name = "float_modulo", .params = {x, y, out},
                     .body = for_loop("i", 0, n, store(out, i, load(x, i) % load(y, i)))},
          {a, b});
}

// Loop bounds that depend on an outer variable, a parallel loop nested in another, an
// unrolled loop and a loop with a non-zero start.
Case loop_shapes() {
  Buffer out = Buffer::param("out", DType::f32, {8, 8});
  Buffer acc = Buffer::param("acc", DType::i64, {8});
  Expr i = var("i"), j = var("j"), k = var("k");
  Stmt body = for_loop(
      "i", 0, 8, ForKind::parallel,
      block({for_loop("j", 0, i + 1, ForKind::parallel,
                      store(out, {i, j}, cast(DType::f32, i * 8 + j) * 0.5)),
             for_loop("k", 2, 4, ForKind::unrolled,
                      store(acc, i, load(acc, i) * 3 + k)),
             for_loop("j", i - 3, 2, ForKind::serial,
                      if_then_else(j >= 0, store(out, {i, j}, f32(-1.0))))}));
  return Case(Kernel{.name = "loop_shapes", .params = {out, acc}, .body = body});
}

Case narrow_floats(DType type) {
  Buffer a = Buffer::param("a", type, {3, 12}), b = Buffer::param("b", type, {3, 12});
  Buffer out = Buffer::param("out", type, {3, 12}), sums = Buffer::param("sums", type, {3});
  Expr i = var("i"), j = var("j"), k = var("k");
  Expr x = load(a, {i, j}), y = load(b, {i, j});
  Stmt body = for_loop(
      "i", 0, 3,
      block({for_loop("j", 0, 12, ForKind::vectorized,
                      store(out, {i, j}, x * y + x / y - make_float(1.5, type))),
             store(sums, i, sum("k", 0, 12, load(a, {i, k}) * load(b, {i, k})))}));
  return Case(Kernel{.name = "narrow", .params = {a, b, out, sums}, .body = body});
}

Case integer_arithmetic() {
  Buffer x = Buffer::param("x", DType::i32, {6}), out = Buffer::param("out", DType::i32, {6});
  Buffer wide = Buffer::param("wide", DType::i64, {6});
  Expr i = var("i"), v = load(x, i);
  Stmt body = for_loop(
      "i", 0, 6,
      block({store(out, i, call(Intrinsic::abs, {v}) - v * make_int(3, DType::i32)),
             store(wide, i, call(Intrinsic::abs, {cast(DType::i64, v)}) * 4 - 1)}));
  return Case(Kernel{.name = "integers", .params = {x, out, wide}, .body = body},
          {{-2147483648.0, -5, 0, 5, 2147483647, -1}});
}

// Every case by name.
std::map<std::string, Case> all_cases() {
  return {
      {"elementwise", elementwise()},
      {"reductions", reductions()},
      {"matmul", matmul()},
      {"nested_lets", nested_lets()},
      {"two_phases", two_phases()},
      {"branches", branches()},
      {"invariant_loads", invariant_loads()},
      {"floor_division_i64", floor_division(DType::i64)},
      {"floor_division_i32", floor_division(DType::i32)},
      {"casts", casts()},
      {"min_max", min_max(ForKind::vectorized)},
      {"min_max_serial", min_max(ForKind::serial)},
      {"intrinsics_f32", intrinsics(DType::f32, 2)},
      {"intrinsics_f64", intrinsics(DType::f64, 2)},
      {"intrinsics_f16", intrinsics(DType::f16, 1)},
      {"intrinsics_bf16", intrinsics(DType::bf16, 1)},
      {"logic", logic()},
      {"float_modulo_f32", float_modulo(DType::f32)},
      {"float_modulo_f64", float_modulo(DType::f64)},
      {"float_modulo_f16", float_modulo(DType::f16)},
      {"loop_shapes", loop_shapes()},
      {"narrow_f16", narrow_floats(DType::f16)},
      {"narrow_bf16", narrow_floats(DType::bf16)},
      {"integer_arithmetic", integer_arithmetic()},
      {"hostile_names", Case(testing::hostile_kernel())},
  };
}

// One test compiles every case in one call (CTest runs each test in a process of its own,
// and the compiler is the slow part); failures name the case.
TEST(CpuCodegenKernels, MatchTheEvaluator) {
  const std::map<std::string, Case> cases = all_cases();
  std::vector<Kernel> kernels;
  for (const auto& [name, c] : cases) kernels.push_back(c.kernel);
  testing::TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  options.kernels_per_unit = 6;
  Expected<CompiledKernels> compiled = compile_kernels(kernels, options);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  ASSERT_EQ(compiled->size(), cases.size());
  size_t index = 0;
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE("case " + name);
    std::vector<std::vector<double>> args = random_args(c.kernel, 1234 + index);
    for (size_t p = 0; p < c.inputs.size(); ++p) args[p] = c.inputs[p];
    expect_same_as_evaluator(compiled->function(index), c.kernel, args, c.max_ulps);
    ++index;
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
