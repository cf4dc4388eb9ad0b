// The pack-weights stage (compiler/stages.h): which gemms keep their B packed, that the packed
// product runs (the state's header is filled on the first run) and matches the reference
// interpreter on every run, that each executor packs into its own state, and that the loop IR
// says where B is packed and refuses what the packing cannot keep.
#include <gtest/gtest.h>

#include <cmath>

#include "codegen/cpu/prelude.h"
#include "compiler/tensor_bytes.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "kiln/kiln.h"
#include "loop/parser.h"
#include "loop/printer.h"

namespace kiln {
namespace {

// x [rows, depth] times a constant weight [depth, cols] (stored [cols, depth] when
// `transposed`), plus a bias, through relu: a gemm and its epilogue in one kernel.
Graph dense_layer(int64_t rows, int64_t depth, int64_t cols, bool transposed) {
  GraphBuilder b("dense");
  Value* x = b.input("x", DType::f32, Shape{rows, depth});
  std::vector<double> weights(static_cast<size_t>(depth * cols));
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37 * static_cast<double>(i));
  Value* w = b.constant(Array(DType::f32, transposed ? Shape{cols, depth} : Shape{depth, cols},
                              std::move(weights)));
  Value* bias = b.fill(Shape{cols}, 0.25);
  b.output(b.relu(b.add(b.matmul(x, w, false, transposed), bias)));
  Expected<Graph> graph = b.finish();
  EXPECT_TRUE(graph) << graph.status().message();
  return std::move(*graph);
}

// The state buffers of every kernel step, in step order.
std::vector<int> state_buffers(const runtime::Program& program) {
  std::vector<int> states;
  for (const runtime::Step& step : program.steps) {
    for (int buffer : step.buffers) {
      if (program.buffers[static_cast<size_t>(buffer)].storage == runtime::Storage::state) {
        states.push_back(buffer);
      }
    }
  }
  return states;
}

std::vector<runtime::KernelFunction> functions_of(const CompiledGraph& compiled) {
  std::vector<runtime::KernelFunction> functions;
  for (int k = 0; k < compiled.program->num_kernels; ++k) {
    functions.push_back(compiled.kernels.function(static_cast<size_t>(k)));
  }
  return functions;
}

// Runs `executor` on `inputs` and returns its one output, and whether the state's header was
// filled (the tag the prelude writes) when the step had run.
struct PackedRun {
  Array output;
  bool packed = false;
};
PackedRun run_once(runtime::Executor& executor, const Graph& graph,
                   const std::vector<Array>& inputs, int state_buffer) {
  PackedRun run;
  std::vector<std::vector<std::byte>> raw;
  for (const Array& input : inputs) raw.push_back(encode_array(input));
  std::vector<const void*> input_addresses;
  for (const std::vector<std::byte>& bytes : raw) input_addresses.push_back(bytes.data());
  const TensorType& type = graph.outputs()[0]->type();
  std::vector<std::byte> output(static_cast<size_t>(type.shape.num_elements() * 4));
  const std::vector<void*> output_addresses = {output.data()};
  runtime::RunHooks hooks;
  hooks.after_step = [&](int, std::span<void* const> buffers) {
    const auto* header = static_cast<const int64_t*>(buffers[static_cast<size_t>(state_buffer)]);
    run.packed = header[0] == codegen::cpu::kPackedBTag;
    return Status::ok();
  };
  const Status status = executor.run(input_addresses, output_addresses, hooks);
  EXPECT_TRUE(status) << status.message();
  run.output = decode_array(type, output.data());
  return run;
}

void expect_near(const Array& got, const Array& want) {
  ASSERT_EQ(got.size(), want.size());
  for (int64_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << "element " << i;
  }
}

TEST(PackWeights, AGemmOfFewRowsByAConstantKeepsItsWeightPackedAndMatches) {
  for (const bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "weight stored transposed" : "weight as is");
    const Graph graph = dense_layer(64, 512, 512, transposed);
    Expected<CompiledGraph> compiled = compile_graph(graph, {});
    ASSERT_TRUE(compiled) << compiled.status().message();
    const std::vector<int> states = state_buffers(*compiled->program);
    ASSERT_EQ(states.size(), 1u) << runtime::print_program(*compiled->program);
    EXPECT_NE(loop::print(compiled->records.at(0).kernel).find("packed in packed_b0"),
              std::string::npos);

    const std::vector<Array> inputs = random_inputs(graph, {.seed = 3});
    Expected<std::vector<Array>> want = interpret(graph, inputs);
    ASSERT_TRUE(want) << want.status().message();
    // The step that reads the state is the gemm's: its buffer index within the step.
    const std::vector<int>& step_buffers = compiled->program->steps.at(0).buffers;
    const int state_position = static_cast<int>(
        std::find(step_buffers.begin(), step_buffers.end(), states[0]) - step_buffers.begin());
    // Two executors of one program: each packs into its own state, on its first run, and
    // every run after the first reuses it.
    for (int e = 0; e < 2; ++e) {
      Expected<runtime::Executor> executor =
          runtime::Executor::create(compiled->program, functions_of(*compiled));
      ASSERT_TRUE(executor) << executor.status().message();
      for (int r = 0; r < 2; ++r) {
        const PackedRun run = run_once(*executor, graph, inputs, state_position);
        EXPECT_TRUE(run.packed) << "executor " << e << " run " << r;
        expect_near(run.output, want->at(0));
      }
    }
  }
}

TEST(PackWeights, LeavesWeightsThatAreInputsManyRowsAndSmallProducts) {
  CompileOptions off;
  off.pack_weights = false;
  const struct {
    const char* what;
    Graph graph;
    CompileOptions options;
  } cases[] = {
      {"many rows", dense_layer(1024, 512, 512, false), {}},
      {"a small product", dense_layer(16, 64, 64, false), {}},
      {"packing off", dense_layer(64, 512, 512, false), off},
  };
  for (const auto& c : cases) {
    Expected<CompiledGraph> compiled = compile_graph(c.graph, c.options);
    ASSERT_TRUE(compiled) << compiled.status().message();
    EXPECT_TRUE(state_buffers(*compiled->program).empty()) << c.what;
    EXPECT_EQ(compiled->program->state_bytes, 0) << c.what;
  }
  GraphBuilder b("weight_input");
  Value* x = b.input("x", DType::f32, Shape{64, 512});
  Value* w = b.input("w", DType::f32, Shape{512, 512});
  b.output(b.matmul(x, w));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph);
  Expected<CompiledGraph> compiled = compile_graph(*graph, {});
  ASSERT_TRUE(compiled) << compiled.status().message();
  EXPECT_TRUE(state_buffers(*compiled->program).empty());
}

TEST(PackWeights, LoopIrPrintsParsesAndVerifiesAPackedGemm) {
  const std::string kernel = R"(kernel k(a: f32[4, 8], b: f32[8, 16], c: f32[4, 16], p: i64[64]) {
  gemm(4, 16, 8) c[0, ld 16] = a[0, ld 8] * b[0, ld 16] packed in p
}
)";
  Expected<loop::Kernel> parsed = loop::parse_kernel(kernel);
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(loop::print(*parsed), kernel);

  const std::pair<std::string, std::string> refused[] = {
      {"gemm(4, 16, 8) c[0, ld 16] += a[0, ld 8] * b[0, ld 16] packed in p", "accumulates"},
      {"gemm(4, 16, 8) c[0, ld 16] = a[0, ld 8] * b[0, ld 16] packed in a", "not an i64"},
      {"for (i, 0, 2) {\n    gemm(4, 16, 8) c[0, ld 16] = a[0, ld 8] * b[0, ld 16] packed in p\n  }",
       "inside a loop"},
  };
  for (const auto& [body, message] : refused) {
    const std::string text =
        "kernel k(a: f32[4, 8], b: f32[8, 16], c: f32[4, 16], p: i64[64]) {\n  " + body + "\n}\n";
    Expected<loop::Kernel> bad = loop::parse_kernel(text);
    ASSERT_FALSE(bad) << body;
    EXPECT_NE(bad.status().message().find(message), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace kiln
