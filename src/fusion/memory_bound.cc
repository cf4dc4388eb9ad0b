// Keeping fusion from raising the arena's peak (fusion/context.h: bound_memory).
//
// A kernel's scratch (loop/scratch.h: its large local buffers, a fused group's intermediate
// or a convolution's columns) lives in the arena during its step, so it counts at that step,
// for the fused program and the unfused one alike; a fused group whose scratch alone makes
// the excess runs as single nodes.
//
// A fused group runs when all of its inputs are ready, so a group that joins an early
// consumer of a large value with late work (the batch sum of a weight gradient with the
// optimizer update that also waits for another gradient) keeps that value alive far longer
// than the unfused program does. The arena's peak is computed as the memory planner bounds
// it: every value one group computes and a later group reads (graph inputs, graph outputs and
// constants live elsewhere) is live from its producing group to its last reading group. While
// the fused peak exceeds the unfused one, the largest value live at the peak that a
// multi-node group reads loses those readers to groups of their own; if what remains of the
// group is not a valid group, the group is split into single nodes. In the worst case every
// group is split and the order is the unfused one, so the loop ends with the bound met.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusion/context.h"

namespace kiln::fusion {
namespace {

struct LivePeak {
  int64_t bytes = 0;
  size_t at = 0;                   // the group running at the peak
  std::vector<const Value*> live;  // at the peak, largest first
};

// The bytes of values live between groups plus, at each group, its own scratch.
LivePeak live_peak(PartitionContext& context, const std::vector<NodeSet>& ordered) {
  std::map<const Node*, size_t> position;
  for (size_t g = 0; g < ordered.size(); ++g) {
    for (int node : ordered[g]) position.emplace(context.reach().node(node), g);
  }
  const std::vector<Value*>& graph_outputs = context.graph().outputs();
  struct Lifetime {
    const Value* value;
    size_t first, last;
  };
  std::vector<Lifetime> lifetimes;
  for (size_t g = 0; g < ordered.size(); ++g) {
    for (int index : ordered[g]) {
      for (const Value* value : context.reach().node(index)->outputs()) {
        if (std::find(graph_outputs.begin(), graph_outputs.end(), value) != graph_outputs.end()) {
          continue;  // the caller's memory
        }
        size_t last = g;
        for (const Node* user : value->users()) last = std::max(last, position.at(user));
        if (last > g) lifetimes.push_back({value, g, last});
      }
    }
  }
  std::vector<int64_t> delta(ordered.size() + 1, 0);
  for (const Lifetime& life : lifetimes) {
    const int64_t bytes = life.value->shape().num_elements() * dtype_size_bytes(life.value->dtype());
    delta[life.first] += bytes;
    delta[life.last + 1] -= bytes;
  }
  LivePeak peak;
  int64_t running = 0;
  for (size_t g = 0; g < ordered.size(); ++g) {
    running += delta[g];
    const int64_t with_scratch = running + context.scratch_bytes(ordered[g]);
    if (with_scratch > peak.bytes) {
      peak.bytes = with_scratch;
      peak.at = g;
    }
  }
  for (const Lifetime& life : lifetimes) {
    if (life.first <= peak.at && peak.at <= life.last) peak.live.push_back(life.value);
  }
  std::sort(peak.live.begin(), peak.live.end(), [](const Value* a, const Value* b) {
    return a->shape().num_elements() * dtype_size_bytes(a->dtype()) >
           b->shape().num_elements() * dtype_size_bytes(b->dtype());
  });
  return peak;
}

std::string mib(int64_t bytes) {
  if (bytes < (1 << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1 << 10));
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::vector<NodeSet> bound_memory(PartitionContext& context, std::vector<NodeSet> groups,
                                  std::vector<Decision>& decisions) {
  std::vector<NodeSet> unfused;
  for (int node : context.computed()) unfused.push_back({node});
  const int64_t limit = live_peak(context, unfused).bytes;
  while (true) {
    std::vector<NodeSet> ordered = dependency_order(context, groups);
    const LivePeak peak = live_peak(context, ordered);
    if (peak.bytes <= limit) return ordered;
    // A fused group whose own scratch makes the excess runs as single nodes: the program
    // there is then the unfused one.
    const NodeSet& running = ordered[peak.at];
    const int64_t scratch = context.scratch_bytes(running);
    if (running.size() > 1 && scratch >= peak.bytes - limit) {
      decisions.push_back(
          {Decision::Kind::rejected, nullptr, nullptr, "",
           fmt::format("group of {} nodes starting at '{}' split: it needs {} of scratch where "
                       "the arena's peak would be {} against {} unfused",
                       running.size(), context.reach().node(running.front())->op_name(),
                       mib(scratch), mib(peak.bytes), mib(limit))});
      std::vector<NodeSet> split = ordered;
      split.erase(split.begin() + static_cast<std::ptrdiff_t>(peak.at));
      for (int node : running) split.push_back({node});
      groups = std::move(split);
      continue;
    }
    // The largest live value that a multi-node group reads: its readers leave the last such
    // group, which is what keeps the value alive.
    std::optional<size_t> target;
    NodeSet readers;
    const Value* held = nullptr;
    for (const Value* value : peak.live) {
      for (size_t g = ordered.size(); g-- > 0 && !target;) {
        if (ordered[g].size() < 2) continue;
        NodeSet inside;
        for (const Node* user : value->users()) {
          const int index = context.reach().index(user);
          if (std::binary_search(ordered[g].begin(), ordered[g].end(), index)) inside.push_back(index);
        }
        if (inside.empty() || value->producer() == nullptr ||
            std::binary_search(ordered[g].begin(), ordered[g].end(),
                               context.reach().index(value->producer()))) {
          continue;
        }
        std::sort(inside.begin(), inside.end());
        inside.erase(std::unique(inside.begin(), inside.end()), inside.end());
        target = g;
        readers = std::move(inside);
        held = value;
      }
      if (target) break;
    }
    if (!target) return dependency_order(context, std::move(unfused));  // cannot happen: see above
    NodeSet rest;
    std::set_difference(ordered[*target].begin(), ordered[*target].end(), readers.begin(),
                        readers.end(), std::back_inserter(rest));
    std::vector<NodeSet> split;
    for (int node : readers) split.push_back({node});
    std::vector<NodeSet> candidate = ordered;
    candidate.erase(candidate.begin() + static_cast<std::ptrdiff_t>(*target));
    candidate.insert(candidate.end(), split.begin(), split.end());
    if (!rest.empty()) candidate.push_back(rest);
    if (!rest.empty() && (!context.is_convex(rest) || find_group_cycle(context, candidate))) {
      candidate = ordered;
      candidate.erase(candidate.begin() + static_cast<std::ptrdiff_t>(*target));
      for (int node : ordered[*target]) candidate.push_back({node});
    }
    decisions.push_back(
        {Decision::Kind::rejected, nullptr, nullptr, "",
         fmt::format("group of {} nodes starting at '{}' split so that %{} ({}) is freed as "
                     "early as unfused: fused, the arena's peak was {} against {} unfused",
                     ordered[*target].size(), context.reach().node(ordered[*target].front())->op_name(),
                     held->name(), mib(held->shape().num_elements() * dtype_size_bytes(held->dtype())),
                     mib(peak.bytes), mib(limit))});
    groups = std::move(candidate);
  }
}

}  // namespace kiln::fusion
