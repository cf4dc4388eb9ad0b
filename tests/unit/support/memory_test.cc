// What a run may still allocate (support/memory.h): the kernel's MemAvailable, capped by a
// cgroup's limit.
#include "support/memory.h"

#include <gtest/gtest.h>

#include <fstream>

#include "unit/test_util.h"

namespace kiln {
namespace {

void write(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

TEST(AvailableMemory, IsMemAvailableCappedByTheCgroupsLimit) {
  ::kiln::testing::TempDir proc, cgroup;
  write(proc.path() / "meminfo",
        "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   2000000 kB\n");
  EXPECT_EQ(available_memory_bytes(proc.path(), cgroup.path()), int64_t{2000000} * 1024);
  write(cgroup.path() / "memory.max", "max\n");
  write(cgroup.path() / "memory.current", "100\n");
  EXPECT_EQ(available_memory_bytes(proc.path(), cgroup.path()), int64_t{2000000} * 1024);
  write(cgroup.path() / "memory.max", "1000000\n");
  EXPECT_EQ(available_memory_bytes(proc.path(), cgroup.path()), 1000000 - 100);
  write(cgroup.path() / "memory.current", "2000000\n");
  EXPECT_EQ(available_memory_bytes(proc.path(), cgroup.path()), 0);
}

TEST(AvailableMemory, IsUnknownWhereNothingSaysAndReadOnThisMachine) {
  ::kiln::testing::TempDir empty;
  EXPECT_EQ(available_memory_bytes(empty.path(), empty.path()), std::nullopt);
  const std::optional<int64_t> here = available_memory_bytes();
  ASSERT_TRUE(here.has_value());
  EXPECT_GT(*here, 0);
}

}  // namespace
}  // namespace kiln
