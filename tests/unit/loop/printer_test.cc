// The loop IR's text form: exact output on small kernels and expressions.
#include <gtest/gtest.h>

#include <cmath>

#include "loop/printer.h"

namespace kiln::loop {
namespace {

TEST(LoopPrinter, PrintsAMatmulKernelExactly) {
  const Buffer a = Buffer::param("a", DType::f32, {4, 8});
  const Buffer b = Buffer::param("b", DType::f32, {8, 16});
  const Buffer c = Buffer::param("c", DType::f32, {4, 16});
  const Expr i = var("i"), j = var("j"), k = var("k");
  const Stmt body = for_loop(
      "i", 0, 4, ForKind::parallel,
      for_loop("j", 0, 16, store(c, {i, j}, sum("k", 0, 8, load(a, {i, k}) * load(b, {k, j})))));
  EXPECT_EQ(print(Kernel{"matmul", {a, b, c}, body}),
            R"(kernel matmul(a: f32[4, 8], b: f32[8, 16], c: f32[4, 16]) {
  parallel for (i, 0, 4) {
    for (j, 0, 16) {
      c[i*16 + j] = sum(k, 0, 8, a[i*8 + k]*b[k*16 + j])
    }
  }
}
)");
}

TEST(LoopPrinter, PrintsLetsAllocationsConditionalsAndLoopKinds) {
  const Buffer x = Buffer::param("x", DType::f32, {16, 4}, {1, 16});  // column-major
  const Buffer y = Buffer::param("y", DType::f32, {64});
  const Buffer t = Buffer::local("t", DType::f32, 4, MemoryScope::registers);
  const Expr i = var("i"), v = var("v"), base = var("base");
  const Stmt body = for_loop(
      "i", 0, 16,
      let_stmt("base", i * 4,
               allocate(t, block({
                               for_loop("v", 0, 4, ForKind::vectorized,
                                        store(t, v, call(Intrinsic::exp, {load(x, {i, v})}))),
                               for_loop("v", 0, 4, ForKind::unrolled,
                                        if_then_else(base + v < 60 && !(v == 2),
                                                     store(y, base + v, load(t, v) * 0.5),
                                                     store(y, base + v, make_float(0)))),
                           }))));
  EXPECT_EQ(print(Kernel{"k", {x, y}, body}),
            R"(kernel k(x: f32[16, 4] strides [1, 16], y: f32[64]) {
  for (i, 0, 16) {
    let base = i*4
    allocate t: f32[4] in registers {
      vectorized for (v, 0, 4) {
        t[v] = exp(x[i + v*16])
      }
      unrolled for (v, 0, 4) {
        if (base + v < 60 && !(v == 2)) {
          y[base + v] = t[v]*0.5f
        } else {
          y[base + v] = 0.0f
        }
      }
    }
  }
}
)");
}

TEST(LoopPrinter, ParenthesisesOnlyWhereTheTreeNeedsIt) {
  const Expr x = var("x"), y = var("y"), z = var("z");
  EXPECT_EQ(print(x + y * z), "x + y*z");
  EXPECT_EQ(print((x + y) * z), "(x + y)*z");
  EXPECT_EQ(print(x - (y - z)), "x - (y - z)");
  EXPECT_EQ(print(x - y - z), "x - y - z");
  EXPECT_EQ(print(x / (y * z)), "x/(y*z)");
  EXPECT_EQ(print((x < y) == (y < z)), "(x < y) == (y < z)");
  EXPECT_EQ(print((x < y || y < z) && x == z), "(x < y || y < z) && x == z");
  EXPECT_EQ(print(min(x, y + 1) % 3), "min(x, y + 1) % 3");
  EXPECT_EQ(print(x % 2 / 3), "(x % 2)/3");
  EXPECT_EQ(print(x * (y % 2)), "x*(y % 2)");
  EXPECT_EQ(print(x % 2 % 3), "x % 2 % 3");
  EXPECT_EQ(print(select(x > 0, x, -x)), "select(x > 0, x, 0 - x)");
  EXPECT_EQ(print(let("t", x * 2, var("t") + 1)), "(let t = x*2 in t + 1)");
}

TEST(LoopPrinter, ConstantsAndCastsShowTheirType) {
  EXPECT_EQ(print(make_int(42)), "42");
  EXPECT_EQ(print(make_int(-3, DType::i32)), "i32(-3)");
  EXPECT_EQ(print(make_bool(true)), "true");
  EXPECT_EQ(print(make_float(0.1)), "0.1f");
  EXPECT_EQ(print(make_float(0.1, DType::f64)), "0.1");
  EXPECT_EQ(print(make_float(2, DType::f64)), "2.0");
  EXPECT_EQ(print(make_float(0.5, DType::f16)), "f16(0.5)");
  // bf16 keeps 8 significant bits: 1e30 = 1.5777 * 2^99 rounds to 202/128 * 2^99.
  EXPECT_EQ(print(make_float(1e30, DType::bf16)), "bf16(1.00025555e+30)");
  EXPECT_EQ(print(make_float(-INFINITY)), "f32(-inf)");
  EXPECT_EQ(print(cast(DType::f32, var("n"))), "f32(n)");
  EXPECT_EQ(print(call(Intrinsic::pow, {var("p", DType::f64), make_float(2, DType::f64)})),
            "pow(p, 2.0)");
  EXPECT_EQ(print(reduce(ReduceOp::max, "r", 1, var("n"), var("r") * 2)), "maximum(r, 1, n, r*2)");
}

}  // namespace
}  // namespace kiln::loop
