// The arena planner: exact plans for small cases, and on random lifetimes a plan the independent
// checker accepts whose peak lies between the live bound and the sum of all buffers.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kiln {
namespace {

TEST(MemoryPlan, BuffersWithDisjointLifetimesShareBytes) {
  // A chain a -> b -> c: a and c are never alive together, so c reuses a's bytes.
  const std::vector<BufferLifetime> buffers = {
      {.bytes = 1000, .first_step = 0, .last_step = 1},
      {.bytes = 1000, .first_step = 1, .last_step = 2},
      {.bytes = 1000, .first_step = 2, .last_step = 3},
  };
  const MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 1024, 0}));
  EXPECT_EQ(plan.peak_bytes, 2048);
  EXPECT_EQ(plan.total_bytes, 3072);
  EXPECT_EQ(plan.live_bound_bytes, 2048);
  EXPECT_EQ(check_memory_plan(buffers, plan), "");
}

TEST(MemoryPlan, SmallBuffersFillHolesBetweenLargeOnes) {
  // Two large buffers alive at different times leave the space after the shorter one free for
  // a small buffer alive alongside the longer one.
  const std::vector<BufferLifetime> buffers = {
      {.bytes = 64, .first_step = 3, .last_step = 4},
      {.bytes = 256, .first_step = 0, .last_step = 2},
      {.bytes = 128, .first_step = 3, .last_step = 5},
  };
  const MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{128, 0, 0}));
  EXPECT_EQ(plan.peak_bytes, 256);
  EXPECT_EQ(check_memory_plan(buffers, plan), "");
}

TEST(MemoryPlan, AnotherOrderAvoidsTheFragmentationOfLargestFirst) {
  // Placed largest first, first used first, or by size x lifetime, these buffers fragment the
  // arena to 640 bytes; largest first with equal sizes by last use (and busiest step first)
  // reaches the live bound, 576.
  const std::vector<BufferLifetime> buffers = {
      {.bytes = 256, .first_step = 4, .last_step = 4},
      {.bytes = 128, .first_step = 5, .last_step = 6},
      {.bytes = 192, .first_step = 3, .last_step = 5},
      {.bytes = 192, .first_step = 1, .last_step = 3},
      {.bytes = 64, .first_step = 1, .last_step = 6},
      {.bytes = 192, .first_step = 5, .last_step = 6},
  };
  const MemoryPlan plan = plan_memory(buffers);
  EXPECT_EQ(plan.live_bound_bytes, 576);
  EXPECT_EQ(plan.peak_bytes, 576);
  EXPECT_EQ(check_memory_plan(buffers, plan), "");
}

TEST(MemoryPlan, LastReadAndFirstWriteAtOneStepOverlap) {
  // Step 1 reads a and writes b: both are alive at step 1 and may not share bytes.
  const std::vector<BufferLifetime> buffers = {
      {.bytes = 64, .first_step = 0, .last_step = 1},
      {.bytes = 64, .first_step = 1, .last_step = 2},
  };
  const MemoryPlan plan = plan_memory(buffers);
  EXPECT_NE(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.live_bound_bytes, 128);
}

TEST(MemoryPlan, LiveBytesByStepCountEachBufferFromItsFirstToItsLastStep) {
  const std::vector<BufferLifetime> buffers = {{100, 0, 1}, {30, 1, 3}, {7, 3, 3}};
  EXPECT_EQ(live_bytes_by_step(buffers), (std::vector<int64_t>{100, 130, 30, 37}));
  // Rounded to the alignment: 128, 64 and 64 bytes.
  EXPECT_EQ(live_bytes_by_step(buffers, 64), (std::vector<int64_t>{128, 192, 64, 128}));
  EXPECT_TRUE(live_bytes_by_step({}).empty());
}

TEST(MemoryPlan, CheckerRejectsOverlapsAndMisalignment) {
  const std::vector<BufferLifetime> buffers = {
      {.bytes = 64, .first_step = 0, .last_step = 1},
      {.bytes = 64, .first_step = 1, .last_step = 2},
  };
  MemoryPlan plan{.offsets = {0, 32}, .peak_bytes = 96};
  EXPECT_EQ(check_memory_plan(buffers, plan), "buffer 1 is not aligned");
  plan.offsets = {0, 0};
  EXPECT_EQ(check_memory_plan(buffers, plan), "buffers 0 and 1 are alive together and overlap");
  plan.offsets = {0, 64};
  plan.peak_bytes = 100;
  EXPECT_EQ(check_memory_plan(buffers, plan), "buffer 1 lies outside the arena");
}

TEST(MemoryPlan, RandomLifetimesGiveValidTightPlans) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937 rng(seed);
    const int steps = 1 + static_cast<int>(rng() % 50);
    const int count = static_cast<int>(rng() % 80);
    std::vector<BufferLifetime> buffers;
    for (int i = 0; i < count; ++i) {
      const int first = static_cast<int>(rng() % static_cast<uint32_t>(steps));
      const int last = first + static_cast<int>(rng() % 8);
      buffers.push_back(
          {.bytes = static_cast<int64_t>(rng() % 5000), .first_step = first, .last_step = last});
    }
    const MemoryPlan plan = plan_memory(buffers);
    ASSERT_EQ(check_memory_plan(buffers, plan), "");
    EXPECT_GE(plan.peak_bytes, plan.live_bound_bytes);
    EXPECT_LE(plan.peak_bytes, plan.total_bytes);
  }
}

}  // namespace
}  // namespace kiln
