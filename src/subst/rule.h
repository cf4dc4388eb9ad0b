// Rewrite rules as data (issue 7): a rule is a pair of graphs over the same variables, a source
// pattern and a target that computes the same outputs from them. Hand-written rules and, later,
// generated ones share one text format, read by parse_rules:
//
//   // matmul distributes over a sum of right-hand sides
//   rule matmul-distributes-over-add
//   graph @source(%a: f32[2,3], %b: f32[3,5], %c: f32[3,5]) {
//     %x = matmul(%a, %b) : f32[2,5]
//     %y = matmul(%a, %c) : f32[2,5]
//     %s = add(%x, %y) : f32[2,5]
//     return %s
//   }
//   graph @target(%a: f32[2,3], %b: f32[3,5], %c: f32[3,5]) {
//     %t = add(%b, %c) : f32[3,5]
//     %s = matmul(%a, %t) : f32[2,5]
//     return %s
//   }
//
// Each graph is IR text (ir/parser.h). The source's parameters are the rule's variables; the
// target has the same parameters (names and types, in order) and returns as many values, of
// the same types, in the same order: the target's k-th result replaces the source's k-th.
// Parameter types are an example: a variable matches a value of the same dtype and rank, of
// any extents, and an application builds the target at the matched shapes and keeps it only
// when its results have the source's types (matcher and applier: subst/match.h, apply.h).
//
// Attributes are literal, except where a target attribute is an extent: an optional line
// after the name,
//   extents %w1[1], %w2[1]
// declares that in the target's integer attributes the example extent of w1's axis 1 (and of
// w2's) stands for that extent, so `split(%y) {sizes = [4, 5]}` splits at the matched
// columns. Declared example extents must be distinct and at least 2. The source's attributes
// match literally, except those given a choice:
//
// A source attribute may match one of several values instead of its literal one: a line
//   attributes strides = [1, 1] | [2, 2]
// (one per attribute, integer or integer-list values) lets every source node with a `strides`
// attribute match any listed value, the same in all of them, and gives every target node with
// that attribute the matched value. The source's own value must be listed. The prover proves
// the rule at every listed value (subst/prove.h), so a rule never applies at a value it was not
// proved at.
//
// A variable may be declared a constant: a line
//   constant %eps as epsilon
// (one per variable) lets %eps match only a value computed by a `constant` node whose elements
// are all equal (the scalar an exporter writes for a layer norm's epsilon), and gives every
// target node's float attribute `epsilon` its value; `constant %c` alone only restricts the
// match (a division by a constant, rewritten as a product). The target's attribute holds an
// example value, which the numeric check gives the variable; the prover does not take a rule
// that binds an attribute so (its target would not depend on the variable).
//
// A rule may be written once over dtypes and ranks, its graphs giving one example: a line
//   dtypes f32 | bf16 | f16
// lets the rule match at each listed float dtype (the example's own among them): every value,
// constant and dtype attribute of the example's dtype takes the listed one, and a constant's
// value is rounded to it, so a pattern's constants match what an exporter writes in that
// dtype; a line
//   ranks %x 3 | 2 | 4
// lets the listed variables (of one example rank, which is listed) match at each listed rank:
// leading axes are dropped, or new ones put in front, and every node is built again at the
// new types. The rule is then the set of its instances, one per dtype and rank (`instances`,
// the example's first), each a rule of fixed types as above: it is matched, applied, proved
// and checked instance by instance.
//
// A rule file's rules are checked when read: the two graphs agree in parameters and result
// types, every variable is used by the source, the source computes each of its results, and
// names are unique. check_rule_numerically compares the two graphs on random inputs: a
// fingerprint, not a proof (the prover is subst/prove.h, `kiln subst verify`).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::subst {

// A target attribute value that stands for an extent of a variable (see above).
struct SymbolicExtent {
  size_t variable = 0;  // index of the source parameter
  int axis = 0;
  int64_t example = 0;  // the extent in the rule's example types
};

// A source attribute that matches any of several values (see above).
struct AttributeChoice {
  std::string name;
  std::vector<AttrValue> values;
};

// A variable that matches only a constant of equal elements (see above).
struct ConstantVariable {
  size_t variable = 0;    // index of the source parameter
  std::string attribute;  // the target attribute that takes its value, or empty
};

// Variables that match at several ranks (see above).
struct RankChoice {
  std::vector<size_t> variables;  // indices of source parameters, of one example rank
  std::vector<int> ranks;         // the example's first
};

struct Rule {
  std::string name;
  std::string origin;  // "FILE:LINE" of its `rule` line; an instance adds "(bf16, rank 2)"
  std::vector<SymbolicExtent> extents;
  std::vector<AttributeChoice> attribute_choices;
  Graph source;
  Graph target;
  std::vector<ConstantVariable> constants;
  std::vector<DType> dtypes;  // `dtypes`, the example's first; empty when not given
  RankChoice ranks;           // `ranks`; no variables when not given
  // With dtypes or ranks: the rule at each combination, the example first; else empty.
  std::vector<Rule> instances;
};

// The rules of fixed types `rule` stands for: its instances, or the rule itself.
std::span<const Rule> instances_of(const Rule& rule);

Expected<std::vector<Rule>> parse_rules(std::string_view text, std::string_view filename = "<rules>");
Expected<std::vector<Rule>> read_rules_file(const std::string& path);

// The value every element of `value` holds, when it is computed by a `constant` node whose
// elements are all equal (a constant variable's match).
std::optional<double> splat_constant(const Value& value);

// Both graphs on `trials` sets of random inputs at the example shapes, in the reference
// interpreter (a variable bound to an attribute takes the target's example value): every
// result must agree within 64 units in the last place of its dtype, relative to its magnitude
// (at least 1), since the interpreter rounds each value to its dtype and a rule may
// reassociate; integer and bool results exactly. The error names the rule, the trial and the
// first result that differs.
Status check_rule_numerically(const Rule& rule, int trials = 3);

}  // namespace kiln::subst
