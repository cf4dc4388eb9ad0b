// The machine a cost estimate is for: what a roofline needs (the arithmetic rates, the memory
// bandwidth, the cache sizes and the fixed cost of a kernel call), measured once per machine
// and cached.
//
// Rates are measured by Kiln itself, not read from a datasheet: a large OpenBLAS sgemm for the
// contraction rate, a vectorizable loop over data that stays in L1 for the elementwise rate,
// a parallel copy of buffers much larger than the last-level cache for the bandwidth (bytes
// read plus bytes written, per second), and a call into an empty OpenMP parallel region for
// the per-kernel overhead; each is the best of a few runs after a warm-up. Measuring takes
// about a tenth of a second; the result is cached as JSON under the Kiln cache root
// (support/files.h) in device/<hash of the CPU model and core count>.json, written atomically.
//
// reference_profile() is a fixed profile (the 2-core machine this project is developed on) for
// tests and golden partitions, which must not depend on the machine running them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::cost {

struct DeviceProfile {
  std::string cpu;                // model name (/proc/cpuinfo), for people reading the cache
  int cores = 1;                  // hardware threads OpenMP uses
  double matmul_flops = 0;        // f32 flop/s of a large sgemm on every core
  double vector_flops = 0;        // f32 flop/s of simple elementwise arithmetic on every core
  double memory_bandwidth = 0;    // bytes/s moved (read + written) by a parallel copy
  int64_t l2_bytes = 0;           // per core
  int64_t llc_bytes = 0;          // last-level cache, shared
  double kernel_overhead = 0;     // seconds per kernel call (a call and an OpenMP region)

  bool operator==(const DeviceProfile&) const = default;
};

DeviceProfile reference_profile();

// The size in bytes of the level-`level` data or unified cache that Linux describes under
// `cache_dir` (/sys/devices/system/cpu/cpu0/cache: index*/level, type and size, as "32768K");
// 0 when there is none or its size cannot be read. measure_device_profile takes the cache
// sizes from there before glibc's sysconf, which can be far off in a VM.
int64_t cache_bytes_from_sysfs(const std::filesystem::path& cache_dir, int level);

// Measures this machine now (about 0.1 s).
Expected<DeviceProfile> measure_device_profile();

// This machine's profile cached under `cache_root`: read, else measured and written. Errors
// only when the measurement fails; an unreadable or damaged entry is measured again and
// replaced, and a cache that cannot be written only costs a measurement next time. A
// measurement is written only when `quiet()`, asked after measuring, says other programs left
// the cores alone; otherwise it is returned but not written: it describes the moment, not the
// machine.
Expected<DeviceProfile> cached_device_profile(const std::filesystem::path& cache_root,
                                              const std::function<bool()>& quiet);

// Starts watching whether other programs leave this machine's `cores` alone: the returned
// function says, when called, whether they did from this call on (the one-minute load average,
// less the caller, was below half the cores at the start, and other processes used less than a
// quarter of the cores since). A measurement taken when it says no describes the moment, not
// the machine, and is not cached.
std::function<bool()> watch_quiet(int cores);

// cached_device_profile(kiln_cache_root(), quiet), remembered for the life of the process;
// quiet when the one-minute load average, less this process, is below half the cores before
// measuring, and other processes used less than a quarter of the cores while it measured.
// $KILN_DEVICE_PROFILE pins it instead: "reference" is reference_profile(), anything else the
// path of a profile's JSON file (as the cache holds). The CLI test pins it, so the kernel
// counts it expects do not depend on the machine or on a measurement taken under load.
Expected<DeviceProfile> host_device_profile();

// `given` where there is one (options that pin a profile), else host_device_profile().
Expected<DeviceProfile> given_or_host_profile(const std::optional<DeviceProfile>& given);

// Which profile given_or_host_profile(given) prices with, named without measuring anything:
// the given or pinned ($KILN_DEVICE_PROFILE) profile's JSON, else this machine's CPU model and
// core count. The compilation cache keys on it (compiler/compilation_cache.h). A key holding
// the measured figures changed whenever a measurement taken under load went uncached (see
// cached_device_profile), so a second identical run compiled again; a compilation priced with
// another measurement of the same machine computes the same, and is served.
Expected<std::string> profile_identity(const std::optional<DeviceProfile>& given);

std::string profile_to_json(const DeviceProfile& profile);
// Errors name the missing or ill-typed field.
Expected<DeviceProfile> profile_from_json(std::string_view json);

}  // namespace kiln::cost
