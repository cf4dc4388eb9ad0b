// The layout stage (passes/channels_last.h) in the compiler: a residual block of convolutions
// compiles channels last with the layout changed only at its ends, matches the reference
// interpreter on every run (the second reusing the weights kept by the first), Winograd's
// algorithm goes where the cost model prices it lower, and the graphs it must leave (a training
// step, a grouped or f64 convolution, the option off, another device) keep conv, each with its
// reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

Value* weights(GraphBuilder& b, Shape shape, double phase, DType dtype = DType::f32) {
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.2 * std::sin(phase + 0.37 * static_cast<double>(i));
  }
  return b.constant(Array(dtype, std::move(shape), std::move(values)));
}

Value* conv(GraphBuilder& b, Value* x, int64_t out, int64_t kernel, int64_t stride, double phase,
            int64_t groups = 1) {
  const int64_t channels = x->shape().dim(1);
  const int64_t pad = kernel / 2;
  Value* w = weights(b, Shape{out, channels / groups, kernel, kernel}, phase, x->dtype());
  Value* y = b.apply1(Op::conv, {x, w},
                      {{"strides", std::vector<int64_t>{stride, stride}},
                       {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
                       {"groups", groups}});
  return b.add(y, weights(b, Shape{out, 1, 1}, phase + 1, x->dtype()));
}

// ResNet's basic block and what surrounds it: a strided stem, ReLUs, a residual add of two
// convolutions, a padded max pool between convolutions, a pointwise convolution at stride 2 and a
// global average at the end.
Graph residual_network(DType dtype = DType::f32, int64_t groups = 1) {
  GraphBuilder b("residual");
  Value* x = b.input("x", dtype, Shape{2, 3, 17, 17});
  Value* stem = b.relu(conv(b, x, 16, 3, 2, 0.1));
  Value* branch = b.relu(conv(b, stem, 16, 3, 1, 0.2, groups));
  Value* block = b.relu(b.add(conv(b, branch, 16, 3, 1, 0.3), stem));
  Value* pooled = b.apply1(Op::max_pool, {block},
                           {{"kernel", std::vector<int64_t>{3, 3}},
                            {"strides", std::vector<int64_t>{2, 2}},
                            {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
  Value* narrow = b.relu(conv(b, pooled, 32, 1, 2, 0.4));
  b.output(b.mean(narrow, {2, 3}));
  Expected<Graph> graph = b.finish();
  EXPECT_TRUE(graph) << graph.status().message();
  return std::move(*graph);
}

// Runs `model` on `inputs` and compares its one output with the interpreter's of `reference`.
void expect_matches(CompiledModel& model, const Graph& reference,
                    const std::vector<Array>& inputs) {
  Expected<std::vector<Array>> want = interpret(reference, inputs);
  ASSERT_TRUE(want) << want.status().message();
  Expected<std::vector<Array>> got = model.run(inputs);
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_EQ(got->at(0).size(), want->at(0).size());
  for (int64_t i = 0; i < want->at(0).size(); ++i) {
    EXPECT_NEAR(got->at(0)[i], want->at(0)[i], 1e-4 * (1 + std::fabs(want->at(0)[i])))
        << "element " << i;
  }
}

int count(const Graph& graph, Op op) {
  return static_cast<int>(
      std::ranges::count_if(graph.nodes(), [&](const Node* node) { return node->op() == op; }));
}

TEST(ChannelsLast, AResidualNetworkRunsChannelsLastAndMatchesTheInterpreter) {
  const Graph reference = residual_network();
  Expected<CompiledModel> model = Compiler().compile(residual_network());
  ASSERT_TRUE(model) << model.status().message();
  const ChannelsLastReport& report = model->compiled().rewrites.channels_last;
  EXPECT_EQ(report.converted, 4);
  EXPECT_TRUE(report.kept.empty());
  // Every bias add, and the ReLUs that read a convolution alone (not the residual's).
  EXPECT_EQ(report.fused, 7);
  EXPECT_EQ(count(model->graph(), Op::conv), 0);
  EXPECT_EQ(count(model->graph(), Op::conv_channels_last), 4);
  // The layout changes at the input, around the max pool and before the mean: the bias
  // adds, ReLUs and the residual add moved with the convolutions.
  EXPECT_EQ(count(model->graph(), Op::transpose), 4) << print_graph(model->graph());

  const std::vector<Array> inputs = random_inputs(reference, {.seed = 5});
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "the first run" : "the second, with the weights kept");
    expect_matches(*model, reference, inputs);
  }
}

// Two convolutions of one input merged into one and split along the channels (the substitution
// search's convs-sharing-input-merge, as in ResNet-50's first block): the split follows the
// layout, so the block runs channels last to its end, and the bias adds and ReLUs join the
// convolutions.
TEST(ChannelsLast, ASplitOfMergedConvolutionsMovesWithTheLayout) {
  GraphBuilder b("merged");
  Value* x = b.input("x", DType::f32, Shape{1, 8, 9, 9});
  Value* merged = conv(b, x, 24, 1, 1, 0.7);
  const std::vector<Value*> pieces =
      b.apply(Op::split, {merged}, {{"axis", int64_t{1}}, {"sizes", std::vector<int64_t>{16, 8}}});
  ASSERT_EQ(pieces.size(), 2u);
  Value* branch = conv(b, b.relu(pieces[1]), 16, 3, 1, 0.8);
  b.output(b.relu(b.add(branch, pieces[0])));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();
  const Graph reference = graph->clone();
  Expected<CompiledModel> model = Compiler().compile(std::move(*graph));
  ASSERT_TRUE(model) << model.status().message();
  const ChannelsLastReport& report = model->compiled().rewrites.channels_last;
  EXPECT_EQ(report.converted, 2);
  EXPECT_GE(report.fused, 2) << "each bias add joins its convolution";
  // The input's and the output's transposes only.
  EXPECT_EQ(count(model->graph(), Op::transpose), 2) << print_graph(model->graph());
  expect_matches(*model, reference, random_inputs(reference, {.seed = 7}));
}

// An inference batch norm whose statistics are inputs (the zoo's models) follows the layout as
// the per-channel arithmetic it computes, so the convolutions around it need no transposes.
TEST(ChannelsLast, ABatchNormWithStatisticsAsInputsMovesWithTheLayout) {
  GraphBuilder b("normalized");
  Value* x = b.input("x", DType::f32, Shape{2, 8, 7, 7});
  Value* y = conv(b, x, 16, 3, 1, 0.9);
  std::vector<Value*> statistics;
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    statistics.push_back(b.input(name, DType::f32, Shape{16}));
  }
  Value* normalized = b.apply1(Op::batch_norm_infer,
                               {y, statistics[0], statistics[1], statistics[2], statistics[3]},
                               {{"epsilon", 1e-3}});
  b.output(conv(b, b.relu(normalized), 8, 1, 1, 1.1));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();
  const Graph reference = graph->clone();
  Expected<CompiledModel> model = Compiler().compile(std::move(*graph));
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(model->compiled().rewrites.channels_last.converted, 2);
  EXPECT_EQ(count(model->graph(), Op::batch_norm_infer), 0);
  EXPECT_EQ(count(model->graph(), Op::transpose), 2) << print_graph(model->graph());
  std::vector<Array> inputs = random_inputs(reference, {.seed = 11});
  for (double& v : inputs.back().data) v = std::fabs(v) + 0.5;  // variances
  expect_matches(*model, reference, inputs);
}

// Winograd's algorithm where the cost model prices it below the direct sum (on the reference
// machine, pinned): a 3x3 convolution at stride 1 with many channels per pixel, but not one
// with few output channels, whose images cost more to copy into oneDNN's blocked layout than
// the multiplications saved, nor a strided or 1x1 one. Compiled, it matches the interpreter,
// on the second run with its transformed weights kept from the first.
TEST(ChannelsLast, TheCostModelChoosesWinogradPerShape) {
  GraphBuilder b("winograd");
  Value* x = b.input("x", DType::f32, Shape{2, 32, 24, 24});
  Value* wide = b.relu(conv(b, x, 32, 3, 1, 1.2));
  Value* strided = b.relu(conv(b, wide, 32, 3, 2, 1.3));
  Value* pointwise = b.relu(conv(b, strided, 32, 1, 1, 1.4));
  b.output(conv(b, pointwise, 4, 3, 1, 1.5));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();
  const Graph reference = graph->clone();
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  Expected<CompiledModel> model = Compiler(options).compile(std::move(*graph));
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(model->compiled().rewrites.channels_last.converted, 4);
  EXPECT_EQ(model->compiled().rewrites.channels_last.winograd, 1);
  const auto by_winograd = std::ranges::count_if(model->graph().nodes(), [](const Node* node) {
    return node->op() == Op::conv_channels_last && node->attrs().get_bool("winograd") &&
           node->input(0)->shape() == Shape{2, 24, 24, 32} && node->output(0)->shape().dim(3) == 32;
  });
  EXPECT_EQ(by_winograd, 1) << print_graph(model->graph());
  const std::vector<Array> inputs = random_inputs(reference, {.seed = 13});
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "the first run" : "the second, with the weights kept");
    expect_matches(*model, reference, inputs);
  }
}

TEST(ChannelsLast, ConvolutionsItCannotTakeKeepConvWithTheReason) {
  const auto compiled = [](Graph graph, CompileOptions options = {}) {
    options.pipeline.stop_after = Stage::layout;
    Expected<Compilation> compilation = Compiler(options).run_pipeline(std::move(graph));
    EXPECT_TRUE(compilation) << compilation.status().message();
    return std::move(*compilation);
  };
  const Compilation grouped = compiled(residual_network(DType::f32, 4));
  EXPECT_EQ(grouped.compiled().rewrites.channels_last.converted, 3);
  ASSERT_EQ(grouped.compiled().rewrites.channels_last.kept.size(), 1u);
  EXPECT_NE(grouped.compiled().rewrites.channels_last.kept[0].find("grouped"), std::string::npos);

  const Compilation f64 = compiled(residual_network(DType::f64));
  EXPECT_EQ(f64.compiled().rewrites.channels_last.converted, 0);
  EXPECT_EQ(f64.compiled().rewrites.channels_last.kept.size(), 4u);
  EXPECT_EQ(count(f64.graph(), Op::conv), 4);

  CompileOptions off;
  off.channels_last = false;
  const Compilation without = compiled(residual_network(), off);
  EXPECT_EQ(without.compiled().rewrites.channels_last.converted, 0);
  EXPECT_EQ(count(without.graph(), Op::conv_channels_last), 0);

  CompileOptions gpu;
  gpu.device.kind = DeviceKind::cuda;
  const Compilation on_gpu = compiled(residual_network(), gpu);
  EXPECT_EQ(count(on_gpu.graph(), Op::conv_channels_last), 0);
}

TEST(ChannelsLast, ATrainingGraphKeepsConv) {
  GraphBuilder b("step");
  Value* x = b.input("x", DType::f32, Shape{1, 4, 6, 6});
  Value* w = b.input("w", DType::f32, Shape{8, 4, 3, 3});
  Value* dy = b.input("dy", DType::f32, Shape{1, 8, 4, 4});
  Value* y = b.apply1(Op::conv, {x, w});
  Value* dw =
      b.apply1(Op::conv_grad_weight, {x, dy}, {{"weight_shape", std::vector<int64_t>{8, 4, 3, 3}}});
  b.output(y);
  b.output(dw);
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();
  CompileOptions options;
  options.pipeline.stop_after = Stage::layout;
  Expected<Compilation> compilation = Compiler(options).run_pipeline(std::move(*graph));
  ASSERT_TRUE(compilation) << compilation.status().message();
  const ChannelsLastReport& report = compilation->compiled().rewrites.channels_last;
  EXPECT_EQ(report.converted, 0);
  ASSERT_EQ(report.kept.size(), 1u);
  EXPECT_NE(report.kept[0].find("training graph"), std::string::npos);
}

// The op's own definition against conv with the layout moved by hand.
TEST(ChannelsLast, TheOpIsConvWithChannelsLast) {
  GraphBuilder b("op");
  Value* x = b.input("x", DType::f32, Shape{2, 9, 7, 6});  // [N, H, W, C]
  Value* w = weights(b, Shape{4, 3, 3, 2}, 0.5);
  const Attrs window = {{"strides", std::vector<int64_t>{2, 1}},
                        {"pads", std::vector<int64_t>{1, 0, 1, 1}},
                        {"groups", int64_t{2}}};
  Value* last = b.apply1(Op::conv_channels_last, {x, w}, window);
  Value* first =
      b.transpose(b.apply1(Op::conv, {b.transpose(x, {0, 3, 1, 2}), w}, window), {0, 2, 3, 1});
  b.output(last);
  b.output(first);
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph) << graph.status().message();
  EXPECT_EQ(graph->outputs()[0]->shape(), (Shape{2, 5, 7, 4}));
  const std::vector<Array> inputs = random_inputs(*graph, {.seed = 9});
  Expected<std::vector<Array>> outputs = interpret(*graph, inputs);
  ASSERT_TRUE(outputs) << outputs.status().message();
  EXPECT_EQ(outputs->at(0), outputs->at(1));
  // And compiled (with the stage on, the conv also becomes channels last).
  Expected<CompiledModel> model = Compiler().compile(std::move(*graph));
  ASSERT_TRUE(model) << model.status().message();
  Expected<std::vector<Array>> got = model->run(inputs);
  ASSERT_TRUE(got) << got.status().message();
  for (int o = 0; o < 2; ++o) {
    for (int64_t i = 0; i < outputs->at(0).size(); ++i) {
      EXPECT_NEAR(got->at(o)[i], outputs->at(0)[i], 1e-4 * (1 + std::fabs(outputs->at(0)[i])));
    }
  }
}

}  // namespace
}  // namespace kiln
