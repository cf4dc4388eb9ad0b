#include "compiler/substitute_by_cost.h"

#include <chrono>

#include "fusion/partition.h"
#include "subst/search.h"
#include "subst/shipped_rules.h"
#include "target/target.h"

namespace kiln {

Expected<SubstitutionSummary> substitute_by_cost(Graph& graph, const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const fusion::FusionOptions fusion = target_of(options).fusion_options(options);
  const subst::CostFunction cost = [&](const Graph& candidate) -> Expected<double> {
    Graph rewritten = candidate.clone();
    KILN_RETURN_IF_ERROR(rewrite_graph(rewritten, options.rewrites).status());
    KILN_ASSIGN_OR_RETURN(const fusion::Partition partition,
                          fusion::partition_graph(rewritten, fusion));
    return partition.estimated_seconds();
  };
  const std::span<const subst::Rule> rules = subst::shipped_rules();
  KILN_ASSIGN_OR_RETURN(subst::SearchResult result,
                        subst::search_substitutions(
                            graph, rules, cost,
                            {.max_expansions = options.substitution.max_expansions,
                             .max_priced = options.substitution.max_priced,
                             .max_seconds = options.substitution.max_seconds}));
  SubstitutionSummary summary{.steps = {},
                              .rules = static_cast<int>(rules.size()),
                              .expanded = result.expanded,
                              .priced = result.priced,
                              .alike = result.alike,
                              .stopped_at_limit = result.stopped_at_limit,
                              .stopped_at_time = result.stopped_at_time,
                              .stopped_at_priced = result.stopped_at_priced};
  for (const subst::AppliedRewrite& rewrite : result.rewrites) {
    summary.steps.push_back({.rule = rewrite.rule,
                             .applications = rewrite.applications,
                             .seconds_before = rewrite.cost_before,
                             .seconds_after = rewrite.cost_after});
  }
  if (!result.rewrites.empty()) {
    graph = std::move(result.graph);
    KILN_RETURN_IF_ERROR(rewrite_graph(graph, options.rewrites).status());
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace kiln
