// Applying a rule where it matched (subst/match.h): the target is built from the matched
// variables and its results replace the source's.
//
// The target's nodes are added with Graph::add_node, so attributes are checked and types
// inferred at the matched shapes, declared extents bound to the matched ones and attributes
// with a choice set to the matched value (rule.h). The
// application is refused, leaving the graph as it was, when a target node does not build
// there or a result's type differs from the value it would replace: the rule does not hold at
// those extents as written.
// The new nodes move to just after the last matched node (Graph::move_computation_after), so
// the rewritten graph keeps its order, and each new result takes the name of the value it
// replaces (graph outputs keep their names); the source's nodes, now unread, are left for
// dead-code elimination.
#pragma once

#include "ir/graph.h"
#include "subst/match.h"
#include "subst/rule.h"
#include "support/status.h"

namespace kiln::subst {

// Whether the rule was applied. `match` must be a current match of `rule` in `graph`.
bool apply_match(Graph& graph, const Rule& rule, const Match& match);

}  // namespace kiln::subst
