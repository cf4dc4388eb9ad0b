#include "fusion/reachability.h"

#include <bit>

namespace kiln::fusion {

Reachability::Reachability(const Graph& graph) {
  for (const Node* node : graph.nodes()) {
    index_.emplace(node, static_cast<int>(nodes_.size()));
    nodes_.push_back(node);
  }
  const size_t words = (nodes_.size() + 63) / 64;
  descendants_.assign(nodes_.size(), Bits(words, 0));
  ancestors_.assign(nodes_.size(), Bits(words, 0));
  // Graph order is topological: a node's producers come before it, its users after.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (const Value* input : nodes_[i]->inputs()) {
      if (input->producer() == nullptr) continue;
      const int producer = index_.at(input->producer());
      set(ancestors_[i], producer);
      for (size_t w = 0; w < words; ++w) ancestors_[i][w] |= ancestors_[static_cast<size_t>(producer)][w];
    }
  }
  for (size_t i = nodes_.size(); i-- > 0;) {
    for (const Value* output : nodes_[i]->outputs()) {
      for (const Node* user : output->users()) {
        const int consumer = index_.at(user);
        set(descendants_[i], consumer);
        for (size_t w = 0; w < words; ++w) {
          descendants_[i][w] |= descendants_[static_cast<size_t>(consumer)][w];
        }
      }
    }
  }
}

bool Reachability::reaches(int from, int to) const {
  return test(descendants_[static_cast<size_t>(from)], to);
}

bool Reachability::is_convex(std::span<const int> members) const {
  if (members.size() < 2) return true;
  const size_t words = descendants_.empty() ? 0 : descendants_[0].size();
  Bits below(words, 0), above(words, 0), inside(words, 0);
  for (int m : members) {
    set(inside, m);
    const auto i = static_cast<size_t>(m);
    for (size_t w = 0; w < words; ++w) {
      below[w] |= descendants_[i][w];
      above[w] |= ancestors_[i][w];
    }
  }
  for (size_t w = 0; w < words; ++w) {
    if ((below[w] & above[w] & ~inside[w]) != 0) return false;
  }
  return true;
}

Reachability::Bits Reachability::make_set(std::span<const int> members) const {
  Bits bits((nodes_.size() + 63) / 64, 0);
  for (int m : members) set(bits, m);
  return bits;
}

std::optional<int> Reachability::path_outside(int from, int to, const Bits& inside) const {
  const Bits& below = descendants_[static_cast<size_t>(from)];
  const Bits& above = ancestors_[static_cast<size_t>(to)];
  for (size_t w = 0; w < below.size(); ++w) {
    if (const uint64_t between = below[w] & above[w] & ~inside[w]; between != 0) {
      return static_cast<int>(w * 64) + std::countr_zero(between);
    }
  }
  return std::nullopt;
}

}  // namespace kiln::fusion
