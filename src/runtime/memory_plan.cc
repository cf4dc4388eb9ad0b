#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>

namespace kiln {
namespace {

bool lifetimes_overlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

// Where a buffer goes among the gaps left by the placed buffers alive beside it: the lowest
// gap that fits (first fit) or the smallest (best fit, which keeps large gaps for large
// buffers); above them all when none fits.
enum class Fit { first, best };

// Places the buffers in `order`, each in a gap beside the placed buffers whose lifetimes
// overlap its own, chosen by `fit`.
MemoryPlan place_in_order(std::span<const BufferLifetime> buffers, const std::vector<size_t>& order,
                          int64_t alignment, Fit fit) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;  // by offset
  for (size_t index : order) {
    const BufferLifetime& buffer = buffers[index];
    const int64_t bytes = round_up(buffer.bytes, alignment);
    plan.total_bytes += bytes;
    // The gaps between the placed buffers alive at the same time, lowest first.
    int64_t offset = 0;
    std::optional<int64_t> chosen, chosen_gap;
    for (size_t other : placed) {
      if (!lifetimes_overlap(buffer, buffers[other])) continue;
      const int64_t gap = plan.offsets[other] - offset;
      if (gap >= bytes && (!chosen_gap || gap < *chosen_gap)) {
        chosen = offset;
        chosen_gap = gap;
        if (fit == Fit::first) break;
      }
      offset = std::max(offset, plan.offsets[other] + round_up(buffers[other].bytes, alignment));
    }
    if (chosen) offset = *chosen;
    plan.offsets[index] = offset;
    plan.peak_bytes = std::max(plan.peak_bytes, offset + bytes);
    placed.insert(std::upper_bound(placed.begin(), placed.end(), offset,
                                   [&](int64_t at, size_t other) { return at < plan.offsets[other]; }),
                  index);
  }
  return plan;
}

// The buffers in TensorFlow Lite's "greedy by breadth" order: steps by the bytes alive at
// them, most first, and at each step its buffers not yet taken, largest first. A buffer is
// taken at the step of its lifetime that comes first in that order, so the order sorts the
// buffers by that step's rank (a range minimum over the lifetime, from a sparse table), then
// largest first: O(n log n) rather than a pass over the buffers per step.
std::vector<size_t> breadth_order(std::span<const BufferLifetime> buffers, int64_t alignment) {
  const std::vector<int64_t> live = live_bytes_by_step(buffers, alignment);
  const int steps = static_cast<int>(live.size());
  std::vector<size_t> by_live(static_cast<size_t>(steps));
  std::iota(by_live.begin(), by_live.end(), size_t{0});
  std::stable_sort(by_live.begin(), by_live.end(), [&](size_t a, size_t b) { return live[a] > live[b]; });
  // minimum[k][s]: the smallest rank among steps s .. s + 2^k - 1.
  std::vector<std::vector<size_t>> minimum(1, std::vector<size_t>(static_cast<size_t>(steps)));
  for (size_t r = 0; r < by_live.size(); ++r) minimum[0][by_live[r]] = r;
  for (size_t width = 2; width <= static_cast<size_t>(steps); width *= 2) {
    const std::vector<size_t>& half = minimum.back();
    std::vector<size_t> level(static_cast<size_t>(steps) - width + 1);
    for (size_t s = 0; s < level.size(); ++s) level[s] = std::min(half[s], half[s + width / 2]);
    minimum.push_back(std::move(level));
  }
  std::vector<size_t> taken_at(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto first = static_cast<size_t>(buffers[i].first_step);
    const auto length = static_cast<size_t>(buffers[i].last_step - buffers[i].first_step + 1);
    const size_t k = static_cast<size_t>(std::bit_width(length)) - 1;
    taken_at[i] = std::min(minimum[k][first], minimum[k][first + length - (size_t{1} << k)]);
  }
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (taken_at[a] != taken_at[b]) return taken_at[a] < taken_at[b];
    return buffers[a].bytes > buffers[b].bytes;
  });
  return order;
}

}  // namespace

std::vector<int64_t> live_bytes_by_step(std::span<const BufferLifetime> buffers,
                                        int64_t alignment) {
  int steps = 0;
  for (const BufferLifetime& buffer : buffers) steps = std::max(steps, buffer.last_step + 1);
  std::vector<int64_t> live(static_cast<size_t>(steps) + 1, 0);
  for (const BufferLifetime& buffer : buffers) {
    live[static_cast<size_t>(buffer.first_step)] += round_up(buffer.bytes, alignment);
    live[static_cast<size_t>(buffer.last_step) + 1] -= round_up(buffer.bytes, alignment);
  }
  for (size_t s = 1; s < live.size(); ++s) live[s] += live[s - 1];
  live.pop_back();  // the entry past the last step, zero
  return live;
}

MemoryPlan plan_memory(std::span<const BufferLifetime> buffers, int64_t alignment) {
  // Greedy placement is not optimal and no single order wins everywhere: largest first packs
  // big buffers tightly (equal sizes ordered by first use, or by last use latest first),
  // first-used first follows the program like a stack allocator, largest size x lifetime
  // first places the buffers that constrain the most others early, and breadth first fills
  // the busiest steps first (first fit, and best fit). Each is tried and the smallest arena
  // kept (ties: the first). On fused ViT-base programs, inference planned 42.3 MiB with the
  // first three for a live bound of 41.6 MiB (largest first by last use: 41.6 MiB), and the
  // training step 1,253 MiB for 1,141 MiB (breadth first, best fit: 1,220 MiB).
  const auto order_by = [&](auto less) {
    std::vector<size_t> order(buffers.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), less);
    return order;
  };
  const auto length = [&](size_t i) {
    return static_cast<int64_t>(buffers[i].last_step - buffers[i].first_step + 1);
  };
  const std::vector<std::vector<size_t>> orders = {
      order_by([&](size_t a, size_t b) {
        if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
        return buffers[a].first_step < buffers[b].first_step;
      }),
      order_by([&](size_t a, size_t b) {
        if (buffers[a].first_step != buffers[b].first_step) {
          return buffers[a].first_step < buffers[b].first_step;
        }
        return buffers[a].bytes > buffers[b].bytes;
      }),
      order_by([&](size_t a, size_t b) {
        return buffers[a].bytes * length(a) > buffers[b].bytes * length(b);
      }),
      order_by([&](size_t a, size_t b) {
        if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
        return buffers[a].last_step > buffers[b].last_step;
      }),
      breadth_order(buffers, alignment),
  };
  std::optional<MemoryPlan> best;
  const auto keep_smaller = [&](MemoryPlan plan) {
    if (!best || plan.peak_bytes < best->peak_bytes) best = std::move(plan);
  };
  for (const std::vector<size_t>& order : orders) {
    keep_smaller(place_in_order(buffers, order, alignment, Fit::first));
  }
  keep_smaller(place_in_order(buffers, orders.back(), alignment, Fit::best));
  const std::vector<int64_t> live = live_bytes_by_step(buffers, alignment);
  best->live_bound_bytes = live.empty() ? 0 : *std::ranges::max_element(live);
  return *best;
}

std::string check_memory_plan(std::span<const BufferLifetime> buffers, const MemoryPlan& plan,
                              int64_t alignment) {
  if (plan.offsets.size() != buffers.size()) {
    return fmt::format("the plan has {} offsets for {} buffers", plan.offsets.size(),
                       buffers.size());
  }
  for (size_t a = 0; a < buffers.size(); ++a) {
    if (plan.offsets[a] % alignment != 0) return fmt::format("buffer {} is not aligned", a);
    if (plan.offsets[a] < 0 || plan.offsets[a] + buffers[a].bytes > plan.peak_bytes) {
      return fmt::format("buffer {} lies outside the arena", a);
    }
  }
  for (size_t a = 0; a < buffers.size(); ++a) {
    const int64_t a_begin = plan.offsets[a];
    const int64_t a_end = a_begin + buffers[a].bytes;
    for (size_t b = a + 1; b < buffers.size(); ++b) {
      if (!lifetimes_overlap(buffers[a], buffers[b])) continue;
      const int64_t b_begin = plan.offsets[b];
      const int64_t b_end = b_begin + buffers[b].bytes;
      if (a_begin < b_end && b_begin < a_end) {
        return fmt::format("buffers {} and {} are alive together and overlap", a, b);
      }
    }
  }
  return "";
}

}  // namespace kiln
