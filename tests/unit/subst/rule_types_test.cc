// Rules over types (subst/rule.h: `dtypes`, `ranks`): a rule written once stands for one
// instance per dtype and rank, each built again at its types with its constants rounded; the
// lines' errors; printing them back; and every canonical pattern recognized in f32, bf16 and
// f16 graphs at each of its ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/printer.h"
#include "subst/canonicalize.h"
#include "subst/generate.h"
#include "subst/match.h"
#include "subst/rule.h"

namespace kiln::subst {
namespace {

constexpr const char* kGelu = R"(
rule gelu-erf
dtypes f32 | bf16 | f16
ranks %x 3 | 2
graph @source(%x: f32[2,3,5]) {
  %root2 = constant() {value = tensor<f32[]>[1.4142135381698608]} : f32[]
  %s = div(%x, %root2) : f32[2,3,5]
  %e = erf(%s) : f32[2,3,5]
  %one = constant() {value = tensor<f32[]>[1.0]} : f32[]
  %p = add(%e, %one) : f32[2,3,5]
  %m = mul(%x, %p) : f32[2,3,5]
  %half = constant() {value = tensor<f32[]>[0.5]} : f32[]
  %y = mul(%m, %half) : f32[2,3,5]
  return %y
}
graph @target(%x: f32[2,3,5]) {
  %y = gelu(%x) : f32[2,3,5]
  return %y
}
)";

std::vector<Rule> parse(const std::string& text) {
  Expected<std::vector<Rule>> rules = parse_rules(text, "test.rules");
  EXPECT_TRUE(rules) << rules.status().message();
  return rules ? std::move(rules).value() : std::vector<Rule>{};
}

std::string parse_error(const std::string& text) {
  Expected<std::vector<Rule>> rules = parse_rules(text, "test.rules");
  return rules ? "" : rules.status().message();
}

TEST(RuleTypes, ARuleStandsForOneInstancePerDtypeAndRankTheExampleFirst) {
  const std::vector<Rule> rules = parse(kGelu);
  ASSERT_EQ(rules.size(), 1u);
  const Rule& rule = rules[0];
  EXPECT_EQ(rule.dtypes, (std::vector<DType>{DType::f32, DType::bf16, DType::f16}));
  EXPECT_EQ(rule.ranks.ranks, (std::vector<int>{3, 2}));
  ASSERT_EQ(instances_of(rule).size(), 6u);
  const std::vector<std::string> types = {"f32[2,3,5]", "f32[3,5]",   "bf16[2,3,5]",
                                          "bf16[3,5]",  "f16[2,3,5]", "f16[3,5]"};
  for (size_t i = 0; i < types.size(); ++i) {
    const Rule& instance = instances_of(rule)[i];
    EXPECT_EQ(instance.name, "gelu-erf");
    EXPECT_EQ(instance.source.inputs()[0]->type().to_string(), types[i]);
    EXPECT_EQ(instance.source.outputs()[0]->type().to_string(), types[i]);
    EXPECT_EQ(instance.target.outputs()[0]->type().to_string(), types[i]);
    EXPECT_TRUE(instance.instances.empty());
    EXPECT_TRUE(check_rule_numerically(instance).is_ok()) << instance.origin;
  }
  EXPECT_NE(instances_of(rule)[3].origin.find("(bf16, rank 2)"), std::string::npos)
      << instances_of(rule)[3].origin;
  // sqrt(2), rounded to bf16 as an exporter writing bf16 rounds it.
  const Node* root2 = instances_of(rule)[3].source.nodes()[0];
  EXPECT_EQ(root2->attrs().get_tensor("value").dtype, DType::bf16);
  EXPECT_EQ(root2->attrs().get_tensor("value")[0], 1.4140625);
}

TEST(RuleTypes, RanksGrowInFrontAndShiftDeclaredExtents) {
  const std::vector<Rule> rules = parse(R"(
rule double-relu
extents %a[1]
ranks %a %b 2 | 3
graph @source(%a: f32[3,4], %b: f32[3,5]) {
  %x = relu(%a) : f32[3,4]
  %y = relu(%x) : f32[3,4]
  %z = relu(%b) : f32[3,5]
  return %y, %z
}
graph @target(%a: f32[3,4], %b: f32[3,5]) {
  %y = relu(%a) : f32[3,4]
  %z = relu(%b) : f32[3,5]
  return %y, %z
}
)");
  ASSERT_EQ(rules.size(), 1u);
  ASSERT_EQ(instances_of(rules[0]).size(), 2u);
  const Rule& rank3 = instances_of(rules[0])[1];
  EXPECT_EQ(rank3.source.inputs()[0]->type().to_string(), "f32[7,3,4]");
  EXPECT_EQ(rank3.source.inputs()[1]->type().to_string(), "f32[7,3,5]");
  ASSERT_EQ(rank3.extents.size(), 1u);
  EXPECT_EQ(rank3.extents[0].axis, 2);
  EXPECT_EQ(rank3.extents[0].example, 4);
}

TEST(RuleTypes, PrintsBackAsWritten) {
  const std::vector<Rule> rules = parse(kGelu);
  const std::string printed = print_rules(rules);
  EXPECT_NE(printed.find("dtypes f32 | bf16 | f16\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("ranks %x 3 | 2\n"), std::string::npos) << printed;
  const std::vector<Rule> again = parse(printed);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(instances_of(again[0]).size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(print_graph(instances_of(again[0])[i].source),
              print_graph(instances_of(rules[0])[i].source));
  }
}

TEST(RuleTypes, TheLinesErrorsSayWhatIsWrong) {
  const auto with = [](const std::string& lines) {
    std::string text = kGelu;
    const size_t at = text.find("dtypes");
    const size_t end = text.find("graph @source");
    return text.substr(0, at) + lines + text.substr(end);
  };
  EXPECT_EQ(parse_error(with("dtypes f32 | bf16\nranks %x 3\n")), "");
  EXPECT_NE(parse_error(with("dtypes bf16 | f16\n")).find("the example's dtype f32 is not listed"),
            std::string::npos);
  EXPECT_NE(parse_error(with("dtypes f32 | i32\n")).find("'i32' is not a float dtype"),
            std::string::npos);
  EXPECT_NE(parse_error(with("dtypes f32 | f32\n")).find("f32 is listed twice"), std::string::npos);
  EXPECT_NE(parse_error(with("dtypes f32\ndtypes f16\n")).find("a second 'dtypes' line"),
            std::string::npos);
  EXPECT_NE(parse_error(with("ranks %x 2 | 4\n")).find("the example's rank 3 is not listed"),
            std::string::npos);
  EXPECT_NE(parse_error(with("ranks %y 3\n")).find("'%y' names no parameter"), std::string::npos);
  EXPECT_NE(parse_error(with("ranks %x 3 | 9\n")).find("'9' is not a rank from 1 to 8"),
            std::string::npos);
  EXPECT_NE(parse_error(with("ranks 3 | 2\n")).find("ranks are written"), std::string::npos);
  // A rank that drops a declared extent's axis cannot be built.
  EXPECT_NE(parse_error(R"(
rule drop
extents %a[0]
ranks %a 2 | 1
graph @source(%a: f32[3,4]) {
  %y = relu(%a) : f32[3,4]
  return %y
}
graph @target(%a: f32[3,4]) {
  %y = relu(%a) : f32[3,4]
  return %y
}
)")
                .find("rank 1 drops the declared extent of %a"),
            std::string::npos);
}

std::vector<Rule> canonical_rules_file() {
  const char* root = std::getenv("KILN_SOURCE_DIR");
  Expected<std::vector<Rule>> rules = read_rules_file(std::string(root != nullptr ? root : ".") +
                                                      "/src/subst/rules/canonical.rules");
  EXPECT_TRUE(rules.has_value()) << rules.status().message();
  return rules ? std::move(rules).value() : std::vector<Rule>{};
}

// `instance`'s source as a graph an exporter would write: its constant variables as constant
// nodes (of the target attribute's example value, or 2), the others graph inputs.
Graph exported_pattern(const Rule& instance) {
  Graph graph("exported");
  std::map<const Value*, Value*> value_of;
  for (size_t i = 0; i < instance.source.inputs().size(); ++i) {
    const Value* input = instance.source.inputs()[i];
    const auto constant = std::ranges::find(instance.constants, i, &ConstantVariable::variable);
    if (constant == instance.constants.end()) {
      value_of[input] = graph.add_input(input->type(), input->name());
      continue;
    }
    double value = 2.0;
    for (const Node* node : instance.target.nodes()) {
      if (!constant->attribute.empty() && node->attrs().contains(constant->attribute)) {
        value = node->attrs().get_float(constant->attribute);
      }
    }
    const TensorType& type = input->type();
    Array splat(type.dtype, type.shape,
                std::vector<double>(static_cast<size_t>(type.shape.num_elements()), value));
    Attrs attrs;
    attrs.set("value", std::move(splat));
    Expected<Node*> made = graph.add_node(Op::constant, {}, attrs);
    EXPECT_TRUE(made) << made.status().message();
    value_of[input] = (*made)->output();
  }
  for (const Node* node : instance.source.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(value_of.at(input));
    Expected<Node*> made = graph.add_node(node->op(), std::move(inputs), node->attrs());
    EXPECT_TRUE(made) << made.status().message();
    for (int k = 0; k < node->num_outputs(); ++k) value_of[node->output(k)] = (*made)->output(k);
  }
  std::vector<Value*> outputs;
  for (const Value* output : instance.source.outputs()) outputs.push_back(value_of.at(output));
  graph.set_outputs(std::move(outputs));
  return graph;
}

TEST(RuleTypes, EveryCanonicalPatternIsRecognizedInF32Bf16AndF16) {
  const std::vector<Rule> rules = canonical_rules_file();
  ASSERT_GE(rules.size(), 13u);
  for (const Rule& rule : rules) {
    std::set<DType> dtypes;
    for (const Rule& instance : instances_of(rule)) {
      SCOPED_TRACE(instance.origin);
      Graph graph = exported_pattern(instance);
      const int before = graph.num_nodes();
      const Recognitions recognized = canonicalize(graph, rules);
      EXPECT_GE(recognized.contains(rule.name) ? recognized.at(rule.name) : 0, 1)
          << print_graph(graph);
      EXPECT_LT(graph.num_nodes(), before + 2) << print_graph(graph);
      EXPECT_EQ(graph.outputs()[0]->type(), instance.source.outputs()[0]->type());
      dtypes.insert(instance.source.outputs()[0]->dtype());
    }
    EXPECT_EQ(dtypes, (std::set<DType>{DType::f32, DType::bf16, DType::f16})) << rule.name;
  }
}

TEST(RuleTypes, ABf16LayerNormAsExportedBecomesTheComposite) {
  Expected<Graph> graph = parse_graph(R"(graph @g(%x: bf16[4,8], %g: bf16[8], %b: bf16[8]) {
  %m = mean(%x) {axes = [-1], keepdims = true} : bf16[4,1]
  %d = sub(%x, %m) : bf16[4,8]
  %two = constant() {value = tensor<bf16[]>[2.0]} : bf16[]
  %sq = pow(%d, %two) : bf16[4,8]
  %v = mean(%sq) {axes = [-1], keepdims = true} : bf16[4,1]
  %eps = constant() {value = tensor<bf16[]>[1e-05]} : bf16[]
  %ve = add(%v, %eps) : bf16[4,1]
  %s = sqrt(%ve) : bf16[4,1]
  %n = div(%d, %s) : bf16[4,8]
  %y = mul(%n, %g) : bf16[4,8]
  %z = add(%y, %b) : bf16[4,8]
  return %z
})");
  ASSERT_TRUE(graph) << graph.status().message();
  const Recognitions recognized = canonicalize(*graph, canonical_rules_file());
  EXPECT_EQ(recognized, (Recognitions{{"layer-norm", 1}, {"square-as-product", 1}}));
  ASSERT_EQ(graph->num_nodes(), 1) << print_graph(*graph);
  const Node* norm = graph->nodes()[0];
  EXPECT_EQ(norm->op(), Op::layer_norm);
  EXPECT_EQ(norm->output()->type().to_string(), "bf16[4,8]");
  // The epsilon as bf16 holds it.
  EXPECT_EQ(norm->attrs().get_float("epsilon"), Array(DType::bf16, Shape{}, {1e-05})[0]);
}

}  // namespace
}  // namespace kiln::subst
