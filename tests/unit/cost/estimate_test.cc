// The kernel estimate (cost/estimate.h) on small groups, against numbers worked out by hand
// with a profile of round rates: bytes of inputs, outputs and large locals, flops with
// recomputation of inlined values, contractions at the matmul rate, and the roofline time.
#include "cost/estimate.h"

#include <gtest/gtest.h>

#include "ir/builder.h"

namespace kiln::cost {
namespace {

DeviceProfile round_profile() {
  return {.cpu = "test",
          .cores = 1,
          .matmul_flops = 1e9,
          .vector_flops = 1e8,
          .memory_bandwidth = 1e9,
          .l2_bytes = 1 << 20,
          .llc_bytes = 1 << 20,
          .kernel_overhead = 1e-6};
}

std::vector<Node*> nodes_of(std::initializer_list<const Value*> values) {
  std::vector<Node*> nodes;
  for (const Value* v : values) nodes.push_back(v->producer());
  return nodes;
}

TEST(Estimate, OneElementwiseNodeReadsItsInputsAndWritesItsOutput) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.add(b.input("a", DType::f32, {100}), b.input("b", DType::f32, {100}));
  graph.set_outputs({y});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({y}), round_profile());
  EXPECT_EQ(e.bytes, 1200);  // two inputs and the output, 400 bytes each
  EXPECT_DOUBLE_EQ(e.flops, 100);
  EXPECT_DOUBLE_EQ(e.memory_seconds, 1200 / 1e9);
  EXPECT_DOUBLE_EQ(e.compute_seconds, 100 / 1e8);
  EXPECT_DOUBLE_EQ(e.seconds, 1e-6 + 1200 / 1e9);  // memory-bound: 1.2 us of bytes, 1 us of flops
}

TEST(Estimate, InlinedIntermediatesCostNoBytes) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {100});
  Value* e1 = b.exp(x);
  Value* y = b.neg(e1);
  graph.set_outputs({y});
  const KernelEstimate both = estimate_kernel(graph, nodes_of({e1, y}), round_profile());
  EXPECT_EQ(both.bytes, 800);  // x read, y written; exp(x) never stored
  const KernelEstimate alone = estimate_kernel(graph, nodes_of({e1}), round_profile());
  EXPECT_EQ(alone.bytes, 800);  // x read, exp(x) written (neg reads it outside)
  EXPECT_DOUBLE_EQ(both.recomputed_flops, 0);
}

TEST(Estimate, InlinedValuesReadTwiceAreComputedTwice) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {100});
  Value* e1 = b.exp(x);
  Value* y = b.mul(b.neg(e1), b.abs(e1));
  graph.set_outputs({y});
  std::vector<Node*> group;
  for (Node* node : graph.nodes()) group.push_back(node);
  const KernelEstimate e = estimate_kernel(graph, group, round_profile());
  const double exp_flops = graph.nodes()[0]->def().cost(graph.nodes()[0]->input_types(),
                                                        graph.nodes()[0]->output_types(), {})
                               .flops;
  EXPECT_DOUBLE_EQ(e.recomputed_flops, exp_flops);  // exp evaluated 200 times for 100 elements
  EXPECT_EQ(e.bytes, 800);
}

TEST(Estimate, ValuesUsedOutsideAreWritten) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {100});
  Value* e1 = b.exp(x);
  Value* y = b.neg(e1);
  graph.set_outputs({y, b.abs(e1)});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({e1, y}), round_profile());
  EXPECT_EQ(e.bytes, 1200);  // x read; exp(x) (read by abs outside) and y written
}

TEST(Estimate, StitchedReductionsLiveInLocals) {
  // mean over rows then x - mean: x [10, 100] read once (small), out written; the row means
  // are a 40-byte local.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {10, 100});
  Value* m = b.mean(x, {1}, /*keepdims=*/true);
  Value* y = b.sub(x, m);
  graph.set_outputs({y});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({m, y}), round_profile());
  EXPECT_EQ(e.bytes, 8000);
}

TEST(Estimate, LargeInputsAreReadOncePerPass) {
  // x is 4 MB, over half the 1 MiB last-level cache: the mean's pass and the output's pass
  // each read it from memory.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {1000, 1000});
  Value* m = b.mean(x, {1}, /*keepdims=*/true);
  Value* y = b.sub(x, m);
  graph.set_outputs({y});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({m, y}), round_profile());
  EXPECT_EQ(e.bytes, 4'000'000 * 2 + 4'000'000);
}

TEST(Estimate, ContractionsRunAtTheMatmulRate) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("a", DType::f32, {10, 20}), b.input("w", DType::f32, {20, 30}));
  graph.set_outputs({y});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({y}), round_profile());
  EXPECT_DOUBLE_EQ(e.matmul_flops, 2.0 * 10 * 20 * 30);
  EXPECT_DOUBLE_EQ(e.flops, e.matmul_flops);
  EXPECT_DOUBLE_EQ(e.compute_seconds, 12000 / 1e9);
  EXPECT_EQ(e.bytes, (200 + 600 + 300) * 4);
}

TEST(Estimate, ConstantsAreInputsNotMembers) {
  Graph graph;
  GraphBuilder b(graph);
  Value* c = b.scalar(2.0, DType::f32);
  Value* y = b.mul(b.input("x", DType::f32, {100}), c);
  graph.set_outputs({y});
  const KernelEstimate e = estimate_kernel(graph, nodes_of({c, y}), round_profile());
  EXPECT_EQ(e.bytes, 804);  // x, the 4-byte scalar, y
}

}  // namespace
}  // namespace kiln::cost
