#include "subst/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "ir/printer.h"
#include "passes/dead_code.h"
#include "subst/apply.h"
#include "subst/match.h"

namespace kiln::subst {
namespace {

// A constant of more elements than this is a weight, told apart by identity (the seen-set) or
// by type (matches alike), never printed; smaller ones (a rule's 1 and 0) are told by value.
constexpr int64_t kMaxSmallConstantElements = 16;

bool is_large_constant(const AttrValue& value) {
  return value.kind() == AttrKind::tensor && value.as_tensor().size() > kMaxSmallConstantElements;
}

// The graphs seen so far, told apart by what they compute rather than how they are written:
// every node is interned by its op, its attributes (large constants by identity: frozen
// weights would otherwise print in full for every graph) and its operands' interned ids,
// sorted where the op commutes, and a graph is the ids of its results. So the same
// independent rewrites applied in two orders (which name their new values differently), and
// graphs that differ only in the order of a sum's or product's operands, are one graph: the
// rewrite sequences that commute are priced once (the pruning of Fang et al.).
class SeenGraphs {
 public:
  // Whether `graph` is new (and remembers it).
  bool insert(const Graph& graph) {
    std::map<const Value*, std::string> ids;
    for (const Value* input : graph.inputs()) ids.emplace(input, "%" + input->name());
    for (const Node* node : graph.nodes()) {
      std::vector<std::string> operands;
      for (const Value* input : node->inputs()) operands.push_back(ids.at(input));
      if (commutes(node->op())) std::ranges::sort(operands);
      std::string key = fmt::format("{}({})", node->op_name(), fmt::join(operands, ","));
      for (const auto& [name, value] : node->attrs().entries()) {
        key += fmt::format(" {}={}", name, attribute_key(value));
      }
      const size_t id = nodes_.emplace(std::move(key), nodes_.size()).first->second;
      for (int k = 0; k < node->num_outputs(); ++k) {
        ids.emplace(node->output(k), fmt::format("n{}.{}", id, k));
      }
    }
    std::vector<std::string> results;
    for (const Value* output : graph.outputs()) results.push_back(ids.at(output));
    return graphs_.insert(fmt::format("{}", fmt::join(results, " "))).second;
  }

 private:
  // Small constants (a rule's 1 and 0, made anew by each application) by value, large ones
  // (frozen weights) by identity.
  static std::string attribute_key(const AttrValue& value) {
    return print_attr_value(value, {.tensors_by_identity = is_large_constant(value)});
  }
  std::map<std::string, size_t> nodes_;  // node key -> id, over every graph seen
  std::set<std::string> graphs_;
};

struct Candidate {
  Graph graph;
  double cost = 0;
  std::vector<AppliedRewrite> rewrites;
  // When the step that reached this graph did not lower the cost: the names of the values it
  // created. Such a graph is expanded only by rewrites that touch them (see `depends_on`).
  std::optional<std::set<std::string>> created;
};

// Each node output of `graph`, by name, as "op(operand names)#k": a value a rewrite created has
// a new name or (a result that keeps the name of the value it replaces) a new signature.
std::map<std::string, std::string> value_signatures(const Graph& graph) {
  std::map<std::string, std::string> signatures;
  for (const Node* node : graph.nodes()) {
    std::vector<std::string> operands;
    for (const Value* input : node->inputs()) operands.push_back(input->name());
    for (int k = 0; k < node->num_outputs(); ++k) {
      signatures.emplace(node->output(k)->name(),
                         fmt::format("{}({})#{}", node->op_name(), fmt::join(operands, ","), k));
    }
  }
  return signatures;
}

// The names of the values of `after` that `before` does not compute the same way.
std::set<std::string> created_values(const Graph& before, const Graph& after) {
  const std::map<std::string, std::string> old = value_signatures(before);
  std::set<std::string> created;
  for (const auto& [name, signature] : value_signatures(after)) {
    const auto it = old.find(name);
    if (it == old.end() || it->second != signature) created.insert(name);
  }
  return created;
}

// Whether `match` rewrites or reads a value the previous step created. The relaxation lets a
// step that does not pay be kept for what it enables, and what it enables depends on it: a
// rewrite independent of it was open before it too, and was tried from the graph before it
// (the two orders reach one graph, which the seen-set prices once). So only dependent rewrites
// extend such a step, which stops equal-cost rewrites (an association in every layer) from
// multiplying into every combination of them.
bool depends_on(const Match& match, const std::set<std::string>& created) {
  for (const Node* node : match.nodes) {
    for (int k = 0; k < node->num_outputs(); ++k) {
      if (created.contains(node->output(k)->name())) return true;
    }
  }
  return std::ranges::any_of(match.variables,
                             [&](const Value* v) { return created.contains(v->name()); });
}

// A rewrite of the graph being expanded that lowered its cost on its own.
struct Improvement {
  double cost = 0;
  const Rule* rule = nullptr;
  std::vector<std::string> node_names;  // the match's nodes, by their first output's name
};

// What a match looks like from around it, for telling alike matches apart: its nodes (ops,
// attributes with large constants by type alone, result types), what its variables are computed
// from and what reads its results, each to `kNeighbourhood` nodes away. The same layer of a
// transformer written twelve times gives twelve matches alike, and a rewrite changes the cost
// of each the same way, so the search prices one of them (the others join the improvements
// when it pays, and are applied together). Matches alike in this neighbourhood but not beyond
// it are a risk the search takes, as any pruning does: it may miss a rewrite, never apply a
// wrong one (every candidate is a proved rewrite, and the combination is priced itself).
constexpr int kNeighbourhood = 2;

std::string describe_node(const Node& node) {
  std::string text(node.op_name());
  for (const auto& [name, value] : node.attrs().entries()) {
    text += fmt::format(
        " {}={}", name,
        is_large_constant(value) ? value.as_tensor().type().to_string() : print_attr_value(value));
  }
  return text;
}

std::string made_from(const Value& value, int depth) {
  const Node* producer = value.producer();
  if (producer == nullptr) return value.type().to_string() + " input";
  if (depth == 0) return value.type().to_string();
  std::vector<std::string> operands;
  for (const Value* input : producer->inputs()) operands.push_back(made_from(*input, depth - 1));
  return fmt::format("{}#{}({})", describe_node(*producer), value.output_index(),
                     fmt::join(operands, ", "));
}

std::string read_by(const Graph& graph, const Value& value, const std::set<const Node*>& inside,
                    int depth) {
  std::vector<std::string> readers;
  if (graph.is_output(&value)) readers.emplace_back("output");
  for (const Node* user : value.users()) {
    if (inside.contains(user)) continue;
    std::string reader = describe_node(*user);
    if (depth > 1) {
      for (const Value* output : user->outputs()) {
        reader += " [" + read_by(graph, *output, inside, depth - 1) + "]";
      }
    }
    readers.push_back(std::move(reader));
  }
  std::ranges::sort(readers);
  return fmt::format("{}", fmt::join(readers, "; "));
}

std::string neighbourhood(const Graph& graph, const Match& match) {
  const std::set<const Node*> inside(match.nodes.begin(), match.nodes.end());
  std::string text;
  for (const Value* variable : match.variables) {
    text += "var " + made_from(*variable, kNeighbourhood) + "\n";
  }
  for (const Node* node : match.nodes) {
    text += "node " + describe_node(*node);
    for (const Value* output : node->outputs()) {
      text += fmt::format(" -> {} [{}]", output->type().to_string(),
                          read_by(graph, *output, inside, kNeighbourhood));
    }
    text += "\n";
  }
  return text;
}

std::vector<std::string> node_names(const Match& match) {
  std::vector<std::string> names;
  for (const Node* node : match.nodes) names.push_back(node->output()->name());
  return names;
}

// "rule" for one application, "rule (x12)" for twelve, rules joined in order of first use.
std::string describe(const std::vector<const Rule*>& applied) {
  std::vector<std::pair<std::string, int>> counts;
  for (const Rule* rule : applied) {
    auto it = std::ranges::find(counts, rule->name, &std::pair<std::string, int>::first);
    if (it == counts.end()) {
      counts.emplace_back(rule->name, 1);
    } else {
      ++it->second;
    }
  }
  std::string text;
  for (const auto& [name, count] : counts) {
    if (!text.empty()) text += ", ";
    text += count == 1 ? name : fmt::format("{} (x{})", name, count);
  }
  return text;
}

// The improvements applied together, best first, each where its match is still a match (an
// earlier one may have rewritten its nodes): the graph, and the rules applied.
std::pair<Graph, std::vector<const Rule*>> combine(const Graph& graph,
                                                   std::vector<Improvement> improvements) {
  std::ranges::stable_sort(improvements, {}, &Improvement::cost);
  Graph combined = graph.clone();
  std::vector<const Rule*> applied;
  for (const Improvement& improvement : improvements) {
    for (const Match& match : find_matches(combined, *improvement.rule)) {
      if (node_names(match) != improvement.node_names) continue;
      if (apply_match(combined, *improvement.rule, match)) applied.push_back(improvement.rule);
      break;
    }
  }
  eliminate_dead_code(combined);
  return {std::move(combined), std::move(applied)};
}

}  // namespace

Expected<SearchResult> search_substitutions(const Graph& graph, std::span<const Rule> rules,
                                            const CostFunction& cost,
                                            const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const double initial, cost(graph));
  SearchResult result;
  result.graph = graph.clone();
  result.initial_cost = result.cost = initial;
  // The queue: (cost, generation number) -> candidate; the first entry is the cheapest,
  // earliest generated.
  std::map<std::pair<double, int>, Candidate> queue;
  int generated = 0;
  SeenGraphs seen;
  seen.insert(graph);
  queue.emplace(std::pair{initial, generated++}, Candidate{graph.clone(), initial, {}, {}});
  // Prices `next`, reached from `current` by `step`, and keeps it as the result or in the
  // queue as its cost says; false when it was seen before.
  const auto consider = [&](Graph next, const Candidate& current,
                            AppliedRewrite step) -> Expected<std::optional<double>> {
    if (!seen.insert(next)) return std::optional<double>();
    KILN_ASSIGN_OR_RETURN(const double next_cost, cost(next));
    ++result.priced;
    std::vector<AppliedRewrite> rewrites = current.rewrites;
    step.cost_before = current.cost;
    step.cost_after = next_cost;
    rewrites.push_back(std::move(step));
    if (next_cost < result.cost) {
      result.graph = next.clone();
      result.cost = next_cost;
      result.rewrites = rewrites;
    }
    if (next_cost < options.relaxation * result.cost) {
      std::optional<std::set<std::string>> created;
      if (next_cost >= current.cost) created = created_values(current.graph, next);
      queue.emplace(std::pair{next_cost, generated++},
                    Candidate{std::move(next), next_cost, std::move(rewrites), std::move(created)});
    }
    return std::optional<double>(next_cost);
  };
  // The budgets are checked before each graph is priced: the time budget is overrun by one
  // pricing at most, the count never.
  const auto out_of_budget = [&] {
    if (options.max_priced > 0 && result.priced >= options.max_priced) {
      result.stopped_at_priced = true;
      return true;
    }
    if (options.max_seconds <= 0 || std::chrono::steady_clock::now() - start <
                                        std::chrono::duration<double>(options.max_seconds)) {
      return false;
    }
    result.stopped_at_time = true;
    return true;
  };
  while (!queue.empty()) {
    if (result.expanded == options.max_expansions) {
      result.stopped_at_limit = true;
      break;
    }
    if (out_of_budget()) break;
    Candidate current = std::move(queue.begin()->second);
    queue.erase(queue.begin());
    ++result.expanded;
    std::vector<Improvement> improvements;
    for (const Rule& rule : rules) {
      std::vector<Match> matches = find_matches(current.graph, rule);
      if (current.created) {
        std::erase_if(matches, [&](const Match& m) { return !depends_on(m, *current.created); });
      }
      // Up to `max_matches_per_rule` matches unlike each other are priced; each match alike
      // one priced takes its cost.
      std::map<std::string, std::optional<double>> priced_alike;
      for (const Match& match : matches) {
        std::string around = neighbourhood(current.graph, match);
        std::optional<double> next_cost;
        if (const auto alike = priced_alike.find(around); alike != priced_alike.end()) {
          next_cost = alike->second;
          ++result.alike;
        } else {
          if (priced_alike.size() == options.max_matches_per_rule) continue;
          if (out_of_budget()) return result;
          Graph next = current.graph.clone();
          if (!apply_match(next, rule, match_in_copy(current.graph, match, next))) continue;
          eliminate_dead_code(next);
          KILN_ASSIGN_OR_RETURN(next_cost, consider(std::move(next), current, {.rule = rule.name}));
          priced_alike.emplace(std::move(around), next_cost);
        }
        if (next_cost && *next_cost < current.cost) {
          improvements.push_back({*next_cost, &rule, node_names(match)});
        }
      }
    }
    if (improvements.size() < 2 || out_of_budget()) continue;
    auto [combined, applied] = combine(current.graph, std::move(improvements));
    if (applied.size() < 2) continue;
    KILN_RETURN_IF_ERROR(
        consider(std::move(combined), current,
                 {.rule = describe(applied), .applications = static_cast<int>(applied.size())})
            .status());
  }
  return result;
}

}  // namespace kiln::subst
