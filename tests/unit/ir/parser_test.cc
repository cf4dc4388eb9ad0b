// The IR parser (ir/parser.h): errors read "FILE:LINE:COL: message" and point at the token at
// fault; numbers read back exactly, overflow to infinity and reject what does not fit.
#include "ir/parser.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

namespace kiln {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct ParseErrorCase {
  std::string name;  // names the gtest case
  std::string text;
  int line;
  int column;
  std::string message;  // a substring of the message after the location
};

void PrintTo(const ParseErrorCase& c, std::ostream* os) { *os << c.name; }

class ParseError : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(ParseError, IsReportedAtTheTokenAtFault) {
  const ParseErrorCase& c = GetParam();
  Expected<Graph> graph = parse_graph(c.text, "model.kir");
  ASSERT_FALSE(graph.has_value()) << "parsed:\n" << c.text;
  const std::string location = fmt::format("model.kir:{}:{}: ", c.line, c.column);
  EXPECT_THAT(graph.status().message(), StartsWith(location));
  EXPECT_THAT(graph.status().message(), HasSubstr(c.message));
}

// Columns count bytes from 1; in "  %y = frobnicate(%x)" the op name starts in column 8.
const ParseErrorCase kParseErrors[] = {
    {"EmptyInput", "", 1, 1, "expected 'graph', found end of input"},
    {"OnlyAComment", "// nothing here\n", 2, 1, "expected 'graph', found end of input"},
    {"UnknownOp",
     "graph @g(%x: f32[2]) {\n"
     "  %y = frobnicate(%x) : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 8, "unknown op 'frobnicate'"},
    {"UnknownAttribute",
     "graph @g(%x: f32[2]) {\n"
     "  %y = gelu(%x) {axis = 1} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 18, "op 'gelu' has no attribute 'axis'"},
    {"WrongAttributeKind",
     "graph @g(%x: f32[2]) {\n"
     "  %y = gelu(%x) {approximate = 3} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 32, "attribute 'approximate' of op 'gelu': expected string, got int"},
    {"AttributeGivenTwice",
     "graph @g(%x: f32[2]) {\n"
     "  %y = split(%x) {axis = 0, axis = 0, sizes = [2]} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 29, "attribute 'axis' given twice"},
    {"MissingRequiredAttribute",
     "graph @g(%x: f32[2]) {\n"
     "  %y = cast(%x) : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 8, "op 'cast' requires attribute 'to'"},
    {"InputsRejectedByTypeInference",
     "graph @g(%x: f32[2], %i: i32[2]) {\n"
     "  %y = add(%x, %i) : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 8, "inputs 'a' (f32[2]) and 'b' (i32[2]) must have the same dtype"},
    {"AnnotatedTypeDisagreesWithInference",
     "graph @g(%x: f32[2]) {\n"
     "  %y = neg(%x) : f32[3]\n"
     "  return %y\n"
     "}\n",
     2, 18, "result %y is annotated f32[3] but op 'neg' gives f32[2]"},
    {"SecondAnnotatedTypeDisagreesWithInference",
     "graph @g(%x: f32[2]) {\n"
     "  %a, %b = split(%x) {sizes = [1, 1]} : f32[1], f32[2]\n"
     "  return %a\n"
     "}\n",
     2, 49, "result %b is annotated f32[2] but op 'split' gives f32[1]"},
    {"FewerResultsNamedThanTheOpProduces",
     "graph @g(%x: f32[2]) {\n"
     "  %a = split(%x) {sizes = [1, 1]} : f32[1]\n"
     "  return %a\n"
     "}\n",
     2, 3, "op 'split' produces 2 results, 1 named"},
    {"FewerTypesThanResults",
     "graph @g(%x: f32[2]) {\n"
     "  %a, %b = split(%x) {sizes = [1, 1]} : f32[1]\n"
     "  return %a\n"
     "}\n",
     2, 41, "1 result types given for 2 results"},
    {"UndefinedValue",
     "graph @g(%x: f32[2]) {\n"
     "  %y = neg(%z) : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 12, "undefined value %z"},
    {"UseBeforeDefinition",
     "graph @g(%x: f32[2]) {\n"
     "  %y = neg(%z) : f32[2]\n"
     "  %z = neg(%x) : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 12, "undefined value %z"},
    {"UndefinedReturnValue",
     "graph @g(%x: f32[2]) {\n"
     "  return %x, %nope\n"
     "}\n",
     2, 14, "undefined value %nope"},
    {"ValueDefinedTwice",
     "graph @g(%x: f32[2]) {\n"
     "  %x = neg(%x) : f32[2]\n"
     "  return %x\n"
     "}\n",
     2, 3, "value %x is defined twice"},
    {"ValueDefinedTwiceInOneStatement",
     "graph @g(%x: f32[2]) {\n"
     "  %a, %a = split(%x) {sizes = [1, 1]} : f32[1], f32[1]\n"
     "  return %a\n"
     "}\n",
     2, 7, "value %a is defined twice"},
    {"ParameterDefinedTwice", "graph @g(%x: f32[2], %x: f32[2]) {\n  return %x\n}\n", 1, 22,
     "value %x is defined twice"},
    {"UnterminatedString",
     "graph @g(%x: f32[2]) {\n"
     "  %y = gelu(%x) {approximate = \"tanh} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 32, "unterminated string"},
    {"UnterminatedQuotedName", "graph @g(%x: f32[2]) {\n  return %\"x\n}\n", 2, 11,
     "unterminated string"},
    {"UnknownEscapeInString", "graph @g(%\"a\\qb\": f32[2]) {\n  return %x\n}\n", 1, 11,
     "unknown escape '\\q' in string"},
    {"BadHexEscapeInString", "graph @g(%\"a\\x4\": f32[2]) {\n  return %x\n}\n", 1, 11,
     "bad \\x escape in string"},
    {"EmptyValueName", "graph @g(%\"\": f32[2]) {\n  return %x\n}\n", 1, 10,
     "a value name must not be empty"},
    {"NumberRunningIntoLetters", "graph @g(%x: f32[2x]) {\n  return %x\n}\n", 1, 18,
     "malformed number '2x'"},
    {"NumberWithoutExponentDigits",
     "graph @g() {\n"
     "  %y = fill() {shape = [2], value = 1e} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 37, "missing exponent digits"},
    {"FloatWhereADimensionIsExpected", "graph @g(%x: f32[1.5]) {\n  return %x\n}\n", 1, 18,
     "expected an integer, found '1.5'"},
    {"DimensionOutOfRange", "graph @g(%x: f32[99999999999999999999]) {\n  return %x\n}\n", 1, 18,
     "integer 99999999999999999999 is out of range"},
    {"NegativeIntegerOutOfRange",
     "graph @g(%x: f32[2]) {\n"
     "  %y = split(%x) {axis = -9223372036854775809, sizes = [2]} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 26, "integer -9223372036854775809 is out of range"},
    {"IntegerListElementOutOfRange",
     "graph @g(%x: f32[2]) {\n"
     "  %y = split(%x) {sizes = [1, 18446744073709551616]} : f32[2]\n"
     "  return %y\n"
     "}\n",
     2, 31, "integer 18446744073709551616 is out of range"},
    {"NegativeDimension", "graph @g(%x: f32[2, -3]) {\n  return %x\n}\n", 1, 14,
     "negative dimension -3"},
    {"ShapeWithTooManyElements", "graph @g(%x: f32[16777216,16777216,2]) {\n  return %x\n}\n", 1,
     14, "more than 2^48 elements"},
    {"ShapeWithAZeroExtentBesideTooManyElements",
     "graph @g(%x: f32[0,16777216,16777216,2]) {\n  return %x\n}\n", 1, 14,
     "more than 2^48 elements"},
    {"UnknownDType", "graph @g(%x: f31[2]) {\n  return %x\n}\n", 1, 14, "unknown dtype 'f31'"},
    {"TensorLiteralWithTooManyElements",
     "graph @g() {\n"
     "  %c = constant() {value = tensor<f32[1]>[1.0, 2.0]} : f32[1]\n"
     "  return %c\n"
     "}\n",
     2, 48, "tensor literal has more than the 1 elements of f32[1]"},
    {"TensorLiteralWithTooFewElements",
     "graph @g() {\n"
     "  %c = constant() {value = tensor<f32[281474976710656]>[]} : f32[281474976710656]\n"
     "  return %c\n"
     "}\n",
     2, 28, "tensor literal has 0 elements, f32[281474976710656] needs 281474976710656"},
    {"MissingReturn",
     "graph @g(%x: f32[2]) {\n"
     "  %y = neg(%x) : f32[2]\n"
     "}\n",
     3, 1, "missing 'return'"},
    {"MissingReturnAtEndOfInput",
     "graph @g(%x: f32[2]) {\n"
     "  %y = neg(%x) : f32[2]\n",
     3, 1, "missing 'return'"},
    {"ReturnWithoutValues", "graph @g(%x: f32[2]) {\n  return\n}\n", 3, 1,
     "expected a value name like %x, found '}'"},
    {"MissingClosingBrace", "graph @g(%x: f32[2]) {\n  return %x\n", 3, 1,
     "expected '}', found end of input"},
    {"TrailingTextAfterTheGraph", "graph @g(%x: f32[2]) {\n  return %x\n} extra\n", 3, 3,
     "unexpected text after the graph"},
    {"SecondGraphAfterTheFirst",
     "graph @g(%x: f32[2]) {\n  return %x\n}\ngraph @h(%x: f32[2]) {\n  return %x\n}\n", 4, 1,
     "unexpected text after the graph"},
    {"UnexpectedCharacter", "graph @g(%x: f32[2]) {\n  return $x\n}\n", 2, 10,
     "unexpected character '$'"},
    {"UnexpectedNonAsciiByte", "graph @g(%x: f32[2]) {\n  return \xC3\xA9\n}\n", 2, 10,
     "unexpected byte 0xC3"},
    {"MissingGraphName", "graph (%x: f32[2]) {\n  return %x\n}\n", 1, 7,
     "expected graph name '@name'"},
};

INSTANTIATE_TEST_SUITE_P(Errors, ParseError, ::testing::ValuesIn(kParseErrors),
                         [](const ::testing::TestParamInfo<ParseErrorCase>& test) {
                           return test.param.name;
                         });

TEST(Parser, ReadsGraphsOneAfterAnotherFromAnOffset) {
  // A string holding a brace does not end the graph; the offset moves past each graph, and an
  // error in the second counts lines from the start of the whole text.
  const std::string text =
      "// two graphs\n"
      "graph @a(%x: f32[2]) {\n  %y = neg(%x) : f32[2]\n  return %y\n}\n"
      "graph @\"b}\"(%x: f32[2]) {\n  return %x\n}\n"
      "graph @c(%x: f32[2]) {\n  %y = nope(%x) : f32[2]\n  return %y\n}\n";
  size_t offset = 0;
  Expected<Graph> a = parse_graph_at(text, offset, "two.kiln");
  ASSERT_TRUE(a.has_value()) << a.status().message();
  EXPECT_EQ(a->name(), "a");
  EXPECT_EQ(text[offset - 1], '}');
  Expected<Graph> b = parse_graph_at(text, offset, "two.kiln");
  ASSERT_TRUE(b.has_value()) << b.status().message();
  EXPECT_EQ(b->name(), "b}");
  Expected<Graph> c = parse_graph_at(text, offset, "two.kiln");
  ASSERT_FALSE(c.has_value());
  EXPECT_THAT(c.status().message(), StartsWith("two.kiln:10:"));
  // The whole-text reader still refuses text after its graph.
  EXPECT_THAT(parse_graph(text.substr(14), "one.kiln").status().message(),
              HasSubstr("unexpected text after the graph"));
}

TEST(Parser, ErrorsNameTheDefaultFileWhenNoneIsGiven) {
  Expected<Graph> graph = parse_graph("graph");
  ASSERT_FALSE(graph.has_value());
  EXPECT_EQ(graph.status().message(),
            "<input>:1:6: expected graph name '@name', found end of input");
}

// The `value` attribute of a fill node written with `literal`, or NaN after failing the test.
double parse_fill_value(const std::string& literal) {
  const std::string text = fmt::format(
      "graph @g() {{\n  %y = fill() {{shape = [1], value = {}}} : f32[1]\n  return %y\n}}\n",
      literal);
  Expected<Graph> graph = parse_graph(text);
  EXPECT_TRUE(graph.has_value()) << literal << ": " << graph.status().message();
  if (!graph) return std::numeric_limits<double>::quiet_NaN();
  return graph->nodes()[0]->attrs().get_float("value");
}

TEST(Parser, ReadsFloatLiterals) {
  EXPECT_EQ(parse_fill_value("0.1"), 0.1);
  EXPECT_EQ(parse_fill_value("1e-30"), 1e-30);
  EXPECT_EQ(parse_fill_value("1E5"), 1e5);
  EXPECT_EQ(parse_fill_value("2.5e+3"), 2500.0);
  EXPECT_EQ(parse_fill_value("7"), 7.0);
  EXPECT_EQ(parse_fill_value("5e-324"), 5e-324);
  EXPECT_EQ(parse_fill_value("1.7976931348623157e+308"), 1.7976931348623157e308);
  EXPECT_EQ(parse_fill_value("inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_fill_value("-inf"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(parse_fill_value("nan")));
  const double negative_zero = parse_fill_value("-0.0");
  EXPECT_EQ(negative_zero, 0.0);
  EXPECT_TRUE(std::signbit(negative_zero));
}

TEST(Parser, FloatLiteralsOutOfRangeOverflowToInfinityAndUnderflowToZero) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(parse_fill_value("1e400"), inf);
  EXPECT_EQ(parse_fill_value("-1e400"), -inf);
  EXPECT_EQ(parse_fill_value("1" + std::string(400, '0') + ".0"), inf);
  EXPECT_EQ(parse_fill_value("0.001e309"), 1e306);
  const double tiny = parse_fill_value("1e-400");
  EXPECT_EQ(tiny, 0.0);
  EXPECT_FALSE(std::signbit(tiny));
  const double negative_tiny = parse_fill_value("-1e-400");
  EXPECT_EQ(negative_tiny, 0.0);
  EXPECT_TRUE(std::signbit(negative_tiny));
  // The exponent's sign alone does not tell: 10^-500 * 10^10 underflows, 10^500 * 10^-100
  // overflows.
  EXPECT_EQ(parse_fill_value("0." + std::string(499, '0') + "1e10"), 0.0);
  EXPECT_EQ(parse_fill_value("1" + std::string(500, '0') + "e-100"), inf);
}

TEST(Parser, ReadsTheFullInt64Range) {
  Expected<Graph> graph = parse_graph(
      "graph @g(%x: f32[2]) {\n"
      "  %y = dropout(%x) {seed = -9223372036854775808, offset = 9223372036854775807} : f32[2]\n"
      "  return %y\n"
      "}\n");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  const Attrs& attrs = graph->nodes()[0]->attrs();
  EXPECT_EQ(attrs.get_int("seed"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(attrs.get_int("offset"), std::numeric_limits<int64_t>::max());
}

TEST(Parser, IntegerAttributeForAFloatAttributeIsConverted) {
  Expected<Graph> graph = parse_graph(
      "graph @g(%x: f32[2]) {\n"
      "  %y = pad(%x) {pads = [1, 0], value = -3} : f32[3]\n"
      "  return %y\n"
      "}\n");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  const AttrValue& value = graph->nodes()[0]->attrs().get("value");
  ASSERT_EQ(value.kind(), AttrKind::floating);
  EXPECT_EQ(value.as_float(), -3.0);
}

TEST(Parser, ReadsQuotedNamesWithEscapes) {
  Expected<Graph> graph = parse_graph(
      "graph @\"my graph\"(%\"a/b:c\": f32[2], %\"q\\\"\\\\\\n\\t\\x41\\xc3\\xa9\": f32[2]) {\n"
      "  return %\"a/b:c\"\n"
      "}\n");
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  EXPECT_EQ(graph->name(), "my graph");
  ASSERT_EQ(graph->inputs().size(), 2u);
  EXPECT_EQ(graph->inputs()[0]->name(), "a/b:c");
  EXPECT_EQ(graph->inputs()[1]->name(), "q\"\\\n\tA\xC3\xA9");
}

}  // namespace
}  // namespace kiln
