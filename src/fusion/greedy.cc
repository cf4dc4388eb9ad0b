// The greedy partitioner (partition.h): edges in graph order of their consumers; two groups
// merge across a fusible edge when the union is convex, keeps the groups' quotient graph
// acyclic, stays within the size limit, and is estimated faster than the two kernels apart.
#include <algorithm>
#include <map>
#include <set>

#include "fusion/context.h"

namespace kiln::fusion {
namespace {

class GreedyPartitioner {
 public:
  explicit GreedyPartitioner(PartitionContext& context) : context_(context) {
    const size_t size = static_cast<size_t>(context.reach().size());
    group_of_.assign(size, -1);
    successors_.resize(size);
    for (int node : context.computed()) {
      group_of_[static_cast<size_t>(node)] = node;
      members_[node] = {node};
    }
    for (const FusibleEdge& edge : context.edges()) {
      successors_[static_cast<size_t>(edge.producer)].push_back(edge.consumer);
    }
  }

  std::vector<NodeSet> run() {
    for (const FusibleEdge& edge : context_.edges()) {
      if (edge.verdict.fusible) try_merge(group(edge.producer), group(edge.consumer));
    }
    std::vector<NodeSet> groups;
    for (auto& [id, nodes] : members_) groups.push_back(std::move(nodes));
    return groups;
  }

 private:
  int group(int node) const { return group_of_[static_cast<size_t>(node)]; }

  void try_merge(int a, int b) {
    if (a == b) return;
    const NodeSet& left = members_.at(a);
    const NodeSet& right = members_.at(b);
    if (static_cast<int>(left.size() + right.size()) > context_.options().max_group_nodes) return;
    NodeSet merged;
    std::merge(left.begin(), left.end(), right.begin(), right.end(), std::back_inserter(merged));
    if (!context_.is_convex(merged) || reaches_through_others(a, b) ||
        reaches_through_others(b, a)) {
      return;
    }
    const double apart = context_.estimate(left).seconds + context_.estimate(right).seconds;
    if (context_.estimate(merged).seconds >= apart) return;
    for (int node : right) group_of_[static_cast<size_t>(node)] = a;
    members_.erase(b);
    members_[a] = std::move(merged);
  }

  // Whether a path of groups leads from group `from` to group `to` through a third group
  // (merging the two would then close a cycle). Only groups with a node before `to`'s last
  // node can be on such a path.
  bool reaches_through_others(int from, int to) const {
    const int limit = members_.at(to).back();
    std::set<int> seen = {from, to};
    std::vector<int> stack;
    const auto push_successors = [&](int g, bool skip_target) {
      for (int node : members_.at(g)) {
        for (int consumer : successors_[static_cast<size_t>(node)]) {
          const int next = group(consumer);
          if (skip_target && next == to) continue;
          if (next == to) return true;
          if (!seen.contains(next) && members_.at(next).front() < limit) {
            seen.insert(next);
            stack.push_back(next);
          }
        }
      }
      return false;
    };
    push_successors(from, /*skip_target=*/true);
    while (!stack.empty()) {
      const int g = stack.back();
      stack.pop_back();
      if (push_successors(g, /*skip_target=*/false)) return true;
    }
    return false;
  }

  PartitionContext& context_;
  std::vector<int> group_of_;                   // node -> group id (its first node)
  std::map<int, NodeSet> members_;              // group id -> nodes
  std::vector<std::vector<int>> successors_;    // node -> computed consumers
};

}  // namespace

std::vector<NodeSet> greedy_partition(PartitionContext& context) {
  return GreedyPartitioner(context).run();
}

}  // namespace kiln::fusion
