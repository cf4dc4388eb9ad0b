// What the partitioners share (internal to src/fusion): the graph's computed nodes by index,
// the fusible edges between them, the components those edges join, reachability, and
// memoised answers to the three questions every partitioner asks of a candidate group: is it
// convex, what does it cost, and does the loop level accept it (the last two also remembered
// process-wide by the group's structure, see structure_key).
//
// Tied edges. A group is convex and lies within one component (partitioners grow groups over
// fusible edges). So when some path from a fusible edge's producer to its consumer passes
// through a node of another component, no group can hold both ends: convexity would need that
// node inside. Such edges are cut before any partitioner looks at them (EVT's reachability
// rule), and cutting them splits components, which can tie more edges, until none is left.
// In a training step these are the edges from a forward value to the backward op that reads
// it again (a saved activation) across the matmuls in between: cut, the forward and backward
// halves of a layer become separate, smaller components. The cut is exact: it removes only
// groups that could never be chosen. Disabling the rule "cut-tied-edges" keeps them, to
// measure what the cut saves or to bisect.
//
// Groups are sorted vectors of node indices (Reachability's numbering, graph order).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cost/estimate.h"
#include "fusion/partition.h"
#include "fusion/reachability.h"
#include "fusion/rules.h"

namespace kiln::fusion {

using NodeSet = std::vector<int>;  // sorted node indices

struct FusibleEdge {
  int producer = 0;
  int consumer = 0;
  EdgeVerdict verdict;
};

class PartitionContext {
 public:
  // `options.profile` must be set.
  PartitionContext(const Graph& graph, const FusionOptions& options);

  const Graph& graph() const { return graph_; }
  const FusionOptions& options() const { return options_; }
  const Reachability& reach() const { return reach_; }
  // Non-constant nodes, in graph order.
  const std::vector<int>& computed() const { return computed_; }
  // Every edge between two computed nodes (one per node pair), in graph order of consumers.
  const std::vector<FusibleEdge>& edges() const { return edges_; }
  // Computed nodes joined to `node` by a fusible edge, either direction.
  const std::vector<int>& fusible_neighbours(int node) const { return neighbours_[static_cast<size_t>(node)]; }
  // The component of a computed node: nodes joined by fusible edges share one (its number is
  // one of its nodes). Every group a partitioner forms lies within one component.
  int component(int node) const { return component_[static_cast<size_t>(node)]; }
  // How many edges were cut as tied (see above).
  int tied_edges_cut() const { return tied_edges_cut_; }

  bool is_convex(const NodeSet& group) const { return reach_.is_convex(group); }
  const cost::KernelEstimate& estimate(const NodeSet& group);
  // The reason the loop level rejects the group, or nullopt when it lowers within the
  // local-memory limit. Single nodes are always accepted.
  const std::optional<std::string>& loop_rejection(const NodeSet& group);
  // The scratch the group's kernel needs in the arena while it runs (loop/scratch.h: its
  // large local buffers, such as a fused group's intermediate or a convolution's columns).
  int64_t scratch_bytes(const NodeSet& group);

  std::vector<Node*> nodes_of(const NodeSet& group) const;

  // A canonical text of the group's structure and of the options its estimate and loop verdict
  // depend on: its nodes' ops, attributes and types, how they connect, which inputs come from
  // outside (one-element constants by value, since lowering writes them in as literals), and
  // which outputs are read outside the group or are graph outputs. Groups of equal keys are
  // lowered and estimated alike, so both answers are remembered by it across partitions.
  std::string structure_key(const NodeSet& group);

 private:
  const Graph& graph_;
  const FusionOptions& options_;
  Reachability reach_;
  std::vector<int> computed_;
  std::vector<FusibleEdge> edges_;
  std::vector<std::vector<int>> neighbours_;
  struct LoopVerdict {
    std::optional<std::string> rejection;
    int64_t scratch_bytes = 0;
  };
  const LoopVerdict& loop_verdict(const NodeSet& group);
  void find_components();
  // Cuts tied edges until none is left; returns whether any was cut.
  bool cut_tied_edges();

  std::vector<int> component_;
  int tied_edges_cut_ = 0;

  std::map<NodeSet, cost::KernelEstimate> estimates_;
  std::map<NodeSet, LoopVerdict> loop_verdicts_;
  // structure_key's parts that do not depend on the group: the options, and each node's op
  // and attributes (by node index, made on first use).
  std::string key_prefix_;
  std::vector<std::string> node_texts_;
};

// Whether the groups, as a quotient graph (an edge between two groups when a node of one
// reads a node of the other), have a cycle; when they do, the indices of the groups on one.
// Nodes in none of the groups are left out (a cycle through them is not seen).
std::optional<std::vector<int>> find_group_cycle(const PartitionContext& context,
                                                 const std::vector<NodeSet>& groups);

// Groups in dependency order: Kahn's algorithm over the quotient graph, taking the ready group
// with the earliest node first so that the order follows the graph's. Shorter than `groups`
// only when the quotient has a cycle.
std::vector<NodeSet> dependency_order(const PartitionContext& context, std::vector<NodeSet> groups);

// `groups` in dependency order, with groups split where needed so that the arena's peak (the
// bytes of values live between kernels, at the worst point of the order) comes down to the
// unfused program's: a group that would hold a large value alive long after the unfused
// program frees it gives up the nodes that read it, while such splits lower the peak (not
// always to the unfused one: a decision says so). Then a bounded search of such splits
// lowers the arena the memory planner places, where it fragments past the unfused one (again
// with a decision where it stops above it). Appends a `rejected` decision per split kept.
std::vector<NodeSet> bound_memory(PartitionContext& context, std::vector<NodeSet> groups,
                                  std::vector<Decision>& decisions);

// Groups joined by the greedy rule (partition.h), every computed node in exactly one.
std::vector<NodeSet> greedy_partition(PartitionContext& context);

// `groups` with groups[target] formed again from its nodes alone, merged as the greedy
// partitioner merges them (along the group's own fusible edges, where convex, acyclic and
// estimated faster) but only into pieces whose scratch is within `max_scratch`: the memory
// bound's alternative to running a group whose scratch raises the arena's peak as single
// nodes.
std::vector<NodeSet> regroup_within_scratch(PartitionContext& context,
                                            const std::vector<NodeSet>& groups, size_t target,
                                            int64_t max_scratch);

// `groups` with independent groups of elementwise and broadcast nodes over the same elements
// merged where the cost model gains (one kernel call instead of several, and nests of the
// same bounds merge at the loop level). Appends one `horizontal` decision per shape fused.
std::vector<NodeSet> horizontal_fusion(PartitionContext& context, const std::vector<NodeSet>& groups,
                                       std::vector<Decision>& decisions);

// The partition of least estimated time over candidate groups (fusion/ilp.cc), starting from
// `start` (a valid partition). Appends loop-level rejections to `decisions`.
Expected<std::vector<NodeSet>> ilp_partition(PartitionContext& context,
                                             const std::vector<NodeSet>& start,
                                             std::vector<Decision>& decisions,
                                             PartitionStats& stats);

}  // namespace kiln::fusion
