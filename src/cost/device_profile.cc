#include "cost/device_profile.h"

#include <dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/files.h"

namespace kiln::cost {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The best time of `runs` calls of `work` after one warm-up call.
template <typename Work>
double best_seconds(int runs, Work&& work) {
  work();
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto start = Clock::now();
    work();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

// The kernel's figure for the cache of `level` (sysfs), else glibc's (sysconf), else
// `fallback`. The kernel's comes first: on a 2-core AMD EPYC VM glibc reported 320 MiB of L3
// where the kernel and lscpu report 32 MiB, and priced with 320 MiB every tensor under 160 MiB
// (bert-base's 125 MB logits among them) counted as read from cache however often it was read.
int64_t cache_bytes(int level, int sysconf_name, int64_t fallback) {
  if (const int64_t bytes = cache_bytes_from_sysfs("/sys/devices/system/cpu/cpu0/cache", level);
      bytes > 0) {
    return bytes;
  }
  const long bytes = sysconf(sysconf_name);
  return bytes > 0 ? bytes : fallback;
}

// "32768K", "1M" or "512" as bytes; 0 when it is none of these.
int64_t parse_cache_size(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  int64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': unit = int64_t{1} << 10; break;
      case 'M': unit = int64_t{1} << 20; break;
      case 'G': unit = int64_t{1} << 30; break;
      default: break;
    }
    if (unit > 1) text.pop_back();
  }
  if (text.empty() || text.size() > 12 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;
  }
  return std::stoll(text) * unit;
}

std::string first_line(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// The library the generated kernels' f32 gemm calls (codegen/cpu/prelude.cc): oneDNN's sgemm.
double measure_matmul_flops() {
  constexpr int n = 512;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double seconds = best_seconds(5, [&] {
    (void)dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * n * n / seconds;
}

// a = a * s + t over a 16 KiB array per thread (L1), 2 flops per element, the best of 10 runs
// of about a millisecond: with 256 sweeps (tens of microseconds, where a thread's wake-up
// matters) and the best of 3, five measurements on one machine spread from 31 to 57 GFLOP/s;
// now they agree within 1%.
double measure_vector_flops() {
  constexpr int elements = 4096, sweeps = 4096;
  const int threads = omp_get_max_threads();
  std::vector<float> data(static_cast<size_t>(elements) * static_cast<size_t>(threads), 1.0f);
  const double seconds = best_seconds(10, [&] {
#pragma omp parallel
    {
      float* a = data.data() + static_cast<size_t>(omp_get_thread_num()) * elements;
      for (int sweep = 0; sweep < sweeps; ++sweep) {
#pragma omp simd
        for (int i = 0; i < elements; ++i) a[i] = a[i] * 0.999f + 0.001f;
      }
    }
  });
  return 2.0 * elements * sweeps * threads / seconds;
}

// A parallel copy of 64 MiB, counting the bytes read and the bytes written.
double measure_memory_bandwidth() {
  constexpr size_t elements = size_t{16} << 20;
  std::vector<float> source(elements, 1.0f), target(elements, 0.0f);
  const double seconds = best_seconds(4, [&] {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < elements; ++i) target[i] = source[i];
  });
  return 2.0 * static_cast<double>(elements * sizeof(float)) / seconds;
}

// Kept out of line so that each call really enters a parallel region.
[[gnu::noinline]] void empty_parallel_region(int* sink) {
#pragma omp parallel
  {
    if (omp_get_thread_num() < 0) *sink = 1;
  }
}

double measure_kernel_overhead() {
  int sink = 0;
  std::vector<double> times;
  for (int call = 0; call < 200; ++call) {
    const auto start = Clock::now();
    empty_parallel_region(&sink);
    times.push_back(seconds_since(start));
  }
  // The 10th percentile: a measurement taken while other work shares the cores is cached for
  // good, so it should reflect the machine, not the moment.
  std::nth_element(times.begin(), times.begin() + 20, times.end());
  return times[20];
}

// Whether other programs leave the cores mostly idle: the one-minute load average, less the
// caller, below half of `cores`. Unknown counts as quiet.
bool machine_is_quiet(int cores) {
  double load = 0;
  if (getloadavg(&load, 1) != 1) return true;
  return load - 1 < 0.5 * cores;
}

// CPU time spent so far by the whole machine (every core, outside idle and I/O wait, from
// /proc/stat) and by this process (getrusage), to tell whether other programs ran while this
// one measured. Zeros where /proc/stat cannot be read.
struct CpuTimes {
  double machine_busy_seconds = 0;
  double own_seconds = 0;
  Clock::time_point when = Clock::now();
};

CpuTimes cpu_times_now() {
  CpuTimes times;
  std::ifstream stat("/proc/stat");
  std::string label;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (stat >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal &&
      label == "cpu") {
    const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
    times.machine_busy_seconds = (user + nice + system + irq + softirq + steal) / ticks_per_second;
  }
  rusage own{};
  if (getrusage(RUSAGE_SELF, &own) == 0) {
    auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
    times.own_seconds = seconds(own.ru_utime) + seconds(own.ru_stime);
  }
  return times;
}

// Whether other programs used less than a quarter of the cores since `start`. The load average
// alone is not enough: it trails by a minute, and a profile measured under a parallel test run
// that it called quiet had its elementwise rate about 110 times too low (0.52 against 57
// GFLOP/s quiet), cached for good, so every later partition on that machine was priced wrong.
bool others_stayed_idle_since(const CpuTimes& start, int cores) {
  const CpuTimes end = cpu_times_now();
  const double wall = std::chrono::duration<double>(end.when - start.when).count();
  const double others = (end.machine_busy_seconds - start.machine_busy_seconds) -
                        (end.own_seconds - start.own_seconds);
  return wall <= 0 || others < 0.25 * wall * cores;
}

std::filesystem::path cache_path(const std::filesystem::path& root, const DeviceProfile& identity) {
  // FNV-1a of the CPU model, the core count and how the profile was taken (profiles taken
  // with OpenBLAS's sgemm, before oneDNN's, or with glibc's cache sizes, before the kernel's,
  // hash otherwise and are measured again): one file per kind of machine.
  uint64_t hash = 1469598103934665603ull;
  for (char c : fmt::format("{}/{}/onednn-sgemm/sysfs-caches", identity.cpu, identity.cores)) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return root / "device" / fmt::format("{:016x}.json", hash);
}

}  // namespace

int64_t cache_bytes_from_sysfs(const std::filesystem::path& cache_dir, int level) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, error)) {
    const std::filesystem::path& index = entry.path();
    if (index.filename().string().rfind("index", 0) != 0) continue;
    if (first_line(index / "level") != std::to_string(level)) continue;
    if (first_line(index / "type") == "Instruction") continue;
    return parse_cache_size(first_line(index / "size"));
  }
  return 0;
}

DeviceProfile reference_profile() {
  return {.cpu = "reference (2-core AVX-512 Xeon VM)",
          .cores = 2,
          .matmul_flops = 340e9,
          .vector_flops = 40e9,
          .memory_bandwidth = 26e9,
          .l2_bytes = int64_t{2} << 20,
          .llc_bytes = int64_t{32} << 20,
          .kernel_overhead = 2e-6};
}

Expected<DeviceProfile> measure_device_profile() {
  DeviceProfile profile;
  profile.cpu = cpu_model();
  profile.cores = omp_get_max_threads();
  profile.matmul_flops = measure_matmul_flops();
  profile.vector_flops = measure_vector_flops();
  profile.memory_bandwidth = measure_memory_bandwidth();
  profile.l2_bytes = cache_bytes(2, _SC_LEVEL2_CACHE_SIZE, int64_t{1} << 20);
  profile.llc_bytes = cache_bytes(3, _SC_LEVEL3_CACHE_SIZE, int64_t{16} << 20);
  profile.kernel_overhead = measure_kernel_overhead();
  if (!(profile.matmul_flops > 0 && profile.vector_flops > 0 && profile.memory_bandwidth > 0)) {
    return Status::errorf("measuring this machine gave unusable rates: {}", profile_to_json(profile));
  }
  return profile;
}

Expected<DeviceProfile> cached_device_profile(const std::filesystem::path& cache_root,
                                              const std::function<bool()>& quiet) {
  const DeviceProfile identity{.cpu = cpu_model(), .cores = omp_get_max_threads()};
  const std::filesystem::path path = cache_path(cache_root, identity);
  if (Expected<std::string> text = read_file(path.string(), 1 << 20)) {
    Expected<DeviceProfile> cached = profile_from_json(*text);
    if (cached && cached->cpu == identity.cpu && cached->cores == identity.cores) return cached;
  }
  // A measurement taken while other programs keep the cores busy describes the moment, not
  // the machine: under a parallel build and test run a kernel call measured 4.7 ms and the
  // elementwise rate 0.7 GFLOP/s (7,000 and 90 times off), and bert-tiny's step partitioned
  // into 131 kernels instead of 69 until the file was deleted. Such a profile serves this
  // caller only; the next one measures again.
  KILN_ASSIGN_OR_RETURN(DeviceProfile measured, measure_device_profile());
  if (quiet()) (void)write_file_atomically(path, profile_to_json(measured));
  return measured;
}

// $KILN_DEVICE_PROFILE when set: "reference", or a profile's JSON file.
Expected<DeviceProfile> pinned_device_profile(std::string_view pinned) {
  if (pinned == "reference") return reference_profile();
  Expected<std::string> text = read_file(std::string(pinned), 1 << 20);
  if (!text) {
    return Status::errorf("KILN_DEVICE_PROFILE={}: {}", pinned, text.status().message());
  }
  Expected<DeviceProfile> profile = profile_from_json(*text);
  if (!profile) {
    return Status::errorf("KILN_DEVICE_PROFILE={}: {}", pinned, profile.status().message());
  }
  return profile;
}

std::function<bool()> watch_quiet(int cores) {
  const bool quiet_before = machine_is_quiet(cores);
  const CpuTimes start = cpu_times_now();
  return [=] { return quiet_before && others_stayed_idle_since(start, cores); };
}

Expected<DeviceProfile> host_device_profile() {
  static std::mutex mutex;
  static std::optional<DeviceProfile> known;
  std::lock_guard lock(mutex);
  if (!known) {
    if (const char* pinned = std::getenv("KILN_DEVICE_PROFILE"); pinned && *pinned) {
      KILN_ASSIGN_OR_RETURN(known, pinned_device_profile(pinned));
    } else {
      KILN_ASSIGN_OR_RETURN(known, cached_device_profile(kiln_cache_root(),
                                                         watch_quiet(omp_get_max_threads())));
    }
  }
  return *known;
}

Expected<DeviceProfile> given_or_host_profile(const std::optional<DeviceProfile>& given) {
  if (given) return *given;
  return host_device_profile();
}

Expected<std::string> profile_identity(const std::optional<DeviceProfile>& given) {
  if (given) return profile_to_json(*given);
  if (const char* pinned = std::getenv("KILN_DEVICE_PROFILE"); pinned && *pinned) {
    KILN_ASSIGN_OR_RETURN(const DeviceProfile profile, pinned_device_profile(pinned));
    return profile_to_json(profile);
  }
  return fmt::format("this machine: {}, {} cores\n", cpu_model(), omp_get_max_threads());
}

std::string profile_to_json(const DeviceProfile& profile) {
  const nlohmann::json json = {
      {"cpu", profile.cpu},
      {"cores", profile.cores},
      {"matmul_flops", profile.matmul_flops},
      {"vector_flops", profile.vector_flops},
      {"memory_bandwidth", profile.memory_bandwidth},
      {"l2_bytes", profile.l2_bytes},
      {"llc_bytes", profile.llc_bytes},
      {"kernel_overhead", profile.kernel_overhead},
  };
  return json.dump(2) + "\n";
}

Expected<DeviceProfile> profile_from_json(std::string_view text) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Status::error("a device profile is a JSON object");
  }
  DeviceProfile profile;
  std::string missing;
  const auto read = [&](const char* name, auto& field, bool (nlohmann::json::*is_kind)() const) {
    auto it = json.find(name);
    if (it == json.end() || !((*it).*is_kind)()) {
      if (missing.empty()) missing = name;
      return;
    }
    field = it->template get<std::remove_reference_t<decltype(field)>>();
  };
  read("cpu", profile.cpu, &nlohmann::json::is_string);
  read("cores", profile.cores, &nlohmann::json::is_number_integer);
  read("matmul_flops", profile.matmul_flops, &nlohmann::json::is_number);
  read("vector_flops", profile.vector_flops, &nlohmann::json::is_number);
  read("memory_bandwidth", profile.memory_bandwidth, &nlohmann::json::is_number);
  read("l2_bytes", profile.l2_bytes, &nlohmann::json::is_number_integer);
  read("llc_bytes", profile.llc_bytes, &nlohmann::json::is_number_integer);
  read("kernel_overhead", profile.kernel_overhead, &nlohmann::json::is_number);
  if (!missing.empty()) {
    return Status::errorf("device profile: '{}' is missing or of the wrong type", missing);
  }
  return profile;
}

}  // namespace kiln::cost
