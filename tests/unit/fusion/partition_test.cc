// The partitioners (fusion/partition.h) on small graphs with the fixed reference profile, so
// the partitions are the same on every machine: golden partitions (matmul + bias + gelu,
// conv + batch norm + relu, layer norm forward and backward), the ILP against the greedy baseline, tied edges cut
// without loss, cycles between groups, loop-level feedback, the component cache, validation
// and the explanation.
#include "fusion/partition.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "autodiff/gradients.h"
#include "fusion/context.h"
#include "ir/builder.h"
#include "loop/printer.h"
#include "models/model.h"
#include "passes/dead_code.h"

namespace kiln::fusion {
namespace {

FusionOptions options_for(FusionMode mode) {
  FusionOptions options;
  options.mode = mode;
  options.profile = cost::reference_profile();
  return options;
}

Partition partition(const Graph& graph, FusionMode mode, FusionOptions options = {}) {
  if (!options.profile) options = options_for(mode);
  options.mode = mode;
  Expected<Partition> result = partition_graph(graph, options);
  EXPECT_TRUE(result.has_value()) << result.status().message();
  if (!result) return {};
  EXPECT_TRUE(check_partition(graph, *result).is_ok());
  return std::move(result).value();
}

// Whether `kernel` makes a gemm call anywhere.
bool print_has_gemm(const loop::Kernel& kernel) {
  return loop::print(kernel).find("gemm(") != std::string::npos;
}

int computed_nodes(const Graph& graph) {
  int count = 0;
  for (const Node* node : graph.nodes()) count += node->op() != Op::constant;
  return count;
}

// Layer norm over the last axis of x [R, N], written in primitives (as autodiff and ONNX
// exporters produce it).
Value* layer_norm_primitives(GraphBuilder& b, Value* x, Value* scale, Value* bias) {
  Value* mean = b.mean(x, {-1}, /*keepdims=*/true);
  Value* centered = b.sub(x, mean);
  Value* var = b.mean(b.mul(centered, centered), {-1}, /*keepdims=*/true);
  Value* inv_std = b.rsqrt(b.add(var, b.scalar(1e-5, x->dtype())));
  return b.add(b.mul(b.mul(centered, inv_std), scale), bias);
}

TEST(Partition, OffGivesEveryNodeItsOwnKernel) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {8, 16});
  graph.set_outputs({b.relu(b.add(b.exp(x), b.scalar(1.0, DType::f32)))});
  const Partition result = partition(graph, FusionMode::off);
  EXPECT_EQ(static_cast<int>(result.groups.size()), computed_nodes(graph));
  for (const Decision& decision : result.decisions) {
    EXPECT_EQ(decision.kind, Decision::Kind::cut);
    EXPECT_EQ(decision.reason, "fusion is off");
  }
}

TEST(Partition, MatmulBiasGeluIsOneKernel) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {64, 128}), b.input("w", DType::f32, {128, 256}));
  graph.set_outputs({b.gelu(b.add(y, b.input("bias", DType::f32, {256})))});
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode);
    ASSERT_EQ(result.groups.size(), 1u) << fusion_mode_name(mode);
    EXPECT_EQ(result.groups[0].nodes.size(), 3u);
  }
}

// A target without a library for a group's call (fusion/partition.h: library_calls) rejects
// the group at the loop level, with its reason, and the partition is solved without it.
TEST(Partition, AGroupWhoseLibraryCallTheTargetRefusesIsNotFused) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {64, 128}), b.input("w", DType::f32, {128, 256}));
  graph.set_outputs({b.gelu(b.add(y, b.input("bias", DType::f32, {256})))});
  FusionOptions refusing = options_for(FusionMode::greedy);
  refusing.library_table = "no gemm";
  refusing.library_calls = [](const loop::Kernel& kernel) {
    return print_has_gemm(kernel)
               ? Status::error(ErrorCode::unsupported, "no library here runs a gemm")
               : Status::ok();
  };
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode, refusing);
    for (const Group& group : result.groups) {
      const bool has_matmul = std::ranges::any_of(
          group.nodes, [](const Node* node) { return node->op() == Op::matmul; });
      EXPECT_FALSE(has_matmul && group.nodes.size() > 1) << fusion_mode_name(mode);
    }
    EXPECT_NE(explain_partition(graph, result).find("no library here runs a gemm"),
              std::string::npos)
        << explain_partition(graph, result);
  }
}

TEST(Partition, ConvBatchNormReluIsOneKernel) {
  // ResNet's unit: the batch norm's scaling and the relu run on each image's block of the
  // convolution (conv-epilogue), for the greedy merger and the ILP alike.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.apply1(Op::conv, {b.input("x", DType::f32, {4, 16, 28, 28}),
                                 b.input("w", DType::f32, {32, 16, 3, 3})},
                      {{"pads", {1, 1, 1, 1}}});
  std::vector<Value*> bn = {y};
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    bn.push_back(b.input(name, DType::f32, {32}));
  }
  graph.set_outputs({b.relu(b.apply1(Op::batch_norm_infer, bn))});
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode);
    ASSERT_EQ(result.groups.size(), 1u) << fusion_mode_name(mode) << "\n"
                                        << explain_partition(graph, result);
    EXPECT_EQ(result.groups[0].nodes.size(), 3u);
  }
}

TEST(Partition, LayerNormForwardFromPrimitivesIsOneKernel) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {32, 128});
  graph.set_outputs({layer_norm_primitives(b, x, b.input("scale", DType::f32, {128}),
                                           b.input("bias", DType::f32, {128}))});
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode);
    EXPECT_EQ(result.groups.size(), 1u) << fusion_mode_name(mode) << "\n"
                                        << explain_partition(graph, result);
  }
}

TEST(Partition, LayerNormBackwardIsOneKernel) {
  // The gradient of sum(layer_norm(x) * g) with respect to x: autodiff's row reductions and
  // elementwise chain, forward statistics included, in one kernel.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {32, 128});
  Value* g = b.input("g", DType::f32, {32, 128});
  Value* y = b.layer_norm(x, b.input("scale", DType::f32, {128}), b.input("bias", DType::f32, {128}));
  Value* loss = b.sum(b.mul(y, g), {0, 1});
  Expected<std::vector<Value*>> grads = build_gradients(graph, loss, std::vector<Value*>{x});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  graph.set_outputs({(*grads)[0]});
  eliminate_dead_code(graph);
  const Partition result = partition(graph, FusionMode::ilp);
  EXPECT_EQ(result.num_kernels(), 1) << explain_partition(graph, result);
}

TEST(Partition, OptimizerUpdatesOfOneShapeAreFusedHorizontally) {
  // Momentum SGD on three parameters of 256 elements: m' = 0.9 m + g, w' = w - lr m'. The
  // three updates are independent; they run in one kernel.
  Graph graph;
  GraphBuilder b(graph);
  Value* lr = b.input("lr", DType::f32, {});
  std::vector<Value*> outputs;
  for (int p = 0; p < 3; ++p) {
    Value* w = b.input(fmt::format("w{}", p), DType::f32, {256});
    Value* g = b.input(fmt::format("g{}", p), DType::f32, {256});
    Value* m = b.input(fmt::format("m{}", p), DType::f32, {256});
    Value* next_m = b.add(b.mul(m, b.scalar(0.9, DType::f32)), g);
    outputs.push_back(b.sub(w, b.mul(lr, next_m)));
    outputs.push_back(next_m);
  }
  graph.set_outputs(outputs);
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode);
    EXPECT_EQ(result.groups.size(), 1u) << explain_partition(graph, result);
    const std::string text = explain_partition(graph, result);
    EXPECT_NE(text.find("3 independent elementwise groups over [256] run in 1 kernel"),
              std::string::npos)
        << text;
  }
}

TEST(Partition, IlpIsNeverWorseThanGreedyOnTheZoo) {
  for (const char* name : {"mlp-tiny", "bert-tiny", "resnet-tiny", "gcn-tiny"}) {
    SCOPED_TRACE(name);
    Expected<ModelInstance> model = build_model(name, {});
    ASSERT_TRUE(model.has_value()) << model.status().message();
    Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
    ASSERT_TRUE(step.has_value()) << step.status().message();
    const Partition greedy = partition(step->graph, FusionMode::greedy);
    const Partition ilp = partition(step->graph, FusionMode::ilp);
    const Partition off = partition(step->graph, FusionMode::off);
    EXPECT_LE(ilp.estimated_seconds(), greedy.estimated_seconds() * (1 + 1e-9));
    EXPECT_LT(greedy.estimated_seconds(), off.estimated_seconds());
    EXPECT_LT(ilp.groups.size(), off.groups.size());
  }
}

TEST(Partition, EdgesTiedThroughAnotherComponentAreCutFirst) {
  // A forward value read again by a backward op across two matmuls: a = exp(x) feeds the
  // first matmul and, directly, b = n * a, where n is the second matmul's product. The path
  // a -> m -> e -> n -> b runs through {m, e}, another component (a matmul's operands are
  // cut), so no convex group holds a and b: the edge is cut before partitioning, and the
  // component {a, n, b} splits into {a} and {n, b}. The cut loses nothing.
  Graph graph;
  GraphBuilder b(graph);
  Value* a = b.exp(b.input("x", DType::f32, {16, 16}));
  Value* e = b.tanh(b.matmul(a, b.input("w1", DType::f32, {16, 16})));
  Value* n = b.matmul(e, b.input("w2", DType::f32, {16, 16}));
  graph.set_outputs({b.mul(n, a)});
  const Partition cut = partition(graph, FusionMode::ilp);
  EXPECT_EQ(cut.stats.tied_edges_cut, 1);
  bool found = false;
  for (const Decision& decision : cut.decisions) {
    if (decision.producer == a->producer() && decision.consumer->op() == Op::mul) {
      found = true;
      EXPECT_EQ(decision.kind, Decision::Kind::cut);
      EXPECT_NE(decision.reason.find("tied through"), std::string::npos) << decision.reason;
      EXPECT_NE(decision.reason.find("matmul"), std::string::npos) << decision.reason;
    }
  }
  EXPECT_TRUE(found) << explain_partition(graph, cut);
  FusionOptions kept = options_for(FusionMode::ilp);
  kept.disabled_rules = {"cut-tied-edges"};
  const Partition uncut = partition(graph, FusionMode::ilp, kept);
  EXPECT_EQ(uncut.stats.tied_edges_cut, 0);
  EXPECT_EQ(cut.stats.components, uncut.stats.components + 1);
  EXPECT_NEAR(cut.estimated_seconds(), uncut.estimated_seconds(), 1e-12);
  EXPECT_EQ(cut.num_kernels(), uncut.num_kernels());
}

TEST(Partition, CuttingTiedEdgesKeepsTheOptimumOfTheZoosTrainingSteps) {
  // The exact program with and without the cut, before horizontal fusion and the memory
  // bound: the same least estimated time, over no fewer components. (bert-tiny's and
  // resnet-tiny's steps have tied edges; the others none.)
  int tied = 0;
  for (const char* name : {"mlp-tiny", "bert-tiny", "resnet-tiny", "gcn-tiny", "xml-cnn-tiny"}) {
    SCOPED_TRACE(name);
    Expected<ModelInstance> model = build_model(name, {});
    ASSERT_TRUE(model.has_value()) << model.status().message();
    Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
    ASSERT_TRUE(step.has_value()) << step.status().message();
    double seconds[2] = {0, 0};
    int components[2] = {0, 0};
    for (int keep = 0; keep < 2; ++keep) {
      FusionOptions options = options_for(FusionMode::ilp);
      if (keep == 1) options.disabled_rules = {"cut-tied-edges"};
      PartitionContext context(step->graph, options);
      if (keep == 0) tied += context.tied_edges_cut();
      std::vector<Decision> decisions;
      PartitionStats stats;
      Expected<std::vector<NodeSet>> groups =
          ilp_partition(context, greedy_partition(context), decisions, stats);
      ASSERT_TRUE(groups.has_value()) << groups.status().message();
      EXPECT_EQ(stats.components_timed_out, 0);
      for (const NodeSet& group : *groups) seconds[keep] += context.estimate(group).seconds;
      components[keep] = stats.components;
    }
    EXPECT_NEAR(seconds[0], seconds[1], 1e-9 * seconds[1]);
    EXPECT_GE(components[0], components[1]);
  }
  EXPECT_GT(tied, 0);
}

TEST(Partition, GroupsDependingOnEachOtherInACycleAreFound) {
  // A = {a1, a2}, B = {b2, b1}: a1 -> b1 and b2 -> a2, so A needs B and B needs A, though
  // each group alone is convex.
  Graph graph;
  GraphBuilder b(graph);
  Value* a1 = b.exp(b.input("x", DType::f32, {8}));
  Value* b2 = b.exp(b.input("y", DType::f32, {8}));
  Value* a2 = b.add(a1, b2);
  Value* b1 = b.mul(a1, b2);
  graph.set_outputs({a2, b1});
  const FusionOptions options = options_for(FusionMode::ilp);
  PartitionContext context(graph, options);
  const auto at = [&](const Value* v) { return context.reach().index(v->producer()); };
  std::vector<NodeSet> groups = {{at(a1), at(a2)}, {at(b2), at(b1)}};
  for (NodeSet& group : groups) std::sort(group.begin(), group.end());
  EXPECT_TRUE(context.is_convex(groups[0]) && context.is_convex(groups[1]));
  EXPECT_TRUE(find_group_cycle(context, groups).has_value());
  EXPECT_FALSE(find_group_cycle(context, {{at(a1), at(a2), at(b1), at(b2)}}).has_value());
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) partition(graph, mode);
}

// Estimates and loop verdicts are remembered across partitions by a group's structure: a
// group of another graph with the same structure gets the same estimate, its views pointing
// into its own graph; a one-element constant's value, or a value becoming a graph output,
// makes another structure.
TEST(PartitionContext, GroupsOfOneStructureShareTheirEstimateAcrossGraphs) {
  struct Built {
    Graph graph;
    std::vector<Value*> grouped;  // exp, mul, reshape: the last a view
  };
  const auto build = [](double scale, bool view_is_output) {
    Built built;
    GraphBuilder b(built.graph);
    Value* e = b.exp(b.input("x", DType::f32, {4, 8}));
    Value* scaling = b.scalar(scale);
    Value* y = b.mul(e, scaling);
    Value* view = b.reshape(y, {32});
    built.grouped = {e, y, view};
    std::vector<Value*> outputs = {y, b.relu(view)};
    if (view_is_output) outputs.push_back(view);
    built.graph.set_outputs(outputs);
    return built;
  };
  const auto group_of = [](const PartitionContext& context, const Built& built) {
    NodeSet group;
    for (const Value* v : built.grouped) group.push_back(context.reach().index(v->producer()));
    std::sort(group.begin(), group.end());
    return group;
  };
  const FusionOptions options = options_for(FusionMode::ilp);
  const Built first = build(2.0, false), second = build(2.0, false);
  PartitionContext a(first.graph, options), b(second.graph, options);
  const NodeSet in_a = group_of(a, first), in_b = group_of(b, second);
  EXPECT_EQ(a.structure_key(in_a), b.structure_key(in_b));
  const cost::KernelEstimate& estimate_a = a.estimate(in_a);
  const cost::KernelEstimate& estimate_b = b.estimate(in_b);
  EXPECT_EQ(estimate_a.seconds, estimate_b.seconds);
  EXPECT_EQ(estimate_a.bytes, estimate_b.bytes);
  ASSERT_EQ(estimate_a.views.size(), 1u);
  ASSERT_EQ(estimate_b.views.size(), 1u);
  EXPECT_EQ(estimate_a.views[0], first.grouped[2]);
  EXPECT_EQ(estimate_b.views[0], second.grouped[2]);
  const Built scaled = build(3.0, false), output = build(2.0, true);
  PartitionContext c(scaled.graph, options), d(output.graph, options);
  EXPECT_NE(c.structure_key(group_of(c, scaled)), a.structure_key(in_a));
  EXPECT_NE(d.structure_key(group_of(d, output)), a.structure_key(in_a));
  EXPECT_TRUE(d.estimate(group_of(d, output)).views.empty());  // a graph output is stored
}

TEST(Partition, GroupsTheLoopLevelRejectsAreNotChosen) {
  // With no local memory allowed, a group stitching a reduction to its consumers (the mean
  // lives in a local buffer) is rejected; the partition is chosen again without it.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {16, 64});
  graph.set_outputs({b.exp(b.sub(x, b.mean(x, {1}, /*keepdims=*/true)))});
  FusionOptions options = options_for(FusionMode::ilp);
  options.max_local_bytes = 0;
  for (FusionMode mode : {FusionMode::greedy, FusionMode::ilp}) {
    const Partition result = partition(graph, mode, options);
    bool rejected = false;
    for (const Decision& decision : result.decisions) {
      rejected = rejected || (decision.kind == Decision::Kind::rejected &&
                              decision.reason.find("local buffers") != std::string::npos);
    }
    EXPECT_TRUE(rejected) << explain_partition(graph, result);
    for (const Group& group : result.groups) {
      const bool holds_mean = std::any_of(group.nodes.begin(), group.nodes.end(),
                                          [](const Node* n) { return n->op() == Op::reduce_mean; });
      EXPECT_TRUE(!holds_mean || group.nodes.size() == 1) << explain_partition(graph, result);
    }
  }
}

TEST(Partition, AGroupIsFormedAgainWithinAScratchLimit) {
  // matmul -> relu -> column sum -> scale in one group: the product's 64 KiB live in scratch.
  // Formed again with no scratch allowed, it becomes pieces without scratch, not single
  // nodes (the memory bound's alternative to running such a group unfused).
  Graph graph;
  GraphBuilder b(graph);
  Value* m = b.matmul(b.input("a", DType::f32, {256, 64}), b.input("w", DType::f32, {64, 64}));
  Value* s = b.sum(b.relu(m), {0});
  graph.set_outputs({b.mul(s, b.input("c", DType::f32, {64}))});
  const FusionOptions options = options_for(FusionMode::ilp);
  PartitionContext context(graph, options);
  const NodeSet all = context.computed();
  ASSERT_GT(context.scratch_bytes(all), 0);
  const std::vector<NodeSet> pieces = regroup_within_scratch(context, {all}, 0, 0);
  NodeSet covered;
  for (const NodeSet& piece : pieces) {
    EXPECT_EQ(context.scratch_bytes(piece), 0);
    EXPECT_TRUE(context.is_convex(piece));
    covered.insert(covered.end(), piece.begin(), piece.end());
  }
  std::sort(covered.begin(), covered.end());
  EXPECT_EQ(covered, all);
  EXPECT_GT(pieces.size(), 1u);
  EXPECT_LT(pieces.size(), all.size());
  EXPECT_FALSE(find_group_cycle(context, pieces).has_value());
  // With room for the scratch, the group stays whole.
  EXPECT_EQ(regroup_within_scratch(context, {all}, 0, context.scratch_bytes(all)).size(), 1u);
}

TEST(Partition, IdenticalComponentsAreSolvedOnce) {
  // Two independent chains of the same structure (as the layers of a transformer have): the
  // second component's key equals the first's.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {24, 25});
  Value* z = b.input("z", DType::f32, {24, 25});
  graph.set_outputs({b.tanh(b.mul(b.exp(x), x)), b.tanh(b.mul(b.exp(z), z))});
  const Partition result = partition(graph, FusionMode::ilp);
  EXPECT_GE(result.stats.components_cached, 1) << explain_partition(graph, result);
}

TEST(Partition, CheckPartitionRejectsInvalidPartitions) {
  Graph graph;
  GraphBuilder b(graph);
  Value* a = b.exp(b.input("x", DType::f32, {4}));
  Value* p = b.neg(a);
  Value* d = b.add(p, a);
  graph.set_outputs({d});
  Node* na = a->producer();
  Node* np = p->producer();
  Node* nd = d->producer();
  Partition bad;
  bad.groups = {{{na, nd}, {}}, {{np}, {}}};  // {a, d} skips p: not convex
  EXPECT_FALSE(check_partition(graph, bad).is_ok());
  bad.groups = {{{na}, {}}, {{nd}, {}}, {{np}, {}}};  // d before p
  EXPECT_NE(check_partition(graph, bad).message().find("later group"), std::string::npos);
  bad.groups = {{{na}, {}}, {{np}, {}}};
  EXPECT_NE(check_partition(graph, bad).message().find("in no group"), std::string::npos);
  bad.groups = {{{na}, {}}, {{np, na}, {}}, {{nd}, {}}};
  EXPECT_NE(check_partition(graph, bad).message().find("two groups"), std::string::npos);
}

TEST(Partition, ExplanationNamesGroupsAndCutEdges) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.relu(b.input("x", DType::f32, {8, 8}));
  graph.set_outputs({b.exp(b.matmul(x, b.input("w", DType::f32, {8, 8})))});
  const Partition result = partition(graph, FusionMode::ilp);
  const std::string text = explain_partition(graph, result);
  EXPECT_NE(text.find("fusion ilp: 3 nodes in 2 kernels"), std::string::npos) << text;
  EXPECT_NE(text.find("operand of the contraction"), std::string::npos) << text;
  EXPECT_NE(text.find("matmul-epilogue 1"), std::string::npos) << text;
}

TEST(Partition, OptionsAreValidated) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.exp(b.input("x", DType::f32, {4}))});
  FusionOptions options = options_for(FusionMode::greedy);
  options.disabled_rules = {"no-such-rule"};
  EXPECT_FALSE(partition_graph(graph, options).has_value());
  EXPECT_EQ(*parse_fusion_mode("greedy"), FusionMode::greedy);
  EXPECT_FALSE(parse_fusion_mode("fast").has_value());
}

}  // namespace
}  // namespace kiln::fusion
