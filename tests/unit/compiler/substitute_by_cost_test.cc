// Substitution by cost: with an attention block's weights frozen, the search over the shipped
// proved rules merges the Q, K and V projections (one gemm instead of three, the concatenated
// weight folded at compile time), the partitioner's estimate says it pays, and the compiled
// result still matches the interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "kiln/kiln.h"
#include "passes/freeze_inputs.h"
#include "subst/shipped_rules.h"

namespace kiln {
namespace {

// An attention block as the zoo's transformers write it: three projections of one input, each
// split into heads.
constexpr const char* kProjections = R"(graph @g(%h: f32[2,16,128], %g: f32[128], %b: f32[128], %wq: f32[128,128], %bq: f32[128], %wk: f32[128,128], %bk: f32[128], %wv: f32[128,128], %bv: f32[128]) {
  %x = layer_norm(%h, %g, %b) : f32[2,16,128]
  %q0 = matmul(%x, %wq) : f32[2,16,128]
  %q1 = add(%q0, %bq) : f32[2,16,128]
  %q2 = reshape(%q1) {shape = [2, 16, 4, 32]} : f32[2,16,4,32]
  %q = transpose(%q2) {perm = [0, 2, 1, 3]} : f32[2,4,16,32]
  %k0 = matmul(%x, %wk) : f32[2,16,128]
  %k1 = add(%k0, %bk) : f32[2,16,128]
  %k2 = reshape(%k1) {shape = [2, 16, 4, 32]} : f32[2,16,4,32]
  %k = transpose(%k2) {perm = [0, 2, 1, 3]} : f32[2,4,16,32]
  %v0 = matmul(%x, %wv) : f32[2,16,128]
  %v1 = add(%v0, %bv) : f32[2,16,128]
  %v2 = reshape(%v1) {shape = [2, 16, 4, 32]} : f32[2,16,4,32]
  %v = transpose(%v2) {perm = [0, 2, 1, 3]} : f32[2,4,16,32]
  %s = matmul(%q, %k) {transpose_b = true} : f32[2,4,16,16]
  %p = softmax(%s) : f32[2,4,16,16]
  %o = matmul(%p, %v) : f32[2,4,16,32]
  return %o
})";

struct Compiled {
  int kernels = 0;
  int contractions = 0;  // nodes of the counted op in the compiled graph
  GraphRewrites rewrites;
};

// Compiles `graph` with or without the search, runs it on `inputs` and checks its first output
// against `expected`.
Compiled compile_and_check(Graph graph, bool substitute, const std::vector<Array>& inputs,
                           const Array& expected, Op counted) {
  SCOPED_TRACE(substitute ? "with substitutions" : "without");
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  options.substitution.enabled = substitute;
  Expected<CompiledModel> model = Compiler(options).compile(std::move(graph));
  EXPECT_TRUE(model) << model.status().message();
  if (!model) return {};
  Expected<std::vector<Array>> actual = model->run(inputs);
  EXPECT_TRUE(actual) << actual.status().message();
  for (int64_t i = 0; actual && i < expected.size(); ++i) {
    EXPECT_NEAR((*actual)[0][i], expected[i], 1e-4 * (1 + std::fabs(expected[i])))
        << "element " << i;
  }
  const auto count = std::ranges::count_if(model->graph().nodes(),
                                           [&](const Node* node) { return node->op() == counted; });
  return {model->compiled().partition.num_kernels(), static_cast<int>(count),
          model->compiled().rewrites};
}

// Freezes the projections' weights, compiles with or without the search, and checks the outputs.
Compiled compile_frozen(bool substitute) {
  Expected<Graph> parsed = parse_graph(kProjections);
  EXPECT_TRUE(parsed) << parsed.status().message();
  Graph graph = std::move(*parsed);
  std::vector<Array> inputs = random_inputs(graph, {.seed = 11});
  for (int weight : {3, 5, 7}) {  // scaled as trained weights are, so the softmax is not one-hot
    for (double& element : inputs[weight].data) element /= 16;
  }
  const std::vector<Array> expected = *interpret(graph, inputs);
  EXPECT_TRUE(freeze_inputs(graph, {{"wq", inputs[3]}, {"bq", inputs[4]}, {"wk", inputs[5]},
                                    {"bk", inputs[6]}, {"wv", inputs[7]}, {"bv", inputs[8]}}));
  return compile_and_check(std::move(graph), substitute, {inputs[0], inputs[1], inputs[2]},
                           expected[0], Op::matmul);
}

TEST(ShippedRules, TheBuildProvedEveryShippedRule) {
  EXPECT_GE(subst::shipped_rules().size(), 40u);
  EXPECT_TRUE(subst::shipped_rules_left_out().empty()) << subst::shipped_rules_left_out()[0];
}

// How many of each is asked for depends on the estimates (a merge of all three can raise the
// arena's peak past the unfused program's, fusion/memory_bound.cc); what must hold is that each
// applied merge lowers the estimate and removes a gemm.
TEST(SubstituteByCost, MergesFrozenProjectionsSharingAnInput) {
  const Compiled without = compile_frozen(false);
  EXPECT_FALSE(without.rewrites.substitution.has_value());
  EXPECT_EQ(without.contractions, 5);
  const Compiled with = compile_frozen(true);
  ASSERT_TRUE(with.rewrites.substitution.has_value());
  const SubstitutionSummary& search = *with.rewrites.substitution;
  ASSERT_GE(search.steps.size(), 1u);
  for (const SubstitutionStep& step : search.steps) {
    EXPECT_EQ(step.rule, "batched-linears-sharing-input-merge");
    EXPECT_LT(step.seconds_after, step.seconds_before);
  }
  EXPECT_EQ(with.contractions, 5 - static_cast<int>(search.steps.size()));
  EXPECT_LT(with.kernels, without.kernels);
}

// Two 1x1 convolutions of one input whose results are concatenated (an inception block's
// branches): merged, the concat of the split's pieces folds away and the relu runs on the
// merged convolution's blocks. The weights stay inputs: their concatenation is small.
TEST(SubstituteByCost, MergesConvolutionsSharingAnInput) {
  constexpr const char* kBranches = R"(graph @g(%x: f32[2,16,10,10], %w1: f32[24,16,1,1], %w2: f32[8,16,1,1]) {
  %c1 = conv(%x, %w1) {strides = [1, 1], pads = [0, 0, 0, 0]} : f32[2,24,10,10]
  %c2 = conv(%x, %w2) {strides = [1, 1], pads = [0, 0, 0, 0]} : f32[2,8,10,10]
  %y = concat(%c1, %c2) {axis = 1} : f32[2,32,10,10]
  %r = relu(%y) : f32[2,32,10,10]
  return %r
})";
  Expected<Graph> parsed = parse_graph(kBranches);
  ASSERT_TRUE(parsed) << parsed.status().message();
  const std::vector<Array> inputs = random_inputs(*parsed, {.seed = 5});
  const std::vector<Array> expected = *interpret(*parsed, inputs);
  // On a CPU the layout stage then makes each conv a conv_channels_last.
  const Compiled without =
      compile_and_check(parsed->clone(), false, inputs, expected[0], Op::conv_channels_last);
  EXPECT_EQ(without.contractions, 2);
  const Compiled with =
      compile_and_check(std::move(*parsed), true, inputs, expected[0], Op::conv_channels_last);
  ASSERT_TRUE(with.rewrites.substitution.has_value());
  ASSERT_EQ(with.rewrites.substitution->steps.size(), 1u);
  EXPECT_EQ(with.rewrites.substitution->steps[0].rule, "convs-sharing-input-merge");
  EXPECT_EQ(with.contractions, 1);
  EXPECT_LT(with.kernels, without.kernels);
}

}  // namespace
}  // namespace kiln
