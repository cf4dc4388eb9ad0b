// The graph rewrites the compiler runs before partitioning, as one readable list.
//
// `rewrite_graph` runs the rewrite passes in the order of `kRewritePipeline`, then dead-code
// and common-subexpression elimination, and repeats the round while a rewrite changes the
// graph (a folded layout op can expose a reduction to eliminate, and the reverse), at most
// kMaxRewriteRounds times. Each rewrite can be switched off by name, for bisecting a wrong
// result or measuring what it gains. Graph outputs keep their names: a rewritten output takes
// over its old value's name where that name is free.
#pragma once

#include <array>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "support/status.h"

namespace kiln {

inline constexpr std::array<std::string_view, 3> kRewritePipeline = {
    "fold-constants", "fold-layout", "eliminate-reductions"};
inline constexpr int kMaxRewriteRounds = 4;
// Decomposing composites (passes/decompose.h) is a rewrite too, switched off by this name, but
// the compiler runs it after the pipeline, deciding by the partitioner's estimated cost
// (compiler/decompose_by_cost.h).
inline constexpr std::string_view kDecomposeRewrite = "decompose";

struct RewriteOptions {
  bool enabled = true;
  // Names from kRewritePipeline, and kDecomposeRewrite.
  std::set<std::string, std::less<>> disabled = {};
  // The search over the shipped proved substitutions (compiler/substitute_by_cost.h), after
  // the pipeline and before decomposition, within its expansion limit and time budget.
  bool substitute = true;
  int substitute_max_expansions = 8;
  double substitute_max_seconds = 60;  // the search's time budget

  bool runs(std::string_view name) const { return enabled && !disabled.contains(name); }
};

// Whether a kind of composite (a DecompositionUnit, passes/decompose.h) was decomposed, and the
// estimates that decided it.
struct DecompositionDecision {
  std::string unit;
  int nodes = 0;  // the composites of that kind in the graph
  double seconds_composite = 0;   // estimated time of the partition with them whole
  double seconds_decomposed = 0;  // and decomposed
  bool decomposed = false;
};

// What a rewrite did over all rounds.
struct RewriteSummary {
  std::string name;
  int rounds_changed = 0;
  double seconds = 0;
};

// A step of the substitution search's path (subst/search.h: AppliedRewrite), with the
// partitioner's estimates before and after.
struct SubstitutionStep {
  std::string rule;
  int applications = 1;
  double seconds_before = 0;
  double seconds_after = 0;
};

// What the substitution search did: its path from the graph to the best one it found.
struct SubstitutionSummary {
  std::vector<SubstitutionStep> steps;
  int rules = 0;     // proved rules searched with
  int expanded = 0;  // graphs expanded
  int priced = 0;    // graphs partitioned to estimate their cost
  bool stopped_at_limit = false;  // at the most expansions allowed
  bool stopped_at_time = false;   // at the time budget
  double seconds = 0;
};

struct RewriteReport {
  std::vector<RewriteSummary> rewrites;  // in pipeline order, disabled ones left out
  int nodes_before = 0;
  int nodes_after = 0;
  std::vector<DecompositionDecision> decompositions;  // filled by the compiler
  std::optional<SubstitutionSummary> substitution;    // filled by the compiler when it searched
};

// Every rewrite's name: kRewritePipeline's, then kDecomposeRewrite.
std::vector<std::string_view> rewrite_names();
// Whether `name` is one of rewrite_names().
bool is_rewrite_name(std::string_view name);

Expected<RewriteReport> rewrite_graph(Graph& graph, const RewriteOptions& options = {});

}  // namespace kiln
