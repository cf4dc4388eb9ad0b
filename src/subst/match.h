// Finding a rule's source pattern in a graph (subst/rule.h).
//
// A match binds each source node to a graph node of the same op, attributes and arity, and
// each variable to a graph value of the variable's dtype and rank, consistently: a source
// value read twice is one graph value, distinct source nodes are distinct graph nodes. The
// search is backtracking over the source's nodes, results first: a node reached through a
// consumer's input is bound by it; one that is not (a second result, as in two matmuls sharing
// an input) is tried against every graph node of its op.
//
// An attribute with a choice (rule.h) matches any of its values, one value in the whole match.
//
// The operands of add and mul, which commute exactly (in IEEE arithmetic too), match in either
// order, so a rule needs no variant for each order and the search no commutation steps. A
// pattern symmetric under such a swap matches once per order: the rewrites compute the same
// values but may differ in form (the order of a concat), and the search prices each form once
// (subst/search.h).
//
// Only matches a rewrite can replace are returned: a source value that is not a result must
// have no reader outside the match and not be a graph output (the target would not compute
// it), and no variable may be computed from the match's values (the target would read what it
// replaces).
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "subst/rule.h"

namespace kiln::subst {

// Whether `op`'s two operands may be swapped without changing its result: add and mul.
bool commutes(Op op);

struct Match {
  std::vector<Value*> variables;  // by source parameter
  std::vector<Node*> nodes;       // by source node, in the source's order
  std::map<std::string, AttrValue> attributes;  // the rule's attribute choices, as matched
};

// Every match of `rule`'s source in `graph`, up to `limit`, in graph order of the node
// matching the source's last node.
std::vector<Match> find_matches(const Graph& graph, const Rule& rule,
                                size_t limit = std::numeric_limits<size_t>::max());

// `match`, found in `graph`, as the same match in `copy`, a clone of `graph` (Graph::clone keeps
// the order of nodes and inputs): to apply it to a copy without matching again.
Match match_in_copy(const Graph& graph, const Match& match, const Graph& copy);

}  // namespace kiln::subst
