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

#include "compiler/compile_graph.h"
#include "ir/graph.h"
#include "passes/pipeline.h"
#include "support/status.h"

namespace kiln {

// A decomposition must win by this fraction of the estimate: the estimates of two plans that
// differ in a handful of nodes are within the cost model's noise of each other.
inline constexpr double kDecompositionMargin = 1e-3;

Expected<std::vector<DecompositionDecision>> decompose_by_cost(Graph& graph,
                                                               const CompileOptions& options);

// The graph rewrites Compiler::compile runs before partitioning, and `kiln explain` shows: the
// pipeline (passes/pipeline.h), then, when asked and fused, the substitution search
// (compiler/substitute_by_cost.h), then, unless disabled or unfused (a composite's pieces would
// each be a kernel), decomposition by cost.
Expected<RewriteReport> rewrite_for_compile(Graph& graph, const CompileOptions& options);

}  // namespace kiln
