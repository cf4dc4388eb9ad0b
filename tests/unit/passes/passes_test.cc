// Dead-code and common-subexpression elimination, and the pass manager, on IR text.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/common_subexpressions.h"
#include "passes/dead_code.h"
#include "passes/pass_manager.h"
#include "unit/passes/pass_test_util.h"

namespace kiln {
namespace {

void expect_same_values(const std::vector<Array>& a, const std::vector<Array>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    for (int64_t j = 0; j < a[i].size(); ++j) EXPECT_EQ(a[i][j], b[i][j]) << "output " << i;
  }
}

TEST(DeadCode, RemovesChainsThatReachNoOutputAndKeepsInputs) {
  Graph graph = parse(R"(graph @g(%x: f32[4], %unused: f32[2]) {
  %a = exp(%x) : f32[4]
  %b = log(%a) : f32[4]
  %c = relu(%x) : f32[4]
  return %c
})");
  EXPECT_TRUE(eliminate_dead_code(graph));
  EXPECT_EQ(print_graph(graph), R"(graph @g(%x: f32[4], %unused: f32[2]) {
  %c = relu(%x) : f32[4]
  return %c
}
)");
  EXPECT_FALSE(eliminate_dead_code(graph));
}

TEST(DeadCode, KeepsMultiOutputNodesWithOneLiveOutput) {
  Graph graph = parse(R"(graph @g(%x: f32[6]) {
  %a, %b = split(%x) {sizes = [2, 4]} : f32[2], f32[4]
  return %b
})");
  EXPECT_FALSE(eliminate_dead_code(graph));
  EXPECT_EQ(graph.num_nodes(), 1);
}

TEST(CommonSubexpressions, MergesEqualNodesAndCollapsesChains) {
  Graph graph = parse(R"(graph @g(%x: f32[4]) {
  %a = exp(%x) : f32[4]
  %b = exp(%x) : f32[4]
  %c = tanh(%a) : f32[4]
  %d = tanh(%b) : f32[4]
  %e = add(%c, %d) : f32[4]
  return %e
})");
  const std::vector<Array> before = evaluate(graph);
  EXPECT_TRUE(eliminate_common_subexpressions(graph));
  EXPECT_EQ(print_graph(graph), R"(graph @g(%x: f32[4]) {
  %a = exp(%x) : f32[4]
  %c = tanh(%a) : f32[4]
  %e = add(%c, %c) : f32[4]
  return %e
}
)");
  EXPECT_TRUE(verify(graph).is_ok());
  expect_same_values(before, evaluate(graph));
}

TEST(CommonSubexpressions, KeepsNodesThatDifferInAttributesOrInputOrder) {
  Graph graph = parse(R"(graph @g(%x: f32[2,3], %y: f32[2,3]) {
  %a = sum(%x) {axes = [0]} : f32[3]
  %b = sum(%x) {axes = [1]} : f32[2]
  %c = sub(%x, %y) : f32[2,3]
  %d = sub(%y, %x) : f32[2,3]
  %e = dropout(%x) {ratio = 0.5, seed = 1} : f32[2,3]
  %f = dropout(%x) {ratio = 0.5, seed = 2} : f32[2,3]
  return %a, %b, %c, %d, %e, %f
})");
  EXPECT_FALSE(eliminate_common_subexpressions(graph));
  EXPECT_EQ(graph.num_nodes(), 6);
}

TEST(CommonSubexpressions, MergesEqualConstantsOnly) {
  Graph graph = parse(R"(graph @g(%x: f32[2]) {
  %one = constant() {value = tensor<f32[2]>[1, 2]} : f32[2]
  %same = constant() {value = tensor<f32[2]>[1, 2]} : f32[2]
  %other = constant() {value = tensor<f32[2]>[1, 3]} : f32[2]
  %a = add(%x, %one) : f32[2]
  %b = add(%same, %other) : f32[2]
  return %a, %b
})");
  EXPECT_TRUE(eliminate_common_subexpressions(graph));
  EXPECT_EQ(graph.num_nodes(), 4);
  EXPECT_EQ(graph.find_value("same"), nullptr);
  EXPECT_NE(graph.find_value("other"), nullptr);
}

TEST(CommonSubexpressions, RedirectsGraphOutputs) {
  Graph graph = parse(R"(graph @g(%x: f32[4]) {
  %a = exp(%x) : f32[4]
  %b = exp(%x) : f32[4]
  return %a, %b
})");
  EXPECT_TRUE(eliminate_common_subexpressions(graph));
  ASSERT_EQ(graph.outputs().size(), 2u);
  EXPECT_EQ(graph.outputs()[0], graph.outputs()[1]);
  EXPECT_TRUE(verify(graph).is_ok());
}

TEST(PassManager, RunsPassesInOrderAndReportsChanges) {
  Graph graph = parse(R"(graph @g(%x: f32[4]) {
  %a = exp(%x) : f32[4]
  %b = exp(%x) : f32[4]
  %c = add(%a, %b) : f32[4]
  %dead = neg(%c) : f32[4]
  return %c
})");
  const std::vector<std::string> names = {"cse", "dce", "cse"};
  Expected<std::vector<PassRun>> runs = run_passes(graph, names);
  ASSERT_TRUE(runs.has_value()) << runs.status().message();
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ((*runs)[0].name, "cse");
  EXPECT_TRUE((*runs)[0].changed);
  EXPECT_TRUE((*runs)[1].changed);
  EXPECT_FALSE((*runs)[2].changed);
  EXPECT_EQ(graph.num_nodes(), 2);
}

TEST(PassManager, RejectsUnknownPassesBeforeRunningAny) {
  Graph graph = parse(R"(graph @g(%x: f32[4]) {
  %dead = neg(%x) : f32[4]
  return %x
})");
  const std::vector<std::string> names = {"dce", "frobnicate"};
  Expected<std::vector<PassRun>> runs = run_passes(graph, names);
  ASSERT_FALSE(runs.has_value());
  EXPECT_EQ(runs.status().message(), "unknown pass 'frobnicate'");
  EXPECT_EQ(graph.num_nodes(), 1);
}

TEST(PassManager, ParsesPassLists) {
  Expected<std::vector<std::string>> names = parse_pass_list("cse,dce");
  ASSERT_TRUE(names.has_value());
  EXPECT_EQ(*names, (std::vector<std::string>{"cse", "dce"}));
  EXPECT_FALSE(parse_pass_list("cse,,dce").has_value());
  EXPECT_FALSE(parse_pass_list("").has_value());
  EXPECT_FALSE(parse_pass_list("cse,").has_value());
}

TEST(PassManager, EveryRegisteredPassIsFoundByName) {
  for (const PassInfo& pass : all_passes()) {
    EXPECT_EQ(find_pass(pass.name), &pass);
    EXPECT_FALSE(pass.summary.empty());
  }
}

}  // namespace
}  // namespace kiln
