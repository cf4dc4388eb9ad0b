// The exact partitioner (partition.h) as a set-partitioning integer program, solved by CBC.
//
// Decomposition. Nodes joined by fusible edges form components (fusion/context.h, after tied
// edges are cut); no group can span two of them, so each is its own problem. Components with the same structure (ops, attributes, types,
// internal edges, which values leave the component, which inputs are shared), such as the
// layers of a transformer, have the same best partition: solutions are cached by a canonical
// key of the component, for the life of the process.
//
// Candidates. The connected sets of a component's nodes (over fusible edges) are enumerated by
// size, one size at a time, while their number stays within FusionOptions::max_candidates: the
// program is exact over every group of up to that size. The convex ones are candidates, with
// their estimated time; the starting partition's groups are added whatever their size, so the
// result is never worse than the start.
//
// The program. A binary z_p per candidate p: minimise sum cost_p z_p subject to, for each node,
// sum of z_p over the candidates holding it = 1. Each group is convex, but convex groups can
// still depend on each other in a cycle (a1 -> b1 and b2 -> a2 with no path inside either):
// the solution's groups are checked and, for each cycle, the cut "not all of these groups"
// (sum of their z_p <= count - 1) is added and the program solved again. A cycle through
// groups of different components merges their problems. Every chosen group is then lowered
// (loop level feedback); a group the loop level rejects is removed from the candidates and the
// program solved again.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>

#include <coin/Cbc_C_Interface.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <limits>

#include "fusion/context.h"
#include "ir/printer.h"

namespace kiln::fusion {
namespace {

struct Problem {
  std::vector<int> nodes;                  // sorted
  std::vector<NodeSet> candidates;
  std::map<NodeSet, int> candidate_index;  // position in `candidates`
  std::vector<bool> forbidden;             // rejected by the loop level
  std::vector<std::vector<int>> cuts;      // candidate indices: not all of them together
  std::vector<int> start;                  // candidate indices of the starting partition
  std::vector<int> chosen;                 // candidate indices of the current solution
  std::string cache_key;                   // empty: not cacheable (a merged problem)
};

// Cached solutions: per component key, the chosen groups as positions in the component's
// node list.
std::mutex cache_mutex;
std::map<std::string, std::vector<std::vector<int>>>& solution_cache() {
  static std::map<std::string, std::vector<std::vector<int>>> cache;
  return cache;
}

// CBC prints a line about the MIP start ("N slacks added") to stdout whatever its log level.
// Standard output is the user's (`kiln explain` prints there), so it points at /dev/null
// while CBC solves.
class QuietStdout {
 public:
  QuietStdout() {
    std::fflush(stdout);
    saved_ = dup(STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (saved_ >= 0 && null >= 0) dup2(null, STDOUT_FILENO);
    if (null >= 0) close(null);
  }
  ~QuietStdout() {
    std::fflush(stdout);
    if (saved_ >= 0) {
      dup2(saved_, STDOUT_FILENO);
      close(saved_);
    }
  }
  QuietStdout(const QuietStdout&) = delete;
  QuietStdout& operator=(const QuietStdout&) = delete;

 private:
  int saved_ = -1;
};

class IlpPartitioner {
 public:
  IlpPartitioner(PartitionContext& context, std::vector<Decision>& decisions,
                 PartitionStats& stats)
      : context_(context), decisions_(decisions), stats_(stats) {}

  Expected<std::vector<NodeSet>> run(const std::vector<NodeSet>& start) {
    make_problems(start);
    for (Problem& problem : problems_) {
      if (!use_cached_solution(problem)) KILN_RETURN_IF_ERROR(solve_component(problem));
    }
    // Cycles through groups of different components: merge their problems and solve again.
    while (true) {
      const std::vector<NodeSet> groups = chosen_groups();
      const std::optional<std::vector<int>> cycle = find_group_cycle(context_, groups);
      if (!cycle) return groups;
      KILN_RETURN_IF_ERROR(merge_problems_on(*cycle, groups));
    }
  }

 private:
  // --- Problems ----------------------------------------------------------------------------

  void make_problems(const std::vector<NodeSet>& start) {
    std::map<int, size_t> problem_of_root;
    for (int node : context_.computed()) {
      auto [it, inserted] = problem_of_root.emplace(context_.component(node), problems_.size());
      if (inserted) problems_.emplace_back();
      problems_[it->second].nodes.push_back(node);
    }
    for (const NodeSet& group : start) {
      Problem& problem = problems_[problem_of_root.at(context_.component(group.front()))];
      problem.start.push_back(add_candidate(problem, group));
    }
    stats_.components = static_cast<int>(problems_.size());
    for (Problem& problem : problems_) {
      // Single nodes are always candidates: every problem, cut or merged, stays feasible.
      for (int node : problem.nodes) add_candidate(problem, {node});
      problem.cache_key = component_key(problem.nodes);
      problem.chosen = problem.start;
    }
  }

  // A canonical text of a component and of the options its solution depends on.
  std::string component_key(const std::vector<int>& nodes) const {
    const FusionOptions& options = context_.options();
    const cost::DeviceProfile& profile = *options.profile;
    std::string key = fmt::format(
        "{} {} {} {} {} {} {} {} {} {} {}\n", profile.matmul_flops, profile.vector_flops,
        profile.memory_bandwidth, profile.l2_bytes, profile.llc_bytes, profile.kernel_overhead,
        profile.cores, options.max_candidates, options.max_group_nodes, options.max_local_bytes,
        fmt::join(options.disabled_rules, ","));
    std::map<const Node*, size_t> local;
    for (int node : nodes) local.emplace(context_.reach().node(node), local.size());
    std::map<const Value*, size_t> external;
    const Graph& graph = context_.graph();
    for (int index : nodes) {
      const Node& node = *context_.reach().node(index);
      key += node.op_name();
      for (const auto& [name, value] : node.attrs().entries()) {
        key += fmt::format(" {}={}", name, print_attr_value(value));
      }
      key += " (";
      for (const Value* input : node.inputs()) {
        auto producer = local.find(input->producer());
        if (input->producer() != nullptr && producer != local.end()) {
          key += fmt::format(" n{}.{}", producer->second, input->output_index());
        } else {
          auto [it, inserted] = external.emplace(input, external.size());
          key += fmt::format(" x{}:{}", it->second, input->type().to_string());
        }
      }
      key += " ) ->";
      for (const Value* output : node.outputs()) {
        const bool leaves =
            graph.is_output(output) ||
            std::any_of(output->users().begin(), output->users().end(),
                        [&](const Node* user) { return !local.contains(user); });
        key += fmt::format(" {}{}", output->type().to_string(), leaves ? "!" : "");
      }
      key += "\n";
    }
    return key;
  }

  bool use_cached_solution(Problem& problem) {
    std::vector<std::vector<int>> cached;
    {
      std::lock_guard lock(cache_mutex);
      auto it = solution_cache().find(problem.cache_key);
      if (it == solution_cache().end()) return false;
      cached = it->second;
    }
    problem.chosen.clear();
    for (const std::vector<int>& positions : cached) {
      NodeSet group;
      for (int p : positions) group.push_back(problem.nodes[static_cast<size_t>(p)]);
      problem.chosen.push_back(add_candidate(problem, group));
    }
    ++stats_.components_cached;
    return true;
  }

  void store_solution(const Problem& problem) {
    if (problem.cache_key.empty()) return;
    std::vector<std::vector<int>> positions;
    for (int c : problem.chosen) {
      std::vector<int>& group = positions.emplace_back();
      for (int node : problem.candidates[static_cast<size_t>(c)]) {
        group.push_back(static_cast<int>(
            std::lower_bound(problem.nodes.begin(), problem.nodes.end(), node) -
            problem.nodes.begin()));
      }
    }
    std::lock_guard lock(cache_mutex);
    solution_cache().emplace(problem.cache_key, std::move(positions));
  }

  static int add_candidate(Problem& problem, const NodeSet& group) {
    auto [it, inserted] =
        problem.candidate_index.emplace(group, static_cast<int>(problem.candidates.size()));
    if (inserted) {
      problem.candidates.push_back(group);
      problem.forbidden.push_back(false);
    }
    return it->second;
  }

  // --- Candidates --------------------------------------------------------------------------

  // Connected sets of the problem's nodes, size by size, while their count stays within the
  // limit; the convex ones become candidates.
  void enumerate_candidates(Problem& problem) {
    const FusionOptions& options = context_.options();
    std::set<int> in_problem(problem.nodes.begin(), problem.nodes.end());
    std::vector<NodeSet> level;
    for (int node : problem.nodes) level.push_back({node});
    size_t total = level.size();
    for (const NodeSet& group : level) add_candidate(problem, group);
    for (int size = 2; size <= options.max_group_nodes && !level.empty(); ++size) {
      std::set<NodeSet> next;
      bool over = false;
      for (const NodeSet& group : level) {
        for (int member : group) {
          for (int neighbour : context_.fusible_neighbours(member)) {
            if (!in_problem.contains(neighbour) ||
                std::binary_search(group.begin(), group.end(), neighbour)) {
              continue;
            }
            NodeSet grown = group;
            grown.insert(std::upper_bound(grown.begin(), grown.end(), neighbour), neighbour);
            next.insert(std::move(grown));
          }
        }
        if (total + next.size() > static_cast<size_t>(options.max_candidates)) {
          over = true;
          break;
        }
      }
      if (over) break;
      total += next.size();
      level.assign(next.begin(), next.end());
      for (const NodeSet& group : level) {
        if (context_.is_convex(group)) add_candidate(problem, group);
      }
    }
  }

  // --- Solving -----------------------------------------------------------------------------

  Status solve_component(Problem& problem) {
    enumerate_candidates(problem);
    stats_.candidates += static_cast<int>(problem.candidates.size());
    KILN_RETURN_IF_ERROR(solve_until_valid(problem));
    store_solution(problem);
    return Status::ok();
  }

  // Solves, then adds a cut for a cycle among the problem's own groups or forbids a group the
  // loop level rejects, until the solution has neither.
  Status solve_until_valid(Problem& problem) {
    while (true) {
      KILN_RETURN_IF_ERROR(solve(problem));
      std::vector<NodeSet> groups;
      for (int c : problem.chosen) groups.push_back(problem.candidates[static_cast<size_t>(c)]);
      if (std::optional<std::vector<int>> cycle = find_group_cycle(context_, groups)) {
        std::vector<int> cut;
        for (int g : *cycle) cut.push_back(problem.chosen[static_cast<size_t>(g)]);
        problem.cuts.push_back(std::move(cut));
        continue;
      }
      bool rejected = false;
      for (int c : problem.chosen) {
        const NodeSet& group = problem.candidates[static_cast<size_t>(c)];
        if (const std::optional<std::string>& reason = context_.loop_rejection(group)) {
          problem.forbidden[static_cast<size_t>(c)] = true;
          decisions_.push_back({Decision::Kind::rejected, nullptr, nullptr, "",
                                fmt::format("group of {} nodes starting at '{}' rejected by the "
                                            "loop level ({}); partition solved again",
                                            group.size(),
                                            context_.reach().node(group.front())->op_name(),
                                            *reason)});
          rejected = true;
        }
      }
      if (!rejected) return Status::ok();
    }
  }

  Status solve(Problem& problem) {
    ++stats_.ilp_rounds;
    std::map<int, int> row_of_node;
    for (int node : problem.nodes) row_of_node.emplace(node, static_cast<int>(row_of_node.size()));
    // Rows: one per node (covered exactly once), then one per cut (not all of its groups).
    // Columns: one per candidate, its rows in compressed sparse column form; loaded at once
    // (CBC's add-one-column calls copy the matrix each time).
    std::vector<std::vector<int>> cuts_of(problem.candidates.size());
    for (size_t k = 0; k < problem.cuts.size(); ++k) {
      for (int c : problem.cuts[k]) {
        cuts_of[static_cast<size_t>(c)].push_back(static_cast<int>(problem.nodes.size() + k));
      }
    }
    std::vector<int> start = {0}, index;
    std::vector<double> lower(problem.candidates.size(), 0.0), upper, cost;
    for (size_t c = 0; c < problem.candidates.size(); ++c) {
      for (int node : problem.candidates[c]) index.push_back(row_of_node.at(node));
      index.insert(index.end(), cuts_of[c].begin(), cuts_of[c].end());
      start.push_back(static_cast<int>(index.size()));
      upper.push_back(problem.forbidden[c] ? 0.0 : 1.0);
      cost.push_back(context_.estimate(problem.candidates[c]).seconds * 1e6);  // microseconds
    }
    const std::vector<double> coefficients(index.size(), 1.0);
    std::vector<double> row_lower(problem.nodes.size(), 1.0), row_upper(problem.nodes.size(), 1.0);
    for (const std::vector<int>& cut : problem.cuts) {
      row_lower.push_back(-std::numeric_limits<double>::max());
      row_upper.push_back(static_cast<double>(cut.size()) - 1);
    }
    Cbc_Model* model = Cbc_newModel();
    Cbc_setLogLevel(model, 0);
    Cbc_loadProblem(model, static_cast<int>(problem.candidates.size()),
                    static_cast<int>(row_lower.size()), start.data(), index.data(), coefficients.data(),
                    lower.data(), upper.data(), cost.data(), row_lower.data(), row_upper.data());
    for (size_t c = 0; c < problem.candidates.size(); ++c) Cbc_setInteger(model, static_cast<int>(c));
    if (start_is_usable(problem)) {
      std::vector<double> ones(problem.start.size(), 1.0);
      Cbc_setMIPStartI(model, static_cast<int>(problem.start.size()), problem.start.data(),
                       ones.data());
    }
    Cbc_setMaximumSeconds(model, context_.options().ilp_seconds_per_component);
    Cbc_setParameter(model, "threads", "1");
    {
      const QuietStdout quiet;
      Cbc_solve(model);
    }
    const double* solution = Cbc_bestSolution(model);
    std::vector<int> chosen;
    if (solution != nullptr) {
      for (size_t c = 0; c < problem.candidates.size(); ++c) {
        if (solution[c] > 0.5) chosen.push_back(static_cast<int>(c));
      }
    }
    if (Cbc_isSecondsLimitReached(model)) ++stats_.components_timed_out;
    Cbc_deleteModel(model);
    if (chosen.empty()) {
      return Status::errorf("the fusion program for a component of {} nodes has no solution "
                            "(CBC found none in {} s)",
                            problem.nodes.size(), context_.options().ilp_seconds_per_component);
    }
    problem.chosen = std::move(chosen);
    return Status::ok();
  }

  // The start is a valid MIP start while none of its groups is forbidden or cut away.
  static bool start_is_usable(const Problem& problem) {
    for (int c : problem.start) {
      if (problem.forbidden[static_cast<size_t>(c)]) return false;
    }
    for (const std::vector<int>& cut : problem.cuts) {
      if (std::all_of(cut.begin(), cut.end(), [&](int c) {
            return std::count(problem.start.begin(), problem.start.end(), c) != 0;
          })) {
        return false;
      }
    }
    return true;
  }

  std::vector<NodeSet> chosen_groups() const {
    std::vector<NodeSet> groups;
    for (const Problem& problem : problems_) {
      for (int c : problem.chosen) groups.push_back(problem.candidates[static_cast<size_t>(c)]);
    }
    return groups;
  }

  // A cycle through groups of several problems: they become one problem holding every
  // candidate, cut and forbidden group of its parts, plus the cut for this cycle.
  Status merge_problems_on(const std::vector<int>& cycle, const std::vector<NodeSet>& groups) {
    std::set<size_t> involved;
    for (int g : cycle) involved.insert(problem_holding(groups[static_cast<size_t>(g)].front()));
    Problem merged;
    for (size_t p : involved) {
      Problem& part = problems_[p];
      const int offset = static_cast<int>(merged.candidates.size());
      merged.nodes.insert(merged.nodes.end(), part.nodes.begin(), part.nodes.end());
      for (size_t c = 0; c < part.candidates.size(); ++c) {
        add_candidate(merged, part.candidates[c]);
        merged.forbidden.back() = part.forbidden[c];
      }
      for (std::vector<int> cut : part.cuts) {
        for (int& c : cut) c += offset;
        merged.cuts.push_back(std::move(cut));
      }
      for (int c : part.chosen) merged.start.push_back(c + offset);
    }
    std::sort(merged.nodes.begin(), merged.nodes.end());
    std::vector<int> cut;
    for (int g : cycle) {
      cut.push_back(add_candidate(merged, groups[static_cast<size_t>(g)]));
    }
    merged.cuts.push_back(std::move(cut));
    merged.chosen = merged.start;
    std::vector<Problem> remaining;
    for (size_t p = 0; p < problems_.size(); ++p) {
      if (!involved.contains(p)) remaining.push_back(std::move(problems_[p]));
    }
    problems_ = std::move(remaining);
    KILN_RETURN_IF_ERROR(solve_until_valid(merged));
    problems_.push_back(std::move(merged));
    return Status::ok();
  }

  size_t problem_holding(int node) const {
    for (size_t p = 0; p < problems_.size(); ++p) {
      if (std::binary_search(problems_[p].nodes.begin(), problems_[p].nodes.end(), node)) return p;
    }
    return 0;  // every computed node is in a problem
  }

  PartitionContext& context_;
  std::vector<Decision>& decisions_;
  PartitionStats& stats_;
  std::vector<Problem> problems_;
};

}  // namespace

Expected<std::vector<NodeSet>> ilp_partition(PartitionContext& context,
                                             const std::vector<NodeSet>& start,
                                             std::vector<Decision>& decisions,
                                             PartitionStats& stats) {
  return IlpPartitioner(context, decisions, stats).run(start);
}

}  // namespace kiln::fusion
