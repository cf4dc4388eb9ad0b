// Substitution, variable queries and the mutator base class.
#include <gtest/gtest.h>

#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/substitute.h"

namespace kiln::loop {
namespace {

const Expr x = var("x"), y = var("y"), i = var("i");

TEST(LoopSubstitute, ReplacesFreeOccurrencesOnly) {
  EXPECT_EQ(print(substitute(x * 2 + y, "x", y + 1)), "(y + 1)*2 + y");
  EXPECT_EQ(print(substitute(x + sum("k", 0, x, var("k") * x), {{"x", make_int(3)}})),
            "3 + sum(k, 0, 3, k*3)");
  // A binder of the same name shadows the substitution in its body (not in its value).
  EXPECT_EQ(print(substitute(let("x", x + 1, x * 2), "x", y)), "(let x = y + 1 in x*2)");
  const Buffer out = Buffer::param("out", DType::i64, {8});
  EXPECT_EQ(print(substitute(for_loop("i", 0, x, store(out, i, x + i)), "x", make_int(8))),
            "for (i, 0, 8) {\n  out[i] = 8 + i\n}\n");
}

TEST(LoopSubstitute, ReportsFreeVariablesAndBufferUses) {
  const Expr e = let("t", x + 1, var("t") * y) + sum("k", 0, 4, var("k"));
  EXPECT_EQ(free_vars(e), (std::set<std::string, std::less<>>{"x", "y"}));
  EXPECT_TRUE(uses_var(e, "y"));
  EXPECT_FALSE(uses_var(e, "t"));
  const Buffer a = Buffer::param("a", DType::i64, {8});
  const Buffer b = Buffer::param("b", DType::i64, {8});
  const Stmt s = for_loop("i", 0, 8, store(b, i, load(a, i) + x));
  EXPECT_TRUE(uses_buffer(s, "a"));
  EXPECT_TRUE(uses_buffer(s, "b"));
  EXPECT_FALSE(uses_buffer(s, "c"));
  EXPECT_TRUE(uses_var(s, "x"));
  EXPECT_FALSE(uses_var(s, "i"));
}

// A pass written on IRMutator: turns every serial loop into a parallel one.
class ParallelizeAll : public IRMutator {
 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    Stmt body = mutate(node.body);
    if (node.for_kind == ForKind::parallel && body.same_as(node.body)) return self;
    return for_loop(node.var, node.min, node.extent, ForKind::parallel, body);
  }
};

TEST(LoopMutator, RebuildsChangedNodesAndSharesTheRest) {
  const Buffer a = Buffer::param("a", DType::i64, {8});
  const Stmt inner = store(a, i, i * 2);
  const Stmt s = block({for_loop("i", 0, 8, inner), store(a, 0, make_int(1))});
  const Stmt p = ParallelizeAll().mutate(s);
  EXPECT_EQ(print(p), "parallel for (i, 0, 8) {\n  a[i] = i*2\n}\na[0] = 1\n");
  EXPECT_TRUE(p.as<Block>()->stmts[0].as<For>()->body.same_as(inner));
  EXPECT_TRUE(p.as<Block>()->stmts[1].same_as(s.as<Block>()->stmts[1]));
  // Nothing to change: the very same tree comes back.
  EXPECT_TRUE(ParallelizeAll().mutate(p).same_as(p));
}

}  // namespace
}  // namespace kiln::loop
