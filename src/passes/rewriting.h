// What the rewrite passes (fold-constants, fold-layout, eliminate-reductions) share: a walk over
// the graph's nodes that survives the reordering each rewrite causes, and the replacement of a
// value by what a rewrite built.
#pragma once

#include <functional>
#include <string_view>

#include "ir/builder.h"
#include "ir/graph.h"

namespace kiln {

// Calls `rewrite` on each node, in the graph's order when the walk starts, skipping nodes that
// are dead by then (no output read, none a graph output: an earlier rewrite may have replaced
// them). A rewrite replaces uses and leaves the nodes it bypassed for dead-code elimination.
// Returns whether any call rewrote something.
bool rewrite_each_node(Graph& graph, const std::function<bool(Graph&, Node*)>& rewrite);

// Every use of `from` becomes a use of `to`, which `builder` built for the pass named `pass`
// from values defined before `from`; `to`'s new nodes move to where `from` was computed
// (Graph::move_computation_after). A builder error or a failed replacement is a bug in that
// pass: an internal compiler error.
void replace_with(Graph& graph, const GraphBuilder& builder, Value* from, Value* to,
                  std::string_view pass);

}  // namespace kiln
