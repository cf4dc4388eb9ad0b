// The simplifier on hand-written cases: each rule, and statements (loops, ifs, blocks).
#include <gtest/gtest.h>

#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

const Expr x = var("x"), y = var("y"), i = var("i"), j = var("j"), k = var("k");
const Expr f = var("f", DType::f32);
const Expr b = var("b", DType::boolean), c = var("c", DType::boolean);

std::string simplified(const Expr& e, const BoundsScope& scope = {}) {
  return print(simplify(e, scope));
}

TEST(LoopSimplify, FoldsConstants) {
  EXPECT_EQ(simplified(make_int(3) * 4 + 2), "14");
  EXPECT_EQ(simplified(make_int(-7) / 2 + make_int(-7) % 2), "-3");
  EXPECT_EQ(simplified(make_int(7) / 0), "0");
  EXPECT_EQ(simplified(make_float(1.5) * 2.0f), "3.0f");
  EXPECT_EQ(simplified(make_int(3) < 4 && make_int(2) == 2), "true");
  EXPECT_EQ(simplified(cast(DType::f32, make_int(3))), "3.0f");
  EXPECT_EQ(simplified(cast(DType::i32, make_float(-2.5))), "i32(-2)");
  EXPECT_EQ(simplified(call(Intrinsic::exp, {make_float(0)})), "1.0f");
  EXPECT_EQ(simplified(min(make_int(3), 9)), "3");
  EXPECT_EQ(simplified(max(make_float(3), 9.0f)), "9.0f");
}

TEST(LoopSimplify, PutsIntegerSumsInLinearForm) {
  EXPECT_EQ(simplified(x + 0), "x");
  EXPECT_EQ(simplified(x * 1), "x");
  EXPECT_EQ(simplified(x * 0), "0");
  EXPECT_EQ(simplified(3 + x), "x + 3");
  EXPECT_EQ(simplified((x + 3) + 4), "x + 7");
  EXPECT_EQ(simplified(x - x), "0");
  EXPECT_EQ(simplified((x + y) - x), "y");
  EXPECT_EQ(simplified((x + 1) * 4), "x*4 + 4");
  EXPECT_EQ(simplified(2 * x + x * 3 - 1), "x*5 - 1");
  EXPECT_EQ(simplified(2 - (x + 5)), "-3 - x");
  EXPECT_EQ(simplified(y - x * 2 + 1), "y - x*2 + 1");
  EXPECT_EQ(simplified(x * y + y * 0), "x*y");
}

TEST(LoopSimplify, DividesLinearIndicesUsingBounds) {
  const BoundsScope scope = {{"i", {0, 7}}, {"j", {0, 3}}, {"k", {0, 3}}};
  EXPECT_EQ(simplified((i * 4 + j) / 4, scope), "i");
  EXPECT_EQ(simplified((i * 4 + j) % 4, scope), "j");
  EXPECT_EQ(simplified((i * 4 + j + 3) / 4, scope), "i + (j + 3)/4");
  EXPECT_EQ(simplified((i * 4 + 3) / 4, scope), "i");
  EXPECT_EQ(simplified((i * 4 + 7) % 4, scope), "3");
  EXPECT_EQ(simplified((i * 8 + j * 4 + k) / 4, scope), "i*2 + j");
  EXPECT_EQ(simplified((i * 16 + j * 4 + k) % 16, scope), "j*4 + k");
  // Through a common factor of the divisor: j*4 + k is 4*j + k with k in [0, 4).
  EXPECT_EQ(simplified((i * 8 + j * 4 + k) % 8, scope), "k + (j % 2)*4");
  EXPECT_EQ(simplified((j * 4 + k) / 8, scope), "j/2");
  // A [8, 128, 256] tensor read as [1024, 256]: row x, column i.
  const BoundsScope column = {{"i", {0, 255}}};
  EXPECT_EQ(simplified((x * 256 + i) / 32768, column), "x/128");
  EXPECT_EQ(simplified((x * 256 + i) % 32768, column), "i + (x % 128)*256");
  EXPECT_EQ(simplified((x * 256 + i + 300) / 32768, column), "(x*256 + i + 300)/32768");
  EXPECT_EQ(simplified(j / 4, scope), "0");
  EXPECT_EQ(simplified((j + 4) % 4, scope), "j");
  // Without bounds only the divisible terms come out.
  EXPECT_EQ(simplified((x * 4 + y) / 4), "x + y/4");
  EXPECT_EQ(simplified((x * 4 + y) % 4), "y % 4");
  EXPECT_EQ(simplified((x * 6 + 9) / 3), "x*2 + 3");
  EXPECT_EQ(simplified((x / 2) / 3), "x/6");
  EXPECT_EQ(simplified((x % 8) % 4), "x % 4");
  EXPECT_EQ(simplified(x % 1 + x / 1), "x");
}

TEST(LoopSimplify, DecidesMinMaxAndComparisonsFromBounds) {
  const BoundsScope scope = {{"i", {0, 7}}, {"j", {0, 3}}};
  EXPECT_EQ(simplified(min(i * 8 + 8, 64), scope), "i*8 + 8");
  EXPECT_EQ(simplified(max(i * 8 + 8, 64), scope), "64");
  EXPECT_EQ(simplified(min(i, j + 4), scope), "min(i, j + 4)");
  EXPECT_EQ(simplified(i < 8, scope), "true");
  EXPECT_EQ(simplified(i * 4 + j >= 32, scope), "false");
  EXPECT_EQ(simplified(i < 7, scope), "i < 7");
  EXPECT_EQ(simplified(x + 1 > x), "true");
  EXPECT_EQ(simplified(min(3, x)), "min(x, 3)");
  EXPECT_EQ(simplified(min(min(x, 5), 3)), "min(x, 3)");
  EXPECT_EQ(simplified(max(x, x)), "x");
  EXPECT_EQ(simplified(3 < x), "x > 3");
}

TEST(LoopSimplify, KeepsFloatingRulesExact) {
  EXPECT_EQ(simplified(f * 1.0f), "f");
  EXPECT_EQ(simplified(1.0f * f), "f");
  EXPECT_EQ(simplified(f / 1.0f), "f");
  EXPECT_EQ(simplified(f - 0.0f), "f");
  EXPECT_EQ(simplified(f + 0.0f), "f + 0.0f");  // -0 + 0 is +0
  EXPECT_EQ(simplified(f * 0.0f), "f*0.0f");    // NaN and infinities
  EXPECT_EQ(simplified(f - f), "f - f");
  EXPECT_EQ(simplified(2.0f + f), "f + 2.0f");
  EXPECT_EQ(simplified((f + 1.0f) + 2.0f), "f + 1.0f + 2.0f");  // no reassociation
  EXPECT_EQ(simplified(!(f < 1.0f)), "!(f < 1.0f)");            // NaN
  EXPECT_EQ(simplified(min(1.0f, f)), "min(1.0f, f)");          // min is not commutative for -0/+0
}

TEST(LoopSimplify, SimplifiesBooleansAndSelects) {
  EXPECT_EQ(simplified(b && true), "b");
  EXPECT_EQ(simplified(false && b), "false");
  EXPECT_EQ(simplified(b || true), "true");
  EXPECT_EQ(simplified(b || false), "b");
  EXPECT_EQ(simplified(b && b), "b");
  EXPECT_EQ(simplified(!!b), "b");
  EXPECT_EQ(simplified(!(x < y)), "x >= y");
  EXPECT_EQ(simplified(select(make_int(1) < 2, x, y)), "x");
  EXPECT_EQ(simplified(select(b, x + 0, x)), "x");
  EXPECT_EQ(simplified(select(!b, x, y)), "select(b, y, x)");
}

TEST(LoopSimplify, InlinesTrivialLetsAndDropsUnusedOnes) {
  EXPECT_EQ(simplified(let("t", 5, var("t") * 2)), "10");
  EXPECT_EQ(simplified(let("t", x, var("t") + 1)), "x + 1");
  EXPECT_EQ(simplified(let("t", x * y, x)), "x");
  EXPECT_EQ(simplified(let("t", x * y, var("t") + var("t"))), "(let t = x*y in t*2)");
  // The let's value bounds its variable.
  EXPECT_EQ(simplified(let("t", x % 4, var("t") < 4)), "true");
}

// Fusing loops writes indices with / and %; the simplifier puts them back together.
TEST(LoopSimplify, JoinsQuotientsAndRemaindersOfOneDivisor) {
  EXPECT_EQ(simplified(x / 56 * 56 + x % 56), "x");
  EXPECT_EQ(simplified((x / 56 * 56 + x % 56) * 3 + y), "x*3 + y");
  EXPECT_EQ(simplified(x / 3136 * 3136 + x / 56 % 56 * 56 + x % 56), "x");
  EXPECT_EQ(simplified(y * 100 + x / -4 * -4 + x % -4), "y*100 + x");
  // Coefficients that do not match stay apart.
  EXPECT_EQ(simplified(x / 56 * 55 + x % 56), "x/56*55 + x % 56");
  EXPECT_EQ(simplified(x / 8 * 56 + x % 56), "x/8*56 + x % 56");
}

// Reductions over adjacent dims of a row-major buffer become one reduction over both, the
// terms in the same order; others stay nested.
TEST(LoopSimplify, JoinsNestedReductionsOverContiguousElements) {
  const Buffer planes = Buffer::param("x", DType::f32, {8, 4, 6});
  const Expr a = var("a"), col = var("b");
  // Rows and columns of plane i: x[i, a, b] for a < 4, b < 6.
  const Expr plane = sum("a", 0, 4, sum("b", 0, 6, load(planes, i * 24 + a * 6 + col)));
  const BoundsScope scope = {{"i", {0, 7}}};
  EXPECT_EQ(simplified(plane, scope), "sum(b, 0, 24, x[i*24 + b])");
  EXPECT_EQ(simplified(reduce(ReduceOp::max, "a", 0, 4,
                              reduce(ReduceOp::max, "b", 0, 6, load(planes, i * 24 + a * 6 + col))),
                       scope),
            "maximum(b, 0, 24, x[i*24 + b])");
  // Planes across a gap (the sum over dims 0 and 2 skips dim 1): not contiguous.
  const Expr gapped = sum("a", 0, 8, sum("b", 0, 6, load(planes, a * 24 + col)));
  EXPECT_EQ(simplified(gapped), "sum(a, 0, 8, sum(b, 0, 6, x[a*24 + b]))");
  // Different ops, or a transposed read, stay nested.
  EXPECT_EQ(simplified(sum("a", 0, 4, reduce(ReduceOp::max, "b", 0, 6, load(planes, a * 6 + col)))),
            "sum(a, 0, 4, maximum(b, 0, 6, x[a*6 + b]))");
  EXPECT_EQ(simplified(sum("a", 0, 4, sum("b", 0, 6, load(planes, col * 4 + a)))),
            "sum(a, 0, 4, sum(b, 0, 6, x[b*4 + a]))");
}

TEST(LoopSimplify, SimplifiesReductions) {
  EXPECT_EQ(simplified(sum("r", 0, 0, f)), "0.0f");
  EXPECT_EQ(simplified(reduce(ReduceOp::max, "r", 0, 0, f)), "f32(-inf)");
  EXPECT_EQ(simplified(sum("r", 3, 1, var("r") * 2)), "6");
  EXPECT_EQ(simplified(sum("r", 0, 4, min(var("r"), 9))), "sum(r, 0, 4, r)");
}

TEST(LoopSimplify, RemovesTrivialLoopsAndBranches) {
  const Buffer a = Buffer::param("a", DType::f32, {8});
  const Buffer out = Buffer::param("out", DType::f32, {8});
  const Buffer t = Buffer::local("t", DType::f32, 4);
  const Stmt s = block({
      for_loop("i", 0, 8,
               for_loop("j", 0, 1, store(out, (i * 4 + j + 3) / 4, load(a, i) * 1.0f + 0.0f))),
      for_loop("e", 0, 0, store(out, 0, make_float(1))),
      if_then_else(make_int(1) > 2, store(out, 0, make_float(2)),
                   block({store(out, 1, make_float(3)), block({})})),
      allocate(t, store(out, 2, make_float(4))),
      for_loop("o", 0, 2,
               for_loop("v", 0, 4,
                        if_then_else(var("o") * 4 + var("v") < 8,
                                     store(out, var("o") * 4 + var("v"), make_float(5))))),
      for_loop("o", 0, 3,
               for_loop("v", 0, 4,
                        if_then_else(var("o") * 4 + var("v") < 8, no_op(),
                                     store(out, 0, make_float(6))))),
  });
  const Kernel kernel = simplify(Kernel{"k", {a, out}, s});
  ASSERT_TRUE(verify(kernel).is_ok());
  EXPECT_EQ(print(kernel), R"(kernel k(a: f32[8], out: f32[8]) {
  for (i, 0, 8) {
    out[i] = a[i] + 0.0f
  }
  out[1] = 3.0f
  out[2] = 4.0f
  for (o, 0, 2) {
    for (v, 0, 4) {
      out[o*4 + v] = 5.0f
    }
  }
  for (o, 0, 3) {
    for (v, 0, 4) {
      if (o*4 + v >= 8) {
        out[0] = 6.0f
      }
    }
  }
}
)");
}

TEST(LoopSimplify, IsIdempotent) {
  const Expr e = x * y + load(Buffer::param("a", DType::i64, {4}), x);
  const Expr once = simplify(e);
  EXPECT_EQ(print(simplify(once)), print(once));
  const Stmt s = for_loop("i", 0, 4, store(Buffer::param("a", DType::i64, {4}), i, i * y));
  EXPECT_EQ(print(simplify(simplify(s))), print(simplify(s)));
}

}  // namespace
}  // namespace kiln::loop
