// The rewrite stage of the compiler pipeline (compiler/pipeline.h): graph rewrites as one list.
//
// `rewrite_graph` runs the rewrite passes in the order of `kRewritePipeline`, then dead-code
// and common-subexpression elimination, and repeats the round while a rewrite changes the
// graph (a folded layout op can expose a reduction to eliminate, and the reverse), at most
// kMaxRewriteRounds times. Each rewrite can be switched off by name, for bisecting a wrong
// result or measuring what it gains. Graph outputs keep their names: a rewritten output takes
// over its old value's name where that name is free.
#pragma once

#include <array>
#include <map>
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
// the compiler runs it as a stage of its own, deciding by the partitioner's estimated cost
// (compiler/decompose_by_cost.h).
inline constexpr std::string_view kDecomposeRewrite = "decompose";
// Canonicalization (subst/canonicalize.h: the forms exporters write, recognized by rules) runs
// before the rewrite passes, in the compiler's rewrite stage, switched off by this name.
inline constexpr std::string_view kCanonicalizeRewrite = "canonicalize";

struct RewriteOptions {
  bool enabled = true;
  // Names from kRewritePipeline, and kDecomposeRewrite.
  std::set<std::string, std::less<>> disabled = {};

  bool runs(std::string_view name) const { return enabled && !disabled.contains(name); }
};

// What a rewrite did over all rounds.
struct RewriteSummary {
  std::string name;
  int rounds_changed = 0;
  double seconds = 0;
};

struct RewriteReport {
  // How often each canonical rule applied, by name (kCanonicalizeRewrite; none: empty).
  std::map<std::string, int> recognized;
  std::vector<RewriteSummary> rewrites;  // in pipeline order, disabled ones left out
  int nodes_before = 0;
  int nodes_after = 0;
};

// Every rewrite's name: kCanonicalizeRewrite, kRewritePipeline's, then kDecomposeRewrite.
std::vector<std::string_view> rewrite_names();
// Whether `name` is one of rewrite_names().
bool is_rewrite_name(std::string_view name);

Expected<RewriteReport> rewrite_graph(Graph& graph, const RewriteOptions& options = {});

}  // namespace kiln
