// Decomposition by cost: a kind of composite is written as primitives (passes/decompose.h)
// when, and only when, the partitioner estimates the decomposed graph faster.
//
// For each DecompositionUnit with nodes in the graph, in order: decompose that kind on a copy
// of the graph as it stands (with the units already taken), run the rewrite pipeline (common-
// subexpression elimination merges the forward's statistics with the backward's), partition
// both with the compile's fusion options, and keep the copy if its estimated time is lower by
// more than kDecompositionMargin. Each decision is reported with both estimates. Partitioning
// is the expensive part: one partition of the graph, then one per unit present.
#pragma once

#include <vector>

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// A decomposition must win by this fraction of the estimate: the estimates of two plans that
// differ in a handful of nodes are within the cost model's noise of each other.
inline constexpr double kDecompositionMargin = 1e-3;

Expected<std::vector<DecompositionDecision>> decompose_by_cost(Graph& graph,
                                                               const CompileOptions& options);

}  // namespace kiln
