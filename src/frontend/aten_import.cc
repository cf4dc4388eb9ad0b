// The ATen importer's graph walk and argument readers; the converters are in aten_ops.cc.
#include "frontend/aten_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <set>

#include "frontend/aten_converter.h"
#include "support/check.h"

namespace kiln {
namespace aten_import {
namespace {

constexpr std::string_view kFormat = "kiln-aten-1";

// The kind of a JSON argument, for error messages.
std::string kind_of(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer()) return "an int";
  if (j.is_number_float()) return "a float";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  if (j.is_object() && !j.empty()) return fmt::format("a {}", j.begin().key());
  return "an object";
}

// A string field of an object, or `fallback` when it is absent or of another kind (reading
// it with Json::value would throw on another kind).
std::string string_field(const Json& j, const char* key, std::string_view fallback) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) return std::string(fallback);
  return j.at(key).get<std::string>();
}

bool is_number(const Json& j) { return j.is_number() || (j.is_object() && j.contains("float")); }

Expected<double> number_of(const Json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string spelled = j.at("float").is_string() ? j.at("float").get<std::string>() : "";
  if (spelled == "inf") return std::numeric_limits<double>::infinity();
  if (spelled == "-inf") return -std::numeric_limits<double>::infinity();
  if (spelled == "nan") return std::numeric_limits<double>::quiet_NaN();
  return Status::errorf("float '{}' is none of inf, -inf, nan", spelled);
}

Expected<DType> dtype_of(const Json& j, std::string_view what) {
  const std::string name = j.is_string() ? j.get<std::string>() : "";
  std::optional<DType> dtype = parse_dtype(name);
  if (!dtype) return Status::errorf("{}: unknown dtype '{}'", what, name);
  return *dtype;
}

Expected<Shape> shape_of(const Json& j, std::string_view what) {
  if (!j.is_array()) return Status::errorf("{}: shape must be a list of ints", what);
  std::vector<int64_t> dims;
  for (const Json& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return Status::errorf("{}: shape must be a list of non-negative ints, got {}", what,
                            j.dump());
    }
    dims.push_back(d.get<int64_t>());
  }
  return Shape(std::move(dims));
}

Expected<TensorType> tensor_type_of(const Json& j, std::string_view what) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape")) {
    return Status::errorf("{}: expected {{\"dtype\": ..., \"shape\": [...]}}, got {}", what,
                          j.dump());
  }
  KILN_ASSIGN_OR_RETURN(DType dtype, dtype_of(j.at("dtype"), what));
  KILN_ASSIGN_OR_RETURN(Shape shape, shape_of(j.at("shape"), what));
  return TensorType{dtype, std::move(shape)};
}

}  // namespace

// ---- AtenNode -------------------------------------------------------------------------------

std::string_view AtenNode::target() const {
  return node_.at("target").get_ref<const std::string&>();
}

const TensorType& AtenNode::output_type(int i) const {
  KILN_CHECK(i < num_outputs() && wants_output(i), "{}: no metadata for result {}", target(), i);
  return *outputs_[static_cast<size_t>(i)];
}

Expected<Value*> AtenNode::rng_seed() {
  if (random_.seed == nullptr) {
    random_.seed = b.input(std::string(kAtenRngSeedInput), DType::i64, {});
    if (random_.seed->name() != kAtenRngSeedInput) {
      return Status::errorf(
          "the graph has an input named '{}', the name of the seed input a "
          "random op adds",
          kAtenRngSeedInput);
    }
  }
  return random_.seed;
}

int64_t AtenNode::take_rng_offsets(int64_t elements) {
  const int64_t first = random_.next_offset;
  random_.next_offset += elements;
  return first;
}

Expected<const Json*> AtenNode::argument(std::string_view name) {
  const Json& args = node_.at("args");
  auto it = args.find(name);
  if (it == args.end()) return Status::errorf("argument '{}' is missing", name);
  read_.insert(std::string(name));
  return &*it;
}

Expected<Value*> AtenNode::resolve(const Json& ref, std::string_view name) {
  // FX graphs pass Python numbers where the schema says Tensor (`1 - x` as sub.Tensor(1, x)):
  // a 0-d constant, which ATen's promotion treats as a wrapped number (converters cast it to
  // the dtype they compute in).
  if (ref.is_boolean()) return b.scalar(ref.get<bool>() ? 1 : 0, DType::boolean);
  if (ref.is_number_integer()) return b.scalar(static_cast<double>(ref.get<int64_t>()), DType::i64);
  if (is_number(ref)) {
    KILN_ASSIGN_OR_RETURN(double value, number_of(ref));
    return b.scalar(value, DType::f64);
  }
  if (!ref.is_object() || !ref.contains("tensor") || !ref.at("tensor").is_string()) {
    return Status::errorf("argument '{}' must be a tensor, got {}", name, kind_of(ref));
  }
  const std::string& source = ref.at("tensor").get_ref<const std::string&>();
  if (ref.contains("index") && !ref.at("index").is_number_integer()) {
    return Status::errorf("argument '{}': a tensor's 'index' must be an int", name);
  }
  const int64_t index = ref.contains("index") ? ref.at("index").get<int64_t>() : 0;
  auto it = values_.find(source);
  if (it == values_.end()) {
    return Status::errorf("argument '{}' refers to '{}', which is not defined before it", name,
                          source);
  }
  if (index < 0 || index >= static_cast<int64_t>(it->second.size()) ||
      it->second[static_cast<size_t>(index)] == nullptr) {
    return Status::errorf("argument '{}' refers to result {} of '{}', which it does not have", name,
                          index, source);
  }
  return it->second[static_cast<size_t>(index)];
}

Expected<Value*> AtenNode::tensor(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  return resolve(*arg, name);
}

Expected<std::optional<Value*>> AtenNode::optional_tensor(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null()) return std::optional<Value*>();
  KILN_ASSIGN_OR_RETURN(Value * value, resolve(*arg, name));
  return std::optional<Value*>(value);
}

Expected<std::vector<Value*>> AtenNode::tensors(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (!arg->is_array()) {
    return Status::errorf("argument '{}' must be a list of tensors, got {}", name, kind_of(*arg));
  }
  std::vector<Value*> values;
  for (const Json& ref : *arg) {
    KILN_ASSIGN_OR_RETURN(Value * value, resolve(ref, name));
    values.push_back(value);
  }
  return values;
}

Expected<std::vector<std::optional<Value*>>> AtenNode::optional_tensors(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (!arg->is_array()) {
    return Status::errorf("argument '{}' must be a list of tensors, got {}", name, kind_of(*arg));
  }
  std::vector<std::optional<Value*>> values;
  for (const Json& ref : *arg) {
    if (ref.is_null()) {
      values.emplace_back();
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Value * value, resolve(ref, name));
    values.emplace_back(value);
  }
  return values;
}

Expected<int64_t> AtenNode::integer(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> value, optional_integer(name));
  if (!value) return Status::errorf("argument '{}' must be an int, got null", name);
  return *value;
}

Expected<std::optional<int64_t>> AtenNode::optional_integer(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null()) return std::optional<int64_t>();
  if (!arg->is_number_integer()) {
    return Status::errorf("argument '{}' must be an int, got {}", name, kind_of(*arg));
  }
  return std::optional<int64_t>(arg->get<int64_t>());
}

Expected<double> AtenNode::number(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(std::optional<double> value, optional_number(name));
  if (!value) return Status::errorf("argument '{}' must be a number, got null", name);
  return *value;
}

Expected<std::optional<double>> AtenNode::optional_number(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null()) return std::optional<double>();
  if (arg->is_boolean()) return std::optional<double>(arg->get<bool>() ? 1.0 : 0.0);
  if (!is_number(*arg)) {
    return Status::errorf("argument '{}' must be a number, got {}", name, kind_of(*arg));
  }
  KILN_ASSIGN_OR_RETURN(double value, number_of(*arg));
  return std::optional<double>(value);
}

Expected<bool> AtenNode::is_float_number(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  return arg->is_number_float() || arg->is_object();
}

Expected<bool> AtenNode::boolean(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(std::optional<bool> value, optional_boolean(name));
  if (!value) return Status::errorf("argument '{}' must be a bool, got null", name);
  return *value;
}

Expected<std::optional<bool>> AtenNode::optional_boolean(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null()) return std::optional<bool>();
  if (!arg->is_boolean()) {
    return Status::errorf("argument '{}' must be a bool, got {}", name, kind_of(*arg));
  }
  return std::optional<bool>(arg->get<bool>());
}

Expected<std::vector<int64_t>> AtenNode::integers(std::string_view name) {
  return read_integers(name, /*null_is_empty=*/false);
}

Expected<std::vector<int64_t>> AtenNode::integers_or_empty(std::string_view name) {
  return read_integers(name, /*null_is_empty=*/true);
}

// The elements of a JSON list whose every element `is_kind`, or nullopt.
template <typename T>
std::optional<std::vector<T>> list_of(const Json& arg, bool (Json::*is_kind)() const noexcept) {
  if (!arg.is_array()) return std::nullopt;
  std::vector<T> values;
  for (const Json& v : arg) {
    if (!(v.*is_kind)()) return std::nullopt;
    values.push_back(v.get<T>());
  }
  return values;
}

Expected<std::vector<int64_t>> AtenNode::read_integers(std::string_view name, bool null_is_empty) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null() && null_is_empty) return std::vector<int64_t>();
  // ATen's int[1] arguments accept a single int for a list of one.
  if (arg->is_number_integer()) return std::vector<int64_t>{arg->get<int64_t>()};
  std::optional<std::vector<int64_t>> values = list_of<int64_t>(*arg, &Json::is_number_integer);
  if (!values) {
    return Status::errorf("argument '{}' must be a list of ints, got {}", name, arg->dump());
  }
  return std::move(*values);
}

Expected<std::vector<bool>> AtenNode::booleans(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  std::optional<std::vector<bool>> values = list_of<bool>(*arg, &Json::is_boolean);
  if (!values) {
    return Status::errorf("argument '{}' must be a list of bools, got {}", name, arg->dump());
  }
  return std::move(*values);
}

Expected<std::optional<std::string>> AtenNode::optional_string(std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const Json* arg, argument(name));
  if (arg->is_null()) return std::optional<std::string>();
  if (!arg->is_string()) {
    return Status::errorf("argument '{}' must be a string, got {}", name, kind_of(*arg));
  }
  return std::optional<std::string>(arg->get<std::string>());
}

void AtenNode::ignore(std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) read_.insert(std::string(name));
}

Status AtenNode::unsupported(std::string_view name, std::string_view why) const {
  const Json& args = node_.at("args");
  auto it = args.find(name);
  return Status::errorf(ErrorCode::unsupported, "argument {} = {} is not supported: {}", name,
                        it == args.end() ? "(missing)" : it->dump(), why);
}

std::vector<std::string> AtenNode::unread_arguments() const {
  std::vector<std::string> unread;
  for (const auto& [name, value] : node_.at("args").items()) {
    if (!read_.contains(name)) unread.push_back(name);
  }
  return unread;
}

// ---- The graph walk --------------------------------------------------------------------------

namespace {

// Checks a node's JSON shape before any converter sees it.
Status check_node_fields(const Json& node) {
  if (!node.is_object() || !node.contains("name") || !node.at("name").is_string() ||
      !node.contains("target") || !node.at("target").is_string()) {
    return Status::errorf("a node needs a string 'name' and 'target', got {}",
                          node.dump().substr(0, 200));
  }
  if (!node.contains("args") || !node.at("args").is_object()) {
    return Status::error("'args' must be an object of arguments by schema name");
  }
  if (!node.contains("outputs") || !node.at("outputs").is_array()) {
    return Status::error("'outputs' must be a list of {\"dtype\", \"shape\"} (or null)");
  }
  return Status::ok();
}

// A converter's error as "unsupported", unless it is Kiln's own bug.
Status as_unsupported(const Status& status) {
  if (status.code() != ErrorCode::invalid_input) return status;
  return Status::error(ErrorCode::unsupported, status.message());
}

// Converts one node and checks its results against PyTorch's metadata.
Expected<std::vector<Value*>> convert_node(GraphBuilder& b, const ValueTable& values,
                                           RandomStream& random, const Json& node) {
  KILN_RETURN_IF_ERROR(check_node_fields(node));
  std::vector<std::optional<TensorType>> outputs;
  for (const Json& meta : node.at("outputs")) {
    if (meta.is_null()) {
      outputs.emplace_back();
      continue;
    }
    KILN_ASSIGN_OR_RETURN(TensorType type, tensor_type_of(meta, "result metadata"));
    outputs.emplace_back(std::move(type));
  }
  const std::string& target = node.at("target").get_ref<const std::string&>();
  auto converter = converters().find(target);
  if (converter == converters().end()) {
    return Status::errorf(ErrorCode::unsupported, "Kiln has no converter for ATen op {}", target);
  }
  AtenNode context(b, values, random, node, std::move(outputs));
  Expected<std::vector<Value*>> results = converter->second(context);
  // PyTorch made the node, so a converter that refuses it, or builds what Kiln's ops refuse,
  // does not support this form of the op; its own bugs stay internal.
  if (!results) return as_unsupported(results.status());
  if (!b.ok()) return as_unsupported(b.status());
  if (std::vector<std::string> unread = context.unread_arguments(); !unread.empty()) {
    return Status::errorf(ErrorCode::unsupported,
                          "argument(s) {} are not read by Kiln's converter of {}",
                          fmt::join(unread, ", "), target);
  }
  if (results->size() != static_cast<size_t>(context.num_outputs())) {
    return Status::errorf(ErrorCode::internal,
                          "internal compiler error: the converter gives {} results, PyTorch's "
                          "metadata {}",
                          results->size(), context.num_outputs());
  }
  for (int i = 0; i < context.num_outputs(); ++i) {
    Value* result = (*results)[static_cast<size_t>(i)];
    if (!context.wants_output(i)) {
      (*results)[static_cast<size_t>(i)] = nullptr;
      continue;
    }
    if (result == nullptr)
      return Status::errorf(ErrorCode::internal, "internal compiler error: result {} was not built",
                            i);
    if (result->type() != context.output_type(i)) {
      return Status::errorf(ErrorCode::internal,
                            "internal compiler error: result {} converts to {}, but PyTorch "
                            "gives {}",
                            i, result->type().to_string(), context.output_type(i).to_string());
    }
  }
  return results;
}

Expected<Graph> import_parsed(const Json& graph) {
  if (string_field(graph, "format", "") != kFormat) {
    return Status::errorf("not an ATen graph: expected an object with \"format\": \"{}\"", kFormat);
  }
  for (const char* field : {"inputs", "nodes", "outputs"}) {
    if (!graph.contains(field) || !graph.at(field).is_array()) {
      return Status::errorf("ATen graph: '{}' must be a list", field);
    }
  }
  GraphBuilder b(string_field(graph, "name", "aten"));
  ValueTable values;
  RandomStream random;
  std::set<Value*> named;  // the values of earlier nodes and inputs, named already
  for (const Json& input : graph.at("inputs")) {
    if (!input.is_object() || !input.contains("name") || !input.at("name").is_string()) {
      return Status::errorf("ATen graph: an input needs a string 'name', got {}", input.dump());
    }
    const std::string& name = input.at("name").get_ref<const std::string&>();
    KILN_ASSIGN_OR_RETURN(TensorType type, tensor_type_of(input, fmt::format("input '{}'", name)));
    if (values.contains(name)) return Status::errorf("ATen graph: input '{}' is repeated", name);
    values[name] = {b.input(name, type.dtype, type.shape)};
    named.insert(values[name][0]);
  }
  for (const Json& node : graph.at("nodes")) {
    const std::string name = string_field(node, "name", "?");
    const std::string target = string_field(node, "target", "?");
    Expected<std::vector<Value*>> results = convert_node(b, values, random, node);
    if (!results) {
      return results.status().with_context(fmt::format("node '{}' ({})", name, target));
    }
    if (values.contains(name)) return Status::errorf("ATen graph: node '{}' is repeated", name);
    // Each new result takes the node's name, so that explanations and dumps read as the graph
    // PyTorch gave (a result that is an earlier value, as a no-op view's, keeps its own).
    for (size_t i = 0; i < results->size(); ++i) {
      Value* result = (*results)[i];
      if (result == nullptr || named.contains(result)) continue;
      b.rename(result, i == 0 ? name : fmt::format("{}.{}", name, i));
      named.insert(result);
    }
    values[name] = std::move(*results);
  }
  // A graph output must be a value of its own: an input or a value already returned is
  // returned again through an identity.
  std::set<Value*> returned;
  for (const Json& ref : graph.at("outputs")) {
    const Json holder = {{"target", "output"}, {"args", {{"output", ref}}}};
    AtenNode reader(b, values, random, holder, {});
    Expected<Value*> output = reader.tensor("output");
    if (!output) return output.status().with_context("ATen graph outputs");
    Value* value = *output;
    if (value->is_graph_input() || returned.contains(value)) {
      value = b.apply1(Op::identity, {value});
    }
    returned.insert(value);
    b.output(value);
  }
  return b.finish();
}

}  // namespace
}  // namespace aten_import

Expected<Graph> import_aten_graph(std::string_view json_text) {
  aten_import::Json graph =
      aten_import::Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (graph.is_discarded()) return Status::error("ATen graph: the text is not valid JSON");
  return aten_import::import_parsed(graph);
}

std::vector<std::string> supported_aten_ops() {
  std::vector<std::string> ops;
  for (const auto& [name, converter] : aten_import::converters()) ops.push_back(name);
  return ops;
}

}  // namespace kiln
