// Decomposition by cost: a kind of composite is written as primitives exactly when the
// partitioner's estimate (on the pinned reference machine) says the pieces fuse better, and the
// compiled result still matches the interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compiler/decompose_by_cost.h"
#include "compiler/pipeline.h"
#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

CompileOptions reference_options() {
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  return options;
}

Graph parse(const std::string& text) {
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph) << graph.status().message();
  return std::move(*graph);
}

// Compiles `text` with `options` and checks it against the interpreter; returns the kernels.
int compile_and_check(const std::string& text, const CompileOptions& options) {
  const Graph graph = parse(text);
  const std::vector<Array> inputs = random_inputs(graph, {.seed = 5, .int_range = 16});
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  EXPECT_TRUE(expected) << expected.status().message();
  Expected<CompiledModel> model = Compiler(options).compile(graph.clone());
  EXPECT_TRUE(model) << model.status().message();
  if (!model || !expected) return -1;
  Expected<std::vector<Array>> actual = model->run(inputs);
  EXPECT_TRUE(actual) << actual.status().message();
  for (size_t o = 0; actual && o < expected->size(); ++o) {
    for (int64_t i = 0; i < (*expected)[o].size(); ++i) {
      EXPECT_NEAR((*actual)[o][i], (*expected)[o][i], 1e-4 * (1 + std::fabs((*expected)[o][i])))
          << "output " << o << " element " << i;
    }
  }
  return model->compiled().partition.num_kernels();
}

// A layer norm beside its own statistics written out (as a gradient rule writes them).
constexpr const char* kLayerNormAndItsVariance = R"(graph @g(%x: f32[64,256], %s: f32[256], %b: f32[256]) {
  %y = layer_norm(%x, %s, %b) : f32[64,256]
  %m = mean(%x) {axes = [1], keepdims = true} : f32[64,1]
  %c = sub(%x, %m) : f32[64,256]
  %sq = mul(%c, %c) : f32[64,256]
  %v = mean(%sq) {axes = [1], keepdims = true} : f32[64,1]
  return %y, %v
})";

// log_softmax, its nll_loss and a softmax, all of one logits.
constexpr const char* kSoftmaxFamily = R"(graph @g(%x: f32[64,256], %l: i64[64]) {
  %p = log_softmax(%x) : f32[64,256]
  %loss = nll_loss(%p, %l) : f32[]
  %q = softmax(%x) : f32[64,256]
  return %loss, %q
})";

TEST(DecomposeByCost, DecomposesWhereThePiecesShareWork) {
  for (const char* text : {kLayerNormAndItsVariance, kSoftmaxFamily}) {
    SCOPED_TRACE(text);
    Graph graph = parse(text);
    Expected<std::vector<DecompositionDecision>> decisions =
        decompose_by_cost(graph, reference_options());
    ASSERT_TRUE(decisions) << decisions.status().message();
    ASSERT_EQ(decisions->size(), 1u);
    const DecompositionDecision& decision = decisions->front();
    EXPECT_TRUE(decision.decomposed);
    EXPECT_LT(decision.seconds_decomposed, decision.seconds_composite);
    for (const Node* node : graph.nodes()) EXPECT_FALSE(node->def().decompose) << node->def().name;

    CompileOptions whole = reference_options();
    whole.rewrites.disabled.emplace(kDecomposeRewrite);
    EXPECT_LT(compile_and_check(text, reference_options()), compile_and_check(text, whole));
  }
}

TEST(DecomposeByCost, KeepsALoneCompositeWhole) {
  Graph graph = parse(R"(graph @g(%x: f32[64,256], %s: f32[256], %b: f32[256]) {
  %y = layer_norm(%x, %s, %b) : f32[64,256]
  %z = relu(%y) : f32[64,256]
  return %z
})");
  Expected<std::vector<DecompositionDecision>> decisions =
      decompose_by_cost(graph, reference_options());
  ASSERT_TRUE(decisions) << decisions.status().message();
  ASSERT_EQ(decisions->size(), 1u);
  EXPECT_EQ(decisions->front().unit, "layer_norm");
  EXPECT_FALSE(decisions->front().decomposed);
  EXPECT_EQ(graph.nodes().front()->op(), Op::layer_norm);
}

TEST(DecomposeByCost, NeitherUnfusedNorDisabled) {
  for (bool unfused : {true, false}) {
    Graph graph = parse(kSoftmaxFamily);
    CompileOptions options = reference_options();
    if (unfused) {
      options.fusion.mode = fusion::FusionMode::off;
    } else {
      options.rewrites.disabled.emplace(kDecomposeRewrite);
    }
    options.pipeline.stop_after = Stage::decompose;
    Expected<CompiledGraph> report = run_pipeline(graph, options);
    ASSERT_TRUE(report) << report.status().message();
    EXPECT_TRUE(report->rewrites.decompositions.empty());
    EXPECT_EQ(graph.nodes().front()->op(), Op::log_softmax);
  }
}

}  // namespace
}  // namespace kiln
