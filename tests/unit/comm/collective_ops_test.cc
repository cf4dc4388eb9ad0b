// The all_reduce and broadcast ops in the graph IR: their text form, types and checks, their
// evaluation by the interpreter through the process's communicator, and how the passes, the
// autodiff and the partitioner treat them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "autodiff/gradients.h"
#include "cost/device_profile.h"
#include "fusion/partition.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/dead_code.h"
#include "passes/fold_constants.h"
#include "unit/comm/simulated_peer.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using kiln::testing::is_error_with;

Graph parse(std::string_view text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return graph ? std::move(*graph) : Graph();
}

int count_ops(const Graph& graph, Op op) {
  return static_cast<int>(std::ranges::count_if(graph.nodes(),
                                                [op](const Node* n) { return n->op() == op; }));
}

constexpr std::string_view kBoth = R"(graph @g(%x: f32[2,3], %t: i64[4]) {
  %s = all_reduce(%x) : f32[2,3]
  %m = all_reduce(%s) {reduction = "mean"} : f32[2,3]
  %b = broadcast(%t) {root = 1} : i64[4]
  return %m, %b
}
)";

TEST(CollectiveOps, ParsePrintAndVerify) {
  const Graph graph = parse(kBoth);
  EXPECT_TRUE(verify(graph));
  EXPECT_EQ(print_graph(graph), kBoth);
  const Node* sum = graph.nodes()[0];
  EXPECT_EQ(sum->attrs().get_string("reduction"), "sum");
  EXPECT_TRUE(sum->def().collective);
  EXPECT_EQ(sum->def().fusion_kind, FusionKind::opaque);
}

TEST(CollectiveOps, TypesAndAttributesAreChecked) {
  EXPECT_TRUE(is_error_with(parse_graph(R"(graph @g(%x: i32[2]) {
    %y = all_reduce(%x) : i32[2]
    return %y
  })").status(), {"input 'x' must be a floating type"}));
  EXPECT_TRUE(is_error_with(parse_graph(R"(graph @g(%x: f32[2]) {
    %y = all_reduce(%x) {reduction = "max"} : f32[2]
    return %y
  })").status(), {"reduction", "'sum' and 'mean'"}));
  EXPECT_TRUE(is_error_with(parse_graph(R"(graph @g(%x: f32[2]) {
    %y = broadcast(%x) {root = -1} : f32[2]
    return %y
  })").status(), {"attribute 'root' is -1"}));
  EXPECT_TRUE(is_error_with(parse_graph(R"(graph @g(%x: f32[2]) {
    %y = all_reduce(%x) : f64[2]
    return %y
  })").status(), {"f64[2]"}));
}

TEST(CollectiveOps, InAWorldOfOneTheInterpreterGivesTheInput) {
  const Graph graph = parse(R"(graph @g(%x: f32[2,3], %t: i64[4]) {
    %s = all_reduce(%x) : f32[2,3]
    %m = all_reduce(%s) {reduction = "mean"} : f32[2,3]
    %b = broadcast(%t) : i64[4]
    return %m, %b
  })");
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 7});
  Expected<std::vector<Array>> outputs = interpret(graph, inputs);
  ASSERT_TRUE(outputs) << outputs.status().message();
  EXPECT_EQ((*outputs)[0].data, inputs[0].data);
  EXPECT_EQ((*outputs)[1].data, inputs[1].data);
}

TEST(CollectiveOps, TheInterpreterGoesThroughTheCommunicator) {
  testing::SimulatedPeerCommunicator peer;
  const testing::ScopedCommunicator scoped(peer);
  const Graph graph = parse(kBoth);
  const Array x(DType::f32, Shape({2, 3}), {1, 2, 3, 4, 5, 6});
  const Array t(DType::i64, Shape({4}), {7, 8, 9, 10});
  Expected<std::vector<Array>> outputs = interpret(graph, std::vector<Array>{x, t});
  ASSERT_TRUE(outputs) << outputs.status().message();
  // s = 2x + 1 (rank 1 holds x + 1), then m = mean(s, s + 1) = s + 0.5; rank 1 broadcasts 0s.
  EXPECT_EQ((*outputs)[0].data, (std::vector<double>{3.5, 5.5, 7.5, 9.5, 11.5, 13.5}));
  EXPECT_EQ((*outputs)[1].data, (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(peer.collectives, 3);
}

TEST(CollectiveOps, ARootOutsideTheWorldIsAnErrorNamingTheNode) {
  const Graph graph = parse(R"(graph @g(%x: f32[2]) {
    %y = broadcast(%x) {root = 3} : f32[2]
    return %y
  })");
  const Array x(DType::f32, Shape({2}), {1, 2});
  EXPECT_TRUE(is_error_with(interpret(graph, std::vector<Array>{x}).status(),
                            {"%y = broadcast", "broadcast from rank 3", "ranks 0 to 0"}));
}

TEST(CollectiveOps, AreNeverFoldedAndKeptWhileUsed) {
  Graph graph = parse(R"(graph @g(%x: f32[2]) {
    %c = constant() {value = tensor<f32[2]>[1, 2]} : f32[2]
    %s = all_reduce(%c) : f32[2]
    %y = add(%s, %x) : f32[2]
    return %y
  })");
  fold_constants(graph);
  eliminate_dead_code(graph);
  EXPECT_TRUE(verify(graph));
  EXPECT_EQ(count_ops(graph, Op::all_reduce), 1);
}

TEST(CollectiveOps, AllReduceDifferentiatesToAnAllReduceOfTheGradient) {
  for (const char* reduction : {"sum", "mean"}) {
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f64, {3});
    Value* y = b.apply1(Op::all_reduce, {b.mul(x, x)}, {{"reduction", reduction}});
    Value* loss = b.sum(y, {0});
    ASSERT_TRUE(b.ok()) << b.status().message();
    Value* const wrt[] = {x};
    Expected<std::vector<Value*>> grads = build_gradients(graph, loss, wrt);
    ASSERT_TRUE(grads) << grads.status().message();
    int gradient_reductions = 0;
    for (const Node* node : graph.nodes()) {
      if (node->op() == Op::all_reduce && node->output() != y) {
        ++gradient_reductions;
        EXPECT_EQ(node->attrs().get_string("reduction"), reduction);
      }
    }
    EXPECT_EQ(gradient_reductions, 1) << reduction;
    // In a world of one: d/dx sum(x * x) = 2x.
    graph.set_outputs({(*grads)[0]});
    const Array input(DType::f64, Shape({3}), {1, -2, 0.5});
    Expected<std::vector<Array>> dx = interpret(graph, std::vector<Array>{input});
    ASSERT_TRUE(dx) << dx.status().message();
    EXPECT_EQ((*dx)[0].data, (std::vector<double>{2, -4, 1}));
  }
}

TEST(CollectiveOps, DifferentiatingThroughBroadcastIsRefusedWithTheReason) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {3});
  Value* loss = b.sum(b.apply1(Op::broadcast, {x}), {0});
  ASSERT_TRUE(b.ok()) << b.status().message();
  Value* const wrt[] = {x};
  EXPECT_TRUE(is_error_with(build_gradients(graph, loss, wrt).status(),
                            {"broadcast", "no op knows its rank yet"}));
}

TEST(CollectiveOps, AreAGroupOfTheirOwnWithTheReason) {
  const Graph graph = parse(R"(graph @g(%x: f32[64]) {
    %a = relu(%x) : f32[64]
    %s = all_reduce(%a) : f32[64]
    %y = exp(%s) : f32[64]
    return %y
  })");
  fusion::FusionOptions options;
  options.profile = cost::reference_profile();
  Expected<fusion::Partition> partition = fusion::partition_graph(graph, options);
  ASSERT_TRUE(partition) << partition.status().message();
  ASSERT_EQ(partition->groups.size(), 3u);
  EXPECT_EQ(partition->num_kernels(), 2);
  int reasons = 0;
  for (const fusion::Decision& decision : partition->decisions) {
    if (decision.kind != fusion::Decision::Kind::cut) continue;
    EXPECT_EQ(decision.reason.find("'all_reduce' is a collective"), 0u) << decision.reason;
    ++reasons;
  }
  EXPECT_EQ(reasons, 2);
}

}  // namespace
}  // namespace kiln
