// The compilation cache (compiler/compilation_cache.h) and the program's bytes it stores
// (runtime/program.h: serialize_program): a graph compiled a second time with the same options
// comes from the cache and computes the same bits; other options, another graph or a damaged
// entry compile afresh; damaged program bytes are refused. A GPU compilation is stored whole
// (source, cubin, launches), also where no GPU runs it, and its launches read back as written
// and refuse damage.
#include "compiler/compilation_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "codegen/cpu/compile_cache.h"
#include "codegen/cuda/nvrtc_compiler.h"
#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "kiln/kiln.h"
#include "loop/printer.h"
#include "support/files.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::TempDir;

// A dense layer (its weight a constant, packed by the CPU stage) and a softmax over it.
Graph layer(double scale, std::string name = "layer") {
  GraphBuilder b(std::move(name));
  Value* x = b.input("x", DType::f32, Shape{64, 512});
  std::vector<double> weights(512 * 512);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37 * double(i)) * scale;
  Value* w = b.constant(Array(DType::f32, Shape{512, 512}, std::move(weights)));
  b.output(b.softmax(b.relu(b.matmul(x, w)), -1));
  Expected<Graph> graph = b.finish();
  EXPECT_TRUE(graph) << graph.status().message();
  return std::move(*graph);
}

// Runs every test with the compilation cache in a folder of its own; the kernels stay in the
// usual kernel cache, so that only the first run of the suite compiles C++.
class CompilationCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernel_cache_ = codegen::cpu::default_cache_dir();
    const char* old = std::getenv("KILN_CACHE_DIR");
    if (old != nullptr) old_root_ = old;
    setenv("KILN_CACHE_DIR", dir_.path().c_str(), 1);
  }
  void TearDown() override {
    if (old_root_) {
      setenv("KILN_CACHE_DIR", old_root_->c_str(), 1);
    } else {
      unsetenv("KILN_CACHE_DIR");
    }
  }
  CompileOptions options() const {
    CompileOptions o;
    o.reuse_compilations = true;
    o.cpu.cache_dir = kernel_cache_;
    o.fusion.profile = cost::reference_profile();
    return o;
  }
  std::vector<float> run(CompiledModel& model, const Array& x) {
    Expected<std::vector<Array>> out = model.run(std::vector<Array>{x});
    EXPECT_TRUE(out) << out.status().message();
    std::vector<float> values;
    if (out) {
      for (int64_t i = 0; i < (*out)[0].shape.num_elements(); ++i) {
        values.push_back(float((*out)[0][i]));
      }
    }
    return values;
  }

  TempDir dir_;
  std::filesystem::path kernel_cache_;
  std::optional<std::string> old_root_;
};

TEST_F(CompilationCacheTest, ASecondCompileComesFromTheCacheAndComputesTheSameBits) {
  const Array x = random_array(TensorType{DType::f32, Shape{64, 512}}, 7);
  Expected<CompiledModel> first = Compiler(options()).compile(layer(0.05));
  ASSERT_TRUE(first) << first.status().message();
  EXPECT_FALSE(first->compiled().cached_explanation);
  // The graph's own name changes nothing compiled, so another name finds the same entry.
  Expected<CompiledModel> second = Compiler(options()).compile(layer(0.05, "renamed"));
  ASSERT_TRUE(second) << second.status().message();
  ASSERT_TRUE(second->compiled().cached_explanation);
  EXPECT_NE(second->compiled().cached_explanation->find("kernel"), std::string::npos);
  EXPECT_EQ(second->program().state_bytes, first->program().state_bytes);
  EXPECT_GT(second->program().state_bytes, 0);  // the packed weight's state survives
  const std::vector<float> a = run(*first, x);
  EXPECT_EQ(run(*second, x), a);
  EXPECT_EQ(run(*second, x), a);  // again, from the packed state
  Expected<std::vector<Array>> expected = interpret(layer(0.05), std::vector<Array>{x});
  ASSERT_TRUE(expected) << expected.status().message();
  for (size_t i = 0; i < a.size(); i += 97) EXPECT_NEAR(a[i], (*expected)[0][int64_t(i)], 1e-5);
  // The check mode needs the records a cached compilation lacks, and says so.
  EXPECT_TRUE(::kiln::testing::is_error_with(second->check(std::vector<Array>{x}).status(),
                                             {"compile with reuse_compilations off"}));
}

TEST_F(CompilationCacheTest, OtherOptionsOrAnotherGraphCompileAfresh) {
  ASSERT_TRUE(Compiler(options()).compile(layer(0.05)));
  CompileOptions unfused = options();
  unfused.fusion.mode = fusion::FusionMode::off;
  Expected<CompiledModel> other_options = Compiler(unfused).compile(layer(0.05));
  ASSERT_TRUE(other_options) << other_options.status().message();
  EXPECT_FALSE(other_options->compiled().cached_explanation);
  Expected<CompiledModel> other_graph = Compiler(options()).compile(layer(0.06));
  ASSERT_TRUE(other_graph) << other_graph.status().message();
  EXPECT_FALSE(other_graph->compiled().cached_explanation);
  CompileOptions off = options();
  off.reuse_compilations = false;
  Expected<CompiledModel> uncached = Compiler(off).compile(layer(0.05));
  ASSERT_TRUE(uncached) << uncached.status().message();
  EXPECT_FALSE(uncached->compiled().cached_explanation);
}

// The key is a pure function of the graph, the options and the binary: a pinned profile is an
// option and enters it, but this machine's profile enters only as its CPU and core count, since
// a measurement differs from run to run and is not always cached (a second identical `kiln run`
// in a fresh cache compiled again).
TEST_F(CompilationCacheTest, TheKeyNamesAPinnedProfileButNeverAMeasurement) {
  Expected<std::optional<std::string>> pinned = compilation_key(layer(0.05), options());
  CompileOptions faster = options();
  faster.fusion.profile->matmul_flops *= 2;
  Expected<std::optional<std::string>> pinned_faster = compilation_key(layer(0.05), faster);
  ASSERT_TRUE(pinned && *pinned && pinned_faster && *pinned_faster);
  EXPECT_NE(**pinned, **pinned_faster);

  const char* pin = std::getenv("KILN_DEVICE_PROFILE");
  const std::optional<std::string> old_pin = pin ? std::optional<std::string>(pin) : std::nullopt;
  unsetenv("KILN_DEVICE_PROFILE");
  Expected<std::string> host = cost::profile_identity(std::nullopt);
  ASSERT_TRUE(host) << host.status().message();
  EXPECT_TRUE(host->starts_with("this machine: ")) << *host;
  EXPECT_EQ(host->find("flops"), std::string::npos) << *host;
  CompileOptions measured = options();
  measured.fusion.profile.reset();
  Expected<std::optional<std::string>> key = compilation_key(layer(0.05), measured);
  ASSERT_TRUE(key && *key);
  EXPECT_NE(**key, **pinned);
  if (old_pin) setenv("KILN_DEVICE_PROFILE", old_pin->c_str(), 1);
}

// Timing, dumping or stopping after stages asks to watch the pipeline, which loading skips.
TEST_F(CompilationCacheTest, WatchingTheStagesCompilesAfresh) {
  ASSERT_TRUE(Compiler(options()).compile(layer(0.05)));
  CompileOptions timed = options();
  timed.pipeline.time_stages = true;
  std::string times;
  timed.pipeline.print = [&](std::string_view text) { times += text; };
  Expected<CompiledModel> watched = Compiler(timed).compile(layer(0.05));
  ASSERT_TRUE(watched) << watched.status().message();
  EXPECT_FALSE(watched->compiled().cached_explanation);
  EXPECT_NE(times.find("stage partition"), std::string::npos) << times;
}

TEST_F(CompilationCacheTest, ADamagedEntryIsCompiledAgainNotTrusted) {
  Expected<std::optional<std::string>> key = compilation_key(layer(0.05), options());
  ASSERT_TRUE(key && *key) << key.status().message();
  ASSERT_TRUE(Compiler(options()).compile(layer(0.05)));
  const std::filesystem::path entry = dir_.path() / "compilations" / (**key + ".bin");
  ASSERT_TRUE(std::filesystem::exists(entry));
  std::filesystem::resize_file(entry, std::filesystem::file_size(entry) / 2);
  Expected<CompiledModel> again = Compiler(options()).compile(layer(0.05));
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_FALSE(again->compiled().cached_explanation);
  Expected<CompiledModel> restored = Compiler(options()).compile(layer(0.05));
  ASSERT_TRUE(restored) << restored.status().message();
  EXPECT_TRUE(restored->compiled().cached_explanation);  // the recompile replaced the entry
}

TEST_F(CompilationCacheTest, AGpuCompilationIsStoredWholeAndLoadsAsCompiled) {
  if (!codegen::cuda::nvrtc_available()) GTEST_SKIP() << "no NVRTC";
  CompileOptions gpu = options();
  gpu.device.kind = DeviceKind::cuda;
  Expected<std::optional<std::string>> key = compilation_key(layer(0.05), gpu);
  ASSERT_TRUE(key && *key) << key.status().message();
  Expected<std::optional<std::string>> cpu_key = compilation_key(layer(0.05), options());
  ASSERT_TRUE(cpu_key && *cpu_key);
  EXPECT_NE(**key, **cpu_key);
  // Without a GPU the executor cannot be made, but the compilation is complete and stored.
  Expected<CompiledModel> first = Compiler(gpu).compile(layer(0.05));
  std::optional<CachedCompilation> cached = load_compilation(**key);
  ASSERT_TRUE(cached);
  ASSERT_TRUE(cached->cuda);
  Expected<Compilation> fresh = Compiler(gpu).run_pipeline(layer(0.05));
  ASSERT_TRUE(fresh) << fresh.status().message();
  // The mapped kernels' loop IR too, which CompiledModel::allow_in_place reads.
  const std::vector<const loop::Kernel*> mapped = fresh->compiled().program_kernels();
  ASSERT_EQ(cached->kernels.size(), mapped.size());
  for (size_t k = 0; k < mapped.size(); ++k) {
    EXPECT_EQ(loop::print(cached->kernels[k]), loop::print(*mapped[k])) << "kernel " << k;
  }
  const CudaCompiled& expected = *fresh->compiled().cuda;
  EXPECT_EQ(cached->cuda->source, expected.source);
  EXPECT_EQ(cached->cuda->cubin, expected.cubin);
  EXPECT_EQ(cached->cuda->architecture, "sm_90");
  EXPECT_EQ(runtime::serialize_launches(cached->cuda->launches),
            runtime::serialize_launches(expected.launches));
  EXPECT_EQ(runtime::print_program(cached->program),
            runtime::print_program(*fresh->compiled().program));
  // Another architecture is another compilation.
  CompileOptions other = gpu;
  other.cuda.architecture = "sm_80";
  Expected<std::optional<std::string>> other_key = compilation_key(layer(0.05), other);
  ASSERT_TRUE(other_key && *other_key);
  EXPECT_NE(**other_key, **key);
  if (first) {  // a machine with a GPU: the second compile comes from the cache, same bits
    const Array x = random_array(TensorType{DType::f32, Shape{64, 512}}, 7);
    Expected<CompiledModel> second = Compiler(gpu).compile(layer(0.05));
    ASSERT_TRUE(second) << second.status().message();
    EXPECT_TRUE(second->compiled().cached_explanation);
    EXPECT_EQ(run(*second, x), run(*first, x));
  }
}

TEST(CudaLaunches, ReadBackAsWrittenAndRefuseDamage) {
  runtime::CudaLaunch plain{"kiln_k0_0", {4, 2, 1}, {256, 1, 1}, {}, std::nullopt};
  plain.args = {{runtime::CudaLaunchArg::Kind::buffer, 1, 64, 0},
                {runtime::CudaLaunchArg::Kind::i64, 0, 0, -7}};
  runtime::CudaLaunch gemm{"kiln_gemm_f32", {1, 1, 1}, {128, 1, 1}, {}, runtime::CudaGemm{}};
  gemm.args = {{runtime::CudaLaunchArg::Kind::buffer, 0, 0, 0},
               {runtime::CudaLaunchArg::Kind::buffer, 2, 0, 0},
               {runtime::CudaLaunchArg::Kind::buffer, 3, 4096, 0}};
  *gemm.gemm = {runtime::CudaGemm::Type::f64, 64, 32, 16, 16, 32, 32, true, false, true,
                true, 12, 1024, 0, 2048};
  const runtime::CudaKernelLaunches launches = {{plain, gemm}, {}, {plain}};
  const std::string bytes = runtime::serialize_launches(launches);
  Expected<runtime::CudaKernelLaunches> back = runtime::deserialize_launches(bytes);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(runtime::serialize_launches(*back), bytes);
  ASSERT_EQ(back->size(), 3u);
  ASSERT_EQ((*back)[0].size(), 2u);
  EXPECT_TRUE((*back)[1].empty());
  const runtime::CudaLaunch& g = (*back)[0][1];
  ASSERT_TRUE(g.gemm);
  EXPECT_EQ(g.gemm->type, runtime::CudaGemm::Type::f64);
  EXPECT_TRUE(g.gemm->transpose_a && !g.gemm->transpose_b && g.gemm->accumulate);
  EXPECT_TRUE(g.gemm->tf32);
  EXPECT_EQ(g.gemm->batch, 12);
  EXPECT_EQ(g.gemm->stride_c, 2048);
  EXPECT_EQ(g.args[2].byte_offset, 4096);
  EXPECT_EQ((*back)[0][0].args[1].value, -7);
  EXPECT_EQ((*back)[0][0].grid[0], 4);
  // Damage: cut short, a byte more, not launches at all, and values out of their range (a
  // negative parameter or grid, a flag of 2) that the writer does not check.
  runtime::CudaLaunch negative_param = plain, negative_grid = plain;
  negative_param.args[0].param = -1;
  negative_grid.grid[1] = -2;
  std::string flag_of_two = runtime::serialize_launches({{gemm}});
  flag_of_two[flag_of_two.size() - 8] = 2;  // the last field: the gemm's accumulate flag
  for (const std::string& bad :
       {bytes.substr(0, bytes.size() - 1), bytes + "x", std::string("buffer 0 0\n"),
        std::string(), runtime::serialize_launches({{negative_param}}),
        runtime::serialize_launches({{negative_grid}}), flag_of_two}) {
    EXPECT_FALSE(runtime::deserialize_launches(bad)) << bad.size() << " bytes";
  }
  Expected<runtime::CudaKernelLaunches> none =
      runtime::deserialize_launches(runtime::serialize_launches({}));
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST(CachePruning, RemovesTheLeastRecentlyUsedFilesDownToThreeQuarters) {
  TempDir folder;
  const auto file = [&](const std::string& name, int age_seconds) {
    const std::filesystem::path path = folder.path() / name;
    EXPECT_TRUE(write_file_atomically(path, std::string(100, 'x')).is_ok());
    std::filesystem::last_write_time(
        path, std::filesystem::file_time_type::clock::now() - std::chrono::seconds(age_seconds));
    return path;
  };
  const std::filesystem::path oldest = file("a.bin", 50), old = file("b.bin", 40);
  const std::filesystem::path used = file("c.bin", 60), newest = file("d.bin", 10);
  const std::filesystem::path writing = file("e.bin.tmp-1-0", 90);
  touch(used);  // loaded just now: the most recently used
  EXPECT_EQ(prune_least_recently_used(folder.path(), 400), 0);  // 400 bytes: within
  // Over 300 bytes: down to 225, the two least recently used go; a file being written stays.
  EXPECT_EQ(prune_least_recently_used(folder.path(), 300), 2);
  EXPECT_FALSE(std::filesystem::exists(oldest));
  EXPECT_FALSE(std::filesystem::exists(old));
  EXPECT_TRUE(std::filesystem::exists(used) && std::filesystem::exists(newest));
  EXPECT_TRUE(std::filesystem::exists(writing));
  EXPECT_EQ(prune_least_recently_used(folder.path() / "missing", 1), 0);
}

TEST(ProgramBytes, ReadBackAsWrittenAndRefuseDamage) {
  runtime::Program p;
  p.buffers = {{runtime::Storage::input, 0, 0, 16},
               {runtime::Storage::constant, 0, 8, 8},
               {runtime::Storage::arena, 0, 32, 64},
               {runtime::Storage::state, 0, 0, 128},
               {runtime::Storage::output, 0, 0, 16}};
  p.steps = {{runtime::Step::Kind::kernel, 0, {0, 1, 2, 3}, "matmul #1"},
             {runtime::Step::Kind::copy, 0, {2, 4}, "copy"}};
  p.input_bytes = {16};
  p.output_bytes = {16};
  p.num_kernels = 1;
  p.arena_bytes = 96;
  p.state_bytes = 128;
  p.constants.assign(16, std::byte{7});
  const std::string bytes = runtime::serialize_program(p);
  Expected<runtime::Program> back = runtime::deserialize_program(bytes);
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(runtime::print_program(*back), runtime::print_program(p));
  EXPECT_EQ(back->constants, p.constants);
  EXPECT_FALSE(runtime::deserialize_program(bytes.substr(0, bytes.size() - 3)));
  EXPECT_FALSE(runtime::deserialize_program(bytes + "x"));
  EXPECT_FALSE(runtime::deserialize_program("not a program"));
  runtime::Program outside = p;
  outside.buffers[2].offset = 64;  // past the arena's 96 bytes
  EXPECT_FALSE(runtime::deserialize_program(runtime::serialize_program(outside)));
  runtime::Program no_kernel = p;
  no_kernel.num_kernels = 0;
  EXPECT_FALSE(runtime::deserialize_program(runtime::serialize_program(no_kernel)));
}

}  // namespace
}  // namespace kiln
