// The text form's promise as a test predicate: a graph's printed text parses back into a graph
// that verifies, is the same graph (names, types, ops, attribute values to the bit) and prints
// the same text. Shared by the round-trip unit test and the parser fuzz test.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::testing {

// Same double, bit for bit, except that any NaN equals any NaN (the text form has one "nan").
inline bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

inline bool same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_double(a[i], b[i])) return false;
  }
  return true;
}

// AttrValue::operator== but with same_double for floating values, so that -0.0 differs from
// 0.0. Integer and bool tensor elements compare as numbers: -0.0 and 0.0 are the same integer.
inline bool same_attr_value(const AttrValue& a, const AttrValue& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case AttrKind::floating: return same_double(a.as_float(), b.as_float());
    case AttrKind::floats: return same_doubles(a.as_floats(), b.as_floats());
    case AttrKind::tensor: {
      const Array& x = a.as_tensor();
      const Array& y = b.as_tensor();
      if (x.type() != y.type()) return false;
      return is_floating(x.dtype) ? same_doubles(x.data, y.data) : x.data == y.data;
    }
    default: return a == b;
  }
}

inline std::string names_of(const std::vector<Value*>& values) {
  std::string out;
  for (const Value* v : values) out += (out.empty() ? "" : ", ") + print_value_ref(*v);
  return out;
}

// Whether `b` is the same graph as `a`: name, inputs, nodes in order (op, operands, results,
// every attribute) and outputs, comparing values by name and type.
inline ::testing::AssertionResult same_graph(const Graph& a, const Graph& b) {
  if (a.name() != b.name()) {
    return ::testing::AssertionFailure()
           << "graph names differ: " << a.name() << " vs " << b.name();
  }
  auto same_values = [](const std::vector<Value*>& x, const std::vector<Value*>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i]->name() != y[i]->name() || x[i]->type() != y[i]->type()) return false;
    }
    return true;
  };
  if (!same_values(a.inputs(), b.inputs())) {
    return ::testing::AssertionFailure()
           << "inputs differ: " << names_of(a.inputs()) << " vs " << names_of(b.inputs());
  }
  if (a.num_nodes() != b.num_nodes()) {
    return ::testing::AssertionFailure()
           << "node counts differ: " << a.num_nodes() << " vs " << b.num_nodes();
  }
  for (int i = 0; i < a.num_nodes(); ++i) {
    const Node& x = *a.nodes()[static_cast<size_t>(i)];
    const Node& y = *b.nodes()[static_cast<size_t>(i)];
    if (x.op() != y.op() || !same_values(x.inputs(), y.inputs()) ||
        !same_values(x.outputs(), y.outputs())) {
      return ::testing::AssertionFailure()
             << "node " << i << " differs: " << print_node(x) << " vs " << print_node(y);
    }
    for (const AttrSpec& spec : x.def().attrs) {
      const AttrValue* value = y.attrs().find(spec.name);
      if (value == nullptr || !same_attr_value(x.attrs().get(spec.name), *value)) {
        return ::testing::AssertionFailure()
               << "attribute '" << spec.name << "' of node " << i
               << " differs: " << print_attr_value(x.attrs().get(spec.name)) << " vs "
               << (value != nullptr ? print_attr_value(*value) : "missing");
      }
    }
  }
  if (!same_values(a.outputs(), b.outputs())) {
    return ::testing::AssertionFailure()
           << "outputs differ: " << names_of(a.outputs()) << " vs " << names_of(b.outputs());
  }
  return ::testing::AssertionSuccess();
}

// print(parse(print(g))) == print(g), parse(print(g)) verifies and is the same graph as g.
inline ::testing::AssertionResult round_trips(const Graph& graph) {
  const std::string text = print_graph(graph);
  Expected<Graph> parsed = parse_graph(text, "printed");
  if (!parsed) {
    return ::testing::AssertionFailure()
           << "the printed text does not parse: " << parsed.status().message() << "\n"
           << text;
  }
  if (Status verified = verify(*parsed); !verified.is_ok()) {
    return ::testing::AssertionFailure()
           << "the parsed graph does not verify: " << verified.message() << "\n"
           << text;
  }
  const std::string reprinted = print_graph(*parsed);
  if (reprinted != text) {
    return ::testing::AssertionFailure() << "printing the parsed graph changes the text:\n"
                                         << text << "became\n"
                                         << reprinted;
  }
  ::testing::AssertionResult same = same_graph(graph, *parsed);
  if (!same) return same << "\n" << text;
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
