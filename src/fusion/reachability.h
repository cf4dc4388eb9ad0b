// Reachability between the nodes of a graph, for convexity: a group of nodes is convex when no
// path leaves it and comes back, so that it can run as one kernel between the kernels that
// feed it and the kernels that read it.
//
// Nodes are numbered in graph order (a topological order). Each node keeps bitsets of its
// descendants and ancestors, so testing a group costs a few word operations per member:
// the group is convex exactly when no node outside it is both a descendant and an ancestor
// of members. Memory is two bits per pair of nodes: 16 MB for the 8,000 nodes of a bert-large
// training step.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace kiln::fusion {

class Reachability {
 public:
  explicit Reachability(const Graph& graph);

  int index(const Node* node) const { return index_.at(node); }
  const Node* node(int index) const { return nodes_[static_cast<size_t>(index)]; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Whether a path of one or more edges leads from `from` to `to`.
  bool reaches(int from, int to) const;
  // Whether no path leaves `members` (node indices) and re-enters it.
  bool is_convex(std::span<const int> members) const;

  // A set of node indices as a bitset, for path_outside.
  using Bits = std::vector<uint64_t>;
  Bits make_set(std::span<const int> members) const;
  // The first node (in graph order) on a path from `from` to `to` that is not in `inside`;
  // nullopt when every path between them stays inside, or there is none.
  std::optional<int> path_outside(int from, int to, const Bits& inside) const;

 private:
  static bool test(const Bits& bits, int i) { return (bits[static_cast<size_t>(i) / 64] >> (i % 64)) & 1; }
  static void set(Bits& bits, int i) { bits[static_cast<size_t>(i) / 64] |= uint64_t{1} << (i % 64); }

  std::vector<const Node*> nodes_;
  std::unordered_map<const Node*, int> index_;
  std::vector<Bits> descendants_;
  std::vector<Bits> ancestors_;
};

}  // namespace kiln::fusion
