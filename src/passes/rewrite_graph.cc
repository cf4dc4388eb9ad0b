#include "passes/rewrite_graph.h"

#include <algorithm>
#include <map>

namespace kiln {
namespace {

// Gives each graph output back the name it had before the rewrites, where its new value is
// computed by a node, is no other output, and the name is free.
void restore_output_names(Graph& graph, const std::vector<std::string>& names) {
  std::map<const Value*, int> uses;
  for (const Value* output : graph.outputs()) ++uses[output];
  for (size_t i = 0; i < names.size(); ++i) {
    Value* output = graph.outputs()[i];
    if (output->name() == names[i] || output->is_graph_input() || uses[output] > 1) continue;
    if (graph.find_value(names[i]) != nullptr) continue;
    graph.rename_value(output, names[i]);
  }
}

}  // namespace

std::vector<std::string_view> rewrite_names() {
  std::vector<std::string_view> names = {kCanonicalizeRewrite};
  names.insert(names.end(), kRewritePipeline.begin(), kRewritePipeline.end());
  names.push_back(kDecomposeRewrite);
  return names;
}

bool is_rewrite_name(std::string_view name) {
  const std::vector<std::string_view> names = rewrite_names();
  return std::ranges::find(names, name) != names.end();
}

Expected<RewriteReport> rewrite_graph(Graph& graph, const RewriteOptions& options) {
  RewriteReport report;
  report.nodes_before = graph.num_nodes();
  std::vector<std::string> round;
  for (std::string_view name : kRewritePipeline) {
    if (!options.runs(name)) continue;
    round.emplace_back(name);
    report.rewrites.push_back({.name = std::string(name)});
  }
  // Dead-code and common-subexpression elimination run whenever rewrites do, even with every
  // named rewrite disabled: a decomposition (compiler/decompose_by_cost.h) relies on them.
  if (options.enabled) {
    std::vector<std::string> output_names;
    for (const Value* output : graph.outputs()) output_names.push_back(output->name());
    round.emplace_back("dce");
    round.emplace_back("cse");
    const PassManagerOptions pass_options = PassManagerOptions::from_environment();
    for (int r = 0; r < kMaxRewriteRounds; ++r) {
      KILN_ASSIGN_OR_RETURN(std::vector<PassRun> runs, run_passes(graph, round, pass_options));
      bool changed = false;
      for (size_t i = 0; i < report.rewrites.size(); ++i) {
        report.rewrites[i].rounds_changed += runs[i].changed;
        report.rewrites[i].seconds += runs[i].seconds;
        changed = changed || runs[i].changed;
      }
      if (!changed) break;
    }
    restore_output_names(graph, output_names);
  }
  report.nodes_after = graph.num_nodes();
  return report;
}

}  // namespace kiln
