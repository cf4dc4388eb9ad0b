// The graph stages (precision, rewrite, substitute, decompose, layout) and the partition stage
// (compiler/stages.h): each decides whether it runs, then calls the pass that does the work.
#include "compiler/decompose_by_cost.h"
#include "compiler/stages.h"
#include "compiler/substitute_by_cost.h"
#include "subst/canonicalize.h"
#include "subst/shipped_rules.h"
#include "target/target.h"

namespace kiln {

Expected<PrecisionSummary> precision_stage(Graph& graph, const CompileOptions& options) {
  const Target& target = target_of(options);
  return apply_precision(graph, options.precision,
                         [&target](Op op) { return target.computes_in_low_precision(op); });
}

// Canonicalization first: the rewrite passes then fold what it leaves (the reciprocal of a
// divisor) and remove the nodes it replaced.
Expected<RewriteReport> rewrite_stage(Graph& graph, const CompileOptions& options) {
  const int nodes_before = graph.num_nodes();
  subst::Recognitions recognized;
  if (options.rewrites.runs(kCanonicalizeRewrite)) {
    recognized = subst::canonicalize(graph, subst::canonical_rules());
  }
  KILN_ASSIGN_OR_RETURN(RewriteReport report, rewrite_graph(graph, options.rewrites));
  report.recognized = std::move(recognized);
  report.nodes_before = nodes_before;
  return report;
}

Expected<std::optional<SubstitutionSummary>> substitute_stage(Graph& graph,
                                                              const CompileOptions& options) {
  if (!options.rewrites.enabled || !options.substitution.enabled ||
      options.fusion.mode == fusion::FusionMode::off) {
    return std::optional<SubstitutionSummary>();
  }
  KILN_ASSIGN_OR_RETURN(SubstitutionSummary summary, substitute_by_cost(graph, options));
  return std::optional<SubstitutionSummary>(std::move(summary));
}

Expected<std::vector<DecompositionDecision>> decompose_stage(Graph& graph,
                                                             const CompileOptions& options) {
  if (!options.rewrites.runs(kDecomposeRewrite) || options.fusion.mode == fusion::FusionMode::off ||
      !target_of(options).decomposes_by_cost()) {
    return std::vector<DecompositionDecision>();
  }
  return decompose_by_cost(graph, options);
}

// Only where a library computes the convolutions channels last, and nothing asked for the graph
// as it is (rewrites off); priced for the machine the partition prices its kernels for.
Expected<ChannelsLastReport> layout_stage(Graph& graph, const CompileOptions& options) {
  const Target& target = target_of(options);
  if (!target.computes_convolutions_channels_last() || !options.channels_last ||
      !options.rewrites.enabled) {
    return ChannelsLastReport();
  }
  KILN_ASSIGN_OR_RETURN(const cost::DeviceProfile profile, target.cost_profile(options));
  return convert_to_channels_last(graph, profile);
}

Expected<fusion::Partition> partition_stage(const Graph& graph, const CompileOptions& options,
                                            std::span<const std::vector<Node*>> given) {
  if (given.empty()) {
    return fusion::partition_graph(graph, target_of(options).fusion_options(options));
  }
  fusion::Partition partition;
  for (const std::vector<Node*>& nodes : given) partition.groups.push_back({nodes, {}});
  return partition;
}

}  // namespace kiln
