// The device profile (cost/device_profile.h): the JSON form and its errors, a real
// measurement of this machine, the per-machine cache (written once, read back, a damaged
// entry replaced), and the cache root and atomic writes of support/files.h it relies on.
#include "cost/device_profile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "support/files.h"
#include "unit/test_util.h"

namespace kiln::cost {
namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DeviceProfile, JsonRoundTripAndFieldErrors) {
  const DeviceProfile profile = reference_profile();
  Expected<DeviceProfile> back = profile_from_json(profile_to_json(profile));
  ASSERT_TRUE(back.has_value()) << back.status().message();
  EXPECT_EQ(*back, profile);
  Expected<DeviceProfile> missing = profile_from_json(R"({"cpu": "x", "cores": 2})");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("'matmul_flops'"), std::string::npos);
  Expected<DeviceProfile> wrong = profile_from_json(R"({"cpu": 3})");
  EXPECT_NE(wrong.status().message().find("'cpu'"), std::string::npos);
  EXPECT_FALSE(profile_from_json("not json").has_value());
  EXPECT_FALSE(profile_from_json("[1, 2]").has_value());
}

TEST(DeviceProfile, MeasuresPlausibleNumbers) {
  Expected<DeviceProfile> profile = measure_device_profile();
  ASSERT_TRUE(profile.has_value()) << profile.status().message();
  EXPECT_GE(profile->cores, 1);
  EXPECT_GT(profile->matmul_flops, 1e8);
  EXPECT_GT(profile->vector_flops, 1e8);
  EXPECT_GT(profile->memory_bandwidth, 1e8);
  EXPECT_GT(profile->l2_bytes, 0);
  EXPECT_GE(profile->llc_bytes, profile->l2_bytes / 64);
  EXPECT_GT(profile->kernel_overhead, 0);
  EXPECT_LT(profile->kernel_overhead, 0.05);  // generous: other tests may share the cores
  EXPECT_FALSE(profile->cpu.empty());
}

// A sysfs cache folder like a 2-core AMD EPYC VM's, whose glibc said 320 MiB of L3.
TEST(DeviceProfile, CacheSizesComeFromLinuxsDescription) {
  testing::TempDir dir;
  const auto index = [&](int n, const std::string& level, const std::string& type,
                         const std::string& size) {
    const std::filesystem::path folder = dir.path() / fmt::format("index{}", n);
    std::filesystem::create_directories(folder);
    std::ofstream(folder / "level") << level << "\n";
    std::ofstream(folder / "type") << type << "\n";
    std::ofstream(folder / "size") << size << "\n";
  };
  index(0, "1", "Data", "32K");
  index(1, "1", "Instruction", "64K");
  index(2, "2", "Unified", "1024K");
  index(3, "3", "Unified", "32768K");
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 1), 32 << 10);  // the data cache, not the other
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 2), 1 << 20);
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 3), 32 << 20);
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 4), 0);
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path() / "missing", 3), 0);
  index(3, "3", "Unified", "lots");
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 3), 0);
  index(3, "3", "Unified", "2M");
  EXPECT_EQ(cache_bytes_from_sysfs(dir.path(), 3), 2 << 20);
}

// The one file under `root`/device, or an empty path.
std::filesystem::path cached_file(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> files;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(root / "device", ignored)) {
    files.push_back(entry.path());
  }
  return files.size() == 1 ? files[0] : std::filesystem::path();
}

TEST(DeviceProfile, CachedProfileIsMeasuredOnceThenRead) {
  const testing::TempDir dir;
  Expected<DeviceProfile> measured = cached_device_profile(dir.path(), [] { return true; });
  ASSERT_TRUE(measured.has_value()) << measured.status().message();
  const std::filesystem::path file = cached_file(dir.path());
  ASSERT_FALSE(file.empty());
  // A profile written by hand for this machine is read back, not measured again.
  DeviceProfile edited = *measured;
  edited.vector_flops = 12345;
  ASSERT_TRUE(write_file_atomically(file, profile_to_json(edited)).is_ok());
  Expected<DeviceProfile> read = cached_device_profile(dir.path(), [] { return true; });
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->vector_flops, 12345);
  // A damaged entry is measured again and replaced.
  ASSERT_TRUE(write_file_atomically(file, "{ damaged").is_ok());
  Expected<DeviceProfile> again = cached_device_profile(dir.path(), [] { return true; });
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->vector_flops, 12345);
  EXPECT_TRUE(profile_from_json(*read_file(file.string())).has_value());
}

TEST(DeviceProfile, ABusyMachinesMeasurementIsNotCached) {
  const testing::TempDir dir;
  Expected<DeviceProfile> measured = cached_device_profile(dir.path(), [] { return false; });
  ASSERT_TRUE(measured.has_value()) << measured.status().message();
  EXPECT_GT(measured->matmul_flops, 0);
  EXPECT_TRUE(cached_file(dir.path()).empty());
}

TEST(DeviceProfile, HostProfileIsRememberedByTheProcess) {
  Expected<DeviceProfile> first = host_device_profile();
  ASSERT_TRUE(first.has_value()) << first.status().message();
  Expected<DeviceProfile> second = host_device_profile();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(*first, *second);
}

TEST(Files, CacheRootFollowsTheEnvironment) {
  {
    const ScopedEnv kiln("KILN_CACHE_DIR", "/tmp/kiln-root");
    EXPECT_EQ(kiln_cache_root(), std::filesystem::path("/tmp/kiln-root"));
  }
  const ScopedEnv empty("KILN_CACHE_DIR", "");
  {
    const ScopedEnv xdg("XDG_CACHE_HOME", "/tmp/xdg");
    EXPECT_EQ(kiln_cache_root(), std::filesystem::path("/tmp/xdg/kiln"));
  }
  const ScopedEnv no_xdg("XDG_CACHE_HOME", "");
  const ScopedEnv home("HOME", "/tmp/home");
  EXPECT_EQ(kiln_cache_root(), std::filesystem::path("/tmp/home/.cache/kiln"));
}

TEST(Files, WriteFileAtomicallyCreatesFoldersAndReplaces) {
  const testing::TempDir dir;
  const std::filesystem::path path = dir.path() / "a" / "b" / "file.json";
  ASSERT_TRUE(write_file_atomically(path, "first").is_ok());
  ASSERT_TRUE(write_file_atomically(path, "second").is_ok());
  EXPECT_EQ(*read_file(path.string()), "second");
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(path.parent_path())) {
    ++entries;
  }
  EXPECT_EQ(entries, 1);  // no temporary left behind
  EXPECT_FALSE(write_file_atomically(path / "under-a-file", "x").is_ok());
}

}  // namespace
}  // namespace kiln::cost
