// Constant variables in the rule format (subst/rule.h: `constant %c`, `constant %eps as
// epsilon`): parsing and its errors, printing, what they match; and canonicalize
// (subst/canonicalize.h) with the shipped canonical rules: each pattern replaced where it is
// the graph's own, left alone where a piece of it is read elsewhere, and the rules' order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "subst/canonicalize.h"
#include "subst/generate.h"
#include "subst/match.h"
#include "subst/rule.h"

namespace kiln::subst {
namespace {

std::vector<Rule> canonical_rules_file() {
  const char* root = std::getenv("KILN_SOURCE_DIR");
  Expected<std::vector<Rule>> rules = read_rules_file(
      std::string(root != nullptr ? root : ".") + "/src/subst/rules/canonical.rules");
  EXPECT_TRUE(rules.has_value()) << rules.status().message();
  return rules ? std::move(rules).value() : std::vector<Rule>{};
}

constexpr const char* kScaledNorm = R"(
rule scaled-norm
constant %eps as epsilon
constant %c
graph @source(%x: f32[2,5], %g: f32[5], %b: f32[5], %eps: f32[], %c: f32[]) {
  %n = layer_norm(%x, %g, %b) {epsilon = 0.5} : f32[2,5]
  %m = mul(%n, %eps) : f32[2,5]
  %y = div(%m, %c) : f32[2,5]
  return %y
}
graph @target(%x: f32[2,5], %g: f32[5], %b: f32[5], %eps: f32[], %c: f32[]) {
  %n = layer_norm(%x, %g, %b) {epsilon = 0.5} : f32[2,5]
  %m = mul(%n, %eps) : f32[2,5]
  %y = div(%m, %c) : f32[2,5]
  return %y
}
)";

std::string parse_error(const std::string& text) {
  Expected<std::vector<Rule>> rules = parse_rules(text, "test.rules");
  return rules ? "" : rules.status().message();
}

TEST(ConstantVariables, ParseAndPrintBack) {
  Expected<std::vector<Rule>> rules = parse_rules(kScaledNorm, "test.rules");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  const Rule& rule = rules->front();
  ASSERT_EQ(rule.constants.size(), 2u);
  EXPECT_EQ(rule.constants[0].variable, 3u);
  EXPECT_EQ(rule.constants[0].attribute, "epsilon");
  EXPECT_EQ(rule.constants[1].variable, 4u);
  EXPECT_EQ(rule.constants[1].attribute, "");
  const std::string printed = print_rules(*rules);
  EXPECT_NE(printed.find("constant %eps as epsilon\nconstant %c\n"), std::string::npos) << printed;
  Expected<std::vector<Rule>> again = parse_rules(printed, "printed.rules");
  ASSERT_TRUE(again.has_value()) << again.status().message();
  EXPECT_EQ(again->front().constants.size(), 2u);
}

TEST(ConstantVariables, MalformedDeclarationsAreErrors) {
  const std::string text = kScaledNorm;
  const auto with = [&](const std::string& lines) {
    const std::string declared = "constant %eps as epsilon\nconstant %c\n";
    std::string changed = text;
    return changed.replace(changed.find(declared), declared.size(), lines);
  };
  EXPECT_EQ(parse_error(with("constant %eps as epsilon\nconstant %c\n")), "");
  EXPECT_NE(parse_error(with("constant %nope\n")).find("names no parameter"), std::string::npos);
  EXPECT_NE(parse_error(with("constant %c\nconstant %c\n")).find("declared a constant twice"),
            std::string::npos);
  EXPECT_NE(parse_error(with("constant %c as alpha\n")).find("no node of the target has an "
                                                              "attribute 'alpha'"),
            std::string::npos);
  EXPECT_NE(parse_error(with("constant %c as axis\n")).find("has a 'axis' that is not a float"),
            std::string::npos);
  EXPECT_NE(parse_error(with("constant %c as\n")).find("is written 'constant %VARIABLE'"),
            std::string::npos);
  EXPECT_NE(parse_error(with("constant c\n")).find("is written 'constant %VARIABLE'"),
            std::string::npos);
}

// The canonical division rule on `divisor`'s kind of value.
size_t division_matches(const std::string& divisor) {
  const std::vector<Rule> rules = canonical_rules_file();
  const auto rule = std::ranges::find(rules, "division-by-constant", &Rule::name);
  EXPECT_NE(rule, rules.end());
  Expected<Graph> graph = parse_graph("graph @g(%x: f32[3,4], %y: f32[]) {\n" + divisor +
                                      "  %q = div(%x, %c) : f32[3,4]\n  return %q\n}");
  EXPECT_TRUE(graph.has_value()) << graph.status().message();
  if (!graph || rule == rules.end()) return 0;
  size_t matches = 0;
  for (const Rule& instance : instances_of(*rule)) matches += find_matches(*graph, instance).size();
  return matches;
}

TEST(ConstantVariables, MatchOnlyAConstantOfEqualElements) {
  EXPECT_EQ(division_matches("  %c = constant() {value = tensor<f32[]>[4.0]} : f32[]\n"), 1u);
  EXPECT_EQ(division_matches("  %c = neg(%y) : f32[]\n"), 0u);
  // A splat of rank 1 is not the rule's rank 0; a constant of rank 0 is always a splat.
  EXPECT_EQ(division_matches("  %c = constant() {value = tensor<f32[1]>[4.0]} : f32[1]\n"), 0u);
}

constexpr const char* kSoftmaxTwice = R"(graph @g(%x: f32[2,3,5]) {
  %m = reduce_max(%x) {axes = [-1], keepdims = true} : f32[2,3,1]
  %d = sub(%x, %m) : f32[2,3,5]
  %e = exp(%d) : f32[2,3,5]
  %s = sum(%e) {axes = [-1], keepdims = true} : f32[2,3,1]
  %y = div(%e, %s) : f32[2,3,5]
  %m2 = reduce_max(%y) {axes = [-1], keepdims = true} : f32[2,3,1]
  %d2 = sub(%y, %m2) : f32[2,3,5]
  %e2 = exp(%d2) : f32[2,3,5]
  %s2 = sum(%e2) {axes = [-1], keepdims = true} : f32[2,3,1]
  %y2 = div(%e2, %s2) : f32[2,3,5]
  %eight = constant() {value = tensor<f32[]>[8.0]} : f32[]
  %z = div(%y2, %eight) : f32[2,3,5]
  return %z, %s2
})";

TEST(Canonicalize, ReplacesWhatIsThePatternsOwnAndKeepsTheOutputs) {
  Expected<Graph> graph = parse_graph(kSoftmaxTwice);
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  const std::vector<Array> inputs = random_inputs(*graph, {.seed = 1});
  const std::vector<Array> before = *interpret(*graph, inputs);
  const Recognitions recognized = canonicalize(*graph, canonical_rules_file());
  // The second softmax's sum is a graph output, so its pattern is not its own: left alone.
  const Recognitions expected = {{"division-by-constant", 1}, {"softmax", 1}};
  EXPECT_EQ(recognized, expected);
  EXPECT_EQ(std::ranges::count(graph->nodes(), Op::softmax, &Node::op), 1) << print_graph(*graph);
  const std::vector<Array> after = *interpret(*graph, inputs);
  for (size_t o = 0; o < before.size(); ++o) {
    for (int64_t i = 0; i < before[o].size(); ++i) {
      EXPECT_NEAR(after[o][i], before[o][i], 1e-6 * (1 + std::fabs(before[o][i])));
    }
  }
}

// gelu's division by sqrt(2) is also a division by a constant; the gelu rule comes first.
TEST(Canonicalize, GeluIsRecognizedBeforeItsDivisionBecomesAProduct) {
  Expected<Graph> graph = parse_graph(R"(graph @g(%x: f32[3,5]) {
  %root2 = constant() {value = tensor<f32[]>[1.4142135381698608]} : f32[]
  %s = div(%x, %root2) : f32[3,5]
  %e = erf(%s) : f32[3,5]
  %one = constant() {value = tensor<f32[]>[1.0]} : f32[]
  %p = add(%one, %e) : f32[3,5]
  %half = constant() {value = tensor<f32[]>[0.5]} : f32[]
  %m = mul(%half, %x) : f32[3,5]
  %y = mul(%p, %m) : f32[3,5]
  return %y
})");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  const Recognitions recognized = canonicalize(*graph, canonical_rules_file());
  EXPECT_EQ(recognized, (Recognitions{{"gelu-erf-half-first", 1}}));
  EXPECT_EQ(graph->num_nodes(), 1) << print_graph(*graph);
}

// F.scaled_dot_product_attention as torch.onnx.export writes it (torch 2.9, opset 14): q and
// k^T each scaled by the scale's square root; the scale moves onto the scores, and the
// product of the two constants folds later.
TEST(Canonicalize, AttentionsSplitScaleMovesOntoTheScores) {
  Expected<Graph> graph = parse_graph(R"(graph @g(%q: f32[2,4,16,8], %k: f32[2,4,16,8], %m: f32[2,1,16,16]) {
  %kt = transpose(%k) {perm = [0, 1, 3, 2]} : f32[2,4,8,16]
  %s1 = constant() {value = tensor<f32[1]>[0.5946035385131836]} : f32[1]
  %qs = mul(%q, %s1) : f32[2,4,16,8]
  %s2 = constant() {value = tensor<f32[1]>[0.5946035385131836]} : f32[1]
  %ks = mul(%kt, %s2) : f32[2,4,8,16]
  %scores = matmul(%qs, %ks) : f32[2,4,16,16]
  %masked = add(%scores, %m) : f32[2,4,16,16]
  %p = softmax(%masked) : f32[2,4,16,16]
  return %p
})");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  const std::vector<Array> inputs = random_inputs(*graph, {.seed = 2});
  const std::vector<Array> before = *interpret(*graph, inputs);
  EXPECT_EQ(canonicalize(*graph, canonical_rules_file()),
            (Recognitions{{"attention-scale-on-scores", 1}}));
  const Node* product = graph->find_value("scores")->producer();
  ASSERT_EQ(product->op(), Op::mul) << print_graph(*graph);
  EXPECT_EQ(product->input(0)->producer()->op(), Op::matmul);
  const std::vector<Array> after = *interpret(*graph, inputs);
  for (int64_t i = 0; i < before[0].size(); ++i) {
    EXPECT_NEAR(after[0][i], before[0][i], 1e-6 * (1 + std::fabs(before[0][i])));
  }
}

}  // namespace
}  // namespace kiln::subst
