// Convolutions lowered as im2col + gemm (loop/lower_conv.h): which statements each op
// becomes (a gemm per image and group; a column buffer unless the convolution is pointwise)
// and that the kernels match the graph interpreter for strides, padding, dilation, groups,
// 1-d to 3-d windows and empty batches; and conv's and conv_grad_data's epilogues on each
// image's block. Compiled runs are in lowering_ops_test.cc.
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "unit/loop/fused_graphs.h"
#include "unit/loop/lowering_check.h"

namespace kiln::loop {
namespace {

using testing::conv_cases;
using testing::conv_epilogue_graph;
using testing::conv_graphs;
using testing::ConvCase;
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
  void visit_library_call(const LibraryCall& node) override {
    if (node.op == LibraryOp::gemm) {
      ++gemms;
      gemms_in_loops += loop_depth_ > 0 ? 1 : 0;
    }
    IRVisitor::visit_library_call(node);
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

// In f16 and bf16 too: gemms of 16-bit operands summing in f32, each result rounded once, as
// the interpreter rounds it (loop/lower_conv.h).
TEST(LowerConv, EveryConvolutionIsGemmsThatMatchTheInterpreter) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
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

TEST(LowerConv, GradientOfTheDataScattersColumnsBack) {
  // conv_grad_data with a 3x3 window, at stride 2 and at stride 1: gemm into the columns, then
  // col2im as one zeroing pass and one guard-free nest per tap adding its column row where it
  // lands (no reduction); at stride 1 each tap's row loop is contiguous.
  for (int64_t stride : {2, 1}) {
    SCOPED_TRACE(stride);
    const std::vector<Graph> graphs =
        conv_graphs(DType::f32, {{1, 2, 7, 7}, {3, 2, 3, 3}, {{"strides", {stride, stride}}}});
    ASSERT_EQ(graphs.size(), 3u);
    Expected<LoweredGroup> lowered = lower_group(graphs[1], graphs[1].nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    Counts counts;
    counts.visit(lowered->kernel.body);
    EXPECT_EQ(counts.gemms, 1);
    EXPECT_EQ(counts.allocations, 1);
    EXPECT_EQ(counts.reductions, 0) << print(lowered->kernel);
    EXPECT_EQ(print(lowered->kernel).find("select("), std::string::npos) << print(lowered->kernel);
    EXPECT_TRUE(matches_interpreter(graphs[1], random_inputs(graphs[1]), 8));
  }
}

TEST(LowerConv, ElementwiseConsumersRunOnEachImageAfterItsGemm) {
  // Every case, per image or batched, grouped or pointwise: the relu is stored once, inside the
  // loop that completes each image (or right after the batch's gemm), into the buffer that the
  // product was written to: no buffer for the product, no second pass.
  for (const ConvCase& c : conv_cases()) {
    for (int op : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} x {} w {}", op == 0 ? "conv" : "conv_grad_data",
                               Shape(c.x).to_string(), Shape(c.w).to_string()));
      const Graph graph = conv_epilogue_graph(DType::f64, c, op);
      const Graph alone = std::move(conv_graphs(DType::f64, c).at(static_cast<size_t>(op)));
      Expected<LoweredGroup> fused = lower_group(graph, graph.nodes());
      Expected<LoweredGroup> single = lower_group(alone, alone.nodes());
      ASSERT_TRUE(fused.has_value()) << fused.status().message();
      ASSERT_TRUE(single.has_value()) << single.status().message();
      Counts with, without;
      with.visit(fused->kernel.body);
      without.visit(single->kernel.body);
      EXPECT_EQ(with.allocations, without.allocations) << print(fused->kernel);
      EXPECT_EQ(fused->kernel.params.size(), single->kernel.params.size() + 1);
      EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8)) << print(fused->kernel);
    }
  }
}

TEST(LowerConv, AnEpilogueRunsInsideTheLoopOverImages) {
  // 272 positions per image: a gemm per image, and the relu right after it in the same loop.
  const Graph graph = conv_epilogue_graph(
      DType::f32, {{2, 2, 17, 16}, {3, 2, 3, 3}, {{"pads", {1, 1, 1, 1}}}}, 0);
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const std::string text = print(lowered->kernel);
  const size_t gemm = text.find("gemm(3, 272, 18) out0[");
  ASSERT_NE(gemm, std::string::npos) << text;
  const size_t relu = text.find("out0[", gemm + 20);
  ASSERT_NE(relu, std::string::npos) << text;
  EXPECT_NE(text.find("select(", relu), std::string::npos) << text;
  // Nothing closes the loop over images between the gemm and the relu.
  EXPECT_EQ(text.substr(gemm, relu - gemm).find("\n  }"), std::string::npos) << text;
}

TEST(LowerConv, AProductWithOtherReadersOrAnotherTypeIsStoredInFull) {
  // y is an output too; or the last epilogue is a bool mask (relu's gradient reads it), which
  // cannot hold the product; or a sum over channels reads other elements of the block.
  const ConvCase c{{2, 2, 5, 5}, {3, 2, 3, 3}, {{"pads", {1, 1, 1, 1}}}};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Graph graph = std::move(conv_graphs(DType::f64, c).front());
    GraphBuilder b(graph);
    Value* y = graph.outputs().front();
    Value* r = b.relu(y);
    switch (variant) {
      case 0: graph.set_outputs({y, r}); break;
      case 1: graph.set_outputs({b.greater(r, b.input("t", DType::f64, {1}))}); break;
      default: graph.set_outputs({r, b.sum(y, {1})}); break;
    }
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
  }
}

}  // namespace
}  // namespace kiln::loop
