// The IR text form round-trips: for an example graph of every op (tests/common/example_graphs.h)
// and for the text form's corners, print(parse(print(g))) == print(g), and parse(print(g))
// verifies and is the same graph as g. Hand-written canonical texts check what the printer
// writes: quoting, attribute and float formats, defaults left out, comments ignored.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/example_graphs.h"
#include "common/round_trip_check.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln {
namespace {

using testing::example_graphs;
using testing::ExampleGraph;
using testing::round_trips;
using testing::same_attr_value;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class RoundTrip : public ::testing::TestWithParam<ExampleGraph> {};

TEST_P(RoundTrip, PrintedTextParsesToTheSameGraphAndPrintsIdentically) {
  Expected<Graph> graph = GetParam().build();
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  ASSERT_TRUE(verify(*graph).is_ok()) << verify(*graph).message();
  EXPECT_TRUE(round_trips(*graph));
}

INSTANTIATE_TEST_SUITE_P(Examples, RoundTrip, ::testing::ValuesIn(example_graphs()),
                         [](const ::testing::TestParamInfo<ExampleGraph>& test) {
                           return test.param.name;
                         });

// For each op, whether an example has a node of it, and which of its attributes an example
// sets to something other than the default (a required attribute always counts).
struct Coverage {
  std::set<Op> ops;
  std::map<Op, std::set<std::string>> non_default_attrs;
};

Coverage example_coverage() {
  Coverage coverage;
  for (const ExampleGraph& example : example_graphs()) {
    Expected<Graph> graph = example.build();
    EXPECT_TRUE(graph.has_value()) << example.name << ": " << graph.status().message();
    if (!graph || !example.op) continue;
    for (const Node* node : graph->nodes()) {
      if (node->op() != *example.op) continue;
      coverage.ops.insert(node->op());
      for (const AttrSpec& spec : node->def().attrs) {
        if (!spec.default_value ||
            !same_attr_value(*spec.default_value, node->attrs().get(spec.name))) {
          coverage.non_default_attrs[node->op()].insert(spec.name);
        }
      }
    }
  }
  return coverage;
}

TEST(RoundTripCoverage, EveryOpHasAnExampleGraph) {
  const Coverage coverage = example_coverage();
  for (const OpDef& def : all_op_defs()) {
    EXPECT_TRUE(coverage.ops.contains(def.op))
        << "op '" << def.name << "' has no example in tests/common/example_graphs.h";
  }
}

TEST(RoundTripCoverage, EveryAttributeOfEveryOpIsExercisedWithANonDefaultValue) {
  Coverage coverage = example_coverage();
  for (const OpDef& def : all_op_defs()) {
    for (const AttrSpec& spec : def.attrs) {
      EXPECT_TRUE(coverage.non_default_attrs[def.op].contains(spec.name))
          << "no example of op '" << def.name << "' sets attribute '" << spec.name
          << "' to a non-default value";
    }
  }
}

// Texts in the printer's canonical form (ir/printer.h), written by hand: parsing and printing
// each must give it back unchanged.
TEST(TextForm, CanonicalTextsAreFixedPoints) {
  const char* const texts[] = {
      // Quoted value names: '/', ':', ' ', quotes, backslash, non-ASCII and control bytes.
      R"(graph @encoder(%"encoder/layer.0:out": f32[2,3], %"x y": f32[3]) {
  %"sum \"quoted\" \\ back" = add(%"encoder/layer.0:out", %"x y") : f32[2,3]
  %"na\xC3\xAFve\ttab\nline" = relu(%"sum \"quoted\" \\ back") : f32[2,3]
  %"-1" = neg(%"na\xC3\xAFve\ttab\nline") : f32[2,3]
  return %"-1", %"na\xC3\xAFve\ttab\nline"
}
)",
      // Multi-output node with an unused result, inputs returned directly (one twice),
      // scalars and zero-size dims.
      R"(graph @g(%x: f32[2,6], %s: f32[], %e: i64[0,3]) {
  %a, %b = split(%x) {axis = 1, sizes = [2, 4]} : f32[2,2], f32[2,4]
  %c = mul(%s, %s) : f32[]
  %z = sum(%e) {axes = [1], keepdims = true} : i64[0,1]
  return %b, %x, %c, %z, %x
}
)",
      // Every attribute kind the schemas use, and floats whose text is easy to get wrong;
      // attributes at their default (one_hot's axis, pad's value in %q) are left out.
      R"(graph @attrs(%x: f32[4], %i: i32[3]) {
  %c = constant() {value = tensor<f64[7]>[0.1, 1e-30, inf, -inf, nan, -0.0, 1e+21]} : f64[7]
  %t = constant() {value = tensor<bool[2]>[true, false]} : bool[2]
  %f = fill() {shape = [2, 0], value = -0.0, dtype = f16} : f16[2,0]
  %g = gelu(%x) {approximate = "tanh"} : f32[4]
  %m = mod(%i, %i) {fmod = true} : i32[3]
  %o = one_hot(%i) {depth = 2, dtype = bf16, on_value = 1e+300, off_value = nan} : bf16[3,2]
  %p = pad(%x) {pads = [-1, 2], value = -inf} : f32[5]
  %q = pad(%x) {pads = [0, 1]} : f32[5]
  return %c, %t, %f, %g, %m, %o, %p, %q
}
)",
      // A quoted graph name and no inputs.
      R"(graph @"my model/v2"() {
  %0 = iota() {shape = [3], dtype = f32} : f32[3]
  return %0
}
)",
      // An empty graph name.
      R"(graph @""(%x: i32[1]) {
  return %x
}
)",
  };
  for (const char* text : texts) {
    Expected<Graph> graph = parse_graph(text);
    ASSERT_TRUE(graph.has_value()) << graph.status().message() << "\n" << text;
    EXPECT_EQ(print_graph(*graph), text);
  }
}

TEST(TextForm, CommentsWhitespaceAndLineEndingsAreNotPartOfTheGraph) {
  const std::string text =
      "// A graph with comments and odd layout.\r\n"
      "graph @g ( %x : f32 [ 2 ] ,%\"y\" : f32[2] )   // trailing comment\r\n"
      "{\n"
      "\t%sum=add(%x,%y):f32[2]// no spaces\n"
      "  // a whole-line comment between statements\n"
      "\n"
      "  %0 = neg ( %sum ) : f32 [2]\n"
      "  return %0 ,%x}   \n"
      "// a comment after the graph";
  Expected<Graph> graph = parse_graph(text);
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  EXPECT_EQ(print_graph(*graph),
            "graph @g(%x: f32[2], %y: f32[2]) {\n"
            "  %sum = add(%x, %y) : f32[2]\n"
            "  %0 = neg(%sum) : f32[2]\n"
            "  return %0, %x\n"
            "}\n");
}

TEST(TextForm, PrintsAttributeValuesOfEveryKind) {
  const std::pair<AttrValue, std::string> cases[] = {
      {AttrValue(-7), "-7"},
      {AttrValue(std::numeric_limits<int64_t>::min()), "-9223372036854775808"},
      {AttrValue(0.1), "0.1"},
      {AttrValue(2.0), "2.0"},
      {AttrValue(123456.0), "123456.0"},
      {AttrValue(1e-30), "1e-30"},
      {AttrValue(1e21), "1e+21"},
      {AttrValue(5e-324), "5e-324"},
      {AttrValue(-0.0), "-0.0"},
      {AttrValue(kInf), "inf"},
      {AttrValue(-kInf), "-inf"},
      {AttrValue(kNaN), "nan"},
      {AttrValue(true), "true"},
      {AttrValue("a\"b\\c\n\t\x01\xC3\xA9"), R"("a\"b\\c\n\t\x01\xC3\xA9")"},
      {AttrValue(std::vector<int64_t>{}), "[]"},
      {AttrValue({1, -2, 3}), "[1, -2, 3]"},
      {AttrValue(std::vector<double>{0.5, -0.0, 1e-30, 3.0}), "[0.5, -0.0, 1e-30, 3.0]"},
      {AttrValue(DType::bf16), "bf16"},
      {AttrValue(DType::boolean), "bool"},
  };
  for (const auto& [value, text] : cases) EXPECT_EQ(print_attr_value(value), text);
}

// Tensor elements print as the value the dtype stores, worked out by hand: f16 0.1 is
// 1638 / 2^14; bf16 0.1 is the f32 0x3DCCCCCD rounded to 0x3DCD, 205 / 2^11.
TEST(TextForm, PrintsTensorElementsAsTheirDtypeStoresThem) {
  const std::pair<Array, std::string> cases[] = {
      {Array(DType::f16, {4}, {0.1, 65504, 70000, -0.0}),
       "tensor<f16[4]>[0.0999755859375, 65504.0, inf, -0.0]"},
      {Array(DType::bf16, {2}, {0.1, -1.5}), "tensor<bf16[2]>[0.10009765625, -1.5]"},
      {Array(DType::f32, {1}, {0.1}), "tensor<f32[1]>[0.10000000149011612]"},
      {Array(DType::f64, {}, {1e21}), "tensor<f64[]>[1e+21]"},
      {Array(DType::boolean, {3}, {1, 0, 0.5}), "tensor<bool[3]>[true, false, true]"},
      {Array(DType::i64, {2}, {-9223372036854775808.0, 3}),
       "tensor<i64[2]>[-9223372036854775808, 3]"},
      {Array(DType::i32, {2}, {2147483647, -5.7}), "tensor<i32[2]>[2147483647, -5]"},
      {Array(DType::f32, {2, 0}, {}), "tensor<f32[2,0]>[]"},
  };
  for (const auto& [array, text] : cases) EXPECT_EQ(print_attr_value(AttrValue(array)), text);
}

TEST(TextForm, PrintsUnroundedTensorElementsAsTheirDtypeWouldStoreThem) {
  Array ints(DType::i32, {4});
  ints.data = {1.7, -0.5, kNaN, 1e300};
  EXPECT_EQ(print_attr_value(AttrValue(ints)), "tensor<i32[4]>[1, 0, 0, 2147483647]");
  Array halves(DType::f16, {1});
  halves.data = {0.1};
  EXPECT_EQ(print_attr_value(AttrValue(halves)), "tensor<f16[1]>[0.0999755859375]");
}

}  // namespace
}  // namespace kiln
