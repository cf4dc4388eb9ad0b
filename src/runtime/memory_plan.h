// The static memory plan: every intermediate buffer of a compiled model gets a fixed offset in
// one arena, chosen so that buffers alive at the same time never overlap.
//
// A buffer is alive from the step that writes it to the last step that reads it (inclusive;
// steps are kernel calls in execution order). Offsets are assigned greedily: buffers in some
// order, each taking the lowest-offset gap among the already placed buffers whose lifetimes
// overlap its own that fits it (or the smallest such gap). Largest first ("greedy by size",
// Pisarchyk and Lee, 2020, as TensorFlow Lite plans its arena) places the buffers that
// dominate the peak while the arena is empty, but fragments on some programs (a fused
// ViT-base training step: 1,297 MiB for a live bound of 1,147 MiB), so several orders are
// tried (largest first, first used first, largest size x lifetime first, busiest step first)
// and the smallest arena is kept.
//
// The peak of any plan is at least the largest sum of the sizes of buffers alive at one step;
// `MemoryPlan::live_bound_bytes` reports that bound so a plan's waste is visible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln {

struct BufferLifetime {
  int64_t bytes = 0;
  int first_step = 0;  // the step that writes the buffer
  int last_step = 0;   // the last step that reads it; >= first_step
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per buffer, in bytes from the arena's start; aligned
  int64_t peak_bytes = 0;        // the arena's size
  int64_t total_bytes = 0;       // the sum of all (aligned) buffer sizes: the unplanned cost
  int64_t live_bound_bytes = 0;  // no plan can be smaller than this
};

inline constexpr int64_t kArenaAlignment = 64;  // a cache line; enough for any vector load

// `bytes` rounded up to a multiple of `alignment`.
inline constexpr int64_t round_up(int64_t bytes, int64_t alignment = kArenaAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// The bytes alive at each step, sizes rounded up to `alignment`: entry s for step s, from
// step 0 to the last step any buffer lives. Its largest entry is the live bound.
std::vector<int64_t> live_bytes_by_step(std::span<const BufferLifetime> buffers,
                                        int64_t alignment = 1);

// Plans `buffers`. Sizes are rounded up to `alignment` (a power of two).
MemoryPlan plan_memory(std::span<const BufferLifetime> buffers,
                       int64_t alignment = kArenaAlignment);

// An independent check of a plan: offsets aligned, and no two buffers whose lifetimes overlap
// share a byte. Returns a description of the first violation, or an empty string.
std::string check_memory_plan(std::span<const BufferLifetime> buffers, const MemoryPlan& plan,
                              int64_t alignment = kArenaAlignment);

}  // namespace kiln
