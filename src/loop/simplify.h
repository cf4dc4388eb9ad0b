// The loop-IR simplifier: rewrites that keep meaning and make trees smaller and canonical.
//
//   for (i, 0, 8) { for (j, 0, 1) { b[(i*4 + j + 3) / 4] = a[i] * 1.0f + 0.0f } }
//     becomes
//   for (i, 0, 8) { b[i] = a[i] + 0.0f }
//
// Rules, applied bottom-up in one pass (each child is simplified before its parent):
//  - Constant folding of every operator, cast and intrinsic through loop/scalar.h, the same
//    functions the evaluator runs.
//  - Integer +, -, * by a constant are put in *linear form*: a sum of distinct terms with
//    constant coefficients plus one constant, rebuilt with positive terms first (in order of
//    first appearance) and the constant last. This subsumes x + 0, x - x, x * 1, x * 0,
//    constants moved right and combined ((x + 3) + 4 is x + 7), and distribution of
//    constants ((x + 1) * 4 is x*4 + 4).
//  - What fusing loops splits is joined again: k*d*(x / d) + k*(x % d) is k*x in a linear
//    form (floor division and remainder make it exact for every d != 0), also through a
//    level of division: f / 3136 * 3136 + (f / 56) % 56 * 56 + f % 56 is f.
//  - Integer / and % by a constant d: terms whose coefficient d divides leave the remainder
//    ((i*4 + j) / 4 is i + j / 4, (i*4 + j) % 4 is j % 4), and when the bounds of what
//    remains lie in one period [k*d, k*d + d) the division is k and the remainder is
//    remainder - k*d ((i*4 + j) / 4 is i when 0 <= j < 4; likewise for d < 0). Also
//    x / 1, x % 1, (x / a) / b = x / (a*b) and (x % a) % b = x % b when b divides a
//    (a, b > 0). And through a common factor c of d: when what remains is c*h + l with
//    0 <= l < c, its quotient is h / (d/c) and its remainder c*(h % (d/c)) + l
//    ((k*256 + i) / 32768 is k / 128 for i in [0, 256): a reshaped tensor read across
//    the reshape).
//  - Bounds: min, max and comparisons of integers are decided when the interval of the
//    difference of their operands (loop/bounds.h, with every enclosing loop and let
//    variable's interval) has a sign: min(i*8 + 8, 64) is i*8 + 8 for i in [0, 7].
//  - Floats: only rules exact in IEEE arithmetic: x * 1, x / 1, x - 0 and constants moved
//    right of + and *; no reassociation.
//  - Booleans: x && true, x && false, x || ..., !!x, !(a < b) is a >= b for integers, a
//    comparison with its constant on the left is flipped, select with a constant condition or
//    equal branches, x op x for integers.
//  - Lets (expression and statement) whose value is a constant or a variable are inlined;
//    lets whose variable is unused are dropped.
//  - Loops and reductions with a constant extent <= 0 are removed (a reduction becomes its
//    identity); with extent 1 the variable is replaced by the minimum; loops with an empty
//    body are removed. `if` with a constant condition keeps one branch; empty branches and
//    blocks are dropped and nested blocks flattened; an allocation that its body does not
//    use is dropped. A gemm's offsets and extents are simplified; a gemm with a constant
//    m or n <= 0, or one that accumulates with a constant k <= 0, is removed.
// The input must verify (loop/verifier.h); the result verifies too. Integer overflow is
// assumed not to happen (loop/expr.h).
#pragma once

#include "loop/bounds.h"
#include "loop/expr.h"
#include "loop/stmt.h"

namespace kiln::loop {

// `scope` gives the intervals of the free variables of the expression or statement.
Expr simplify(const Expr& expr, const BoundsScope& scope = {});
Stmt simplify(const Stmt& stmt, const BoundsScope& scope = {});
Kernel simplify(const Kernel& kernel);

}  // namespace kiln::loop
