// The compile cache and the compiler driver: hits without running the compiler, keys that
// change with flags, concurrent compilation of one source, recovery from damaged entries, the
// byte budget kept by dropping the least recently used entries, compiler errors and time
// limits, and running programs without a shell.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cpu/compile_cache.h"
#include "codegen/cpu/kernel_compiler.h"
#include "codegen/cpu/subprocess.h"
#include "unit/codegen/codegen_test_util.h"
#include "unit/test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;
using kiln::testing::contains_all;
using kiln::testing::is_error_with;

// out[i] = in[i] * 3 + 1 (i64).
Kernel small_kernel() {
  Buffer in = Buffer::param("in", DType::i64, {8}), out = Buffer::param("out", DType::i64, {8});
  Expr i = var("i");
  return Kernel{.name = "small", .params = {in, out},
                .body = for_loop("i", 0, 8, store(out, i, load(in, i) * 3 + 1))};
}

CpuCompileOptions options_in(const testing::TempDir& dir) {
  CpuCompileOptions options;
  options.cache_dir = dir.path();
  return options;
}

void expect_runs_correctly(const CompiledKernels& compiled) {
  const Kernel kernel = small_kernel();
  testing::expect_same_as_evaluator(compiled.function(0), kernel,
                                    testing::random_args(kernel, 7));
}

std::vector<std::filesystem::path> files_ending(const std::filesystem::path& dir,
                                                const std::string& suffix) {
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() >= suffix.size() && name.ends_with(suffix)) found.push_back(entry.path());
  }
  return found;
}

TEST(CpuCompileCache, SecondCompileLoadsFromTheCache) {
  testing::TempDir dir;
  const Kernel kernels[] = {small_kernel()};
  {
    Expected<CompiledKernels> first = compile_kernels(kernels, options_in(dir));
    ASSERT_TRUE(first.has_value()) << first.status().message();
    EXPECT_EQ(first->units_compiled(), 1);
    expect_runs_correctly(*first);
  }
  Expected<CompiledKernels> second = compile_kernels(kernels, options_in(dir));
  ASSERT_TRUE(second.has_value()) << second.status().message();
  EXPECT_EQ(second->units(), 1);
  EXPECT_EQ(second->units_compiled(), 0);
  expect_runs_correctly(*second);
  EXPECT_EQ(files_ending(dir.path(), ".so").size(), 1u);
  EXPECT_EQ(files_ending(dir.path(), ".cc").size(), 1u);  // the source, kept for reading
}

TEST(CpuCompileCache, KeyDependsOnSourceFlagsAndCompiler) {
  const std::vector<std::string> flags = {"-O3"}, other_flags = {"-O2"};
  const std::string key = cache_key("g++ 12", flags, "int x;");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(cache_key("g++ 12", flags, "int x;"), key);
  EXPECT_NE(cache_key("g++ 13", flags, "int x;"), key);
  EXPECT_NE(cache_key("g++ 12", other_flags, "int x;"), key);
  EXPECT_NE(cache_key("g++ 12", flags, "int y;"), key);
  // Parts are length-prefixed: moving text between them changes the key.
  EXPECT_NE(cache_key("g++ 12-O3", {}, "int x;"), cache_key("g++ 12", flags, "-O3int x;"));

  testing::TempDir dir;
  const Kernel kernels[] = {small_kernel()};
  CpuCompileOptions options = options_in(dir);
  ASSERT_TRUE(compile_kernels(kernels, options).has_value());
  options.flags.push_back("-fno-unroll-loops");
  Expected<CompiledKernels> other = compile_kernels(kernels, options);
  ASSERT_TRUE(other.has_value()) << other.status().message();
  EXPECT_EQ(other->units_compiled(), 1);
  EXPECT_EQ(files_ending(dir.path(), ".so").size(), 2u);
}

TEST(CpuCompileCache, ConcurrentCompilesOfOneSourceBothSucceed) {
  testing::TempDir dir;
  const Kernel kernels[] = {small_kernel()};
  std::optional<Expected<CompiledKernels>> results[2];
  {
    std::vector<std::jthread> threads;
    for (auto& result : results) {
      threads.emplace_back([&] { result.emplace(compile_kernels(kernels, options_in(dir))); });
    }
  }
  for (const auto& result : results) {
    ASSERT_TRUE(result->has_value()) << result->status().message();
    expect_runs_correctly(**result);
  }
  EXPECT_EQ(files_ending(dir.path(), ".so").size(), 1u);
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST(CpuCompileCache, DamagedEntriesAreCompiledAgain) {
  testing::TempDir dir;
  const Kernel kernels[] = {small_kernel()};
  ASSERT_TRUE(compile_kernels(kernels, options_in(dir)).has_value());
  const std::vector<std::filesystem::path> entries = files_ending(dir.path(), ".so");
  ASSERT_EQ(entries.size(), 1u);
  const std::filesystem::path entry = entries[0];

  // Cut short, as by a crash or a full disk. (Damage is done while no kernel from the file
  // is loaded: a mapped library changed in place faults any process.)
  std::filesystem::resize_file(entry, std::filesystem::file_size(entry) / 2);
  {
    Expected<CompiledKernels> after_truncation = compile_kernels(kernels, options_in(dir));
    ASSERT_TRUE(after_truncation.has_value()) << after_truncation.status().message();
    EXPECT_EQ(after_truncation->units_compiled(), 1);
    expect_runs_correctly(*after_truncation);
  }

  // Not a library at all.
  std::ofstream(entry, std::ios::trunc) << "garbage";
  Expected<CompiledKernels> after_garbage = compile_kernels(kernels, options_in(dir));
  ASSERT_TRUE(after_garbage.has_value()) << after_garbage.status().message();
  EXPECT_EQ(after_garbage->units_compiled(), 1);
  expect_runs_correctly(*after_garbage);

  Expected<CompiledKernels> repaired = compile_kernels(kernels, options_in(dir));
  ASSERT_TRUE(repaired.has_value()) << repaired.status().message();
  EXPECT_EQ(repaired->units_compiled(), 0);
}

// The files of the entry whose source defines `function`.
std::vector<std::filesystem::path> entry_files(const std::filesystem::path& dir,
                                               const std::string& function) {
  for (const std::filesystem::path& source : files_ending(dir, ".cc")) {
    std::ifstream in(source);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.find(function) == std::string::npos) continue;
    std::filesystem::path library = source;
    library.replace_extension(".so");
    return {source, library};
  }
  return {};
}

TEST(CpuCompileCache, KeepsWithinItsBudgetDroppingTheLeastRecentlyUsed) {
  testing::TempDir dir;
  const CompilerConfig config{.compiler = "c++", .flags = default_compile_flags(),
                              .timeout = std::chrono::seconds(60)};
  const auto compile = [&](const std::string& function, int64_t budget) {
    const std::string source = "extern \"C\" int " + function + "() { return 1; }\n";
    const std::vector<std::string> symbols = {function};
    return CompileCache(dir.path(), budget).load_or_compile(source, config, symbols);
  };
  ASSERT_TRUE(compile("f_a", kMaxKernelCacheBytes));
  int64_t one_entry = 0;
  for (const std::filesystem::path& file : entry_files(dir.path(), "f_a")) {
    one_entry += static_cast<int64_t>(std::filesystem::file_size(file));
  }
  ASSERT_GT(one_entry, 0);
  ASSERT_TRUE(compile("f_b", kMaxKernelCacheBytes));
  const auto age = [&](const std::string& function, int seconds) {
    for (const std::filesystem::path& file : entry_files(dir.path(), function)) {
      std::filesystem::last_write_time(
          file, std::filesystem::file_time_type::clock::now() - std::chrono::seconds(seconds));
    }
  };
  age("f_a", 100);
  age("f_b", 50);
  Expected<CachedLibrary> hit = compile("f_a", kMaxKernelCacheBytes);  // marks f_a used now
  ASSERT_TRUE(hit) << hit.status().message();
  EXPECT_FALSE(hit->compiled);
  // Three entries over a budget of 2.9: the least recently used one goes, f_b.
  ASSERT_TRUE(compile("f_c", one_entry * 29 / 10));
  CompileCache(dir.path(), one_entry * 29 / 10).keep_within_budget();
  EXPECT_EQ(entry_files(dir.path(), "f_a").size(), 2u);
  EXPECT_EQ(entry_files(dir.path(), "f_b").size(), 0u);
  EXPECT_EQ(entry_files(dir.path(), "f_c").size(), 2u);
  EXPECT_EQ(files_ending(dir.path(), ".so").size(), 2u);
}

TEST(CpuCompileCache, CompilerErrorsCarryItsMessageAndKeepTheSource) {
  testing::TempDir dir;
  const CompilerConfig config{.compiler = "c++", .flags = default_compile_flags(),
                              .timeout = std::chrono::seconds(60)};
  Expected<CachedLibrary> result =
      CompileCache(dir.path()).load_or_compile("int broken = ;\n", config, {});
  EXPECT_TRUE(is_error_with(result.status(), {"rejected generated code", ".failed.cc", "error"}));
  EXPECT_EQ(files_ending(dir.path(), ".failed.cc").size(), 1u);
  EXPECT_EQ(files_ending(dir.path(), ".so").size(), 0u);
}

TEST(CpuCompileCache, MissingCompilerIsAnError) {
  testing::TempDir dir;
  const Kernel kernels[] = {small_kernel()};
  CpuCompileOptions options = options_in(dir);
  options.compiler = "/nonexistent/kiln-test-compiler";
  Expected<CompiledKernels> result = compile_kernels(kernels, options);
  EXPECT_TRUE(is_error_with(result.status(), {"cannot run", "kiln-test-compiler"}));
}

TEST(CpuCompileCache, DefaultDirectoryFollowsTheEnvironment) {
  const auto saved = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
  };
  const auto restore = [](const char* name, const std::optional<std::string>& value) {
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  };
  const auto kiln_dir = saved("KILN_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME");
  setenv("KILN_CACHE_DIR", "/tmp/kiln-a", 1);
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(default_cache_dir(), std::filesystem::path("/tmp/kiln-a/cpu"));
  unsetenv("KILN_CACHE_DIR");
  EXPECT_EQ(default_cache_dir(), std::filesystem::path("/tmp/xdg/kiln/cpu"));
  restore("KILN_CACHE_DIR", kiln_dir);
  restore("XDG_CACHE_HOME", xdg);
}

TEST(Subprocess, ArgumentsReachTheProgramVerbatim) {
  testing::TempDir dir;
  const std::string marker = (dir.path() / "marker").string();
  const std::string hostile = "$(touch " + marker + "); `touch " + marker + "` | ; & > x";
  Expected<ProcessResult> result = run_process({"echo", hostile}, std::chrono::seconds(10));
  ASSERT_TRUE(result.has_value()) << result.status().message();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->output, hostile + "\n");
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Subprocess, ReportsExitCodesAndStopsAtTheTimeLimit) {
  Expected<ProcessResult> failed = run_process({"false"}, std::chrono::seconds(10));
  ASSERT_TRUE(failed.has_value()) << failed.status().message();
  EXPECT_NE(failed->exit_code, 0);

  const auto start = std::chrono::steady_clock::now();
  Expected<ProcessResult> slow = run_process({"sleep", "30"}, std::chrono::milliseconds(200));
  EXPECT_TRUE(is_error_with(slow.status(), {"sleep", "did not finish"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kiln::codegen::cpu
