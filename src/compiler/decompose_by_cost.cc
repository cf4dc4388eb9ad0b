#include "compiler/decompose_by_cost.h"

#include <algorithm>
#include <optional>

#include "fusion/partition.h"
#include "passes/decompose.h"
#include "target/target.h"

namespace kiln {
namespace {

int count_nodes_of(const Graph& graph, const std::vector<Op>& ops) {
  return static_cast<int>(std::ranges::count_if(graph.nodes(), [&](const Node* node) {
    return std::ranges::find(ops, node->op()) != ops.end();
  }));
}

Expected<double> estimated_seconds(const Graph& graph, const fusion::FusionOptions& options) {
  KILN_ASSIGN_OR_RETURN(fusion::Partition partition, fusion::partition_graph(graph, options));
  return partition.estimated_seconds();
}

}  // namespace

Expected<std::vector<DecompositionDecision>> decompose_by_cost(Graph& graph,
                                                               const CompileOptions& options) {
  std::vector<DecompositionDecision> decisions;
  const fusion::FusionOptions fusion = target_of(options).fusion_options(options);
  std::optional<double> current;  // the estimate of `graph` as it stands, once needed
  for (const DecompositionUnit& unit : decomposition_units()) {
    const int nodes = count_nodes_of(graph, unit.ops);
    if (nodes == 0) continue;
    if (!current) {
      KILN_ASSIGN_OR_RETURN(const double whole, estimated_seconds(graph, fusion));
      current = whole;
    }
    Graph candidate = graph.clone();
    decompose_composites(candidate, unit.ops);
    KILN_RETURN_IF_ERROR(rewrite_graph(candidate, options.rewrites).status());
    KILN_ASSIGN_OR_RETURN(const double decomposed, estimated_seconds(candidate, fusion));
    DecompositionDecision& decision = decisions.emplace_back(DecompositionDecision{
        .unit = std::string(unit.name),
        .nodes = nodes,
        .seconds_composite = *current,
        .seconds_decomposed = decomposed,
        .decomposed = decomposed < *current * (1 - kDecompositionMargin)});
    if (decision.decomposed) {
      graph = std::move(candidate);
      current = decomposed;
    }
  }
  return decisions;
}

}  // namespace kiln
