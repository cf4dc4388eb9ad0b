// The graph verifier: checks every invariant the Graph IR promises (ir/graph.h).
//
// Tests run it after every pass; the parser runs it on what it reads. It checks that
//  - every node's inputs are values of this graph defined before the node (so the node order
//    is topological and the graph acyclic), and each value is defined exactly once;
//  - use lists match the inputs exactly;
//  - attributes are canonical for the op's schema (every attribute, right kinds);
//  - stored output types equal what the op's inference computes now;
//  - value names are unique and the graph has at least one output, all of them its own values.
// The first violation is returned, naming the node (by its first output) and op.
#pragma once

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

Status verify(const Graph& graph);

}  // namespace kiln
