// The timing harness (driver/timing.h): buffers shared by name between variants of a graph,
// timed runs, turns taken, the fusion profile's join of fused kernels with their nodes'
// unfused times, and the bench protocol on streams.
#include "driver/timing.h"

#include <gtest/gtest.h>

#include <sstream>

#include "cost/device_profile.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr const char* kGraph = R"(graph @g(%x: f32[64,32], %w: f32[32,16]) {
  %m = matmul(%x, %w) : f32[64,16]
  %e = exp(%m) : f32[64,16]
  %y = neg(%e) : f32[64,16]
  return %y
})";

CompiledModel compile(fusion::FusionMode mode) {
  Expected<Graph> graph = parse_graph(kGraph);
  EXPECT_TRUE(graph) << graph.status().message();
  CompileOptions options;
  options.fusion.mode = mode;
  options.fusion.profile = cost::reference_profile();
  Expected<CompiledModel> model = Compiler(options).compile(std::move(*graph));
  EXPECT_TRUE(model) << model.status().message();
  return std::move(model).value();
}

TEST(Timing, OutputBuffersAreSharedByName) {
  CompiledModel model = compile(fusion::FusionMode::ilp);
  const std::vector<Array> inputs = random_inputs(model.graph(), {.seed = 1});
  RunBuffers buffers(model.graph(), inputs);
  ASSERT_EQ(buffers.inputs().size(), 2u);
  const Value& output = *model.graph().outputs()[0];
  EXPECT_EQ(buffers.output(output), buffers.output(output));
  // A run writes the shared buffer: the outputs of run() and of a timed run agree.
  Expected<std::vector<Array>> outputs = model.run(inputs);
  ASSERT_TRUE(outputs) << outputs.status().message();
  TimedRun run(model, buffers);
  ASSERT_TRUE(run.time_one());
  const auto* written = static_cast<const float*>(buffers.output(output));
  for (int64_t i = 0; i < (*outputs)[0].size(); ++i) {
    EXPECT_FLOAT_EQ(written[i], static_cast<float>((*outputs)[0][i])) << i;
  }
}

TEST(Timing, TimesAreSortedAndProfiled) {
  CompiledModel model = compile(fusion::FusionMode::ilp);
  const std::vector<Array> inputs = random_inputs(model.graph(), {.seed = 1});
  runtime::Profile profile;
  RunBuffers buffers(model.graph(), inputs);
  Expected<std::vector<double>> times = time_runs(model, buffers, 5, &profile);
  ASSERT_TRUE(times) << times.status().message();
  ASSERT_EQ(times->size(), 5u);
  EXPECT_TRUE(std::is_sorted(times->begin(), times->end()));
  EXPECT_EQ(profile.runs, 5);
  EXPECT_EQ(median_of(*times), (*times)[2]);
  EXPECT_EQ(median_of(std::vector<double>{}), 0);
  // The runs repeat the last run's bytes; an output that changed is named.
  const std::vector<size_t> digests = buffers.output_digests(model.graph());
  ASSERT_TRUE(time_runs(model, buffers, 2));
  EXPECT_EQ(buffers.first_differing_output(model.graph(), digests), std::nullopt);
  static_cast<float*>(buffers.output(*model.graph().outputs()[0]))[3] += 1;
  EXPECT_EQ(buffers.first_differing_output(model.graph(), digests), "y");
}

// Inputs encoded one at a time, as made, are those encoded whole, and decode back.
TEST(Timing, InputsEncodedAsMadeAreTheWholeOnesAndDecodeBack) {
  CompiledModel model = compile(fusion::FusionMode::ilp);
  const std::vector<Array> inputs = random_inputs(model.graph(), {.seed = 1});
  std::vector<size_t> asked;
  Expected<RunBuffers> made = RunBuffers::encode(model.graph(), [&](size_t index) {
    asked.push_back(index);
    return Expected<Array>(inputs[index]);
  });
  ASSERT_TRUE(made) << made.status().message();
  EXPECT_EQ(asked, (std::vector<size_t>{0, 1}));
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(made->input_array(model.graph(), i), inputs[i]);
  }
  TimedRun run(model, *made);
  ASSERT_TRUE(run.time_one());
  Expected<std::vector<Array>> outputs = model.run(inputs);
  ASSERT_TRUE(outputs) << outputs.status().message();
  EXPECT_EQ(made->output_array(0), (*outputs)[0]);
  // A maker's error is the encoding's.
  Expected<RunBuffers> failed = RunBuffers::encode(
      model.graph(), [](size_t) -> Expected<Array> { return Status::error("no such input"); });
  EXPECT_FALSE(failed);
}

TEST(Timing, InterleavedRunsTakeTurnsAndJoinIntoTheFusionProfile) {
  CompiledModel unfused = compile(fusion::FusionMode::off);
  CompiledModel fused = compile(fusion::FusionMode::ilp);
  const std::vector<Array> inputs = random_inputs(unfused.graph(), {.seed = 1});
  RunBuffers buffers(unfused.graph(), inputs);
  TimedRun unfused_run(unfused, buffers), fused_run(fused, buffers);
  std::vector<TimedRun*> runs = {&unfused_run, &fused_run};
  runtime::Profile unfused_profile, fused_profile;
  std::vector<runtime::Profile*> profiles = {&unfused_profile, &fused_profile};
  Expected<std::vector<std::vector<double>>> times = time_interleaved(runs, 3, profiles);
  ASSERT_TRUE(times) << times.status().message();
  ASSERT_EQ(times->size(), 2u);
  EXPECT_EQ((*times)[0].size(), 3u);
  EXPECT_EQ(unfused_profile.runs, 3);  // the untimed run of each turn is not profiled
  const FusionProfile joined =
      join_fusion_profile(unfused.compiled(), unfused_profile, fused.compiled(), fused_profile);
  // Every node of the fused program ran alone unfused: each fused kernel has their time.
  ASSERT_EQ(joined.kernels.size(), fused.compiled().records.size());
  for (const FusedKernelTime& kernel : joined.kernels) EXPECT_GT(kernel.unfused, 0);
  for (size_t k = 1; k < joined.kernels.size(); ++k) {
    const FusedKernelTime& a = joined.kernels[k - 1];
    const FusedKernelTime& b = joined.kernels[k];
    EXPECT_GE(a.fused - a.unfused, b.fused - b.unfused) << "slowest against its nodes first";
  }
  EXPECT_GT(joined.unfused_contractions, 0);  // the matmul
  EXPECT_LE(joined.unfused_contractions, joined.unfused_total);
  EXPECT_NEAR(joined.unfused_kernels_total, joined.unfused_total, 1e-12);
}

TEST(Timing, ServesTheBenchProtocol) {
  CompiledModel model = compile(fusion::FusionMode::ilp);
  const std::vector<Array> inputs = random_inputs(model.graph(), {.seed = 1});
  RunBuffers buffers(model.graph(), inputs);
  TimedRun run(model, buffers);
  std::istringstream requests("2\n1\n");
  std::ostringstream answers;
  ASSERT_TRUE(serve_timing_requests(requests, answers, run));
  std::istringstream lines(answers.str());
  std::string line;
  std::vector<size_t> counts;
  while (std::getline(lines, line)) {
    ASSERT_EQ(line.rfind("seconds ", 0), 0u) << line;
    counts.push_back(static_cast<size_t>(std::count(line.begin(), line.end(), ' ')));
  }
  EXPECT_EQ(counts, (std::vector<size_t>{2, 1}));

  std::istringstream bad("3\nmany\n");
  std::ostringstream ignored;
  const Status refused = serve_timing_requests(bad, ignored, run);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.message().find("expected a positive run count, read 'many'"),
            std::string::npos);
  for (const char* not_a_count : {"0\n", "-1\n", "2x\n", "\n"}) {
    std::istringstream in(not_a_count);
    EXPECT_FALSE(serve_timing_requests(in, ignored, run)) << not_a_count;
  }
}

}  // namespace
}  // namespace kiln
