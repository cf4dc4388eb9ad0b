#include "subst/canonicalize.h"

#include "passes/dead_code.h"
#include "subst/apply.h"
#include "subst/match.h"

namespace kiln::subst {
namespace {

// A bound on the passes over the rule list: each application replaces matched nodes by fewer
// or cheaper ones, so the list settles long before; the bound only guards against two rules
// that would undo each other.
constexpr int kMaxCanonicalPasses = 8;

// Applies `rule` wherever it matches; returns how often. A match is applied only while it is
// current: an earlier application may have consumed its nodes, so the rule is matched again
// after each one, the replaced nodes removed first (else they would match again).
int apply_everywhere(Graph& graph, const Rule& rule) {
  int applied = 0;
  for (;;) {
    bool changed = false;
    for (const Match& match : find_matches(graph, rule)) {
      if (apply_match(graph, rule, match)) {
        eliminate_dead_code(graph);
        ++applied;
        changed = true;
        break;
      }
    }
    if (!changed) return applied;
  }
}

}  // namespace

Recognitions canonicalize(Graph& graph, std::span<const Rule> rules) {
  Recognitions recognized;
  for (int pass = 0; pass < kMaxCanonicalPasses; ++pass) {
    bool changed = false;
    for (const Rule& rule : rules) {
      for (const Rule& instance : instances_of(rule)) {
        if (const int applied = apply_everywhere(graph, instance); applied > 0) {
          recognized[rule.name] += applied;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return recognized;
}

}  // namespace kiln::subst
