// The loop pass registry (loop/loop_passes.h): each pass does what the compiler does with the
// function it names, pipelines run in order on kernels read from text, and errors name the
// pass or the unknown name before anything runs.
#include "loop/loop_passes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/builder.h"
#include "loop/gpu_mapping.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "unit/loop/round_trip_check.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using ::kiln::testing::is_error_with;
using Names = std::vector<std::string>;

const LoopPassOptions kOptions{
    .dump_after = {}, .time_passes = false, .target = testing::kNarrowTarget};

// softmax over the rows of x [64, 48]: row statistics to hoist, rows to vectorize.
Kernel softmax_kernel() {
  return testing::lower([](GraphBuilder& b) {
    return b.softmax(b.input("x", DType::f32, {64, 48}));
  });
}

// `kernel` after `passes`, or the error.
Expected<Kernel> after(Kernel kernel, const Names& passes) {
  KILN_RETURN_IF_ERROR(run_loop_passes(kernel, passes, kOptions).status());
  return kernel;
}

TEST(LoopPasses, RegistersEachPassByName) {
  std::vector<std::string_view> names;
  for (const LoopPassInfo& pass : all_loop_passes()) {
    names.push_back(pass.name);
    EXPECT_FALSE(pass.summary.empty()) << pass.name;
    EXPECT_EQ(find_loop_pass(pass.name), &pass);
  }
  EXPECT_EQ(names, (std::vector<std::string_view>{"simplify", "verify", "schedule", "map-gpu",
                                                  "scratch"}));
  EXPECT_EQ(find_loop_pass("cse"), nullptr);
}

TEST(LoopPasses, ScheduleAppliesTheDefaultScheduleForTheTarget) {
  const Kernel kernel = softmax_kernel();
  Expected<Kernel> expected =
      apply_schedule(kernel, default_schedule(kernel, testing::kNarrowTarget));
  ASSERT_TRUE(expected.has_value()) << expected.status().message();
  Kernel scheduled = kernel;
  Expected<std::vector<LoopPassRun>> runs = run_loop_passes(scheduled, Names{"schedule"}, kOptions);
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  EXPECT_EQ(print(scheduled), print(*expected));
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].name, "schedule");
  EXPECT_TRUE((*runs)[0].changed);
}

TEST(LoopPasses, SimplifyAndVerifyRunOnParsedText) {
  Expected<Kernel> kernel = parse_kernel(R"(kernel k(x: f32[8], y: f32[8]) {
  for (i, 0, 8) {
    for (j, 0, 1) {
      y[(i*4 + j + 3)/4] = x[i]*1.0f + 0.0f
    }
  }
}
)");
  ASSERT_TRUE(kernel.has_value()) << kernel.status().message();
  Expected<std::vector<LoopPassRun>> runs =
      run_loop_passes(*kernel, Names{"verify", "simplify", "verify"}, kOptions);
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  EXPECT_EQ(
      print(*kernel),
      "kernel k(x: f32[8], y: f32[8]) {\n  for (i, 0, 8) {\n    y[i] = x[i] + 0.0f\n  }\n}\n");
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_FALSE((*runs)[0].changed);
  EXPECT_TRUE((*runs)[1].changed);
  EXPECT_FALSE((*runs)[2].changed);
}

TEST(LoopPasses, MapGpuMapsALoweredKernelAndRefusesAScheduledOne) {
  const Kernel kernel = softmax_kernel();
  Expected<GpuMapping> expected = map_to_gpu(kernel);
  ASSERT_TRUE(expected.has_value()) << expected.status().message();
  Expected<Kernel> mapped = after(kernel, {"map-gpu"});
  ASSERT_TRUE(mapped.has_value()) << mapped.status().message();
  EXPECT_EQ(print(*mapped), print(expected->kernel));
  EXPECT_TRUE(is_error_with(after(kernel, {"schedule", "map-gpu"}).status(),
                            {"loop pass 'map-gpu': ", "with serial loops", "is parallel"}));
}

TEST(LoopPasses, ScratchMakesLargeLocalsParameters) {
  // 8192 f32 are 32 KiB, above kMaxKernelLocalBytes; the parameter declares its bytes.
  Expected<Kernel> kernel = parse_kernel(R"(kernel k(x: f32[8192], y: f32[8192]) {
  allocate t: f32[8192] in local {
    for (i, 0, 8192) {
      t[i] = x[i]*2.0f
    }
    for (i, 0, 8192) {
      y[i] = t[8191 - i]
    }
  }
}
)");
  ASSERT_TRUE(kernel.has_value()) << kernel.status().message();
  Expected<Kernel> promoted = after(*kernel, {"scratch"});
  ASSERT_TRUE(promoted.has_value()) << promoted.status().message();
  ASSERT_EQ(promoted->params.size(), 3u);
  EXPECT_EQ(print_buffer_decl(promoted->params[2]), "t: f32[8192]");
  EXPECT_EQ(print(*promoted).find("allocate"), std::string::npos) << print(*promoted);
  EXPECT_TRUE(testing::round_trips(*promoted));
}

TEST(LoopPasses, APipelineRunsInOrderAndReportsWhatItWasAskedTo) {
  Kernel kernel = softmax_kernel();
  const Kernel original = kernel;
  const LoopPassOptions options{
      .dump_after = "schedule", .time_passes = true, .target = testing::kNarrowTarget};
  ::testing::internal::CaptureStderr();
  Expected<std::vector<LoopPassRun>> runs =
      run_loop_passes(kernel, Names{"simplify", "schedule", "scratch"}, options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  EXPECT_EQ(runs->size(), 3u);
  EXPECT_TRUE(::kiln::testing::contains_all(
      err, {"loop pass simplify", "loop pass schedule", "loop pass scratch",
            "// after loop pass schedule\n" + print(kernel)}));
  EXPECT_TRUE(testing::same_results(original, kernel));
}

TEST(LoopPasses, UnknownNamesAndInvalidKernelsAreErrorsBeforeAnyPassRuns) {
  Kernel kernel = softmax_kernel();
  const std::string before = print(kernel);
  EXPECT_TRUE(is_error_with(run_loop_passes(kernel, Names{"schedule", "fuse"}, kOptions).status(),
                            {"unknown loop pass 'fuse'"}));
  EXPECT_EQ(print(kernel), before);
  Kernel invalid = kernel;
  invalid.params.pop_back();  // the output its stores write
  EXPECT_TRUE(is_error_with(run_loop_passes(invalid, Names{"simplify"}, kOptions).status(),
                            {"loop passes run on kernels that verify", "neither a parameter"}));
}

}  // namespace
}  // namespace kiln::loop
