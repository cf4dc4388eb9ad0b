// Rewrite rules as data (subst/): the rule file format and its errors, the numeric check,
// the matcher's conditions, the applier's refusals, the Z3 proofs (shipped rules proved, wrong
// ones refuted, unknown ops refused), and the property that every shipped rule, applied to
// random graphs that hold its source, leaves the interpreter's outputs unchanged.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <map>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/dead_code.h"
#include "subst/apply.h"
#include "subst/generate.h"
#include "subst/match.h"
#include "subst/prove.h"
#include "subst/rule.h"
#include "subst/search.h"

namespace kiln::subst {
namespace {

// That `graph` computes `before` on `inputs` (a rewritten graph against its original's results),
// within f32 rounding.
void expect_outputs_near(const Graph& graph, const std::vector<Array>& inputs,
                         const std::vector<Array>& before) {
  const std::vector<Array> after = *interpret(graph, inputs);
  ASSERT_EQ(after.size(), before.size());
  for (size_t o = 0; o < before.size(); ++o) {
    for (int64_t i = 0; i < before[o].size(); ++i) {
      EXPECT_NEAR(after[o][i], before[o][i], 1e-5 * (1 + std::fabs(before[o][i])));
    }
  }
}

std::vector<Rule> rules_file(const std::string& name) {
  const char* root = std::getenv("KILN_SOURCE_DIR");
  const std::string dir = root != nullptr ? root : ".";
  Expected<std::vector<Rule>> rules = read_rules_file(dir + "/src/subst/rules/" + name);
  EXPECT_TRUE(rules.has_value()) << rules.status().message();
  return rules ? std::move(rules).value() : std::vector<Rule>{};
}

std::vector<Rule> shipped_rules() { return rules_file("handwritten.rules"); }

const Rule& rule_named(const std::vector<Rule>& rules, std::string_view name) {
  for (const Rule& rule : rules) {
    if (rule.name == name) return rule;
  }
  ADD_FAILURE() << "no rule " << name;
  return rules.front();
}

std::string parse_error(std::string_view text) {
  Expected<std::vector<Rule>> rules = parse_rules(text, "test.rules");
  return rules ? "" : rules.status().message();
}

constexpr std::string_view kNegNeg = R"(
rule neg-neg
graph @source(%x: f32[2,3]) {
  %n = neg(%x) : f32[2,3]
  %y = neg(%n) : f32[2,3]
  return %y
}
graph @target(%x: f32[2,3]) {
  return %x
}
)";

// A wrong rule whose two sides agree in types: exp(a) exp(b) is exp(a + b), not exp(a b).
constexpr std::string_view kExpOfProduct = R"(
rule exp-of-product  // wrong: exp(a) exp(b) is exp(a + b)
graph @source(%a: f32[2,3], %b: f32[2,3]) {
  %x = exp(%a) : f32[2,3]
  %y = exp(%b) : f32[2,3]
  %p = mul(%x, %y) : f32[2,3]
  return %p
}
graph @target(%a: f32[2,3], %b: f32[2,3]) {
  %s = mul(%a, %b) : f32[2,3]
  %p = exp(%s) : f32[2,3]
  return %p
}
)";

TEST(Rules, ShippedRulesParseAndPassTheirNumericCheck) {
  const std::vector<Rule> rules = shipped_rules();
  EXPECT_GE(rules.size(), 9u);
  for (const Rule& rule : rules) {
    const Status checked = check_rule_numerically(rule);
    EXPECT_TRUE(checked.is_ok()) << checked.message();
  }
}

TEST(Rules, AWrongRuleFailsItsNumericCheck) {
  Expected<std::vector<Rule>> rules = parse_rules(kExpOfProduct, "wrong.rules");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  const Status checked = check_rule_numerically(rules->front());
  EXPECT_NE(checked.message().find("wrong.rules:2: rule 'exp-of-product' is wrong"),
            std::string::npos)
      << checked.message();
}

TEST(Rules, MalformedFilesAreErrorsWithTheirPlace) {
  EXPECT_EQ(parse_error(kNegNeg), "");
  EXPECT_NE(parse_error("rulez x").find("test.rules:1:1: expected 'rule NAME'"), std::string::npos);
  EXPECT_NE(parse_error("rule a/b").find("letters, digits"), std::string::npos);
  EXPECT_NE(parse_error(std::string(kNegNeg) + std::string(kNegNeg)).find("a second rule named"),
            std::string::npos);
  // An unclosed graph: the IR parser, reading from the rule's position, says where.
  EXPECT_NE(parse_error("rule r\ngraph @s(%x: f32[2]) {\n  return %x\n")
                .find("test.rules:4:1: expected '}', found end of input"),
            std::string::npos);
  EXPECT_NE(parse_error("rule r\ngraph @s(%x: f32[2]) {\n  %y = neg(%x) : f32[2]\n  return %y\n}\n")
                .find("expected 'graph'"),
            std::string::npos);
  // The IR parser's errors keep the file's lines.
  EXPECT_NE(parse_error("rule r\ngraph @s(%x: f32[2]) {\n  %y = nope(%x) : f32[2]\n  return %y\n}\n"
                        "graph @t(%x: f32[2]) {\n  return %x\n}\n")
                .find("test.rules:3:"),
            std::string::npos);
  const std::string mismatch = parse_error(R"(
rule r
graph @source(%x: f32[2,3]) {
  %y = neg(%x) : f32[2,3]
  return %y
}
graph @target(%z: f32[2,3]) {
  return %z
}
)");
  EXPECT_NE(mismatch.find("parameter 0 is %x: f32[2,3] in the source but %z"), std::string::npos)
      << mismatch;
  const std::string unused = parse_error(R"(
rule r
graph @source(%x: f32[2,3], %u: f32[2,3]) {
  %y = neg(%x) : f32[2,3]
  return %y
}
graph @target(%x: f32[2,3], %u: f32[2,3]) {
  return %x
}
)");
  EXPECT_NE(unused.find("the source does not use %u"), std::string::npos) << unused;
  const std::string types = parse_error(R"(
rule r
graph @source(%x: f32[2,3]) {
  %y = neg(%x) : f32[2,3]
  return %y
}
graph @target(%x: f32[2,3]) {
  %t = transpose(%x) : f32[3,2]
  return %t
}
)");
  EXPECT_NE(types.find("result 0 is f32[2,3] in the source but f32[3,2] in the target"),
            std::string::npos)
      << types;
}

TEST(Match, SharedLhsMatmulsAreMatchedAndMerged) {
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "matmul-shared-lhs-distributes");
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.tanh(b.input("x", DType::f32, {6, 7}));
  Value* w1 = b.input("w1", DType::f32, {7, 8});
  Value* w2 = b.input("w2", DType::f32, {7, 8});
  graph.set_outputs({b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2)))});
  const std::vector<Array> inputs = random_inputs(graph);
  const std::vector<Array> before = *interpret(graph, inputs);
  const std::vector<Match> matches = find_matches(graph, rule);
  ASSERT_EQ(matches.size(), 2u);  // the sum either way round
  EXPECT_EQ(matches[0].variables[0], x);
  ASSERT_TRUE(apply_match(graph, rule, matches[0]));
  eliminate_dead_code(graph);
  ASSERT_TRUE(verify(graph).is_ok());
  int matmuls = 0;
  for (const Node* node : graph.nodes()) matmuls += node->op() == Op::matmul;
  EXPECT_EQ(matmuls, 1) << print_graph(graph);
  expect_outputs_near(graph, inputs, before);
}

TEST(Match, OperandsOfAddAndMulMatchInEitherOrder) {
  // b*a + c*a: the shared operand is on the right of both products, where the rule has it on
  // the left. Two matches, one per order of the sum's operands.
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "mul-distributes-over-add");
  Graph graph;
  GraphBuilder b(graph);
  Value* a = b.input("a", DType::f32, {2, 3});
  Value* bb = b.input("b", DType::f32, {2, 3});
  Value* c = b.input("c", DType::f32, {2, 3});
  graph.set_outputs({b.add(b.mul(bb, a), b.mul(c, a))});
  const std::vector<Array> inputs = random_inputs(graph);
  const std::vector<Array> before = *interpret(graph, inputs);
  const std::vector<Match> matches = find_matches(graph, rule);
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(matches[0].variables[0], a);
  EXPECT_EQ(matches[1].variables[0], a);
  ASSERT_TRUE(apply_match(graph, rule, matches[0]));
  eliminate_dead_code(graph);
  EXPECT_EQ(graph.num_nodes(), 2) << print_graph(graph);
  expect_outputs_near(graph, inputs, before);
  // A matmul does not commute: with the shared operand on the right, the left-operand rule
  // does not match.
  Graph products;
  GraphBuilder p(products);
  Value* w = p.input("w", DType::f32, {3, 3});
  products.set_outputs({p.add(p.matmul(p.input("x1", DType::f32, {3, 3}), w),
                              p.matmul(p.input("x2", DType::f32, {3, 3}), w))});
  EXPECT_TRUE(find_matches(products, rule_named(rules, "matmul-shared-lhs-distributes")).empty());
}

// ONNX writes a convolution's default window out (dilations = [1, 1], pads = [0, 0, 0, 0]) where
// a rule leaves it empty: the two spell one convolution and match; other dilations do not.
TEST(Match, WindowAttributesMatchByMeaning) {
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "convs-sharing-input-merge");
  for (const bool dilated : {false, true}) {
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, {2, 3, 6, 6});
    const std::vector<int64_t> dilations = dilated ? std::vector<int64_t>{2, 2}
                                                   : std::vector<int64_t>{1, 1};
    const auto conv = [&](const char* weight, int64_t channels) {
      return b.conv(x, b.input(weight, DType::f32, {channels, 3, 1, 1}), {1, 1}, {}, dilations, 1);
    };
    graph.set_outputs({conv("w1", 4), conv("w2", 5)});
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_EQ(find_matches(graph, rule).size(), dilated ? 0u : 2u) << print_graph(graph);
  }
}

TEST(Match, AMatchCarriesOverToACopyOfItsGraph) {
  // Applying the carried-over match to a copy gives what applying the original gives.
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "matmul-shared-lhs-distributes");
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {6, 7});
  graph.set_outputs({b.add(b.matmul(x, b.input("w1", DType::f32, {7, 8})),
                           b.matmul(x, b.input("w2", DType::f32, {7, 8})))});
  const std::vector<Match> matches = find_matches(graph, rule);
  ASSERT_EQ(matches.size(), 2u);  // the sum either way round
  Graph copy = graph.clone();
  const Match carried = match_in_copy(graph, matches[0], copy);
  ASSERT_EQ(carried.nodes.size(), matches[0].nodes.size());
  for (size_t n = 0; n < carried.nodes.size(); ++n) {
    EXPECT_NE(carried.nodes[n], matches[0].nodes[n]);
    EXPECT_EQ(print_node(*carried.nodes[n]), print_node(*matches[0].nodes[n]));
  }
  EXPECT_EQ(carried.variables[0], copy.inputs()[0]);
  ASSERT_TRUE(apply_match(copy, rule, carried));
  ASSERT_TRUE(apply_match(graph, rule, matches[0]));
  EXPECT_EQ(print_graph(copy), print_graph(graph));
}

TEST(Match, ValuesReadOutsideTheMatchOrOfAnotherRankAreNotMatched) {
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "matmul-shared-lhs-distributes");
  {
    // The first product is also a graph output: the target would not compute it.
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, {6, 7});
    Value* p = b.matmul(x, b.input("w1", DType::f32, {7, 8}));
    graph.set_outputs({b.add(p, b.matmul(x, b.input("w2", DType::f32, {7, 8}))), p});
    EXPECT_TRUE(find_matches(graph, rule).empty());
  }
  {
    // Batched matmuls: a rank-2 variable does not match a rank-3 value.
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, {2, 6, 7});
    graph.set_outputs({b.add(b.matmul(x, b.input("w1", DType::f32, {2, 7, 8})),
                             b.matmul(x, b.input("w2", DType::f32, {2, 7, 8})))});
    EXPECT_TRUE(find_matches(graph, rule).empty());
  }
  {
    // Different left operands.
    Graph graph;
    GraphBuilder b(graph);
    Value* w = b.input("w", DType::f32, {7, 8});
    graph.set_outputs({b.add(b.matmul(b.input("x", DType::f32, {6, 7}), w),
                             b.matmul(b.input("z", DType::f32, {6, 7}), w))});
    EXPECT_TRUE(find_matches(graph, rule).empty());
  }
}

// Two matmuls sharing their left operand, merged; `extents` as given (or none).
std::string merge_rule(std::string_view extents) {
  return fmt::format(R"(
rule merge
{}
graph @source(%x: f32[2,3], %w1: f32[3,4], %w2: f32[3,5]) {{
  %y1 = matmul(%x, %w1) : f32[2,4]
  %y2 = matmul(%x, %w2) : f32[2,5]
  return %y1, %y2
}}
graph @target(%x: f32[2,3], %w1: f32[3,4], %w2: f32[3,5]) {{
  %w = concat(%w1, %w2) {{axis = 1}} : f32[3,9]
  %y = matmul(%x, %w) : f32[2,9]
  %y1, %y2 = split(%y) {{axis = 1, sizes = [4, 5]}} : f32[2,4], f32[2,5]
  return %y1, %y2
}}
)", extents);
}

TEST(Apply, DeclaredExtentsBindToTheMatchAndLiteralOnesMustFit) {
  // The right operands have 6 and 2 columns. Declared, the split's sizes become [6, 2];
  // literal, [4, 5] does not fit and the application is refused.
  for (const bool declared : {true, false}) {
    SCOPED_TRACE(declared ? "declared" : "literal");
    Expected<std::vector<Rule>> rules =
        parse_rules(merge_rule(declared ? "extents %w1[1], %w2[1]" : ""), "merge.rules");
    ASSERT_TRUE(rules.has_value()) << rules.status().message();
    ASSERT_TRUE(check_rule_numerically(rules->front()).is_ok());
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, {5, 3});
    graph.set_outputs({b.matmul(x, b.input("w1", DType::f32, {3, 6})),
                       b.matmul(x, b.input("w2", DType::f32, {3, 2}))});
    const std::vector<Array> inputs = random_inputs(graph);
    const std::vector<Array> before = *interpret(graph, inputs);
    const std::string printed = print_graph(graph);
    const std::vector<Match> matches = find_matches(graph, rules->front());
    ASSERT_EQ(matches.size(), 2u);  // the results either way round
    bool applied = false;
    for (const Match& match : matches) applied = applied || apply_match(graph, rules->front(), match);
    EXPECT_EQ(applied, declared);
    if (!declared) {
      EXPECT_EQ(print_graph(graph), printed);
      continue;
    }
    eliminate_dead_code(graph);
    // The first match takes the results either way round: [6, 2] or [2, 6].
    const std::string merged = print_graph(graph);
    EXPECT_TRUE(merged.find("sizes = [6, 2]") != std::string::npos ||
                merged.find("sizes = [2, 6]") != std::string::npos)
        << merged;
    expect_outputs_near(graph, inputs, before);
  }
}

TEST(Apply, AReplacedGraphOutputKeepsItsName) {
  const std::vector<Rule> rules = shipped_rules();
  const Rule& rule = rule_named(rules, "transpose-of-matmul");
  Graph graph;
  GraphBuilder b(graph);
  Value* m = b.matmul(b.input("a", DType::f32, {4, 6}), b.input("b", DType::f32, {6, 3}));
  Value* t = b.transpose(m, {1, 0});
  graph.rename_value(t, "scores");
  graph.set_outputs({t});
  const std::vector<Match> matches = find_matches(graph, rule);
  ASSERT_EQ(matches.size(), 1u);
  ASSERT_TRUE(apply_match(graph, rule, matches[0]));
  eliminate_dead_code(graph);
  EXPECT_EQ(graph.outputs()[0]->name(), "scores");
  EXPECT_EQ(graph.outputs()[0]->producer()->op(), Op::matmul);
  EXPECT_EQ(graph.num_nodes(), 1);
}

TEST(Rules, MalformedExtentsAreErrors) {
  EXPECT_NE(parse_error(merge_rule("extents %w3[1]")).find("names no parameter"), std::string::npos);
  EXPECT_NE(parse_error(merge_rule("extents %w1[2]")).find("is not an axis of %w1 (rank 2)"),
            std::string::npos);
  EXPECT_NE(parse_error(merge_rule("extents w1")).find("written %VARIABLE[AXIS]"), std::string::npos);
  EXPECT_NE(parse_error(merge_rule("extents %w1[0], %x[1]")).find("distinct example extents"),
            std::string::npos);
  EXPECT_NE(parse_error(merge_rule("extents")).find("lists no extent"), std::string::npos);
  EXPECT_EQ(parse_error(merge_rule("extents %w1[1]  // w2's columns stay literal")), "");
}

// Two 1x1 convolutions of x summed: one convolution of the summed weights, at strides and
// pads that are choices.
std::string conv_sum_rule(const std::string& choices) {
  return "rule convs-sum\n" + choices + R"(
graph @source(%x: f32[2,3,6,6], %a: f32[4,3,1,1], %b: f32[4,3,1,1]) {
  %p = conv(%x, %a) {strides = [1, 1], pads = [0, 0, 0, 0]} : f32[2,4,6,6]
  %q = conv(%x, %b) {strides = [1, 1], pads = [0, 0, 0, 0]} : f32[2,4,6,6]
  %s = add(%p, %q) : f32[2,4,6,6]
  return %s
}
graph @target(%x: f32[2,3,6,6], %a: f32[4,3,1,1], %b: f32[4,3,1,1]) {
  %w = add(%a, %b) : f32[4,3,1,1]
  %s = conv(%x, %w) {strides = [1, 1], pads = [0, 0, 0, 0]} : f32[2,4,6,6]
  return %s
}
)";
}

TEST(Rules, MalformedAttributeChoicesAreErrors) {
  EXPECT_NE(parse_error(conv_sum_rule("attributes strides = [2, 2]")).find("not one of the choices"),
            std::string::npos);
  EXPECT_NE(parse_error(conv_sum_rule("attributes groups2 = 1 | 2")).find("no node of the source"),
            std::string::npos);
  EXPECT_NE(parse_error(conv_sum_rule("attributes strides = [1, x]")).find("not an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(conv_sum_rule("attributes strides [1, 1]")).find("NAME = VALUE"),
            std::string::npos);
  EXPECT_NE(parse_error(conv_sum_rule("attributes strides = [1, 1]\nattributes strides = [1, 1]"))
                .find("a second choice"),
            std::string::npos);
  EXPECT_EQ(parse_error(conv_sum_rule("attributes strides = [1, 1] | [2, 2]")), "");
}

// A 1x1 convolution's dilations do not change its shape, so two of different dilations can be
// summed: they must not match a rule that gives both one value.
TEST(Match, AttributeChoicesBindOneValueForTheWholeMatch) {
  Expected<std::vector<Rule>> rules =
      parse_rules(conv_sum_rule("attributes dilations = [] | [2, 2]"), "choices.rules");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  const Rule& rule = rules->front();
  for (const bool same : {true, false}) {
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, {2, 3, 8, 8});
    const auto conv = [&](const std::string& weight, std::vector<int64_t> dilations) {
      return b.apply1(Op::conv, {x, b.input(weight, DType::f32, {4, 3, 1, 1})},
                      Attrs{{"strides", AttrValue(std::vector<int64_t>{1, 1})},
                            {"pads", AttrValue(std::vector<int64_t>{0, 0, 0, 0})},
                            {"dilations", AttrValue(std::move(dilations))}});
    };
    Value* sum = b.add(conv("a", {2, 2}), conv("b", same ? std::vector<int64_t>{2, 2}
                                                         : std::vector<int64_t>{}));
    ASSERT_TRUE(b.ok()) << b.status().message();
    graph.set_outputs({sum});
    const std::vector<Match> matches = find_matches(graph, rule);
    if (!same) {
      EXPECT_TRUE(matches.empty()) << "convolutions of different dilations matched as one choice";
      continue;
    }
    ASSERT_EQ(matches.size(), 2u);  // the sum either way round
    EXPECT_EQ(matches[0].attributes.at("dilations").as_ints(), (std::vector<int64_t>{2, 2}));
    const std::vector<Array> inputs = random_inputs(graph);
    const std::vector<Array> before = *interpret(graph, inputs);
    ASSERT_TRUE(apply_match(graph, rule, matches[0]));
    eliminate_dead_code(graph);
    ASSERT_EQ(graph.num_nodes(), 2) << print_graph(graph);  // the weights' sum, one conv
    EXPECT_EQ(graph.nodes()[1]->attrs().get_ints("dilations"), (std::vector<int64_t>{2, 2}));
    expect_outputs_near(graph, inputs, before);
  }
}

// The proof covers every choice: twice the instances for two values of the strides.
TEST(Prove, AttributeChoicesAreProvedAtEveryValue) {
  Expected<std::vector<Rule>> two =
      parse_rules(conv_sum_rule("attributes strides = [1, 1] | [2, 2]"), "two.rules");
  Expected<std::vector<Rule>> one = parse_rules(conv_sum_rule(""), "one.rules");
  ASSERT_TRUE(two.has_value() && one.has_value());
  Expected<Proof> both = prove_rule(two->front());
  Expected<Proof> literal = prove_rule(one->front());
  ASSERT_TRUE(both.has_value()) << both.status().message();
  ASSERT_TRUE(literal.has_value()) << literal.status().message();
  EXPECT_EQ(both->instances + both->skipped, 2 * (literal->instances + literal->skipped));
}

TEST(Prove, ShippedRulesAreProved) {
  ASSERT_TRUE(prove_axioms_numerically().is_ok());
  for (const Rule& rule : shipped_rules()) {
    Expected<Proof> proof = prove_rule(rule);
    ASSERT_TRUE(proof.has_value()) << proof.status().message();
    EXPECT_GT(proof->instances, 1) << rule.name;  // the example and other extents
  }
}

// relu(x + x) = 2 relu(x) over an image: Z3 times out on all 1,470 elements' if-then-elses as one
// query (it did, before the prover went on element by element), and decides each alone at once.
TEST(Prove, ElementsTheWholeQueryCannotDecideAreProvedOneByOne) {
  Expected<std::vector<Rule>> rules = parse_rules(R"(
rule relu-of-doubled-image
graph @source(%x: f32[5,6,7,7]) {
  %a = add(%x, %x) : f32[5,6,7,7]
  %y = relu(%a) : f32[5,6,7,7]
  return %y
}
graph @target(%x: f32[5,6,7,7]) {
  %r = relu(%x) : f32[5,6,7,7]
  %y = add(%r, %r) : f32[5,6,7,7]
  return %y
}
)", "doubled.rules");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  Expected<Proof> proof = prove_rule(rules->front(), {.max_extent = 1});
  EXPECT_TRUE(proof.has_value()) << proof.status().message();
}

TEST(Prove, WrongAndUnprovableRulesAreRejected) {
  Expected<std::vector<Rule>> rules = parse_rules(std::string(kExpOfProduct) + R"(
rule relu-of-neg-is-neg  // wrong: relu(-x) is not -x
graph @source(%x: f32[2,3]) {
  %n = neg(%x) : f32[2,3]
  %y = relu(%n) : f32[2,3]
  return %y
}
graph @target(%x: f32[2,3]) {
  %y = neg(%x) : f32[2,3]
  return %y
}

rule softmax-twice  // true, but softmax has no symbolic semantics
graph @source(%x: f32[2,3]) {
  %s = softmax(%x) : f32[2,3]
  %y = identity(%s) : f32[2,3]
  return %y
}
graph @target(%x: f32[2,3]) {
  %y = softmax(%x) : f32[2,3]
  return %y
}
)", "wrong.rules");
  ASSERT_TRUE(rules.has_value()) << rules.status().message();
  ASSERT_EQ(rules->size(), 3u);
  for (size_t r = 0; r < 2; ++r) {
    Rejection rejection = Rejection::unsupported;
    Expected<Proof> proof = prove_rule((*rules)[r], {}, &rejection);
    ASSERT_FALSE(proof.has_value());
    EXPECT_EQ(rejection, Rejection::refuted);
    const std::string& message = proof.status().message();
    EXPECT_NE(message.find("wrong.rules:"), std::string::npos) << message;
    EXPECT_NE(message.find("does not hold with %"), std::string::npos) << message;
    EXPECT_NE(message.find(": f32["), std::string::npos) << message;
  }
  Rejection rejection = Rejection::refuted;
  Expected<Proof> unprovable = prove_rule((*rules)[2], {}, &rejection);
  ASSERT_FALSE(unprovable.has_value());
  EXPECT_EQ(rejection, Rejection::unsupported);
  EXPECT_NE(unprovable.status().message().find("cannot be proved: no symbolic semantics for 'softmax'"),
            std::string::npos)
      << unprovable.status().message();
}

// The number of nodes: a cost for tests of the search that needs no partitioner.
Expected<double> node_count(const Graph& graph) { return static_cast<double>(graph.num_nodes()); }

TEST(Search, AppliesRulesThatLowerTheCostAndStaysDeterministic) {
  // relu(relu(x)) negated twice, then a second branch where two matmuls share x.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 6});
  Value* twice = b.neg(b.neg(b.relu(b.relu(x))));
  graph.set_outputs({twice});
  const std::vector<Rule> rules = shipped_rules();
  Expected<SearchResult> first = search_substitutions(graph, rules, node_count);
  ASSERT_TRUE(first.has_value()) << first.status().message();
  EXPECT_EQ(first->initial_cost, 4);
  EXPECT_EQ(first->cost, 1);
  // Both rewrites at once: each lowers the input's cost and they do not overlap.
  ASSERT_EQ(first->rewrites.size(), 1u);
  EXPECT_EQ(first->rewrites[0].applications, 2);
  EXPECT_EQ(first->graph.num_nodes(), 1);
  EXPECT_EQ(first->graph.nodes()[0]->op(), Op::relu);
  EXPECT_FALSE(first->stopped_at_limit);
  Expected<SearchResult> second = search_substitutions(graph, rules, node_count);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(print_graph(second->graph), print_graph(first->graph));
  for (size_t r = 0; r < first->rewrites.size(); ++r) {
    EXPECT_EQ(second->rewrites[r].rule, first->rewrites[r].rule);
  }
  const std::vector<Array> inputs = random_inputs(graph);
  EXPECT_EQ(interpret(graph, inputs)->front().data, interpret(first->graph, inputs)->front().data);
  // One expansion: the input's rewrites are priced alone and together (they do not overlap),
  // then the search stops.
  Expected<SearchResult> limited = search_substitutions(graph, rules, node_count, {.max_expansions = 1});
  ASSERT_TRUE(limited.has_value());
  EXPECT_EQ(limited->expanded, 1);
  EXPECT_TRUE(limited->stopped_at_limit);
  EXPECT_EQ(limited->cost, 1);
  ASSERT_EQ(limited->rewrites.size(), 1u);
  EXPECT_EQ(limited->rewrites[0].applications, 2);
  EXPECT_EQ(limited->rewrites[0].rule, "neg-neg-cancel, relu-idempotent");
}

TEST(Search, GraphsThatDifferOnlyInOperandOrderOrNamesArePricedOnce) {
  // A rule that only swaps a sum's operands gives the graph the search started from.
  Expected<std::vector<Rule>> swap = parse_rules(R"(
rule add-swaps
graph @source(%x: f32[2,3], %y: f32[2,3]) {
  %s = add(%x, %y) : f32[2,3]
  return %s
}
graph @target(%x: f32[2,3], %y: f32[2,3]) {
  %s = add(%y, %x) : f32[2,3]
  return %s
}
)");
  ASSERT_TRUE(swap.has_value()) << swap.status().message();
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {2, 3});
  Value* y = b.input("y", DType::f32, {2, 3});
  graph.set_outputs({b.relu(b.add(x, y)), b.neg(b.mul(b.add(y, x), x))});
  Expected<SearchResult> swapped = search_substitutions(graph, *swap, node_count, {.relaxation = 2});
  ASSERT_TRUE(swapped.has_value()) << swapped.status().message();
  EXPECT_EQ(swapped->priced, 0);
  EXPECT_EQ(swapped->expanded, 1);
  // Two double negations removed in either order are one graph: of the three graphs after one
  // or two removals, each is priced once.
  Graph twice;
  GraphBuilder t(twice);
  Value* z = t.input("z", DType::f32, {2, 3});
  twice.set_outputs({t.neg(t.neg(t.relu(z))), t.neg(t.neg(t.exp(z)))});
  const std::vector<Rule> rules = rules_file("handwritten.rules");
  const Rule& cancel = rule_named(rules, "neg-neg-cancel");
  Expected<SearchResult> both = search_substitutions(twice, std::span(&cancel, 1), node_count,
                                                     {.relaxation = 2});
  ASSERT_TRUE(both.has_value()) << both.status().message();
  EXPECT_EQ(both->priced, 3);
  EXPECT_EQ(both->cost, 2);
}

TEST(Search, AStepThatDoesNotPayIsExtendedOnlyByRewritesThatDependOnIt) {
  // out1 = -(-z + y): pushing the negation into the sum costs a node, -(-z) + -y, and then
  // the double negation it made cancels: z + -y, a node fewer than the start. out2 = -(p + q):
  // the same first step, independent of out1's, and nothing after it.
  Expected<std::vector<Rule>> pushed = parse_rules(R"(
rule neg-of-sum
graph @source(%x: f32[2,3], %y: f32[2,3]) {
  %s = add(%x, %y) : f32[2,3]
  %n = neg(%s) : f32[2,3]
  return %n
}
graph @target(%x: f32[2,3], %y: f32[2,3]) {
  %a = neg(%x) : f32[2,3]
  %b = neg(%y) : f32[2,3]
  %n = add(%a, %b) : f32[2,3]
  return %n
}
)");
  ASSERT_TRUE(pushed.has_value()) << pushed.status().message();
  const std::vector<Rule> shipped = shipped_rules();
  const Rule& cancel = rule_named(shipped, "neg-neg-cancel");
  Rule copy;
  copy.name = cancel.name;
  copy.origin = cancel.origin;
  copy.source = cancel.source.clone();
  copy.target = cancel.target.clone();
  pushed->push_back(std::move(copy));
  Graph graph;
  GraphBuilder b(graph);
  const auto input = [&](const char* name) { return b.input(name, DType::f32, {2, 3}); };
  Value* out1 = b.neg(b.add(b.neg(input("z")), input("y")));
  Value* out2 = b.neg(b.add(input("p"), input("q")));
  graph.set_outputs({out1, out2});
  Expected<SearchResult> result = search_substitutions(graph, *pushed, node_count, {.relaxation = 2});
  ASSERT_TRUE(result.has_value()) << result.status().message();
  EXPECT_EQ(result->initial_cost, 5);
  EXPECT_EQ(result->cost, 4);
  ASSERT_EQ(result->rewrites.size(), 2u);
  EXPECT_EQ(result->rewrites[0].rule, "neg-of-sum");
  EXPECT_EQ(result->rewrites[1].rule, "neg-neg-cancel");
  // Priced: out1's and out2's first steps from the start, the cancellation after out1's, and
  // out2's step after the cancellation (a graph that paid is expanded by every rewrite). Not
  // priced: out2's step after out1's first, or out1's after out2's: neither depends on the
  // other.
  EXPECT_EQ(result->priced, 4);
  const std::vector<Array> inputs = random_inputs(graph);
  const std::vector<Array> before = *interpret(graph, inputs);
  expect_outputs_near(result->graph, inputs, before);
}

TEST(Search, StopsAtItsTimeBudgetWithTheBestSoFar) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 6});
  graph.set_outputs({b.neg(b.neg(b.relu(b.relu(x))))});
  const std::vector<Rule> rules = shipped_rules();
  Expected<SearchResult> result =
      search_substitutions(graph, rules, node_count, {.max_seconds = 1e-9});
  ASSERT_TRUE(result.has_value()) << result.status().message();
  EXPECT_TRUE(result->stopped_at_time);
  EXPECT_EQ(result->priced, 0);  // the budget was spent before the first candidate
  EXPECT_EQ(result->cost, result->initial_cost);
  EXPECT_EQ(print_graph(result->graph), print_graph(graph));
}

TEST(Search, MatchesAlikeArePricedOnceAndAppliedTogether) {
  // Four branches alike, -(-x) read by exp, and a fifth whose reader differs: one pricing for
  // the four (the first; the other three take its cost), one for the fifth, and one for all
  // five cancellations together.
  Graph graph;
  GraphBuilder b(graph);
  std::vector<Value*> outputs;
  for (int branch = 0; branch < 4; ++branch) {
    Value* x = b.input(fmt::format("x{}", branch), DType::f32, {2, 3});
    outputs.push_back(b.exp(b.neg(b.neg(x))));
  }
  outputs.push_back(b.relu(b.neg(b.neg(b.input("y", DType::f32, {2, 3})))));
  graph.set_outputs(outputs);
  const std::vector<Rule> rules = rules_file("handwritten.rules");
  const Rule& cancel = rule_named(rules, "neg-neg-cancel");
  Expected<SearchResult> result =
      search_substitutions(graph, std::span(&cancel, 1), node_count, {.max_expansions = 1});
  ASSERT_TRUE(result.has_value()) << result.status().message();
  EXPECT_EQ(result->priced, 3);
  EXPECT_EQ(result->alike, 3);
  EXPECT_EQ(result->cost, 5);
  ASSERT_EQ(result->rewrites.size(), 1u);
  EXPECT_EQ(result->rewrites[0].applications, 5);
  const std::vector<Array> inputs = random_inputs(graph);
  expect_outputs_near(result->graph, inputs, *interpret(graph, inputs));
  // A budget of one pricing: the first branch's cancellation, and the search stops there.
  Expected<SearchResult> one =
      search_substitutions(graph, std::span(&cancel, 1), node_count, {.max_priced = 1});
  ASSERT_TRUE(one.has_value()) << one.status().message();
  EXPECT_TRUE(one->stopped_at_priced);
  EXPECT_EQ(one->priced, 1);
  EXPECT_EQ(one->cost, 13);
}

TEST(Search, RelaxationExploresCostlierGraphsButNeverReturnsOne) {
  // Merging two matmuls that share x costs nodes (2 -> 3): explored with a relaxation of 2,
  // not with the default, and never the result under this cost.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 6});
  graph.set_outputs({b.matmul(x, b.input("w1", DType::f32, {6, 3})),
                     b.matmul(x, b.input("w2", DType::f32, {6, 5}))});
  const std::vector<Rule> rules = shipped_rules();
  Expected<SearchResult> strict = search_substitutions(graph, rules, node_count);
  Expected<SearchResult> relaxed = search_substitutions(graph, rules, node_count, {.relaxation = 2});
  ASSERT_TRUE(strict.has_value() && relaxed.has_value());
  EXPECT_EQ(strict->cost, 2);
  EXPECT_EQ(relaxed->cost, 2);
  EXPECT_TRUE(relaxed->rewrites.empty());
  EXPECT_GT(relaxed->priced, 0);
  EXPECT_GT(relaxed->expanded, strict->expanded);
}

TEST(Generate, CountsShrinkStageByStageAndTheRulesHold) {
  Expected<GeneratedRules> generated = generate_rules({.max_ops = 2, .variables = 2});
  ASSERT_TRUE(generated.has_value()) << generated.status().message();
  const GeneratorCounts& c = generated->counts;
  EXPECT_GT(c.graphs, c.classes);
  EXPECT_GE(c.pairs, c.after_renaming);
  EXPECT_GE(c.after_renaming, c.after_subsumption);
  EXPECT_GE(c.after_subsumption, c.after_common);
  EXPECT_GT(c.after_common, 0);
  EXPECT_EQ(static_cast<int>(generated->rules.size()), c.after_common);
  std::set<std::string> names;
  for (const Rule& rule : generated->rules) {
    names.insert(rule.name);
    EXPECT_TRUE(check_rule_numerically(rule).is_ok()) << rule.name;
  }
  // Found on its own: two transposes cancel, a double negation cancels, a product
  // reassociates, a sum over the rows of a product is the product of the rows' sum (reduction
  // elimination), the top half of two joined matrices is the first, and a matmul of a matrix
  // joined to itself is its product joined to itself. Operands that commute are the matcher's
  // business: no rule swaps them.
  for (const char* expected : {"gen-transpose-transpose-x0", "gen-neg-neg-x0",
                               "gen-mul-mul-x0-x1-x0", "gen-sumrows-matmul-x0-x1",
                               "gen-top-concatrows-x0-x1", "gen-matmul-concatrows-x0-x0-x1"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
  EXPECT_FALSE(names.contains("gen-add-x0-x1"));
  EXPECT_FALSE(names.contains("gen-mul-x0-x1"));
  // The file form reads back, and a sample of the rules is proved.
  Expected<std::vector<Rule>> reread = parse_rules(print_rules(generated->rules), "generated.rules");
  ASSERT_TRUE(reread.has_value()) << reread.status().message();
  ASSERT_EQ(reread->size(), generated->rules.size());
  for (size_t r = 0; r < reread->size(); r += 4) {
    Expected<Proof> proof = prove_rule((*reread)[r]);
    EXPECT_TRUE(proof.has_value()) << proof.status().message();
  }
}

// Over an image and convolution weights, at 3 ops and 3 variables, the generator finds TASO's
// convolution rules: two convolutions of one image summed are one over the weights' sum, and
// joined over their channels are one over the joined weights (the parallel-convolution merge).
// With the inference batch norm among its ops it finds that two batch norms by one set of
// parameters, joined over their images, are one batch norm of the joined images.
TEST(Generate, ConvolutionAndBatchNormRulesAreFoundAndProved) {
  Expected<GeneratedRules> generated =
      generate_rules({.max_ops = 3, .variables = 3, .family = Family::convolutions});
  ASSERT_TRUE(generated.has_value()) << generated.status().message();
  const std::map<std::string, int> wanted_nodes = {
      {"gen4d-add-conv-x0-x1-conv-x0-x2", 2},  // the weights' add or concat, one conv
      {"gen4d-concatcolumns-conv-x0-x1-conv-x0-x2", 2},
      {"gen4d-concatrows-batchnorm-x0-x1-x2-x3-x4-batchnorm-x5-x1-x2-x3-x4", 2},
  };
  std::vector<const Rule*> wanted;
  for (const Rule& rule : generated->rules) {
    if (wanted_nodes.contains(rule.name)) wanted.push_back(&rule);
  }
  ASSERT_EQ(wanted.size(), wanted_nodes.size());
  for (const Rule* rule : wanted) {
    EXPECT_EQ(rule->target.num_nodes(), wanted_nodes.at(rule->name)) << rule->name;
    Expected<Proof> proof = prove_rule(*rule);
    EXPECT_TRUE(proof.has_value()) << proof.status().message();
  }
}

TEST(Generate, TheShippedGeneratedFileIsWhatTheGeneratorWrites) {
  // `make rules` writes it; regenerate it when the generator changes.
  const char* root = std::getenv("KILN_SOURCE_DIR");
  const std::string path = std::string(root != nullptr ? root : ".") + "/src/subst/rules/generated.rules";
  std::ifstream file(path);
  ASSERT_TRUE(file.good()) << path;
  std::stringstream shipped;
  shipped << file.rdbuf();
  EXPECT_EQ(rules_file("generated.rules").size(), 108u);
  Expected<GeneratedRules> generated = generate_rules({.max_ops = 2, .variables = 2});
  ASSERT_TRUE(generated.has_value());
  EXPECT_EQ(shipped.str(), print_rules(generated->rules)) << "run `make rules`";
}

// --- Property: every shipped rule, applied to random graphs holding its source -------------

// The source's example extents mapped one to one onto others (1 stays 1, so broadcasting is
// kept): the rule's structure, at other extents.
std::map<int64_t, int64_t> extent_map(uint64_t seed) {
  std::map<int64_t, int64_t> map;
  for (int64_t e = 2; e <= 16; ++e) map[e] = e + 1 + static_cast<int64_t>((seed * 7 + e) % 5);
  return map;
}

// A graph whose inputs pass through random elementwise ops into a copy of the rule's source
// (at the extents `map` gives), whose results pass through more before becoming outputs.
// Fails (nullopt) when the source does not build at those extents.
std::optional<Graph> embedding_graph(const Rule& rule, uint64_t seed,
                                     const std::map<int64_t, int64_t>& map) {
  Graph graph;
  GraphBuilder b(graph);
  const auto wrap = [&](Value* v, uint64_t k) -> Value* {
    switch ((seed + k) % 3) {
      case 0: return b.tanh(v);
      case 1: return b.neg(v);
      default: return b.mul(v, v);
    }
  };
  std::map<const Value*, Value*> copied;
  uint64_t k = 0;
  for (const Value* param : rule.source.inputs()) {
    std::vector<int64_t> dims;
    for (int64_t d : param->shape().dims()) dims.push_back(map.contains(d) ? map.at(d) : d);
    copied[param] = wrap(b.input(param->name(), param->dtype(), Shape(dims)), k++);
  }
  for (const Node* node : rule.source.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(copied.at(input));
    Expected<Node*> made = graph.add_node(node->op(), std::move(inputs), node->attrs());
    if (!made) return std::nullopt;
    for (int o = 0; o < node->num_outputs(); ++o) copied[node->output(o)] = (*made)->output(o);
  }
  std::vector<Value*> outputs;
  for (const Value* result : rule.source.outputs()) outputs.push_back(wrap(copied.at(result), k++));
  graph.set_outputs(outputs);
  return graph;
}

TEST(Property, EveryShippedRuleKeepsTheInterpretersOutputs) {
  int applied_at_other_extents = 0;
  std::vector<Rule> rules = shipped_rules();
  for (Rule& rule : rules_file("generated.rules")) rules.push_back(std::move(rule));
  for (const Rule& rule : rules) {
    for (uint64_t seed = 0; seed < 4; ++seed) {
      SCOPED_TRACE(fmt::format("rule {} seed {}", rule.name, seed));
      const bool example = seed == 0;
      std::optional<Graph> graph =
          embedding_graph(rule, seed, example ? std::map<int64_t, int64_t>{} : extent_map(seed));
      if (!graph) continue;  // the source does not build at these extents
      const std::vector<Array> inputs = random_inputs(*graph, {.seed = seed});
      const std::vector<Array> before = *interpret(*graph, inputs);
      const std::vector<Match> matches = find_matches(*graph, rule);
      ASSERT_FALSE(matches.empty()) << print_graph(*graph);
      // The first match that applies (a two-result source also matches with its results
      // swapped, and the swapped match may not build).
      bool applied = false;
      for (size_t m = 0; m < matches.size() && !applied; ++m) {
        applied = apply_match(*graph, rule, matches[m]);
      }
      if (example) {
        EXPECT_TRUE(applied) << print_graph(*graph);
      } else {
        applied_at_other_extents += applied;
      }
      eliminate_dead_code(*graph);
      ASSERT_TRUE(verify(*graph).is_ok()) << print_graph(*graph);
      Expected<std::vector<Array>> after = interpret(*graph, inputs);
      ASSERT_TRUE(after.has_value()) << after.status().message();
      for (size_t o = 0; o < before.size(); ++o) {
        for (int64_t i = 0; i < before[o].size(); ++i) {
          // NaN on both sides (a batch norm of a negative variance) is the same result.
          if (std::isnan(before[o][i]) && std::isnan((*after)[o][i])) continue;
          // f32 values, reassociated: a few roundings apart.
          ASSERT_NEAR((*after)[o][i], before[o][i], 1e-5 * (1 + std::fabs(before[o][i])))
              << "output " << o << " element " << i << "\n" << print_graph(*graph);
        }
      }
    }
  }
  EXPECT_GT(applied_at_other_extents, 0);
}

}  // namespace
}  // namespace kiln::subst
