// The compiler pipeline (compiler/pipeline.h): every stage runs once, in order; each can be
// dumped, timed and stopped after, from run_pipeline and from Compiler; a stopped compilation
// holds what the stages up to its stop made and nothing after.
#include "compiler/pipeline.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr const char* kGraph = R"(graph @g(%x: f32[128,256], %w: f32[256,64], %b: f32[64]) {
  %m = matmul(%x, %w) : f32[128,64]
  %y = add(%m, %b) : f32[128,64]
  %z = relu(%y) : f32[128,64]
  %t = transpose(%z) {perm = [1, 0]} : f32[64,128]
  %s = sum(%t) {axes = [1]} : f32[64]
  return %z, %s
})";

Graph parse(const char* text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return std::move(graph).value();
}

CompileOptions options_printing_to(std::string& text) {
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  options.pipeline.print = [&text](std::string_view chunk) { text += chunk; };
  return options;
}

TEST(Pipeline, StagesHaveNamesThatParseBack) {
  for (const Stage stage : kStages) {
    Expected<Stage> parsed = parse_stage(stage_name(stage));
    ASSERT_TRUE(parsed) << parsed.status().message();
    EXPECT_EQ(*parsed, stage);
  }
  Expected<Stage> unknown = parse_stage("lowering");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("share-kernels"), std::string::npos)
      << unknown.status().message();
}

TEST(Pipeline, RunsEveryStageOnceInOrder) {
  Graph graph = parse(kGraph);
  std::string printed;
  CompileOptions options = options_printing_to(printed);
  options.pipeline.time_stages = true;
  Expected<CompiledGraph> compiled = run_pipeline(graph, options);
  ASSERT_TRUE(compiled) << compiled.status().message();
  ASSERT_EQ(compiled->stage_seconds.size(), kStages.size());
  for (size_t i = 0; i < kStages.size(); ++i) {
    EXPECT_EQ(compiled->stage_seconds[i].first, kStages[i]);
    EXPECT_GE(compiled->stage_seconds[i].second, 0);
    EXPECT_NE(printed.find(fmt::format("stage {:<14}", stage_name(kStages[i]))), std::string::npos)
        << printed;
  }
  EXPECT_EQ(compiled->last_stage, Stage::codegen);
  EXPECT_NE(compiled->program, nullptr);
  EXPECT_EQ(compiled->kernels.size(), static_cast<size_t>(compiled->program->num_kernels));
}

// Each stage's dump holds what that stage made.
TEST(Pipeline, DumpsEveryStagesResult) {
  const std::vector<std::pair<Stage, std::string>> expected = {
      {Stage::verify, "graph @g("},
      {Stage::rewrite, "graph @g("},
      {Stage::substitute, "graph @g("},
      {Stage::decompose, "graph @g("},
      {Stage::layout, "graph @g("},
      {Stage::partition, "cut edges:"},
      {Stage::lower, "// kernel call 0: "},
      {Stage::schedule, "vectorized for"},
      {Stage::scratch, "// kernel call 0: "},
      {Stage::pack_weights, "// kernel call 0: "},
      {Stage::share_kernels, "// kernel 0, run by kernel calls 0\nkernel kernel("},
      {Stage::plan_memory, "kernel calls:"},
      {Stage::codegen, "extern \"C\" void kiln_kernel_0"}};
  for (const auto& [stage, text] : expected) {
    SCOPED_TRACE(stage_name(stage));
    Graph graph = parse(kGraph);
    std::string printed;
    CompileOptions options = options_printing_to(printed);
    options.pipeline.dump_after = {stage};
    ASSERT_TRUE(run_pipeline(graph, options));
    const std::string header = fmt::format("// after stage {}\n", stage_name(stage));
    ASSERT_EQ(printed.find(header), 0u) << printed;
    EXPECT_NE(printed.find(text, header.size()), std::string::npos) << printed;
    EXPECT_EQ(printed.find("// after stage", header.size()), std::string::npos)
        << "one stage dumped, not more";
  }
}

// A stop after each stage leaves the later stages' results empty.
TEST(Pipeline, StopsAfterAnyStage) {
  for (const Stage stage : kStages) {
    SCOPED_TRACE(stage_name(stage));
    Graph graph = parse(kGraph);
    CompileOptions options;
    options.fusion.profile = cost::reference_profile();
    options.pipeline.stop_after = stage;
    Expected<CompiledGraph> compiled = run_pipeline(graph, options);
    ASSERT_TRUE(compiled) << compiled.status().message();
    EXPECT_EQ(compiled->last_stage, stage);
    EXPECT_EQ(compiled->stage_seconds.size(), static_cast<size_t>(static_cast<int>(stage) + 1));
    EXPECT_EQ(compiled->partition.groups.empty(), stage < Stage::partition);
    EXPECT_EQ(compiled->records.empty(), stage < Stage::lower);
    EXPECT_EQ(compiled->program == nullptr, stage < Stage::plan_memory);
    EXPECT_EQ(compiled->kernels.size() == 0, stage < Stage::codegen);
  }
}

TEST(Pipeline, CompilerStopsWhereAskedAndSaysThereIsNothingToRun) {
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  options.pipeline.stop_after = Stage::partition;
  Expected<Compilation> stopped = Compiler(options).run_pipeline(parse(kGraph));
  ASSERT_TRUE(stopped) << stopped.status().message();
  EXPECT_EQ(stopped->compiled().last_stage, Stage::partition);
  EXPECT_GT(stopped->compiled().partition.num_kernels(), 0);
  EXPECT_EQ(stopped->graph().name(), "g");
  Expected<CompiledModel> model = Compiler(options).compile(parse(kGraph));
  ASSERT_FALSE(model);
  EXPECT_NE(model.status().message().find("stopped after stage partition"), std::string::npos)
      << model.status().message();
}

// compile_graph leaves the caller's graph as it is: the graph stages do not run.
TEST(Pipeline, CompileGraphDoesNotRewrite) {
  const Graph graph = parse(kGraph);
  Expected<CompiledGraph> compiled = compile_graph(graph);
  ASSERT_TRUE(compiled) << compiled.status().message();
  EXPECT_TRUE(compiled->rewrites.passes.rewrites.empty());
  EXPECT_FALSE(compiled->rewrites.substitution);
  for (const KernelRecord& record : compiled->records) {
    for (const Node* node : record.nodes) {
      EXPECT_NE(std::find(graph.nodes().begin(), graph.nodes().end(), node), graph.nodes().end());
    }
  }
}

// compile_groups takes the groups as given: here every node in one kernel.
TEST(Pipeline, CompileGroupsTakesTheGroupsGiven) {
  const Graph graph = parse(kGraph);
  const std::vector<Node*> all(graph.nodes().begin(), graph.nodes().end());
  Expected<CompiledGraph> compiled =
      compile_groups(graph, std::span<const std::vector<Node*>>(&all, 1));
  ASSERT_TRUE(compiled) << compiled.status().message();
  ASSERT_EQ(compiled->records.size(), 1u);
  EXPECT_EQ(compiled->records[0].nodes.size(), all.size());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// $KILN_FAULT set for one scope.
class ScopedFault {
 public:
  explicit ScopedFault(const char* fault) { setenv("KILN_FAULT", fault, 1); }
  ~ScopedFault() { unsetenv("KILN_FAULT"); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;
};

TEST(Pipeline, AnInjectedInternalFaultFailsTheCompilationAsInternal) {
  Graph graph = parse(kGraph);
  ScopedFault fault("internal");
  Expected<CompiledGraph> compiled = run_pipeline(graph);
  ASSERT_FALSE(compiled);
  EXPECT_EQ(compiled.status().code(), ErrorCode::internal);
  EXPECT_NE(compiled.status().message().find("internal compiler error"), std::string::npos);
}

TEST(Pipeline, AnUnknownFaultIsInvalidInput) {
  Graph graph = parse(kGraph);
  ScopedFault fault("segfault");
  Expected<CompiledGraph> compiled = run_pipeline(graph);
  ASSERT_FALSE(compiled);
  EXPECT_EQ(compiled.status().code(), ErrorCode::invalid_input);
}

TEST(PipelineDeathTest, AnInjectedCheckFaultFailsACheck) {
  Graph graph = parse(kGraph);
  EXPECT_DEATH(
      {
        ScopedFault fault("check");
        (void)run_pipeline(graph);
      },
      "internal compiler error: .*check failed: .*KILN_FAULT=check");
}

}  // namespace
}  // namespace kiln
