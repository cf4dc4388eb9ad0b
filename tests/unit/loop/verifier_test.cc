// The loop-IR verifier: accepts well-formed kernels, rejects each broken rule with a message
// that names the rule and prints the offending node.
#include <gtest/gtest.h>

#include "loop/verifier.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using ::kiln::testing::is_error_with;

const Buffer kIn = Buffer::param("in", DType::f32, {8});
const Buffer kOut = Buffer::param("out", DType::f32, {8});

Kernel kernel_of(Stmt body) { return Kernel{"k", {kIn, kOut}, std::move(body)}; }

TEST(LoopVerifier, AcceptsAWellFormedKernel) {
  const Buffer t = Buffer::local("t", DType::f32, 8);
  const Expr i = var("i");
  const Stmt body =
      allocate(t, block({for_loop("i", 0, 8, ForKind::vectorized, store(t, i, load(kIn, i) * 2.0)),
                         for_loop("i", 0, 8, ForKind::parallel,
                                  let_stmt("x", load(t, i),
                                           if_then_else(var("x", DType::f32) > 0.0f,
                                                        store(kOut, i, var("x", DType::f32)),
                                                        store(kOut, i, make_float(0)))))}));
  Status status = verify(kernel_of(body));
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(LoopVerifier, RejectsMixedOperandTypes) {
  const Stmt body =
      for_loop("i", 0, 8, store(kOut, var("i"), load(kIn, var("i")) + make_float(1, DType::f64)));
  EXPECT_TRUE(is_error_with(
      verify(kernel_of(body)),
      {"kernel 'k'", "operands of '+' have different types f32 and f64", "in[i] + 1.0"}));
}

TEST(LoopVerifier, RejectsAStoreOfTheWrongElementType) {
  const Stmt body = for_loop("i", 0, 8, store(kOut, var("i"), cast(DType::f64, load(kIn, 0))));
  EXPECT_TRUE(is_error_with(verify(kernel_of(body)),
                            {"a store of f64 to 'out', which holds f32", "out[i] = f64(in[0])"}));
}

TEST(LoopVerifier, AnAtomicStoreAddsToItsOwnElementInF32OrF64) {
  EXPECT_TRUE(verify(kernel_of(for_loop("i", 0, 8, atomic_add(kOut, 0, load(kIn, var("i"))))))
                  .is_ok());
  // Its value must be the element it stores plus an addend.
  const Stmt elsewhere = Stmt(std::make_shared<const Store>(
      kOut, make_int(0), load(kOut, make_int(1)) + load(kIn, make_int(0)), /*is_atomic=*/true));
  EXPECT_TRUE(is_error_with(verify(kernel_of(elsewhere)),
                            {"an atomic store's value is not its element plus an addend"}));
  const Buffer counts = Buffer::param("n", DType::i64, {8});
  const Kernel integers{"k", {counts}, atomic_add(counts, 0, make_int(1))};
  EXPECT_TRUE(is_error_with(verify(integers), {"an atomic add of i64, not f32 or f64"}));
}

TEST(LoopVerifier, RejectsUnboundAndMistypedVariables) {
  EXPECT_TRUE(is_error_with(verify(kernel_of(store(kOut, var("j"), make_float(1)))),
                            {"variable 'j' is not bound"}));
  const Stmt mistyped = for_loop("i", 0, 8, store(kOut, 0, var("i", DType::f32)));
  EXPECT_TRUE(
      is_error_with(verify(kernel_of(mistyped)), {"variable 'i' is used as f32 but bound as i64"}));
  // A loop variable is not visible after its loop.
  const Stmt after = block({for_loop("i", 0, 8, store(kOut, var("i"), make_float(1))),
                            store(kOut, var("i"), make_float(2))});
  EXPECT_TRUE(is_error_with(verify(kernel_of(after)), {"variable 'i' is not bound"}));
}

TEST(LoopVerifier, RejectsANameBoundAgainInItsOwnScope) {
  const Stmt nested = for_loop("i", 0, 8, for_loop("i", 0, 8, store(kOut, var("i"), load(kIn, 0))));
  EXPECT_TRUE(is_error_with(verify(kernel_of(nested)),
                            {"'i' is bound again inside its own scope", "for (i, 0, 8) {"}));
  const Stmt in_reduction =
      for_loop("i", 0, 8, store(kOut, var("i"), sum("i", 0, 8, load(kIn, var("i")))));
  EXPECT_TRUE(is_error_with(verify(kernel_of(in_reduction)),
                            {"'i' is bound again", "sum(i, 0, 8, in[i])"}));
  // Sibling scopes may reuse a name.
  const Stmt siblings = block({for_loop("i", 0, 8, store(kOut, var("i"), make_float(1))),
                               for_loop("i", 0, 8, store(kOut, var("i"), make_float(2)))});
  EXPECT_TRUE(verify(kernel_of(siblings)).is_ok());
}

TEST(LoopVerifier, RejectsUndeclaredOrMismatchedBuffers) {
  const Buffer stranger = Buffer::param("stranger", DType::f32, {8});
  EXPECT_TRUE(is_error_with(verify(kernel_of(store(stranger, 0, make_float(1)))),
                            {"buffer 'stranger' is neither a parameter nor an enclosing allocation",
                             "stranger[0] = 1.0f"}));
  const Buffer impostor = Buffer::param("in", DType::f32, {16});
  EXPECT_TRUE(is_error_with(verify(kernel_of(store(kOut, 0, load(impostor, 0)))),
                            {"buffer in: f32[16] is declared as in: f32[8]"}));
  // A local buffer is visible only inside its allocation.
  const Buffer t = Buffer::local("t", DType::f32, 4);
  const Stmt escaped = block({allocate(t, store(t, 0, make_float(1))), store(kOut, 0, load(t, 0))});
  EXPECT_TRUE(is_error_with(verify(kernel_of(escaped)), {"buffer 't' is neither"}));
  const Buffer shadow = Buffer::local("in", DType::f32, 4);
  EXPECT_TRUE(is_error_with(verify(kernel_of(allocate(shadow, store(shadow, 0, make_float(1))))),
                            {"buffer 'in' is already declared"}));
  EXPECT_TRUE(
      is_error_with(verify(Kernel{"k", {kIn, kIn}, no_op()}), {"two parameters are named 'in'"}));
}

TEST(LoopVerifier, RejectsNonI64IndicesAndBounds) {
  const Stmt index = store(kOut, make_int(0, DType::i32), make_float(1));
  EXPECT_TRUE(is_error_with(verify(kernel_of(index)), {"a store index is i32, not i64"}));
  const Stmt bounds = for_loop("i", 0, make_int(8, DType::i32), store(kOut, 0, make_float(1)));
  EXPECT_TRUE(is_error_with(verify(kernel_of(bounds)), {"loop bounds must be i64"}));
}

TEST(LoopVerifier, RejectsVectorizedLoopsWithoutConstantExtentsOrWithParallelInside) {
  const Stmt dynamic = for_loop(
      "n", 1, 4,
      for_loop("i", 0, var("n"), ForKind::vectorized, store(kOut, var("i"), make_float(1))));
  EXPECT_TRUE(is_error_with(
      verify(kernel_of(dynamic)),
      {"a vectorized loop needs a constant positive extent", "vectorized for (i, 0, n) {"}));
  const Stmt nested = for_loop(
      "i", 0, 2, ForKind::vectorized,
      for_loop("j", 0, 4, ForKind::parallel, store(kOut, var("i") * 4 + var("j"), make_float(1))));
  EXPECT_TRUE(
      is_error_with(verify(kernel_of(nested)), {"a parallel loop inside a vectorized loop"}));
}

TEST(LoopVerifier, RejectsAVectorizedReductionInsideAVectorizedLoopOrReduction) {
  const Expr row = reduce(ReduceOp::sum, "k", 0, 4, make_float(1), /*vectorized=*/true);
  EXPECT_TRUE(verify(kernel_of(for_loop("i", 0, 4, store(kOut, var("i"), row)))).is_ok());
  EXPECT_TRUE(is_error_with(
      verify(kernel_of(for_loop("i", 0, 4, ForKind::vectorized, store(kOut, var("i"), row)))),
      {"a vectorized reduction inside a vectorized loop or reduction"}));
  const Expr nested = reduce(ReduceOp::sum, "j", 0, 4, row, /*vectorized=*/true);
  EXPECT_TRUE(is_error_with(verify(kernel_of(store(kOut, 0, nested))),
                            {"a vectorized reduction inside a vectorized loop or reduction"}));
}

TEST(LoopVerifier, RejectsIllTypedExpressions) {
  const std::map<std::string, DType, std::less<>> vars = {
      {"x", DType::f32}, {"n", DType::i64}, {"b", DType::boolean}};
  const Expr x = var("x", DType::f32), n = var("n"), b = var("b", DType::boolean);
  EXPECT_TRUE(verify(select(b && n < 3, x, x * 2.0f), vars).is_ok());
  EXPECT_TRUE(is_error_with(verify(n && n, vars), {"'&&' takes bool operands, not i64"}));
  EXPECT_TRUE(is_error_with(verify(b + b, vars), {"'+' takes numeric operands, not bool"}));
  EXPECT_TRUE(is_error_with(verify(select(n, x, x), vars),
                            {"a select condition is i64, not bool", "select(n, x, x)"}));
  EXPECT_TRUE(
      is_error_with(verify(select(b, x, n), vars), {"select branches have types f32 and i64"}));
  EXPECT_TRUE(is_error_with(verify(call(Intrinsic::exp, {n}), vars), {"exp of i64"}));
  EXPECT_TRUE(
      is_error_with(verify(call(Intrinsic::pow, {x}), vars), {"pow takes 2 argument(s), not 1"}));
  EXPECT_TRUE(verify(call(Intrinsic::abs, {n}), vars).is_ok());
  EXPECT_TRUE(is_error_with(verify(sum("k", 0, 4, b), vars), {"a sum reduces a bool body"}));
  EXPECT_TRUE(is_error_with(verify(!x, vars), {"the operand of '!' is f32, not bool"}));
  const Expr inexact(std::make_shared<const FloatImm>(DType::f32, 0.1));
  EXPECT_TRUE(is_error_with(verify(inexact), {"0.1 is not representable in f32"}));
}

}  // namespace
}  // namespace kiln::loop
