// How much memory this process may still take: what the kernel says is available
// (/proc/meminfo's MemAvailable: free memory plus what it can reclaim without swapping), capped
// by the cgroup's limit where one is set (cgroup v2: memory.max less memory.current), as in a
// container. A run asks before allocating, so that one that cannot fit stops with a message
// instead of being killed by the kernel without a word.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace kiln {

// nullopt where neither can be read (not Linux).
std::optional<int64_t> available_memory_bytes();

// The same, read from the files under `proc` (meminfo) and `cgroup` (memory.max,
// memory.current), for tests.
std::optional<int64_t> available_memory_bytes(const std::filesystem::path& proc,
                                              const std::filesystem::path& cgroup);

}  // namespace kiln
