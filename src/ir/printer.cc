#include "ir/printer.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "ir/dtype.h"

namespace kiln {
namespace {

bool is_plain_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string quote(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7F) {
          out += fmt::format("\\x{:02X}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string print_name(std::string_view name) {
  return is_plain_name(name) ? std::string(name) : quote(name);
}

// Shortest text that reads back to the same double, always recognisable as a float.
std::string print_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// An element as its dtype stores it. Arrays hold rounded values, but one filled through `data`
// may not; rounding first also keeps the integer conversion defined for NaN and huge values.
std::string print_element(double value, DType dtype) {
  const double stored = round_to_dtype(value, dtype);
  if (dtype == DType::boolean) return stored != 0 ? "true" : "false";
  if (is_integer(dtype)) return fmt::format("{}", static_cast<int64_t>(stored));
  return print_float(stored);
}

template <typename T, typename Fn>
std::string print_list(const std::vector<T>& items, Fn&& print_item) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += print_item(items[i]);
  }
  return out + "]";
}

std::string print_type_list(const std::vector<Value*>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += values[i]->type().to_string();
  }
  return out;
}

}  // namespace

std::string print_value_ref(const Value& value) { return "%" + print_name(value.name()); }

std::string print_attr_value(const AttrValue& value, const PrintOptions& options) {
  switch (value.kind()) {
    case AttrKind::integer:
      return fmt::format("{}", value.as_int());
    case AttrKind::floating:
      return print_float(value.as_float());
    case AttrKind::boolean:
      return value.as_bool() ? "true" : "false";
    case AttrKind::string:
      return quote(value.as_string());
    case AttrKind::ints:
      return print_list(value.as_ints(), [](int64_t v) { return fmt::format("{}", v); });
    case AttrKind::floats:
      return print_list(value.as_floats(), print_float);
    case AttrKind::dtype:
      return std::string(dtype_name(value.as_dtype()));
    case AttrKind::tensor: {
      const Array& array = value.as_tensor();
      if (options.tensors_by_identity) {
        return fmt::format("tensor<{}>@{}", array.type().to_string(),
                           static_cast<const void*>(&array));
      }
      return fmt::format("tensor<{}>", array.type().to_string()) +
             print_list(array.data, [&](double v) { return print_element(v, array.dtype); });
    }
  }
  return "?";
}

std::string print_node(const Node& node, const PrintOptions& options) {
  std::string out;
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (i > 0) out += ", ";
    out += print_value_ref(*node.output(i));
  }
  out += fmt::format(" = {}(", node.op_name());
  for (int i = 0; i < node.num_inputs(); ++i) {
    if (i > 0) out += ", ";
    out += print_value_ref(*node.input(i));
  }
  out += ")";
  std::string attrs;
  for (const AttrSpec& spec : node.def().attrs) {
    const std::string value = print_attr_value(node.attrs().get(spec.name), options);
    // Compared as text, not with ==: -0.0 == 0.0, yet leaving out "-0.0" would read back as
    // the default 0.0.
    if (spec.default_value && print_attr_value(*spec.default_value) == value) continue;
    if (!attrs.empty()) attrs += ", ";
    attrs += fmt::format("{} = {}", spec.name, value);
  }
  if (!attrs.empty()) out += " {" + attrs + "}";
  return out + " : " + print_type_list(node.outputs());
}

std::string print_graph(const Graph& graph, const PrintOptions& options) {
  std::string out = fmt::format("graph @{}(", options.anonymous ? "_" : print_name(graph.name()));
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    const Value& input = *graph.inputs()[i];
    if (i > 0) out += ", ";
    out += fmt::format("{}: {}", print_value_ref(input), input.type().to_string());
  }
  out += ") {\n";
  for (const Node* node : graph.nodes()) out += "  " + print_node(*node, options) + "\n";
  out += "  return ";
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    if (i > 0) out += ", ";
    out += print_value_ref(*graph.outputs()[i]);
  }
  return out + "\n}\n";
}

}  // namespace kiln
