// Canonicalization in the compiler (subst/canonicalize.h): the canonical rules the build kept,
// and a layer norm and GELU as torch.onnx.export writes them below opset 17, recognized,
// compiled and compared with the interpreter on the graph as exported.
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
#include "subst/shipped_rules.h"

namespace kiln {
namespace {

// nn.LayerNorm(8, eps=1e-12) then F.gelu, as exported at opset 14 (names shortened).
constexpr const char* kExportedNormAndGelu = R"(graph @g(%x: f32[2,3,8], %w: f32[8], %b: f32[8]) {
  %m = mean(%x) {axes = [-1], keepdims = true} : f32[2,3,1]
  %d = sub(%x, %m) : f32[2,3,8]
  %two = constant() {value = tensor<f32[]>[2.0]} : f32[]
  %p = pow(%d, %two) : f32[2,3,8]
  %v = mean(%p) {axes = [-1], keepdims = true} : f32[2,3,1]
  %eps = constant() {value = tensor<f32[]>[9.999999960041972e-13]} : f32[]
  %ve = add(%v, %eps) : f32[2,3,1]
  %s = sqrt(%ve) : f32[2,3,1]
  %n = div(%d, %s) : f32[2,3,8]
  %nw = mul(%n, %w) : f32[2,3,8]
  %y = add(%nw, %b) : f32[2,3,8]
  %root2 = constant() {value = tensor<f32[]>[1.4142135381698608]} : f32[]
  %q = div(%y, %root2) : f32[2,3,8]
  %e = erf(%q) : f32[2,3,8]
  %one = constant() {value = tensor<f32[]>[1.0]} : f32[]
  %e1 = add(%e, %one) : f32[2,3,8]
  %ye = mul(%y, %e1) : f32[2,3,8]
  %half = constant() {value = tensor<f32[]>[0.5]} : f32[]
  %z = mul(%ye, %half) : f32[2,3,8]
  return %z
})";

TEST(CanonicalRules, TheBuildKeptEveryCanonicalRule) {
  // The rules at f32 are the per-rank rules the file held before it listed dtypes and ranks.
  size_t f32_instances = 0;
  for (const subst::Rule& rule : subst::canonical_rules()) {
    for (const subst::Rule& instance : subst::instances_of(rule)) {
      f32_instances += instance.source.outputs()[0]->dtype() == DType::f32 ? 1 : 0;
    }
  }
  EXPECT_GE(f32_instances, 20u);
  EXPECT_TRUE(subst::canonical_rules_left_out().empty()) << subst::canonical_rules_left_out()[0];
  for (const subst::Rule& rule : subst::canonical_rules()) {
    const Status checked = subst::check_rule_numerically(rule);
    EXPECT_TRUE(checked.is_ok()) << checked.message();
  }
}

struct Compiled {
  GraphRewrites rewrites;
  std::vector<Op> ops;  // of the compiled graph
};

Compiled compile_and_check(bool canonicalize) {
  SCOPED_TRACE(canonicalize ? "canonicalized" : "as exported");
  Expected<Graph> parsed = parse_graph(kExportedNormAndGelu);
  EXPECT_TRUE(parsed) << parsed.status().message();
  if (!parsed) return {};
  const std::vector<Array> inputs = random_inputs(*parsed, {.seed = 3});
  const std::vector<Array> expected = *interpret(*parsed, inputs);
  CompileOptions options;
  options.fusion.profile = cost::reference_profile();
  if (!canonicalize) options.rewrites.disabled.emplace(kCanonicalizeRewrite);
  Expected<CompiledModel> model = Compiler(options).compile(std::move(*parsed));
  EXPECT_TRUE(model) << model.status().message();
  if (!model) return {};
  Expected<std::vector<Array>> actual = model->run(inputs);
  EXPECT_TRUE(actual) << actual.status().message();
  for (int64_t i = 0; actual && i < expected[0].size(); ++i) {
    EXPECT_NEAR((*actual)[0][i], expected[0][i], 1e-5 * (1 + std::fabs(expected[0][i])))
        << "element " << i;
  }
  Compiled compiled{model->compiled().rewrites, {}};
  for (const Node* node : model->graph().nodes()) compiled.ops.push_back(node->op());
  return compiled;
}

TEST(Canonicalize, AnExportedLayerNormAndGeluCompileAsTheComposites) {
  const Compiled canonical = compile_and_check(true);
  const std::map<std::string, int> expected = {
      {"gelu-erf", 1}, {"layer-norm", 1}, {"square-as-product", 1}};
  EXPECT_EQ(canonical.rewrites.passes.recognized, expected);
  EXPECT_EQ(std::ranges::count(canonical.ops, Op::layer_norm), 1);
  EXPECT_EQ(std::ranges::count(canonical.ops, Op::gelu), 1);
  EXPECT_EQ(std::ranges::count(canonical.ops, Op::pow), 0);
  EXPECT_EQ(canonical.rewrites.passes.nodes_before, 19);

  const Compiled exported = compile_and_check(false);
  EXPECT_TRUE(exported.rewrites.passes.recognized.empty());
  EXPECT_EQ(std::ranges::count(exported.ops, Op::layer_norm), 0);
  EXPECT_EQ(std::ranges::count(exported.ops, Op::pow), 1);
}

}  // namespace
}  // namespace kiln
