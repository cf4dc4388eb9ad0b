#include "support/memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln {
namespace {

// The value of the "MemAvailable:  123 kB" line, in bytes.
std::optional<int64_t> meminfo_available(const std::filesystem::path& meminfo) {
  std::ifstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, unit;
    int64_t value = 0;
    if (!(fields >> name >> value)) continue;
    if (name != "MemAvailable:") continue;
    fields >> unit;
    return unit == "kB" ? value * 1024 : value;
  }
  return std::nullopt;
}

// A cgroup v2 file holding one number ("max" where there is no limit).
std::optional<int64_t> cgroup_number(const std::filesystem::path& file) {
  std::ifstream in(file);
  int64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int64_t> available_memory_bytes(const std::filesystem::path& proc,
                                              const std::filesystem::path& cgroup) {
  std::optional<int64_t> available = meminfo_available(proc / "meminfo");
  const std::optional<int64_t> limit = cgroup_number(cgroup / "memory.max");
  const std::optional<int64_t> used = cgroup_number(cgroup / "memory.current");
  if (limit && used) {
    const int64_t left = std::max<int64_t>(*limit - *used, 0);
    available = available ? std::min(*available, left) : left;
  }
  return available;
}

std::optional<int64_t> available_memory_bytes() {
  return available_memory_bytes("/proc", "/sys/fs/cgroup");
}

}  // namespace kiln
