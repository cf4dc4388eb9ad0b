// Mixed precision compiled (CompileOptions::precision): bf16 contractions as library calls that
// accumulate in f32, checked kernel by kernel against the reference on the policy graph; and
// sums of bf16 that keep f32's accuracy. (How close the policy graph is to the f32 graph is
// the pass's test, tests/unit/passes/precision_test.cc, and the training tests'.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "compiler/stages.h"
#include "compiler/training_loop.h"
#include "kiln/kiln.h"
#include "loop/ir_visitor.h"
#include "models/model.h"
#include "target/target.h"

namespace kiln {
namespace {

Graph parse(const std::string& text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph();
}

// The largest |got - want| over the largest |want|.
double relative_error(const Array& got, const Array& want) {
  double error = 0, scale = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    error = std::max(error, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return error / std::max(scale, 1e-30);
}

// Every library call of the compiled kernels.
std::vector<const loop::LibraryCall*> library_calls(const CompiledGraph& compiled) {
  struct Collector : loop::IRVisitor {
    std::vector<const loop::LibraryCall*> calls;
    void visit_library_call(const loop::LibraryCall& call) override {
      calls.push_back(&call);
      loop::IRVisitor::visit_library_call(call);
    }
  } collector;
  for (const KernelRecord& record : compiled.records) collector.visit(record.kernel.body);
  return collector.calls;
}

TEST(MixedPrecision, LongBf16SumsAndProductsKeepF32Accuracy) {
  // 4096 terms: rounded to bf16 after every addition, these sums lost whole units.
  Graph graph = parse(R"(graph @g(%a: bf16[32,4096], %b: bf16[4096,16]) {
  %c = matmul(%a, %b) : bf16[32,16]
  %s = sum(%a) {axes = [1]} : bf16[32]
  return %c, %s
})");
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 1});
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected) << expected.status().message();
  Expected<CompiledModel> compiled = Compiler().compile(graph.clone());
  ASSERT_TRUE(compiled) << compiled.status().message();
  Expected<std::vector<Array>> outputs = compiled->run(inputs);
  ASSERT_TRUE(outputs) << outputs.status().message();
  // One bf16 rounding of the result, and f32's summation error.
  EXPECT_LT(relative_error((*outputs)[0], (*expected)[0]), 1e-2);
  EXPECT_LT(relative_error((*outputs)[1], (*expected)[1]), 1e-2);
  // Element by element, as the check mode judges them: a sum rounded to bf16 after every
  // term was a whole unit off in some elements, within 1e-2 of the largest but not of itself.
  Expected<CheckReport> check = compiled->check(inputs);
  ASSERT_TRUE(check) << check.status().message();
  EXPECT_TRUE(check->ok()) << check->kernels.back().mismatch;
  // The matmul is a gemm of bf16 accumulating in f32, which the CPU runs through oneDNN.
  const std::vector<const loop::LibraryCall*> calls = library_calls(compiled->compiled());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]->dtypes,
            (loop::LibraryDTypes{
                .a = DType::bf16, .b = DType::bf16, .accumulate = DType::f32, .out = DType::bf16}));
  Expected<std::string_view> library = target_for(DeviceKind::cpu).library_for(*calls[0]);
  ASSERT_TRUE(library) << library.status().message();
  EXPECT_EQ(*library, "oneDNN");
}

// A transformer block in f32: attention scores, a softmax, a feed-forward layer with a bias and
// gelu, a residual add and a layer norm.
constexpr const char* kBlock = R"(graph @block(%x: f32[2,16,32], %wq: f32[32,32], %wk: f32[32,32],
                                           %w1: f32[32,64], %b1: f32[64], %w2: f32[64,32],
                                           %g: f32[32], %beta: f32[32]) {
  %q = matmul(%x, %wq) : f32[2,16,32]
  %k = matmul(%x, %wk) : f32[2,16,32]
  %s = matmul(%q, %k) {transpose_b = true} : f32[2,16,16]
  %p = softmax(%s) : f32[2,16,16]
  %c = matmul(%p, %x) : f32[2,16,32]
  %h = matmul(%c, %w1) : f32[2,16,64]
  %hb = add(%h, %b1) : f32[2,16,64]
  %a = gelu(%hb) : f32[2,16,64]
  %y = matmul(%a, %w2) : f32[2,16,32]
  %r = add(%x, %y) : f32[2,16,32]
  %n = layer_norm(%r, %g, %beta) : f32[2,16,32]
  return %n
})";

// The precision stage asks the target: on the CPU matmuls and convolutions run in bf16
// (oneDNN), while on the GPU a convolution, which no GPU library of Kiln's runs in bf16 yet
// (cuDNN), stays f32.
TEST(MixedPrecision, TheStageRunsLowOnlyTheContractionsTheTargetHasALibraryFor) {
  constexpr const char* kText = R"(graph @g(%x: f32[1,2,6,6], %w: f32[4,2,3,3], %v: f32[16,8]) {
  %y = conv(%x, %w) : f32[1,4,4,4]
  %f = reshape(%y) {shape = [4, 16]} : f32[4,16]
  %z = matmul(%f, %v) : f32[4,8]
  return %z
})";
  CompileOptions options;
  options.precision = Precision::bf16;
  Graph on_cpu = parse(kText);
  Expected<PrecisionSummary> summary = precision_stage(on_cpu, options);
  ASSERT_TRUE(summary) << summary.status().message();
  EXPECT_EQ(on_cpu.find_value("y")->dtype(), DType::bf16);
  EXPECT_EQ(on_cpu.find_value("z.bf16")->dtype(), DType::bf16);  // cast back to f32 as %z
  EXPECT_EQ(summary->low_precision_nodes, 3);  // the conv, the reshape following it, the matmul

  options.device.kind = DeviceKind::cuda;
  Graph on_gpu = parse(kText);
  summary = precision_stage(on_gpu, options);
  ASSERT_TRUE(summary) << summary.status().message();
  EXPECT_EQ(on_gpu.find_value("y")->dtype(), DType::f32);
  EXPECT_EQ(summary->low_precision_nodes, 1);  // the matmul; the reshape follows the conv
}

// An f32 convolution and its two gradients compiled in bf16 and f16, over images with many
// output positions (a gemm per image) and few (the batch's columns in one gemm), agree with
// the reference on the policy graph kernel by kernel. Every gemm reads 16-bit operands and
// sums in f32, through oneDNN: a conv's into y's 16-bit values, the gradients' into f32 where
// their sums go on (col2im's taps, dw's images), so that each value is rounded once.
TEST(MixedPrecision, ConvolutionsAndTheirGradientsRunAsLowPrecisionGemms) {
  const std::string per_image = R"(graph @g(%x: f32[2,3,16,16], %w: f32[4,3,3,3],
                                            %dy: f32[2,4,16,16]) {
  %y = conv(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,4,16,16]
  %dx = conv_grad_data(%dy, %w) {input_shape = [2, 3, 16, 16], pads = [1, 1, 1, 1]} : f32[2,3,16,16]
  %dw = conv_grad_weight(%x, %dy) {weight_shape = [4, 3, 3, 3], pads = [1, 1, 1, 1]} : f32[4,3,3,3]
  return %y, %dx, %dw
})";
  const std::string batched = R"(graph @g(%x: f32[3,4,5,5], %w: f32[6,4,3,3], %v: f32[6,4,1,1],
                                          %dy: f32[3,6,3,3], %dz: f32[3,6,5,5]) {
  %y = conv(%x, %w) : f32[3,6,3,3]
  %dx = conv_grad_data(%dy, %w) {input_shape = [3, 4, 5, 5]} : f32[3,4,5,5]
  %dw = conv_grad_weight(%x, %dy) {weight_shape = [6, 4, 3, 3]} : f32[6,4,3,3]
  %px = conv_grad_data(%dz, %v) {input_shape = [3, 4, 5, 5]} : f32[3,4,5,5]
  return %y, %dx, %dw, %px
})";
  for (const std::string& text : {per_image, batched}) {
    for (Precision precision : {Precision::bf16, Precision::fp16}) {
      SCOPED_TRACE(std::string(precision_name(precision)));
      const DType low = *low_precision_dtype(precision);
      const Graph graph = parse(text);
      const std::vector<Array> inputs = random_inputs(graph, {.seed = 3});
      CompileOptions options;
      options.precision = precision;
      Expected<CompiledModel> compiled = Compiler(options).compile(graph.clone());
      ASSERT_TRUE(compiled) << compiled.status().message();
      Expected<CheckReport> check = compiled->check(inputs);
      ASSERT_TRUE(check) << check.status().message();
      EXPECT_TRUE(check->ok()) << check->kernels.back().mismatch;
      int rounded = 0, widened = 0;
      for (const loop::LibraryCall* call : library_calls(compiled->compiled())) {
        ASSERT_EQ(call->op, loop::LibraryOp::gemm);
        EXPECT_EQ(call->dtypes.a, low);
        EXPECT_EQ(call->dtypes.accumulate, DType::f32);
        (call->dtypes.out == low ? rounded : widened) += 1;
        Expected<std::string_view> library = target_for(DeviceKind::cpu).library_for(*call);
        ASSERT_TRUE(library) << library.status().message();
        EXPECT_EQ(*library, "oneDNN");
      }
      EXPECT_GT(rounded, 0);  // the conv's (and the pointwise data gradient's)
      EXPECT_GT(widened, 0);  // the gradients' that sum on
    }
  }
}

// An inference graph's convolutions, channels last, run as oneDNN's convolution of the low
// dtype (f16 on widened f32 copies where the CPU has no f16 kernel), the first with the bias
// and the relu it absorbed (in bf16 between two convolutions; before an f32 output they would
// compute in f32).
TEST(MixedPrecision, ChannelsLastConvolutionsRunInTheLowDtype) {
  const Graph graph = parse(R"(graph @g(%x: f32[2,8,10,10], %w: f32[16,8,3,3], %b: f32[16,1,1],
                                       %v: f32[4,16,1,1]) {
  %y = conv(%x, %w) {pads = [1, 1, 1, 1]} : f32[2,16,10,10]
  %z = add(%y, %b) : f32[2,16,10,10]
  %r = relu(%z) : f32[2,16,10,10]
  %o = conv(%r, %v) : f32[2,4,10,10]
  return %o
})");
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 4});
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(std::string(precision_name(precision)));
    const DType low = *low_precision_dtype(precision);
    CompileOptions options;
    options.precision = precision;
    Expected<CompiledModel> compiled = Compiler(options).compile(graph.clone());
    ASSERT_TRUE(compiled) << compiled.status().message();
    EXPECT_EQ(compiled->compiled().rewrites.channels_last.converted, 2);
    EXPECT_EQ(compiled->compiled().rewrites.channels_last.fused, 2);
    Expected<CheckReport> check = compiled->check(inputs);
    ASSERT_TRUE(check) << check.status().message();
    EXPECT_TRUE(check->ok()) << check->kernels.back().mismatch;
    const std::vector<const loop::LibraryCall*> calls = library_calls(compiled->compiled());
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_TRUE(calls[0]->bias().defined() && calls[0]->applies(loop::EpilogueKind::relu));
    for (const loop::LibraryCall* call : calls) {
      EXPECT_EQ(call->op, loop::LibraryOp::conv);
      EXPECT_EQ(call->dtypes,
                (loop::LibraryDTypes{.a = low, .b = low, .accumulate = DType::f32, .out = low}));
      Expected<std::string_view> library = target_for(DeviceKind::cpu).library_for(*call);
      ASSERT_TRUE(library) << library.status().message();
      EXPECT_EQ(*library, "oneDNN");
    }
  }
}

TEST(MixedPrecision, EachKernelAgreesWithTheReferenceOnThePolicyGraph) {
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(std::string(precision_name(precision)));
    const Graph graph = parse(kBlock);
    const std::vector<Array> inputs = random_inputs(graph, {.seed = 2});

    CompileOptions options;
    options.precision = precision;
    Expected<CompiledModel> compiled = Compiler(options).compile(graph.clone());
    ASSERT_TRUE(compiled) << compiled.status().message();
    EXPECT_GT(compiled->compiled().rewrites.precision.low_precision_nodes, 0);
    // The signature is the f32 graph's.
    ASSERT_EQ(compiled->graph().outputs().size(), 1u);
    EXPECT_EQ(compiled->graph().outputs()[0]->dtype(), DType::f32);
    Expected<CheckReport> check = compiled->check(inputs);
    ASSERT_TRUE(check) << check.status().message();
    EXPECT_TRUE(check->ok()) << check->kernels.back().mismatch;
  }
}

// The loss every 10 steps of `steps` Adam steps of a preset on its fixed batch, compiled in
// `precision` (fp16 with loss scaling), and the last loss scale.
struct Training {
  std::vector<double> losses;
  double loss_scale = 0;
};
Training train(const std::string& preset, Precision precision, int steps) {
  Expected<ModelInstance> model = build_model(preset, {});
  EXPECT_TRUE(model) << model.status().message();
  if (!model) return {};
  const bool fp16 = precision == Precision::fp16;
  Expected<TrainingStep> step = build_training_step(
      *model, Optimizer::adam(), fp16 ? std::optional(LossScaling{}) : std::nullopt);
  EXPECT_TRUE(step) << step.status().message();
  if (!step) return {};
  Expected<std::vector<Array>> inputs = first_step_inputs(*model, step->graph);
  EXPECT_TRUE(inputs) << inputs.status().message();
  CompileOptions options;
  options.precision = precision;
  Expected<CompiledTrainingStep> compiled =
      Compiler(options).compile_training_step(std::move(step->graph), /*eliminate_loss=*/false);
  EXPECT_TRUE(compiled) << compiled.status().message();
  if (!inputs || !compiled) return {};
  Expected<TrainingLoopResult> result =
      run_training_loop(*compiled, *inputs, {.steps = steps, .loss_every = 10});
  EXPECT_TRUE(result) << result.status().message();
  Training training;
  if (!result) return training;
  for (const LoggedLoss& logged : result->losses) training.losses.push_back(logged.loss);
  const std::vector<Value*>& step_inputs = compiled->full_step().graph().inputs();
  for (size_t i = 0; i < step_inputs.size(); ++i) {
    if (step_inputs[i]->name() == "loss_scale") training.loss_scale = result->final_input(i)[0];
  }
  return training;
}

// A tiny preset trains 50 steps in bf16, and in fp16 with loss scaling, as it does in fp32:
// each logged loss within kBand of fp32's, and falling; fp16's scale never backed off. The band
// is bf16's: its 8 bits of precision in every contraction move a loss by a few parts in a
// thousand per step, and 50 steps of Adam on a fixed batch carry such differences along. The
// presets: an MLP, a transformer and a text CNN (its convolutions and their gradients in the
// low dtype); resnet-tiny below. (The others: `kiln zoo train NAME --steps 50 --precision
// bf16`, in the issue's note; vit-tiny's compilations would double this suite's time.)
TEST(MixedPrecision, TinyPresetsTrainInBf16AndFp16AsInFp32) {
  constexpr double kBand = 0.05;
  constexpr int kSteps = 50;
  for (const char* preset : {"mlp-tiny", "bert-tiny", "xml-cnn-tiny"}) {
    SCOPED_TRACE(preset);
    const Training f32 = train(preset, Precision::fp32, kSteps);
    ASSERT_EQ(f32.losses.size(), 5u);
    for (Precision precision : {Precision::bf16, Precision::fp16}) {
      SCOPED_TRACE(std::string(precision_name(precision)));
      const Training low = train(preset, precision, kSteps);
      ASSERT_EQ(low.losses.size(), f32.losses.size());
      for (size_t i = 0; i < low.losses.size(); ++i) {
        EXPECT_NEAR(low.losses[i], f32.losses[i], kBand * std::fabs(f32.losses[i]) + 1e-3)
            << "step " << (i + 1) * 10;
      }
      EXPECT_LT(low.losses.back(), low.losses.front());
      if (precision == Precision::fp16) {
        EXPECT_EQ(low.loss_scale, LossScaling{}.initial_scale);
      }
    }
  }
}

// resnet-tiny, its convolutions and their gradients in the low dtype, ends 50 steps where
// fp32 ends. It memorizes a batch of two images through batch norms, and its loss curve is
// chaotic: fp32 alone, its sums reordered (`--fusion off`), logs 1.54 against 1.22 at step 10
// and ends at 0.043 against 0.073; so no per-step band holds, and the test holds the low
// precisions to the curve's end: the last loss within kEnd of fp32's, and fallen below a tenth
// of the first logged. fp16's scale backs off in its first steps (a scaled gradient of 65536
// times the loss overflows f16 in the convolutions' gradients) and skips those updates, as
// torch.amp.GradScaler does, so only its not collapsing is asserted.
TEST(MixedPrecision, ResNetTinyTrainsInBf16AndFp16ToWhereFp32Ends) {
  constexpr double kEnd = 0.05;
  constexpr int kSteps = 50;
  const Training f32 = train("resnet-tiny", Precision::fp32, kSteps);
  ASSERT_EQ(f32.losses.size(), 5u);
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(std::string(precision_name(precision)));
    const Training low = train("resnet-tiny", precision, kSteps);
    ASSERT_EQ(low.losses.size(), f32.losses.size());
    EXPECT_NEAR(low.losses.back(), f32.losses.back(), kEnd);
    EXPECT_LT(low.losses.back(), 0.1 * low.losses.front());
    if (precision == Precision::fp16) {
      EXPECT_GE(low.loss_scale, 1.0);
    }
  }
}

}  // namespace
}  // namespace kiln
