// What schedule directives must know about a loop before they transform it: its accesses,
// index arithmetic in linear form, and the proof that its iterations are independent.
//
// Indices of lowered kernels are affine in the loop variables (`i0*1000 + i1`), possibly
// through the division and remainder that fuse introduces (`f / 125 * 1000 + f % 125 * 8`).
// `linearize` writes an index as constant coefficients times *terms* (the maximal
// subexpressions that are not +, - or a product with a constant) plus a constant; equal terms
// are recognised by their printed form. The independence proof treats the terms that use the
// loop variable v as mixed-radix digits of v (v, v / d, v % m, (v / d) % m) and requires,
// for each buffer the loop writes, that all of its accesses inside the loop (loads included)
// have the same digits with the same coefficients and the same terms in variables bound
// outside the loop, and that from the lowest digit up each coefficient exceeds the span of
// everything below it (the interval of the terms in variables bound inside the loop, from
// loop/bounds.h, plus the lower digits' spans). Two iterations then differ in some highest
// digit, whose coefficient outweighs every other difference, so they touch different
// elements. Buffers allocated inside the loop are private to an iteration and need no proof.
// The proof is deliberately conservative: anything else (a digit missing, a load in an index
// that the loop may write, an unbounded term, an unknown statement kind) is "not proven",
// with a reason.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "loop/bounds.h"
#include "loop/expr.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

// sum of coefficient * term + constant, exactly equal to the expression it came from.
struct LinearForm {
  struct Term {
    Expr expr;
    int64_t coefficient = 0;  // never 0
  };
  std::map<std::string, Term, std::less<>> terms;  // by the term's printed form
  int64_t constant = 0;
};

// The linear form of an i64 expression; nullopt when a coefficient would overflow.
std::optional<LinearForm> linearize(const Expr& index);
// The form as an expression: terms in key order, then the constant.
Expr to_expr(const LinearForm& form);

// The coefficient of `var` in `index` when var occurs only as a plain term (0 when it does
// not occur); nullopt when it occurs inside another term (a division, a load, ...).
std::optional<int64_t> stride_of(const Expr& index, std::string_view var);

// The first loop over `var` in `stmt` (a split's tail copies loops, so a name can have
// several), or null.
const For* find_loop(const Stmt& stmt, std::string_view var);

// Whether `e` (or `stmt`) holds a reduction; whether `stmt` holds a loop.
bool contains_reduce(const Expr& e);
bool contains_reduce(const Stmt& stmt);
bool contains_loop(const Stmt& stmt);

// Whether every statement in `stmt` is of a kind this analysis knows (for, store, let_stmt,
// allocate, if_then_else, block); others are opaque to scheduling.
bool all_statements_known(const Stmt& stmt);

// Whether two statements may run in either order: neither writes a buffer the other reads or
// writes. False when either holds a statement this analysis does not know (a gemm).
bool statements_commute(const Stmt& a, const Stmt& b);

// One load or store, with the intervals of every loop, reduction and integer let variable
// bound around it (those given to collect_accesses included).
struct Access {
  Buffer buffer;
  Expr index;
  bool is_store = false;
  const Load* load = nullptr;  // the load node, for loads
  BoundsScope scope;
};

struct Accesses {
  std::vector<Access> list;                        // in program order
  std::set<std::string, std::less<>> bound_names;  // variables bound inside the statement
  std::set<std::string, std::less<>> allocated;    // buffers allocated inside it
};

// The accesses in `stmt`, whose free variables have the intervals in `scope`.
Accesses collect_accesses(const Stmt& stmt, const BoundsScope& scope);

// The interval of `loop`'s variable given the intervals of the variables around it.
Interval loop_interval(const For& loop, const BoundsScope& scope);

// OK when no two iterations of `loop` touch the same element of a buffer that one of them
// writes (see above); otherwise an error saying why that is not proven. `scope` holds the
// intervals of the variables bound around the loop.
Status check_independent(const For& loop, const BoundsScope& scope);

}  // namespace kiln::loop
