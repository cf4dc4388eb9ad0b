// Collectives in compiled programs on the CPU: each is a program step of its own between the
// kernels, run by the executor through the process's communicator, agreeing with the
// interpreter; and the step in the program's serialized form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/run.h"
#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "runtime/executor.h"
#include "runtime/program.h"
#include "target/target.h"
#include "unit/comm/simulated_peer.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using kiln::testing::contains_all;
using kiln::testing::is_error_with;
using runtime::Step;

// Kernels before, between and after the collectives; a broadcast of an input straight to an
// output.
constexpr std::string_view kGraph = R"(graph @g(%x: f32[2,3], %w: f64[5]) {
  %a = mul(%x, %x) : f32[2,3]
  %s = all_reduce(%a) {reduction = "mean"} : f32[2,3]
  %y = add(%s, %x) : f32[2,3]
  %z = all_reduce(%y) : f32[2,3]
  %b = broadcast(%w) : f64[5]
  return %z, %b
})";

Graph parse(std::string_view text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph();
}

CompileOptions options() {
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  return options;
}

std::vector<const Step*> collective_steps(const runtime::Program& program) {
  std::vector<const Step*> steps;
  for (const Step& step : program.steps) {
    if (step.kind == Step::Kind::collective) steps.push_back(&step);
  }
  return steps;
}

// The compiled graph's outputs on `inputs`, and the interpreter's, element by element.
void expect_compiled_equals_interpreter(const Graph& graph, const std::vector<Array>& inputs) {
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  Expected<std::unique_ptr<runtime::ProgramExecutor>> executor =
      target_of(options()).make_executor(*compiled, options().device);
  ASSERT_TRUE(executor) << executor.status().message();
  Expected<std::vector<Array>> got = run_compiled(graph, **executor, inputs);
  ASSERT_TRUE(got) << got.status().message();
  Expected<std::vector<Array>> want = interpret(graph, inputs);
  ASSERT_TRUE(want) << want.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (size_t o = 0; o < got->size(); ++o) {
    ASSERT_EQ((*got)[o].size(), (*want)[o].size());
    for (int64_t i = 0; i < (*got)[o].size(); ++i) {
      EXPECT_NEAR((*got)[o][i], (*want)[o][i], 1e-5 * (1 + std::abs((*want)[o][i])))
          << "output " << o << " element " << i;
    }
  }
}

TEST(CollectiveProgram, EachCollectiveIsAStepOfItsOwnBetweenTheKernels) {
  const Graph graph = parse(kGraph);
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  const runtime::Program& program = *compiled->program;
  const std::vector<const Step*> collectives = collective_steps(program);
  ASSERT_EQ(collectives.size(), 3u);
  EXPECT_EQ(compiled->records.size(), 2u);  // mul and add: nothing fuses across a collective
  ASSERT_EQ(program.steps.size(), 5u);
  // The step whose label starts with `op`.
  const auto step_of = [&](std::string_view op) {
    const auto it = std::ranges::find_if(
        program.steps, [&](const Step& step) { return step.label.starts_with(op); });
    EXPECT_NE(it, program.steps.end()) << op;
    return static_cast<size_t>(it - program.steps.begin());
  };
  const size_t mul = step_of("mul"), mean = step_of("all_reduce #1"),
               add = step_of("add"), sum = step_of("all_reduce #3"), bcast = step_of("broadcast");
  EXPECT_LT(mul, mean);
  EXPECT_LT(mean, add);
  EXPECT_LT(add, sum);
  EXPECT_EQ(program.steps[mul].kind, Step::Kind::kernel);
  EXPECT_EQ(program.steps[mean].kind, Step::Kind::collective);
  EXPECT_EQ(program.steps[mean].collective.reduction, comm::Reduction::mean);
  EXPECT_EQ(program.steps[mean].collective.type, comm::DataType::f32);
  EXPECT_EQ(program.steps[mean].collective.count, 6);
  EXPECT_EQ(program.steps[sum].collective.reduction, comm::Reduction::sum);
  EXPECT_EQ(program.steps[bcast].collective.kind, runtime::Collective::Kind::broadcast);
  EXPECT_EQ(program.steps[bcast].collective.count, 40);
  EXPECT_EQ(compiled->step_kernel_record[mean], -1);
  EXPECT_TRUE(contains_all(runtime::print_program(program),
                           {"all_reduce (mean) 6 f32", "broadcast 40 bytes from rank 0"}));
}

TEST(CollectiveProgram, InAWorldOfOneTheCompiledProgramEqualsTheInterpreter) {
  const Graph graph = parse(kGraph);
  expect_compiled_equals_interpreter(graph, random_inputs(graph, {.seed = 3}));
}

TEST(CollectiveProgram, TheExecutorGoesThroughTheCommunicator) {
  testing::SimulatedPeerCommunicator peer;
  const testing::ScopedCommunicator scoped(peer);
  const Graph graph = parse(kGraph);
  expect_compiled_equals_interpreter(graph, random_inputs(graph, {.seed = 4}));
  EXPECT_EQ(peer.collectives, 6);  // three by the program, three by the interpreter
}

TEST(CollectiveProgram, AnErrorOfTheCommunicatorNamesTheStep) {
  const Graph graph = parse(R"(graph @g(%x: f32[3]) {
    %b = broadcast(%x) {root = 2} : f32[3]
    return %b
  })");
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  Expected<std::unique_ptr<runtime::ProgramExecutor>> executor =
      target_of(options()).make_executor(*compiled, options().device);
  ASSERT_TRUE(executor) << executor.status().message();
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 5});
  EXPECT_TRUE(is_error_with(run_compiled(graph, **executor, inputs).status(),
                            {"broadcast #", "broadcast from rank 2"}));
}

TEST(CollectiveProgram, SixteenBitAllReducesAreRefusedWhenCompiled) {
  const Graph graph = parse(R"(graph @g(%x: bf16[3]) {
    %s = all_reduce(%x) : bf16[3]
    return %s
  })");
  const Status status = compile_graph(graph, options()).status();
  EXPECT_TRUE(is_error_with(status, {"all_reduce of bf16 is not supported yet"}));
  EXPECT_EQ(status.code(), ErrorCode::unsupported);
}

TEST(CollectiveProgram, ACollectiveSharingAGivenGroupIsRefused) {
  const Graph graph = parse(R"(graph @g(%x: f32[3]) {
    %a = exp(%x) : f32[3]
    %s = all_reduce(%a) : f32[3]
    return %s
  })");
  const std::vector<Node*> all(graph.nodes().begin(), graph.nodes().end());
  EXPECT_TRUE(is_error_with(
      compile_groups(graph, std::span<const std::vector<Node*>>(&all, 1), options()).status(),
      {"all_reduce", "shares a group with 1 other nodes"}));
}

TEST(CollectiveProgram, TheGpuNeedsNccl) {
  const Graph graph = parse(kGraph);
  CompileOptions gpu = options();
  gpu.device.kind = DeviceKind::cuda;
  const Status status = compile_graph(graph, gpu).status();
  EXPECT_TRUE(is_error_with(status, {"collectives on the GPU need NCCL (not yet)"}));
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  EXPECT_TRUE(is_error_with(runtime::refuse_collectives(*compiled->program, "needs NCCL"),
                            {"(all_reduce #1): needs NCCL"}));
}

TEST(CollectiveProgram, SerializationRoundTripsTheCollectiveSteps) {
  const Graph graph = parse(kGraph);
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  const std::string bytes = runtime::serialize_program(*compiled->program);
  Expected<runtime::Program> read = runtime::deserialize_program(bytes);
  ASSERT_TRUE(read) << read.status().message();
  ASSERT_EQ(read->steps.size(), compiled->program->steps.size());
  for (size_t s = 0; s < read->steps.size(); ++s) {
    EXPECT_EQ(read->steps[s].kind, compiled->program->steps[s].kind);
    EXPECT_EQ(read->steps[s].buffers, compiled->program->steps[s].buffers);
    EXPECT_EQ(read->steps[s].collective, compiled->program->steps[s].collective);
  }
  EXPECT_EQ(runtime::serialize_program(*read), bytes);
}

TEST(CollectiveProgram, ACollectiveOfAnotherSizeThanItsBufferIsRefused) {
  const Graph graph = parse(kGraph);
  Expected<CompiledGraph> compiled = compile_graph(graph, options());
  ASSERT_TRUE(compiled) << compiled.status().message();
  runtime::Program damaged = *compiled->program;
  Step& mean = *std::ranges::find_if(
      damaged.steps, [](const Step& step) { return step.label.starts_with("all_reduce #1"); });
  mean.collective.count = 7;
  EXPECT_TRUE(is_error_with(runtime::deserialize_program(runtime::serialize_program(damaged))
                                .status(),
                            {"a collective step needs two buffers of its size"}));
  EXPECT_TRUE(is_error_with(runtime::check_program(damaged, 2),
                            {"all_reduce #1", "collective over 28 bytes in a buffer of 24"}));
}

}  // namespace
}  // namespace kiln
