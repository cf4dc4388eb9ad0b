// The compile pipeline end to end: graphs compiled (fused by default; the mechanics tests one
// kernel per node), run over the planned arena, against the reference interpreter; the
// program's buffers and copies; the check mode naming a wrong kernel; the executor's
// validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

// One kernel per node, so that tests can name kernels and steps by node.
CompileOptions unfused() {
  CompileOptions options;
  options.fusion.mode = fusion::FusionMode::off;
  return options;
}

// Compiles `graph`, runs it and the interpreter on the same random inputs and compares every
// output within f32 tolerance.
void expect_matches_interpreter(const Graph& graph, uint64_t seed = 7) {
  const std::vector<Array> inputs = random_inputs(graph, {.seed = seed});
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected) << expected.status().message();
  Expected<CompiledModel> model = Compiler().compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  Expected<std::vector<Array>> actual = model->run(inputs);
  ASSERT_TRUE(actual) << actual.status().message();
  ASSERT_EQ(actual->size(), expected->size());
  for (size_t o = 0; o < actual->size(); ++o) {
    const Array& got = (*actual)[o];
    const Array& want = (*expected)[o];
    ASSERT_EQ(got.type(), want.type());
    for (int64_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
          << "output " << o << " element " << i;
    }
  }
}

Graph parse(std::string_view text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph();
}

TEST(CompileGraph, SmallNetworkMatchesInterpreter) {
  expect_matches_interpreter(parse(R"(
    graph @net(%x: f32[5,7], %w: f32[7,3], %b: f32[3]) {
      %h = matmul(%x, %w) : f32[5,3]
      %hb = add(%h, %b) : f32[5,3]
      %r = relu(%hb) : f32[5,3]
      %p = softmax(%r) : f32[5,3]
      %s = sum(%p) {axes = [1]} : f32[5]
      return %p, %s
    })"));
}

TEST(CompileGraph, EncoderLayerExampleMatchesInterpreter) {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr);
  std::ifstream file(std::string(source_dir) + "/examples/encoder_layer.kiln");
  std::stringstream text;
  text << file.rdbuf();
  expect_matches_interpreter(parse(text.str()));
}

TEST(CompileGraph, OutputsThatNoKernelComputesAreCopied) {
  // An input returned as is, a constant, and one value returned twice.
  const Graph graph = parse(R"(
    graph @g(%x: f32[4]) {
      %c = constant() {value = tensor<f32[2]>[1.5, -2]} : f32[2]
      %y = exp(%x) : f32[4]
      return %x, %c, %y, %y
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  int copies = 0;
  for (const runtime::Step& step : model->program().steps) {
    copies += step.kind == runtime::Step::Kind::copy ? 1 : 0;
  }
  EXPECT_EQ(copies, 3);
  EXPECT_EQ(model->program().num_kernels, 1);
  expect_matches_interpreter(graph);
}

TEST(CompileGraph, ReshapesOfValuesInMemoryAreViews) {
  // %gr is the gelu output %g read as rows, and %xr is %x as rows: neither is copied.
  // Unfused, the reshapes are groups of their own that store nothing; fused, %gr leaves the
  // gelu's kernel as a view of %g, which the kernel stores for the other matmul.
  const Graph graph = parse(R"(
    graph @views(%x: f32[2,3,4], %w: f32[4,5], %v: f32[5,6]) {
      %h = matmul(%x, %w) : f32[2,3,5]
      %g = gelu(%h) : f32[2,3,5]
      %y = matmul(%g, %v) : f32[2,3,6]
      %gr = reshape(%g) {shape = [6, 5]} : f32[6,5]
      %xr = reshape(%x) {shape = [6, 4]} : f32[6,4]
      %dw = matmul(%xr, %gr) {transpose_a = true} : f32[4,5]
      return %y, %dw
    })");
  expect_matches_interpreter(graph);
  for (fusion::FusionMode mode : {fusion::FusionMode::off, fusion::FusionMode::ilp}) {
    CompileOptions options;
    options.fusion.mode = mode;
    Expected<CompiledModel> model = Compiler(options).compile(graph.clone());
    ASSERT_TRUE(model) << model.status().message();
    if (mode == fusion::FusionMode::off) {
      // Four kernels for six nodes; the arena holds %h and %g (120 bytes each, aligned).
      EXPECT_EQ(model->program().steps.size(), 4u);
      EXPECT_EQ(model->stats().arena_total_bytes, 2 * 128);
    } else {
      // %g stored once (with the gemm's small scratch), never a second copy for %gr.
      EXPECT_LT(model->stats().arena_total_bytes, 2 * 128);
    }
  }
}

TEST(CompileGraph, IdenticalGroupsShareOneKernel) {
  // Two exps of one shape share a kernel; the exp of another shape does not.
  const Graph graph = parse(R"(
    graph @g(%x: f32[4,5], %y: f32[4,5], %z: f32[5]) {
      %a = exp(%x) : f32[4,5]
      %b = exp(%y) : f32[4,5]
      %c = exp(%z) : f32[5]
      return %a, %b, %c
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(model->program().steps.size(), 3u);
  EXPECT_EQ(model->program().num_kernels, 2);
  expect_matches_interpreter(graph);
}

TEST(CompileGraph, ArenaReusesBuffersOfAChain) {
  // Ten elementwise steps over 64 KiB tensors: at most two intermediates are alive at once.
  GraphBuilder b;
  Value* x = b.input("x", DType::f32, Shape{16384});
  Value* v = x;
  for (int i = 0; i < 10; ++i) v = i % 2 == 0 ? b.exp(b.neg(v)) : b.relu(v);
  b.output(v);
  Expected<Graph> built = b.finish();
  ASSERT_TRUE(built) << built.status().message();
  const Graph& graph = *built;
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  const int64_t tensor = 16384 * 4;
  EXPECT_LE(model->program().arena_bytes, 2 * tensor);
  EXPECT_GE(model->stats().arena_total_bytes, 13 * tensor);
  expect_matches_interpreter(graph);
}

TEST(CompileGraph, CheckModePassesACorrectModel) {
  const Graph graph = parse(R"(
    graph @g(%x: f32[3,9], %scale: f32[9], %bias: f32[9]) {
      %y = layer_norm(%x, %scale, %bias) : f32[3,9]
      %z = tanh(%y) : f32[3,9]
      return %z
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  Expected<CheckReport> report = model->check(random_inputs(graph, {.seed = 3}));
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->kernels.size(), 2u);
}

TEST(CompileGraph, CheckModeNamesTheFirstWrongKernel) {
  // Run the program of exp -> neg -> relu with the kernels of exp -> sin -> relu: the second
  // step is wrong and must be named; the first is right.
  const Graph good = parse(R"(
    graph @g(%x: f32[8]) {
      %a = exp(%x) : f32[8]
      %b = neg(%a) : f32[8]
      %c = relu(%b) : f32[8]
      return %c
    })");
  const Graph bad = parse(R"(
    graph @g(%x: f32[8]) {
      %a = exp(%x) : f32[8]
      %b = sin(%a) : f32[8]
      %c = relu(%b) : f32[8]
      return %c
    })");
  Expected<CompiledGraph> good_compiled = compile_graph(good, unfused());
  Expected<CompiledGraph> bad_compiled = compile_graph(bad, unfused());
  ASSERT_TRUE(good_compiled && bad_compiled);
  std::vector<runtime::KernelFunction> kernels;
  for (size_t k = 0; k < 3; ++k) kernels.push_back(bad_compiled->kernels.function(k));
  Expected<runtime::Executor> executor =
      runtime::Executor::create(good_compiled->program, std::move(kernels));
  ASSERT_TRUE(executor) << executor.status().message();
  Expected<CheckReport> report =
      check_compiled(good, *good_compiled, *executor, random_inputs(good, {.seed = 1}));
  ASSERT_TRUE(report) << report.status().message();
  ASSERT_FALSE(report->ok());
  ASSERT_EQ(report->kernels.size(), 2u);
  EXPECT_TRUE(report->kernels[0].mismatch.empty());
  EXPECT_NE(report->kernels[1].label.find("neg"), std::string::npos);
}

// The program of `good` run with the kernels compiled from `bad` (the same kernels and
// buffers), checked against `good`'s reference on `inputs`.
Expected<CheckReport> check_with_kernels_of(const Graph& good, const Graph& bad,
                                            const std::vector<Array>& inputs) {
  KILN_ASSIGN_OR_RETURN(CompiledGraph good_compiled, compile_graph(good, {}));
  KILN_ASSIGN_OR_RETURN(CompiledGraph bad_compiled, compile_graph(bad, {}));
  std::vector<runtime::KernelFunction> kernels;
  for (int k = 0; k < good_compiled.program->num_kernels; ++k) {
    kernels.push_back(bad_compiled.kernels.function(static_cast<size_t>(k)));
  }
  KILN_ASSIGN_OR_RETURN(runtime::Executor executor,
                        runtime::Executor::create(good_compiled.program, std::move(kernels)));
  return check_compiled(good, good_compiled, executor, inputs);
}

TEST(CompileGraph, CheckModeJudgesIllConditionedElementsByTheirSensitivity) {
  // y = 1 / (x - k - 1) near its pole: x = 1 + 1e-4 gives y = 1e4, and a change of x by one
  // part in a million moves y by one part in a hundred. Kernels that add k = 2^-22 instead of
  // subtracting it (a rounding-sized change of x) are within that; ones that multiply where
  // the graph divides are not.
  const auto graph = [](const std::string& first, const std::string& last) {
    return parse(fmt::format(R"(
      graph @g(%x: f32[4]) {{
        %k = constant() {{value = tensor<f32[]>[2.384185791015625e-07]}} : f32[]
        %one = constant() {{value = tensor<f32[]>[1]}} : f32[]
        %m = {}(%x, %k) : f32[4]
        %d = sub(%m, %one) : f32[4]
        %y = {}(%one, %d) : f32[4]
        return %y
      }})",
                             first, last));
  };
  const Graph good = graph("sub", "div");
  Array x(DType::f32, Shape({4}));
  x.data = {1.0001, 1.0002, -1.0, 3.0};
  x.round_to_dtype();
  Expected<CheckReport> nudged = check_with_kernels_of(good, graph("add", "div"), {x});
  ASSERT_TRUE(nudged) << nudged.status().message();
  ASSERT_EQ(nudged->kernels.size(), 1u) << "one fused kernel";
  EXPECT_TRUE(nudged->ok()) << nudged->kernels.back().mismatch;
  EXPECT_GT(nudged->kernels.back().max_rel_error, 1e-3) << "beyond the f32 tolerance";
  Expected<CheckReport> wrong = check_with_kernels_of(good, graph("sub", "mul"), {x});
  ASSERT_TRUE(wrong) << wrong.status().message();
  EXPECT_FALSE(wrong->ok());
}

TEST(CompileGraph, GeneratedSourceCarriesNoModelNames) {
  const Graph graph = parse(R"(
    graph @g(%"evil\"); system(\"rm -rf /\"); //": f32[4]) {
      %"also*/evil" = exp(%"evil\"); system(\"rm -rf /\"); //") : f32[4]
      return %"also*/evil"
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  Expected<std::string> source = model->source();
  ASSERT_TRUE(source);
  EXPECT_EQ(source->find("evil"), std::string::npos);
  EXPECT_EQ(source->find("system"), std::string::npos);
}

TEST(CompileGraph, FusionNeverRaisesTheArenasPeak) {
  // s = colsum(a) with a = x w computed first; fused with the late add of colsum(c), the sum
  // would keep a alive while b and c are computed (3 MiB live instead of 2).
  Graph graph;
  GraphBuilder b(graph);
  Value* a = b.matmul(b.input("x", DType::f32, {512, 512}), b.input("w", DType::f32, {512, 512}));
  Value* s = b.sum(a, {0});
  Value* mid = b.matmul(b.input("x2", DType::f32, {512, 512}), b.input("w2", DType::f32, {512, 512}));
  Value* c = b.matmul(mid, b.input("w3", DType::f32, {512, 512}));
  graph.set_outputs({b.add(s, b.sum(c, {0}))});
  Expected<CompiledGraph> unfused_plan = compile_graph(graph, unfused());
  CompileOptions fused;
  fused.fusion.profile = cost::reference_profile();
  Expected<CompiledGraph> fused_plan = compile_graph(graph, fused);
  ASSERT_TRUE(unfused_plan && fused_plan);
  EXPECT_LE(fused_plan->program->arena_bytes, unfused_plan->program->arena_bytes);
  const std::string text = fusion::explain_partition(graph, fused_plan->partition);
  EXPECT_NE(text.find("freed as early as unfused"), std::string::npos) << text;
}

TEST(Executor, RejectsAProgramWhoseBuffersLeaveTheArena) {
  auto program = std::make_shared<runtime::Program>();
  program->arena_bytes = 64;
  program->buffers.push_back({runtime::Storage::arena, 0, 32, 64});
  Expected<runtime::Executor> executor = runtime::Executor::create(program, {});
  ASSERT_FALSE(executor);
  EXPECT_NE(executor.status().message().find("outside the arena"), std::string::npos);
}

TEST(Executor, ProfileHasOneTimePerStep) {
  const Graph graph = parse(R"(
    graph @g(%x: f32[4]) {
      %a = exp(%x) : f32[4]
      %b = neg(%a) : f32[4]
      return %b
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  runtime::Profile profile;
  const std::vector<Array> inputs = random_inputs(graph);
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(model->run(inputs, &profile));
  EXPECT_EQ(profile.runs, 3);
  EXPECT_EQ(profile.step_seconds.size(), 2u);
}

// A run on the caller's arena (a framework's allocator's memory, RunHooks::arena) keeps its
// intermediates there and computes what a run on the executor's own arena computes; one off the
// alignment is refused.
TEST(Executor, RunsInTheArenaItIsGiven) {
  const Graph graph = parse(R"(
    graph @g(%x: f32[64]) {
      %a = exp(%x) : f32[64]
      %b = neg(%a) : f32[64]
      return %b
    })");
  Expected<CompiledModel> model = Compiler(unfused()).compile(graph.clone());
  ASSERT_TRUE(model) << model.status().message();
  ASSERT_GE(model->program().arena_bytes, 64 * 4) << "exp's result lies in the arena";
  std::vector<float> x(64), own(64), given(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) / 64;
  const void* inputs[] = {x.data()};
  void* on_own[] = {own.data()};
  void* on_given[] = {given.data()};
  ASSERT_TRUE(model->run_raw(inputs, on_own));
  const auto bytes = static_cast<size_t>(model->program().arena_bytes);
  // aligned_alloc takes a multiple of the alignment.
  auto* arena = static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  std::memset(arena, 0xff, bytes);
  ASSERT_TRUE(model->run_raw(inputs, on_given, nullptr, false, arena));
  EXPECT_EQ(own, given);
  EXPECT_NE(std::count(arena, arena + bytes, std::byte{0xff}), static_cast<ptrdiff_t>(bytes))
      << "exp's result was written into the given arena";
  const Status misaligned = model->run_raw(inputs, on_given, nullptr, false, arena + 4);
  ASSERT_FALSE(misaligned);
  EXPECT_NE(misaligned.message().find("64-byte aligned"), std::string::npos)
      << misaligned.message();
  std::free(arena);
}

}  // namespace
}  // namespace kiln
