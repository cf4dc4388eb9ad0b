// Proving rewrite rules (subst/rule.h) with Z3 by symbolic evaluation.
//
// A rule is instantiated at every assignment of small extents: each distinct example extent of
// its variables (2 or more; 1 stays 1) takes every value from 1 to ProofOptions::max_extent,
// equal example extents together, plus the example itself, and each at every assignment of
// the rule's attribute choices (rule.h), so a choice is proved at each of its values. At an
// instance the source is built
// at those shapes and the target is made from it by the applier (subst/apply.h), so the proof
// covers exactly what an application does; an instance where the source or the target does
// not build is skipped, as the applier refuses there. Both graphs are then evaluated element
// by element over Z3 reals: each variable element is a real unknown; add, sub, mul, div, neg,
// max, min, relu, abs are arithmetic; matmul (batch axes broadcast), conv (grouped, strided,
// dilated, zero-padded), transpose, reshape, broadcast_to, concat, split and reduce_sum are
// sums and index maps; batch_norm_infer is (x - mean) rsqrt(var + epsilon) scale + bias; every
// other elementwise op (exp, tanh, rsqrt ...) is an uninterpreted function of its operand, the
// same in both graphs (batch_norm_infer's rsqrt is rsqrt's), about which only the axioms below
// are known. Each result element of the target must equal the source's for all values of the
// unknowns: either their difference, written by Z3's simplifier as a sum of monomials, is 0,
// or Z3 proves the negation unsatisfiable (the solver alone times out on a convolution with a
// folded scale).
//
// Axioms: exp(x + y) = exp(x) exp(y) and exp(x - y) = exp(x) / exp(y), checked on random
// reals (prove_axioms_numerically) and given to Z3 instantiated at the exp terms the graphs
// build, so that the query has no quantifier. Z3 gets 5 s per instance for all the elements
// at once; when that is undecided, each element is asked alone (1 s each, 20 s in all): one
// disjunction over 1,470 elements' if-then-elses timed out where each alone is immediate.
//
// The proof is over the reals: it says the rule is an identity of real arithmetic, not that
// its two sides round alike in f32 (a reassociating rule changes rounding; the numeric check,
// check_rule_numerically, bounds that at the example shapes). A rule with an op the evaluator
// does not know is not proved: it is rejected with the op named.
#pragma once

#include <string>

#include "subst/rule.h"
#include "support/status.h"

namespace kiln::subst {

struct ProofOptions {
  int max_extent = 3;
  int max_instances = 2048;  // more instances than this: the proof is refused
};

struct Proof {
  int instances = 0;  // extent assignments proved
  int skipped = 0;    // where the source or the target does not build
};

// Why a rule was not proved: a counterexample (the sides differ at some instance; for a
// generated rule, a fingerprint collision), Z3 giving up within its time, or a rule the
// prover cannot take (an op without symbolic semantics, too many instances, a rule that does
// not apply to its own example).
enum class Rejection { refuted, undecided, unsupported };

// The proof of `rule`, or why there is none, its message naming the instance's shapes;
// `rejection`, when given, is set to the kind of failure.
Expected<Proof> prove_rule(const Rule& rule, const ProofOptions& options = {},
                           Rejection* rejection = nullptr);

// The axioms, evaluated on random reals; an error names one that does not hold.
Status prove_axioms_numerically();

}  // namespace kiln::subst
