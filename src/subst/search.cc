#include "subst/search.h"

#include <map>
#include <set>

#include "ir/printer.h"
#include "passes/dead_code.h"
#include "subst/apply.h"
#include "subst/match.h"

namespace kiln::subst {
namespace {

struct Candidate {
  Graph graph;
  double cost = 0;
  std::vector<AppliedRewrite> rewrites;
};

}  // namespace

Expected<SearchResult> search_substitutions(const Graph& graph, std::span<const Rule> rules,
                                            const CostFunction& cost,
                                            const SearchOptions& options) {
  KILN_ASSIGN_OR_RETURN(const double initial, cost(graph));
  SearchResult result;
  result.graph = graph.clone();
  result.initial_cost = result.cost = initial;
  // The queue: (cost, generation number) -> candidate; the first entry is the cheapest,
  // earliest generated.
  std::map<std::pair<double, int>, Candidate> queue;
  int generated = 0;
  std::set<std::string> seen = {print_graph(graph)};
  queue.emplace(std::pair{initial, generated++}, Candidate{graph.clone(), initial, {}});
  while (!queue.empty()) {
    if (result.expanded == options.max_expansions) {
      result.stopped_at_limit = true;
      break;
    }
    Candidate current = std::move(queue.begin()->second);
    queue.erase(queue.begin());
    ++result.expanded;
    for (const Rule& rule : rules) {
      for (const Match& match : find_matches(current.graph, rule, options.max_matches_per_rule)) {
        Graph next = current.graph.clone();
        if (!apply_match(next, rule, match_in_copy(current.graph, match, next))) continue;
        eliminate_dead_code(next);
        if (!seen.insert(print_graph(next)).second) continue;
        KILN_ASSIGN_OR_RETURN(const double next_cost, cost(next));
        ++result.priced;
        std::vector<AppliedRewrite> rewrites = current.rewrites;
        rewrites.push_back({rule.name, current.cost, next_cost});
        if (next_cost < result.cost) {
          result.graph = next.clone();
          result.cost = next_cost;
          result.rewrites = rewrites;
        }
        if (next_cost < options.relaxation * result.cost) {
          queue.emplace(std::pair{next_cost, generated++},
                        Candidate{std::move(next), next_cost, std::move(rewrites)});
        }
      }
    }
  }
  return result;
}

}  // namespace kiln::subst
