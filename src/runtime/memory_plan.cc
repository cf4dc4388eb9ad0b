#include "runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>

namespace kiln {
namespace {

int64_t round_up(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

bool lifetimes_overlap(const BufferLifetime& a, const BufferLifetime& b) {
  return a.first_step <= b.last_step && b.first_step <= a.last_step;
}

// The largest sum of aligned sizes of the buffers alive at one step, by a sweep over the
// lifetime endpoints.
int64_t live_bound(std::span<const BufferLifetime> buffers, int64_t alignment) {
  std::vector<std::pair<int, int64_t>> events;  // (step, +bytes at first / -bytes after last)
  for (const BufferLifetime& buffer : buffers) {
    const int64_t bytes = round_up(buffer.bytes, alignment);
    events.emplace_back(buffer.first_step, bytes);
    events.emplace_back(buffer.last_step + 1, -bytes);
  }
  // At equal steps, frees sort before allocations (negative first): a buffer last read at step
  // s is not alive at s + 1.
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  int64_t peak = 0;
  for (const auto& [step, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

// Places the buffers in `order`, each at the lowest offset where it fits beside the placed
// buffers whose lifetimes overlap its own.
MemoryPlan place_in_order(std::span<const BufferLifetime> buffers, const std::vector<size_t>& order,
                          int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  for (size_t index : order) {
    const BufferLifetime& buffer = buffers[index];
    const int64_t bytes = round_up(buffer.bytes, alignment);
    plan.total_bytes += bytes;
    // The placed buffers alive at the same time, by offset; take the lowest gap that fits.
    std::vector<size_t> conflicts;
    for (size_t other : placed) {
      if (lifetimes_overlap(buffer, buffers[other])) conflicts.push_back(other);
    }
    std::sort(conflicts.begin(), conflicts.end(),
              [&](size_t a, size_t b) { return plan.offsets[a] < plan.offsets[b]; });
    int64_t offset = 0;
    for (size_t other : conflicts) {
      if (plan.offsets[other] - offset >= bytes) break;  // the gap before `other` fits
      offset = std::max(offset, plan.offsets[other] + round_up(buffers[other].bytes, alignment));
    }
    plan.offsets[index] = offset;
    plan.peak_bytes = std::max(plan.peak_bytes, offset + bytes);
    placed.push_back(index);
  }
  return plan;
}

}  // namespace

MemoryPlan plan_memory(std::span<const BufferLifetime> buffers, int64_t alignment) {
  // Greedy placement is not optimal and no single order wins everywhere: largest first packs
  // big buffers tightly, first-used first follows the program like a stack allocator, and
  // largest size x lifetime first places the buffers that constrain the most others early.
  // Each order is tried and the smallest arena kept (ties: the first).
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
  };
  std::optional<MemoryPlan> best;
  for (const std::vector<size_t>& order : orders) {
    MemoryPlan plan = place_in_order(buffers, order, alignment);
    if (!best || plan.peak_bytes < best->peak_bytes) best = std::move(plan);
  }
  best->live_bound_bytes = live_bound(buffers, alignment);
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
