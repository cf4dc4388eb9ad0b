// Cost-guided search over rule applications (issue 7, item 4), after TASO: a queue of graphs
// ordered by cost, starting from the input graph. Each graph taken from the queue is expanded:
// every rule is applied at each of its matches to a copy; a copy that is new (what it computes
// not seen before) is priced, and it joins the queue when
// it costs less than `relaxation` times the best cost so far, so a rewrite that costs a little
// can lead to one that gains more. The best graph seen is the result, never costlier than the
// input.
//
// Rewrites that each lower the cost of the graph being expanded are also applied together,
// best first, each where its match survives the ones before it, and the result is priced as
// one more candidate: the same merge in every layer of a transformer is then one step instead
// of one expansion per layer.
//
// The cost is a parameter: the compiler's is the fusion partitioner's estimate of the graph
// (scoring what a graph costs after fusion, where TASO sums unfused op costs), and tests use
// simpler ones. The search stops when the queue empties, after `max_expansions` graphs or at
// its time budget; short of the budget it is deterministic (ties in cost go to the graph
// generated first).
//
// Matches alike, whose neighbourhoods (the ops two nodes around them) are the same, are priced
// once, and up to `max_matches_per_rule` unlike matches per rule: the same rewrite in each
// layer of a 24-layer model is one pricing, not 24, so the pricings a search needs stop
// growing with a model's depth (each pricing still partitions the whole graph).
//
// Copies are told apart by what they compute, not by their text: two orders of the same
// independent rewrites, and graphs that differ only in the order of an add's or mul's operands,
// are priced once (pruning the rewrite sequences that commute, as Fang et al. do). The matcher
// tries both operand orders of add and mul (subst/match.h), so no rule has to commute them.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "subst/rule.h"
#include "support/status.h"

namespace kiln::subst {

struct SearchOptions {
  double relaxation = 1.05;
  int max_expansions = 64;
  size_t max_matches_per_rule = 16;
  // The most graphs priced (0: no limit). Each pricing takes time in proportion to the graph,
  // so this is a budget that grows with the graph, and, unlike one in seconds, the same on
  // every machine.
  int max_priced = 0;
  // The time budget: no graph is priced after this many seconds (0: none). A search that
  // stops at it depends on the machine's speed, so the result says so.
  double max_seconds = 0;
};

// One step of the search's path: a rule applied at one match, or several rewrites at once.
struct AppliedRewrite {
  std::string rule;  // its name; for several, "name (xN)" per rule, joined by commas
  int applications = 1;
  double cost_before = 0;
  double cost_after = 0;
};

struct SearchResult {
  Graph graph;
  double initial_cost = 0;
  double cost = 0;
  std::vector<AppliedRewrite> rewrites;  // the path from the input to `graph`
  int expanded = 0;                      // graphs taken from the queue
  int priced = 0;                        // new graphs whose cost was computed
  int alike = 0;  // matches not priced, for one alike had been (their neighbourhoods equal)
  bool stopped_at_limit = false;         // max_expansions reached with graphs still queued
  bool stopped_at_time = false;          // max_seconds reached with graphs still queued
  bool stopped_at_priced = false;        // max_priced reached
};

using CostFunction = std::function<Expected<double>(const Graph&)>;

Expected<SearchResult> search_substitutions(const Graph& graph, std::span<const Rule> rules,
                                            const CostFunction& cost,
                                            const SearchOptions& options = {});

}  // namespace kiln::subst
