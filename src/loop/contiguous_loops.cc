#include "loop/contiguous_loops.h"

#include <optional>

#include "loop/ir_visitor.h"
#include "loop/simplify.h"
#include "loop/substitute.h"

namespace kiln::loop {
namespace {

class ContiguousLoopJoiner : public IRMutator {
 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    const Stmt mutated = IRMutator::visit_for(node, self);
    const For& outer = *mutated.as<For>();
    const For* inner = outer.body.as<For>();
    const std::optional<int64_t> a = as_const_int(outer.extent);
    if (inner == nullptr || !a || outer.for_kind != ForKind::serial ||
        inner->for_kind != ForKind::serial || as_const_int(outer.min) != 0 ||
        as_const_int(inner->min) != 0) {
      return mutated;
    }
    const std::optional<int64_t> b = as_const_int(inner->extent);
    int64_t total = 0;
    if (!b || *b <= 1 || *a <= 1 || __builtin_mul_overflow(*a, *b, &total)) return mutated;
    const Expr joined = var(inner->var);
    const Stmt body =
        simplify(substitute(substitute(inner->body, inner->var, joined % make_int(*b)), outer.var,
                            joined / make_int(*b)),
                 BoundsScope{{inner->var, Interval{0, total - 1}}});
    if (divides_var(body, inner->var)) return mutated;
    return for_loop(inner->var, 0, total, body);
  }
};

}  // namespace

Stmt join_contiguous_loops(const Stmt& stmt) { return ContiguousLoopJoiner().mutate(stmt); }

}  // namespace kiln::loop
