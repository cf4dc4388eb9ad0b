// The graph rewrites (fold-constants, fold-layout, eliminate-reductions) and their pipeline, on
// IR text: each rewrite's result (golden, the lines that matter) and the graph's outputs before
// and after, by the reference interpreter on random inputs.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "passes/dead_code.h"
#include "passes/eliminate_reductions.h"
#include "passes/fold_constants.h"
#include "passes/fold_layout.h"
#include "passes/freeze_inputs.h"
#include "passes/rewrite_graph.h"
#include "unit/passes/pass_test_util.h"

namespace kiln {
namespace {

// The printed result of `rewrite` on `text`'s graph, whose outputs it must keep.
std::string rewritten(const std::string& text, bool (*rewrite)(Graph&)) {
  return print_graph(rewrite_keeping_outputs(text, rewrite));
}

bool contains(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

TEST(EliminateReductions, BatchSumOfWeightGradientJoinsTheMatmul) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,3,4], %dy: f32[2,3,5]) {
  %p = matmul(%x, %dy) {transpose_a = true} : f32[2,4,5]
  %dw = sum(%p) {axes = [0]} : f32[4,5]
  return %dw
})", eliminate_reductions);
  EXPECT_TRUE(contains(result, "reshape(%x) {shape = [6, 4]} : f32[6,4]")) << result;
  EXPECT_TRUE(contains(result, "reshape(%dy) {shape = [6, 5]} : f32[6,5]")) << result;
  EXPECT_TRUE(contains(result, "{transpose_a = true} : f32[4,5]")) << result;
  EXPECT_FALSE(contains(result, "sum(")) << result;
}

TEST(EliminateReductions, TheMergedMatmulRunsWhereTheSumDid) {
  // Appended, the new nodes would run after %late (the stable sort runs them as late as
  // possible), keeping %x and %dy live through it.
  Graph graph = parse(R"(graph @g(%x: f32[2,3,4], %dy: f32[2,3,5], %y: f32[9]) {
  %p = matmul(%x, %dy) {transpose_a = true} : f32[2,4,5]
  %dw = sum(%p) {axes = [0]} : f32[4,5]
  %late = exp(%y) : f32[9]
  %use = relu(%dw) : f32[4,5]
  return %late, %use
})");
  ASSERT_TRUE(eliminate_reductions(graph));
  eliminate_dead_code(graph);
  const std::string result = print_graph(graph);
  EXPECT_LT(result.find("matmul("), result.find("exp(")) << result;
}

TEST(EliminateReductions, KeepsBatchSumsThatAreNotTheWholeBatch) {
  // Summing one of two batch axes, or a matmul whose product another node reads, stays.
  Graph graph = parse(R"(graph @g(%x: f32[2,2,3,4], %dy: f32[2,2,3,5]) {
  %p = matmul(%x, %dy) {transpose_a = true} : f32[2,2,4,5]
  %dw = sum(%p) {axes = [0]} : f32[2,4,5]
  %q = matmul(%x, %dy) {transpose_a = true} : f32[2,2,4,5]
  %s = sum(%q) {axes = [0, 1]} : f32[4,5]
  %r = relu(%q) : f32[2,2,4,5]
  return %dw, %s, %r
})");
  EXPECT_FALSE(eliminate_reductions(graph)) << print_graph(graph);
}

TEST(EliminateReductions, ReductionOverUnitAxesIsAReshape) {
  const std::string result = rewritten(R"(graph @g(%x: f32[3,1,5]) {
  %m = mean(%x) {axes = [1]} : f32[3,5]
  return %m
})", eliminate_reductions);
  EXPECT_TRUE(contains(result, "reshape(%x) {shape = [3, 5]}")) << result;
  EXPECT_FALSE(contains(result, "mean(")) << result;
}

TEST(EliminateReductions, NestedReductionsMerge) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,3,4]) {
  %a = sum(%x) {axes = [2]} : f32[2,3]
  %b = sum(%a) {axes = [1]} : f32[2]
  %c = mean(%x) {axes = [0], keepdims = true} : f32[1,3,4]
  %d = mean(%c) {axes = [2]} : f32[1,3]
  return %b, %d
})", eliminate_reductions);
  EXPECT_TRUE(contains(result, "sum(%x) {axes = [1, 2]} : f32[2]")) << result;
  EXPECT_TRUE(contains(result, "mean(%x) {axes = [0, 2], keepdims = true} : f32[1,3,1]")) << result;
}

TEST(EliminateReductions, SumOfABroadcastIsAScaling) {
  const std::string result = rewritten(R"(graph @g(%v: f32[4]) {
  %b = broadcast_to(%v) {shape = [3, 4]} : f32[3,4]
  %s = sum(%b) {axes = [0]} : f32[4]
  %m = reduce_max(%b) {axes = [0], keepdims = true} : f32[1,4]
  return %s, %m
})", eliminate_reductions);
  EXPECT_TRUE(contains(result, "tensor<f32[]>[3.0]")) << result;
  EXPECT_TRUE(contains(result, "mul(%v, ")) << result;
  EXPECT_FALSE(contains(result, "sum(")) << result;
  EXPECT_FALSE(contains(result, "reduce_max(")) << result;
}

TEST(FoldLayout, TransposedMatmulOperandsBecomeFlags) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,8,4], %w: f32[6,4]) {
  %t = transpose(%w) {perm = [1, 0]} : f32[4,6]
  %y = matmul(%x, %t) : f32[2,8,6]
  %u = transpose(%x) {perm = [0, 2, 1]} : f32[2,4,8]
  %z = matmul(%u, %x) : f32[2,4,4]
  return %y, %z
})", fold_layout);
  EXPECT_TRUE(contains(result, "matmul(%x, %w) {transpose_b = true} : f32[2,8,6]")) << result;
  EXPECT_TRUE(contains(result, "matmul(%x, %x) {transpose_a = true} : f32[2,4,4]")) << result;
  EXPECT_FALSE(contains(result, "transpose(")) << result;
}

TEST(FoldLayout, ChainsOfReshapesAndTransposesCollapse) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,3,4]) {
  %a = reshape(%x) {shape = [6, 4]} : f32[6,4]
  %b = reshape(%a) {shape = [24]} : f32[24]
  %c = transpose(%x) {perm = [1, 0, 2]} : f32[3,2,4]
  %d = transpose(%c) {perm = [2, 1, 0]} : f32[4,2,3]
  %e = transpose(%x) : f32[4,3,2]
  %f = transpose(%e) : f32[2,3,4]
  %g = identity(%f) : f32[2,3,4]
  %h = reshape(%g) {shape = [2, 3, 4]} : f32[2,3,4]
  return %b, %d, %h
})", fold_layout);
  EXPECT_TRUE(contains(result, "reshape(%x) {shape = [24]}")) << result;
  EXPECT_TRUE(contains(result, "transpose(%x) {perm = [2, 0, 1]} : f32[4,2,3]")) << result;
  EXPECT_TRUE(contains(result, "return %0, %1, %x") || contains(result, ", %x\n")) << result;
}

TEST(FoldLayout, SplitOfASplitPieceIsOneSplit) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,12], %y: f32[2,5]) {
  %a, %b = split(%x) {axis = 1, sizes = [7, 5]} : f32[2,7], f32[2,5]
  %p, %q = split(%a) {axis = -1, sizes = [3, 4]} : f32[2,3], f32[2,4]
  %s = add(%b, %y) : f32[2,5]
  return %p, %q, %s
})", fold_layout);
  EXPECT_TRUE(contains(result, "split(%x) {axis = 1, sizes = [3, 4, 5]}")) << result;
  EXPECT_EQ(result.find("split(%a)"), std::string::npos) << result;
}

TEST(FoldLayout, KeepsASplitPieceOthersRead) {
  Graph graph = parse(R"(graph @g(%x: f32[2,12]) {
  %a, %b = split(%x) {axis = 1, sizes = [7, 5]} : f32[2,7], f32[2,5]
  %p, %q = split(%a) {axis = 1, sizes = [3, 4]} : f32[2,3], f32[2,4]
  %r = relu(%a) : f32[2,7]
  return %p, %q, %r, %b
})");
  EXPECT_FALSE(fold_layout(graph)) << print_graph(graph);
}

TEST(FoldLayout, ConcatOfEverySplitPieceInOrderIsTheSplitInput) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,12]) {
  %a, %b, %c = split(%x) {axis = -1, sizes = [3, 4, 5]} : f32[2,3], f32[2,4], f32[2,5]
  %y = concat(%a, %b, %c) {axis = 1} : f32[2,12]
  %r = relu(%y) : f32[2,12]
  return %r, %b
})", fold_layout);
  EXPECT_TRUE(contains(result, "relu(%x)")) << result;
  EXPECT_FALSE(contains(result, "concat(")) << result;
}

TEST(FoldLayout, KeepsAConcatOfSplitPiecesOutOfOrderOrOnAnotherAxis) {
  for (const char* concat : {"concat(%b, %a) {axis = 1} : f32[2,12]",
                             "concat(%a, %a) {axis = 1} : f32[2,12]"}) {
    Graph graph = parse(fmt::format(R"(graph @g(%x: f32[2,12]) {{
  %a, %b = split(%x) {{axis = 1, sizes = [6, 6]}} : f32[2,6], f32[2,6]
  %y = {}
  return %y
}})", concat));
    EXPECT_FALSE(fold_layout(graph)) << print_graph(graph);
  }
  Graph across = parse(R"(graph @g(%x: f32[4,6]) {
  %a, %b = split(%x) {axis = 0, sizes = [2, 2]} : f32[2,6], f32[2,6]
  %y = concat(%a, %b) {axis = 1} : f32[2,12]
  return %y
})");
  EXPECT_FALSE(fold_layout(across)) << print_graph(across);
}

TEST(FoldLayout, BroadcastOperandsOfBroadcastingOpsGo) {
  const std::string result = rewritten(R"(graph @g(%x: f32[2,1], %y: f32[2,8], %z: f32[8]) {
  %b = broadcast_to(%x) {shape = [2, 8]} : f32[2,8]
  %p = mul(%b, %y) : f32[2,8]
  %c = broadcast_to(%z) {shape = [2, 8]} : f32[2,8]
  %q = add(%c, %x) : f32[2,8]
  return %p, %q
})", fold_layout);
  EXPECT_TRUE(contains(result, "mul(%x, %y) : f32[2,8]")) << result;
  // add(%z, %x) would broadcast to [2,8] too: both operands may go.
  EXPECT_TRUE(contains(result, "add(%z, %x) : f32[2,8]")) << result;
  EXPECT_FALSE(contains(result, "broadcast_to(")) << result;
}

TEST(FoldLayout, KeepsABroadcastTheResultNeeds) {
  Graph graph = parse(R"(graph @g(%x: f32[2,1], %y: f32[2,1]) {
  %b = broadcast_to(%x) {shape = [2, 8]} : f32[2,8]
  %p = mul(%b, %y) : f32[2,8]
  return %p
})");
  EXPECT_FALSE(fold_layout(graph)) << print_graph(graph);
}

TEST(FoldConstants, ConstantArithmeticAndNeutralOperandsFold) {
  const std::string result = rewritten(R"(graph @g(%x: f32[4]) {
  %one = constant() {value = tensor<f32[]>[1.0]} : f32[]
  %n = constant() {value = tensor<f32[]>[0.25]} : f32[]
  %s = mul(%one, %n) : f32[]
  %t = add(%s, %s) : f32[]
  %y = mul(%x, %t) : f32[4]
  %z = mul(%y, %one) : f32[4]
  return %z
})", fold_constants);
  EXPECT_TRUE(contains(result, "tensor<f32[]>[0.5]")) << result;
  EXPECT_FALSE(contains(result, "[1.0]")) << result;
  EXPECT_EQ(std::count(result.begin(), result.end(), '\n'), 5) << result;  // header, constant, mul, return, brace
}

TEST(FoldConstants, LeavesLargeResultsComputed) {
  Graph graph = parse(R"(graph @g() {
  %c = constant() {value = tensor<f32[]>[2.0]} : f32[]
  %b = broadcast_to(%c) {shape = [100, 100]} : f32[100,100]
  return %b
})");
  EXPECT_FALSE(fold_constants(graph)) << print_graph(graph);
}

// Frozen weights concatenated (as a merge of Q, K and V projections makes them): the result is
// no larger than its operands, so it folds whatever its size.
TEST(FoldConstants, FoldsLargeResultsNoLargerThanTheirOperands) {
  Graph graph = parse(R"(graph @g(%x: f32[4,64], %a: f32[64,64], %b: f32[64,64]) {
  %w = concat(%a, %b) {axis = 1} : f32[64,128]
  %y = matmul(%x, %w) : f32[4,128]
  return %y
})");
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 7});
  const std::vector<Array> expected = *interpret(graph, inputs);
  ASSERT_TRUE(freeze_inputs(graph, {{"a", inputs[1]}, {"b", inputs[2]}}));
  EXPECT_TRUE(fold_constants(graph));
  eliminate_dead_code(graph);
  ASSERT_EQ(graph.num_nodes(), 2) << print_graph(graph);  // the folded weight and the matmul
  EXPECT_EQ(graph.nodes()[0]->op(), Op::constant);
  Expected<std::vector<Array>> actual = interpret(graph, std::vector<Array>{inputs[0]});
  ASSERT_TRUE(actual) << actual.status().message();
  EXPECT_EQ((*actual)[0], expected[0]);
}

TEST(FreezeInputs, InputsBecomeNamedConstants) {
  Graph graph = parse(R"(graph @g(%x: f32[2,3], %w: f32[3,4]) {
  %y = matmul(%x, %w) : f32[2,4]
  return %y
})");
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 2});
  const std::vector<Array> expected = *interpret(graph, inputs);
  ASSERT_TRUE(freeze_inputs(graph, {{"w", inputs[1]}}));
  ASSERT_EQ(graph.inputs().size(), 1u);
  EXPECT_EQ(graph.inputs()[0]->name(), "x");
  ASSERT_EQ(graph.nodes()[0]->op(), Op::constant);
  EXPECT_EQ(graph.nodes()[0]->output()->name(), "w");
  EXPECT_EQ((*interpret(graph, std::vector<Array>{inputs[0]}))[0], expected[0]);
}

TEST(FreezeInputs, RefusesUnknownNamesWrongTypesAndOutputs) {
  Graph graph = parse(R"(graph @g(%x: f32[2,3], %w: f32[3,4]) {
  %y = matmul(%x, %w) : f32[2,4]
  return %y, %w
})");
  const std::string before = print_graph(graph);
  const Array w(DType::f32, Shape{3, 4});
  Status unknown = freeze_inputs(graph, {{"v", w}});
  EXPECT_NE(unknown.message().find("no input of that name"), std::string::npos) << unknown.message();
  Status wrong_type = freeze_inputs(graph, {{"x", w}});
  EXPECT_NE(wrong_type.message().find("its value is f32[3,4], the input f32[2,3]"), std::string::npos)
      << wrong_type.message();
  Status output = freeze_inputs(graph, {{"w", w}});
  EXPECT_NE(output.message().find("graph output"), std::string::npos) << output.message();
  EXPECT_EQ(print_graph(graph), before);
}

TEST(RewritePipeline, KeepsOutputNamesAndCanBeSwitchedOff) {
  const std::string text = R"(graph @g(%x: f32[2,3,4], %dy: f32[2,3,5]) {
  %p = matmul(%x, %dy) {transpose_a = true} : f32[2,4,5]
  %dw = sum(%p) {axes = [0]} : f32[4,5]
  return %dw
})";
  Graph graph = parse(text);
  Expected<RewriteReport> report = rewrite_graph(graph);
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(graph.outputs()[0]->name(), "dw");
  EXPECT_EQ(report->nodes_before, 2);
  EXPECT_EQ(report->nodes_after, 3);  // two reshapes and the matmul
  ASSERT_EQ(report->rewrites.size(), kRewritePipeline.size());
  EXPECT_EQ(report->rewrites[2].name, "eliminate-reductions");
  EXPECT_EQ(report->rewrites[2].rounds_changed, 1);

  Graph untouched = parse(text);
  Expected<RewriteReport> off = rewrite_graph(untouched, {.enabled = false, .disabled = {}});
  ASSERT_TRUE(off);
  EXPECT_TRUE(off->rewrites.empty());
  EXPECT_EQ(print_graph(untouched), print_graph(parse(text)));
  Graph disabled = parse(text);
  ASSERT_TRUE(rewrite_graph(disabled, {.disabled = {"eliminate-reductions"}}));
  EXPECT_EQ(print_graph(disabled), print_graph(parse(text)));
}

}  // namespace
}  // namespace kiln
