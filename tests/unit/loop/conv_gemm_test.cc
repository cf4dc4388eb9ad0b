// Convolutions lowered as im2col + gemm (loop/lower_conv.h): which statements each op
// becomes (a gemm per image and group; a column buffer unless the convolution is pointwise)
// and that the kernels match the graph interpreter for strides, padding, dilation, groups,
// 1-d to 3-d windows and empty batches. Compiled runs are in lowering_ops_test.cc.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "unit/loop/lowering_check.h"

namespace kiln::loop {
namespace {

using testing::matches_interpreter;
using testing::random_inputs;

struct Counts : IRVisitor {
  int gemms = 0, allocations = 0, reductions = 0;
  int gemms_in_loops = 0;  // gemms with a loop around them

 protected:
  void visit_for(const For& node) override {
    ++loop_depth_;
    IRVisitor::visit_for(node);
    --loop_depth_;
  }
  void visit_gemm(const Gemm& node) override {
    ++gemms;
    gemms_in_loops += loop_depth_ > 0 ? 1 : 0;
    IRVisitor::visit_gemm(node);
  }
  void visit_allocate(const Allocate& node) override {
    ++allocations;
    IRVisitor::visit_allocate(node);
  }
  void visit_reduce(const Reduce& node) override {
    ++reductions;
    IRVisitor::visit_reduce(node);
  }

 private:
  int loop_depth_ = 0;
};

struct ConvCase {
  std::vector<int64_t> x, w;
  Attrs attrs;
};

// conv of `c`, then its two gradients with a random output gradient: three single-op graphs.
std::vector<Graph> conv_graphs(DType dtype, const ConvCase& c) {
  std::vector<Graph> graphs(3);
  GraphBuilder forward(graphs[0]);
  Value* y = forward.apply1(Op::conv, {forward.input("x", dtype, Shape(c.x)), forward.input("w", dtype, Shape(c.w))},
                            c.attrs);
  EXPECT_NE(y, nullptr);
  if (y == nullptr) return {};
  graphs[0].set_outputs({y});
  const std::vector<int64_t> y_dims = y->shape().dims();
  Attrs data = c.attrs;
  data.set("input_shape", c.x);
  GraphBuilder b1(graphs[1]);
  graphs[1].set_outputs({b1.apply1(
      Op::conv_grad_data, {b1.input("dy", dtype, Shape(y_dims)), b1.input("w", dtype, Shape(c.w))}, data)});
  Attrs weight = c.attrs;
  weight.set("weight_shape", c.w);
  GraphBuilder b2(graphs[2]);
  graphs[2].set_outputs({b2.apply1(
      Op::conv_grad_weight, {b2.input("x", dtype, Shape(c.x)), b2.input("dy", dtype, Shape(y_dims))}, weight)});
  return graphs;
}

std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 5, 6}, {4, 3, 2, 2}, {{"strides", {2, 1}}, {"pads", {1, 0, 1, 2}}, {"dilations", {1, 2}}}},
      {{1, 4, 7}, {6, 2, 3}, {{"groups", 2}, {"pads", {1, 1}}, {"strides", {2}}}},
      {{2, 2, 3, 4, 3}, {3, 2, 2, 1, 2}, {{"pads", {0, 1, 1, 1, 0, 0}}}},
      {{2, 6, 4, 3}, {6, 1, 3, 3}, {{"groups", 6}, {"pads", {1, 1, 1, 1}}}},  // depthwise
      {{2, 5, 3, 4}, {7, 5, 1, 1}, {}},                                       // pointwise
      {{1, 4, 5}, {4, 2, 1}, {{"groups", 2}}},                                // grouped pointwise
      {{3, 4, 6, 6}, {2, 4, 1, 1}, {{"strides", {2, 2}}}},                    // strided 1x1
      {{0, 2, 4}, {3, 2, 3}, {}},                                             // no images
      // Wide padding and stride 3: the last tap of a row sees only padding (an empty range
      // of the column copy), the first sees x only at the second output position.
      {{1, 2, 3, 2}, {2, 2, 1, 3}, {{"strides", {1, 3}}, {"pads", {0, 3, 0, 3}}}},
      // 272 output positions per image: a gemm per image (fewer share one gemm).
      {{2, 2, 17, 16}, {3, 2, 3, 3}, {{"pads", {1, 1, 1, 1}}}},
  };
}

TEST(LowerConv, EveryConvolutionIsGemmsThatMatchTheInterpreter) {
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const ConvCase& c : conv_cases()) {
      SCOPED_TRACE(fmt::format("{} x {} w {}", dtype_name(dtype), Shape(c.x).to_string(),
                               Shape(c.w).to_string()));
      for (const Graph& graph : conv_graphs(dtype, c)) {
        Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
        ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
        Counts counts;
        counts.visit(lowered->kernel.body);
        const bool empty = c.x[0] == 0;  // the simplifier drops loops of no iterations
        EXPECT_EQ(counts.gemms, empty ? 0 : 1) << print(lowered->kernel);
        EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
      }
    }
  }
}

TEST(LowerConv, PointwiseConvolutionsNeedNoColumnBuffer) {
  // One image (several would share one gemm, their columns copied side by side).
  for (const Graph& graph : conv_graphs(DType::f32, {{1, 5, 3, 4}, {7, 5, 1, 1}, {}})) {
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    Counts counts;
    counts.visit(lowered->kernel.body);
    EXPECT_EQ(counts.allocations, 0) << print(lowered->kernel);
    EXPECT_EQ(counts.reductions, 0) << print(lowered->kernel);
  }
}

TEST(LowerConv, ImagesWithFewPositionsShareOneGemm) {
  // 3 images of 3 x 4 positions: each op is one gemm over the batch's 36 columns, outside any
  // loop over images; so is a pointwise convolution, which then copies x into the columns.
  for (const ConvCase& c : {ConvCase{{3, 2, 3, 4}, {5, 2, 3, 3}, {{"pads", {1, 1, 1, 1}}}},
                            ConvCase{{3, 2, 3, 4}, {5, 2, 1, 1}, {}}}) {
    for (const Graph& graph : conv_graphs(DType::f64, c)) {
      Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
      ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
      const std::string text = print(lowered->kernel);
      // The gemm's n (conv, data gradient) or k (weight gradient).
      EXPECT_TRUE(text.find(", 36, ") != std::string::npos ||
                  text.find(", 36) ") != std::string::npos)
          << text;
      Counts counts;
      counts.visit(lowered->kernel.body);
      EXPECT_EQ(counts.gemms, 1) << text;
      EXPECT_EQ(counts.gemms_in_loops, 0) << text;
      EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8)) << text;
    }
  }
}

TEST(LowerConv, StridedGradientOfTheDataGathersColumnsBack) {
  // conv_grad_data with stride 2 and a 3x3 window: gemm into the columns, then col2im as
  // one reduction over the window per dx element.
  const std::vector<Graph> graphs =
      conv_graphs(DType::f32, {{1, 2, 7, 7}, {3, 2, 3, 3}, {{"strides", {2, 2}}}});
  ASSERT_EQ(graphs.size(), 3u);
  Expected<LoweredGroup> lowered = lower_group(graphs[1], graphs[1].nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  Counts counts;
  counts.visit(lowered->kernel.body);
  EXPECT_EQ(counts.gemms, 1);
  EXPECT_EQ(counts.allocations, 1);
  EXPECT_EQ(counts.reductions, 2) << print(lowered->kernel);  // one per window dim
}

TEST(LowerConv, OtherDtypesKeepTheReduceDefinition) {
  for (const Graph& graph : conv_graphs(DType::f16, {{1, 2, 5}, {2, 2, 3}, {}})) {
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    Counts counts;
    counts.visit(lowered->kernel.body);
    EXPECT_EQ(counts.gemms, 0);
    // f16 rounds after every operation, the interpreter once: a few f16 ulps (about 1e-3).
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 400));
  }
}

}  // namespace
}  // namespace kiln::loop
