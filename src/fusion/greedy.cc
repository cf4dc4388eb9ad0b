// Merging groups when the cost model gains (partition.h): the greedy partitioner (producer
// and consumer across fusible edges, in graph order of the consumers), horizontal fusion
// (independent groups over the same elements) and the memory bound's regrouping of one group
// within a scratch limit. A merge needs a convex union that keeps the groups' quotient graph
// acyclic, within the size limit, estimated faster than the two kernels apart.
#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusion/context.h"

namespace kiln::fusion {
namespace {

class GroupMerger {
 public:
  GroupMerger(PartitionContext& context, const std::vector<NodeSet>& groups)
      : context_(context) {
    const size_t size = static_cast<size_t>(context.reach().size());
    group_of_.assign(size, -1);
    members_.resize(size);
    seen_.assign(size, 0);
    successors_.resize(size);
    for (const NodeSet& nodes : groups) {
      for (int node : nodes) group_of_[static_cast<size_t>(node)] = nodes.front();
      members_[static_cast<size_t>(nodes.front())] = nodes;
    }
    for (const FusibleEdge& edge : context.edges()) {
      successors_[static_cast<size_t>(edge.producer)].push_back(edge.consumer);
    }
  }

  int group(int node) const { return group_of_[static_cast<size_t>(node)]; }
  const NodeSet& members(int group) const { return members_[static_cast<size_t>(group)]; }

  std::vector<NodeSet> groups() const {
    std::vector<NodeSet> result;
    for (const NodeSet& nodes : members_) {
      if (!nodes.empty()) result.push_back(nodes);
    }
    return result;
  }

  // Merges group b into group a when that is legal and estimated faster, and the merged
  // group's scratch is within `max_scratch`.
  bool try_merge(int a, int b, int64_t max_scratch = std::numeric_limits<int64_t>::max()) {
    if (a == b) return false;
    const NodeSet& left = members(a);
    const NodeSet& right = members(b);
    if (static_cast<int>(left.size() + right.size()) > context_.options().max_group_nodes) {
      return false;
    }
    NodeSet merged;
    std::merge(left.begin(), left.end(), right.begin(), right.end(), std::back_inserter(merged));
    if (!context_.is_convex(merged) || reaches_through_others(a, b) ||
        reaches_through_others(b, a)) {
      return false;
    }
    const double apart = context_.estimate(left).seconds + context_.estimate(right).seconds;
    if (context_.estimate(merged).seconds >= apart) return false;
    if (max_scratch < std::numeric_limits<int64_t>::max() &&
        context_.scratch_bytes(merged) > max_scratch) {
      return false;
    }
    for (int node : right) group_of_[static_cast<size_t>(node)] = a;
    members_[static_cast<size_t>(b)].clear();
    members_[static_cast<size_t>(a)] = std::move(merged);
    return true;
  }

 private:
  // Whether a path of groups leads from group `from` to group `to` through a third group
  // (merging the two would then close a cycle). Only groups with a node before `to`'s last
  // node can be on such a path.
  bool reaches_through_others(int from, int to) {
    const int limit = members(to).back();
    ++stamp_;  // groups whose seen_ entry equals it were seen in this search
    seen_[static_cast<size_t>(from)] = seen_[static_cast<size_t>(to)] = stamp_;
    std::vector<int>& stack = stack_;
    stack.clear();
    const auto push_successors = [&](int g, bool skip_target) {
      for (int node : members(g)) {
        for (int consumer : successors_[static_cast<size_t>(node)]) {
          const int next = group(consumer);
          if (skip_target && next == to) continue;
          if (next == to) return true;
          uint32_t& seen = seen_[static_cast<size_t>(next)];
          if (seen != stamp_ && members(next).front() < limit) {
            seen = stamp_;
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
  std::vector<int> group_of_;                   // node -> group id (a node of the group)
  std::vector<NodeSet> members_;                // group id -> nodes; empty: no such group
  std::vector<uint32_t> seen_;                  // group id -> stamp of the last search seeing it
  uint32_t stamp_ = 0;
  std::vector<int> stack_;                      // reaches_through_others' work list
  std::vector<std::vector<int>> successors_;    // node -> computed consumers
};

// The elements a group of elementwise and broadcast nodes iterates over: the shape of its
// last node's output; empty for groups of other kinds, which are not fused horizontally.
std::vector<int64_t> elementwise_space(const PartitionContext& context, const NodeSet& group) {
  for (int node : group) {
    if (!reads_at_own_index(context.reach().node(node)->def().fusion_kind)) return {};
  }
  const Value& last = *context.reach().node(group.back())->output(0);
  if (last.shape().num_elements() <= 1) return {};
  return last.shape().dims();
}

// Whether a node of one group reaches a node of the other, either way.
bool connected(const PartitionContext& context, const NodeSet& a, const NodeSet& b) {
  for (int x : a) {
    for (int y : b) {
      if (context.reach().reaches(x, y) || context.reach().reaches(y, x)) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<NodeSet> greedy_partition(PartitionContext& context) {
  std::vector<NodeSet> singletons;
  for (int node : context.computed()) singletons.push_back({node});
  GroupMerger merger(context, singletons);
  for (const FusibleEdge& edge : context.edges()) {
    if (edge.verdict.fusible) merger.try_merge(merger.group(edge.producer), merger.group(edge.consumer));
  }
  return merger.groups();
}

std::vector<NodeSet> regroup_within_scratch(PartitionContext& context,
                                            const std::vector<NodeSet>& groups, size_t target,
                                            int64_t max_scratch) {
  std::vector<NodeSet> split;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (g != target) split.push_back(groups[g]);
  }
  const NodeSet& members = groups[target];
  for (int node : members) split.push_back({node});
  GroupMerger merger(context, split);
  for (const FusibleEdge& edge : context.edges()) {
    if (edge.verdict.fusible && std::binary_search(members.begin(), members.end(), edge.producer) &&
        std::binary_search(members.begin(), members.end(), edge.consumer)) {
      merger.try_merge(merger.group(edge.producer), merger.group(edge.consumer), max_scratch);
    }
  }
  return merger.groups();
}

std::vector<NodeSet> horizontal_fusion(PartitionContext& context, const std::vector<NodeSet>& groups,
                                       std::vector<Decision>& decisions) {
  GroupMerger merger(context, groups);
  std::map<std::vector<int64_t>, std::vector<int>> by_space;  // space -> group ids, in order
  for (const NodeSet& group : groups) {
    std::vector<int64_t> space = elementwise_space(context, group);
    if (!space.empty()) by_space[std::move(space)].push_back(group.front());
  }
  for (const auto& [space, ids] : by_space) {
    int current = -1;
    for (int id : ids) {
      if (current >= 0 && !connected(context, merger.members(current), merger.members(id)) &&
          merger.try_merge(current, id)) {
        continue;
      }
      current = id;
    }
  }
  std::vector<NodeSet> result = merger.groups();
  std::map<std::vector<int64_t>, int> before, after;
  for (const NodeSet& group : groups) {
    if (auto space = elementwise_space(context, group); !space.empty()) ++before[space];
  }
  for (const NodeSet& group : result) {
    if (auto space = elementwise_space(context, group); !space.empty()) ++after[space];
  }
  for (const auto& [space, count] : before) {
    if (after[space] < count) {
      decisions.push_back({Decision::Kind::horizontal, nullptr, nullptr, "horizontal",
                           fmt::format("{} independent elementwise groups over [{}] run in {} "
                                       "kernel{}",
                                       count, fmt::join(space, ", "), after[space],
                                       after[space] == 1 ? "" : "s")});
    }
  }
  return result;
}

}  // namespace kiln::fusion
