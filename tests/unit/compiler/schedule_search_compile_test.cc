// The schedule search on this CPU: the timer (target/cpu_kernel_timer.h) compiles, checks and
// times real kernels, and a compilation with --schedule-search quick (compiler/options.h)
// computes what the graph computes, searches its kernels once and reads them from the cache
// the second time. What the search chooses is tested with injected timers in
// unit/loop/schedule_search_test.cc; here only that it is sound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "codegen/cpu/compile_cache.h"
#include "compiler/pipeline.h"
#include "compiler/run.h"
#include "cost/device_profile.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "loop/lower_group.h"
#include "loop/printer.h"
#include "target/cpu_kernel_timer.h"
#include "target/cpu_target.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

loop::Kernel lowered(const std::function<Value*(GraphBuilder&)>& build) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({build(b)});
  Expected<loop::LoweredGroup> group = loop::lower_group(graph, graph.nodes());
  EXPECT_TRUE(group) << group.status().message();
  return group->kernel;
}

loop::Kernel scheduled(const loop::Kernel& kernel) {
  return *loop::apply_schedule(kernel, loop::default_schedule(kernel, loop::host_target()));
}

TEST(CpuKernelTimer, ChecksEachKernelAgainstTheReferenceAndTimesIt) {
  const loop::Kernel softmax_rows =
      lowered([](GraphBuilder& b) { return b.softmax(b.input("x", DType::f32, {16, 300})); });
  // The same parameters, another function: the timer must see that it computes something else.
  const loop::Kernel exp_rows =
      lowered([](GraphBuilder& b) { return b.exp(b.input("x", DType::f32, {16, 300})); });
  ASSERT_EQ(exp_rows.params.size(), softmax_rows.params.size());
  for (size_t p = 0; p < exp_rows.params.size(); ++p) {
    ASSERT_EQ(loop::print_buffer_decl(exp_rows.params[p]),
              loop::print_buffer_decl(softmax_rows.params[p]));
  }
  const std::vector<loop::Kernel> kernels = {softmax_rows, scheduled(softmax_rows), scheduled(exp_rows)};
  CpuKernelTimer timer({});
  Expected<std::vector<loop::Timing>> timings = timer.time(kernels, 0.05);
  ASSERT_TRUE(timings) << timings.status().message();
  ASSERT_EQ(timings->size(), 3u);
  EXPECT_EQ((*timings)[1].disagreement, "");
  EXPECT_GT((*timings)[1].seconds, 0);
  EXPECT_NE((*timings)[2].disagreement.find("where the reference gives"), std::string::npos)
      << (*timings)[2].disagreement;
}

// Compilations with the cache root in a folder of their own.
class ScheduleSearchCompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("KILN_CACHE_DIR")) old_root_ = old;
    kernel_cache_ = codegen::cpu::default_cache_dir();
    setenv("KILN_CACHE_DIR", dir_.path().c_str(), 1);
  }
  void TearDown() override {
    if (old_root_) {
      setenv("KILN_CACHE_DIR", old_root_->c_str(), 1);
    } else {
      unsetenv("KILN_CACHE_DIR");
    }
  }

  ::kiln::testing::TempDir dir_;
  std::optional<std::string> old_root_;
  std::filesystem::path kernel_cache_;
};

TEST_F(ScheduleSearchCompileTest, SearchedKernelsComputeTheGraphAndAreSearchedOnce) {
  GraphBuilder b("rows_and_columns");
  Value* x = b.input("x", DType::f32, Shape{64, 256});
  b.output(b.softmax(b.tanh(x), -1));
  b.output(b.sum(b.exp(x), {0}));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();

  CompileOptions options;
  options.schedule_search = loop::SearchMode::quick;
  options.cpu.cache_dir = kernel_cache_;
  options.fusion.profile = cost::reference_profile();
  std::vector<std::string> searched;
  for (const bool second : {false, true}) {
    Expected<CompiledGraph> compiled = compile_graph(*graph, options);
    ASSERT_TRUE(compiled) << compiled.status().message();
    Expected<std::unique_ptr<runtime::ProgramExecutor>> executor = cpu_executor(*compiled);
    ASSERT_TRUE(executor) << executor.status().message();
    Expected<CheckReport> report =
        check_compiled(*graph, *compiled, **executor, random_inputs(*graph, {.seed = 3}));
    ASSERT_TRUE(report) << report.status().message();
    EXPECT_TRUE(report->ok()) << report->kernels.back().mismatch;
    for (const KernelRecord& record : compiled->records) {
      EXPECT_TRUE(record.search.disagreements.empty()) << record.search.disagreements[0];
      if (!second) {
        if (record.search.how == "searched") searched.push_back(loop::print(record.kernel));
        continue;
      }
      const bool was_searched =
          std::find(searched.begin(), searched.end(), loop::print(record.kernel)) !=
          searched.end();
      EXPECT_EQ(record.search.how == "cached", was_searched) << record.search.how;
    }
    if (!second && searched.empty()) {
      // Times measured while other programs (a parallel build, other tests) use the cores
      // are not trusted (loop/schedule_search.h); what was compiled is checked above.
      GTEST_SKIP() << "the machine was busy: nothing was searched";
    }
  }
}

}  // namespace
}  // namespace kiln
