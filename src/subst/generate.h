// Generating rewrite rules (issue 7, item 2), as TASO does: enumerate small graphs, pair those
// that compute the same values, keep the pairs no smaller pair implies.
//
// 1. Enumerate. Every graph of up to `max_ops` ops over `variables` f64 variables whose every
//    op is used and whose last op is its result, and each variable alone (so that neg(neg(x))
//    pairs with x). Two families:
//    - matrices (square, 4 x 4): neg, relu, transpose, a sum over rows or over columns
//      (keeping the axis), a multiplication by 2, a reshape to one row, a broadcast of a row
//      or column to a square, add and mul (both broadcasting), matmul, concat of rows or of
//      columns, and each half of a split of the rows or of the columns;
//    - convolutions (an image x0 [1, 2, 4, 4], weights [2, 2, 3, 3]): conv (stride 1, pads
//      1), neg, relu, the multiplication by 2, add, mul, the concats and the split halves
//      along axes 0 and 1 (images or output channels; channels), and the inference batch norm
//      of a 2-channel tensor by four parameter vectors [2] (scale, bias, mean, variance) that
//      are variables of their own, beside the `variables` counted, read by batch norms only
//      (as in TASO, the op's weights come with it; the variance is drawn positive).
//    A graph whose shapes do not fit is not enumerated. Graphs that spell the same expression
//    (independent ops in another order, or the operands of an add or mul swapped, which the
//    matcher tries both ways) are counted once.
// 2. Fingerprint. Each graph runs in the interpreter on two sets of random inputs; its
//    fingerprint is its result's shape and values to 10 significant digits.
// 3. Pair. In each class of equal fingerprints the smallest graph (fewest ops, then its
//    expression's text) is the target of a rule from every other graph that uses all the
//    variables the target does.
// 4. Prune. Variable renaming (variables numbered by first use in the source, duplicates
//    dropped); subsumption (a source with a proper subexpression that is not the smallest
//    graph of its class is implied: the rule for that subexpression applies inside it first,
//    and what it gives pairs with the same target); common subexpressions (a source and
//    target sharing an expression over variables are implied by the rule with a variable in
//    its place).
// 5. Generalise. A rule is given the finest extents that both of its graphs build with,
//    checked numerically again at them: for matrices every partition of the variables' axes
//    is tried, finest first (every axis its own extent where it can be); for convolutions,
//    whose axes are too many for that, each group of axes at one position with one extent
//    (the spatial ones together) takes an extent of its own where the rule still holds.
//
// The result's rules still have to pass `kiln subst verify`: a fingerprint is evidence, not a
// proof, and a pair whose proof fails is a fingerprint collision.
#pragma once

#include <string>
#include <vector>

#include "subst/rule.h"
#include "support/status.h"

namespace kiln::subst {

// What the variables are: square matrices, or an image x0 [N, C, H, W] and convolution weights
// [O, C, KH, KW] (the others).
enum class Family { matrices, convolutions };

struct GeneratorOptions {
  int max_ops = 2;
  int variables = 2;
  Family family = Family::matrices;
};

struct GeneratorCounts {
  int graphs = 0;             // distinct expressions enumerated
  int classes = 0;            // fingerprint classes with two graphs or more
  int pairs = 0;              // candidate rules before pruning
  int after_renaming = 0;
  int after_subsumption = 0;
  int after_common = 0;       // after common-subexpression pruning
  int generalised = 0;        // rules whose extents are not all equal
  double enumerate_seconds = 0;
  double fingerprint_seconds = 0;
  double prune_seconds = 0;
};

struct GeneratedRules {
  std::vector<Rule> rules;
  GeneratorCounts counts;
};

Expected<GeneratedRules> generate_rules(const GeneratorOptions& options = {});

// The rule file text of `rules` (parse_rules reads it back).
std::string print_rules(const std::vector<Rule>& rules);

}  // namespace kiln::subst
