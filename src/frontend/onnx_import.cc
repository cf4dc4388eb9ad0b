#include "frontend/onnx_import.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/version_converter/convert.h>

#include "frontend/onnx_converter.h"
#include "frontend/onnx_tensor.h"
#include "ir/verifier.h"
#include "support/check.h"
#include "support/files.h"

namespace kiln {
namespace onnx_import {

// Everything the import of one graph accumulates: the Kiln graph under construction, what each
// ONNX tensor name stands for, and the weights behind weight inputs.
class ImportState {
 public:
  explicit ImportState(std::string graph_name) : graph_(std::move(graph_name)) {}

  Graph& graph() { return graph_; }

  void define(const std::string& name, Operand operand) {
    if (operand.constant && !operand.value) constant_names_.emplace(operand.constant.get(), name);
    tensors_[name] = std::move(operand);
  }
  const Operand* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }

  // A Kiln value for `operand`: its own, or the materialized constant (once per constant).
  Expected<Value*> materialize(const Operand& operand) {
    if (operand.value != nullptr) return operand.value;
    KILN_CHECK(operand.constant != nullptr, "materializing an absent operand");
    const Array* array = operand.constant.get();
    if (auto it = materialized_.find(array); it != materialized_.end()) return it->second;
    auto name_it = constant_names_.find(array);
    const std::string name = name_it == constant_names_.end() ? std::string() : name_it->second;
    Value* value = nullptr;
    if (array->size() <= kEmbedElements) {
      KILN_ASSIGN_OR_RETURN(Node * node, graph_.add_node(Op::constant, {}, {{"value", *array}}));
      value = node->output();
    } else {
      value = graph_.add_input(array->type());
      weights_.push_back(*array);
    }
    if (!name.empty()) give_name(value, name);
    materialized_.emplace(array, value);
    keep_alive_.push_back(operand.constant);
    return value;
  }

  Expected<std::vector<Operand>> apply(Op op, const std::vector<Operand>& inputs,
                                       const Attrs& attrs) {
    bool all_constant = true;
    for (const Operand& input : inputs) {
      KILN_CHECK(input.present(), "op '{}' applied to an absent operand", op_def(op).name);
      all_constant = all_constant && input.is_constant();
    }
    if (all_constant) {
      KILN_ASSIGN_OR_RETURN(std::optional<std::vector<Operand>> folded, fold(op, inputs, attrs));
      if (folded) return std::move(*folded);
    }
    std::vector<Value*> values;
    for (const Operand& input : inputs) {
      KILN_ASSIGN_OR_RETURN(Value * value, materialize(input));
      values.push_back(value);
    }
    KILN_ASSIGN_OR_RETURN(Node * node, graph_.add_node(op, std::move(values), attrs));
    std::vector<Operand> outputs;
    for (Value* output : node->outputs()) outputs.push_back(Operand{output, nullptr});
    return outputs;
  }

  // Gives `value` the ONNX tensor name `name`. ONNX names take precedence over the numbers
  // Kiln gives its own unnamed values (old PyTorch exports name tensors "1", "2", ... too): a
  // value holding `name` yields it, unless it is a graph input or in `kept`; then `value` gets
  // a variant of it ("name.1").
  void give_name(Value* value, const std::string& name, const std::set<const Value*>& kept = {}) {
    Value* holder = graph_.find_value(name);
    if (holder != nullptr && holder != value && !holder->is_graph_input() &&
        !kept.contains(holder)) {
      graph_.rename_value(holder, "");
    }
    graph_.rename_value(value, name);
  }

  std::vector<Array> take_weights() { return std::move(weights_); }

 private:
  // The op evaluated on constant inputs, or nullopt when the result is too large to fold.
  Expected<std::optional<std::vector<Operand>>> fold(Op op, const std::vector<Operand>& inputs,
                                                     const Attrs& attrs) {
    const OpDef& def = op_def(op);
    KILN_ASSIGN_OR_RETURN(Attrs canonical, canonicalize_attrs(def, attrs));
    std::vector<TensorType> types;
    std::vector<Array> arrays;
    for (const Operand& input : inputs) {
      types.push_back(input.type());
      arrays.push_back(*input.constant);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<TensorType> output_types,
                          infer_types(def, types, canonical));
    int64_t elements = 0;
    for (const TensorType& type : output_types) elements += type.shape.num_elements();
    if (elements > kMaxFoldElements) return std::optional<std::vector<Operand>>();
    KILN_ASSIGN_OR_RETURN(std::vector<Array> results, def.eval(arrays, canonical, output_types));
    std::vector<Operand> outputs;
    for (Array& result : results) outputs.push_back(Operand::of(std::move(result)));
    return std::optional<std::vector<Operand>>(std::move(outputs));
  }

  Graph graph_;
  std::unordered_map<std::string, Operand> tensors_;
  std::unordered_map<const Array*, std::string> constant_names_;
  std::unordered_map<const Array*, Value*> materialized_;
  std::vector<std::shared_ptr<const Array>> keep_alive_;  // keys of materialized_ stay valid
  std::vector<Array> weights_;
};

// ---- NodeContext ---------------------------------------------------------------------------

bool NodeContext::has_input(int i) const {
  return i >= 0 && i < num_inputs() && inputs_[static_cast<size_t>(i)].present();
}

Expected<Operand> NodeContext::input(int i) const {
  if (!has_input(i)) return Status::errorf("input {} is required", i);
  return inputs_[static_cast<size_t>(i)];
}

Expected<Array> NodeContext::constant_input(int i, std::string_view what) const {
  KILN_ASSIGN_OR_RETURN(Operand operand, input(i));
  if (!operand.is_constant()) {
    return Status::errorf("{} (input {}, {}'{}') {}; it is computed from model inputs", what, i,
                          kStaticInputNameMarker, node_.input(i), kStaticInputNeeded);
  }
  return *operand.constant;
}

Expected<std::vector<int64_t>> NodeContext::ints_input(int i, std::string_view what) const {
  KILN_ASSIGN_OR_RETURN(Array array, constant_input(i, what));
  if (!is_integer(array.dtype) || array.shape.rank() > 1) {
    return Status::errorf("{} (input {}) must be a 1-d integer tensor, got {}", what, i,
                          array.type().to_string());
  }
  std::vector<int64_t> values;
  // An int64 near the type's limits is held as a double that may be 2^63, which no int64
  // holds: clamp before converting (ONNX writes INT64_MAX for "to the end").
  constexpr double kLimit = 9223372036854775807.0;  // 2^63 as a double
  for (double v : array.data) {
    values.push_back(v >= kLimit    ? std::numeric_limits<int64_t>::max()
                     : v <= -kLimit ? std::numeric_limits<int64_t>::min()
                                    : static_cast<int64_t>(v));
  }
  return values;
}

bool NodeContext::wants_output(int i) const {
  return i < num_outputs() && !node_.output(i).empty();
}

const onnx::AttributeProto* NodeContext::find_attr(std::string_view name) const {
  read_attrs_.insert(std::string(name));
  for (const onnx::AttributeProto& attr : node_.attribute()) {
    if (attr.name() == name) return &attr;
  }
  return nullptr;
}

bool NodeContext::has_attr(std::string_view name) const { return find_attr(name) != nullptr; }

std::optional<std::string> NodeContext::unread_attr() const {
  for (const onnx::AttributeProto& attr : node_.attribute()) {
    // consumed_inputs (opsets before 6) was a memory-reuse hint with no effect on values.
    if (!read_attrs_.contains(attr.name()) && attr.name() != "consumed_inputs") return attr.name();
  }
  return std::nullopt;
}

Expected<const onnx::AttributeProto*> NodeContext::typed_attr(
    std::string_view name, onnx::AttributeProto::AttributeType type) const {
  const onnx::AttributeProto* attr = find_attr(name);
  if (attr == nullptr) return static_cast<const onnx::AttributeProto*>(nullptr);
  if (!attr->ref_attr_name().empty()) {
    return Status::errorf(ErrorCode::unsupported,
                          "attribute '{}' refers to a function attribute, which is unsupported",
                          name);
  }
  if (attr->type() != type) {
    return Status::errorf("attribute '{}' has type {}, expected {}", name,
                          onnx::AttributeProto::AttributeType_Name(attr->type()),
                          onnx::AttributeProto::AttributeType_Name(type));
  }
  return attr;
}

Expected<int64_t> NodeContext::attr_int(std::string_view name,
                                        std::optional<int64_t> fallback) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::INT));
  if (attr != nullptr) return attr->i();
  if (fallback) return *fallback;
  return Status::errorf("attribute '{}' is required", name);
}

// ONNX stores a float attribute in f32: an epsilon of 1e-5 arrives as 9.999999747378752e-06.
// Read as the shortest decimal that rounds to that f32 ("1e-05"), it is the value its author
// wrote, which a Kiln op holds in f64: rules match it literally (a batch-norm fold's epsilon
// is 1e-05), the interpreter computes with it, and in f32 it rounds to the same f32 again.
namespace {
double written_value(float value) {
  std::array<char, 64> text{};
  const auto written = std::to_chars(text.data(), text.data() + text.size(), value);
  double read = value;
  std::from_chars(text.data(), written.ptr, read);
  return read;
}
}  // namespace

Expected<double> NodeContext::attr_float(std::string_view name,
                                         std::optional<double> fallback) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::FLOAT));
  if (attr != nullptr) return written_value(attr->f());
  if (fallback) return *fallback;
  return Status::errorf("attribute '{}' is required", name);
}

Expected<std::string> NodeContext::attr_string(std::string_view name,
                                               std::optional<std::string> fallback) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::STRING));
  if (attr != nullptr) return attr->s();
  if (fallback) return *fallback;
  return Status::errorf("attribute '{}' is required", name);
}

Expected<std::vector<int64_t>> NodeContext::attr_ints(
    std::string_view name, std::optional<std::vector<int64_t>> fallback) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::INTS));
  if (attr != nullptr) return std::vector<int64_t>(attr->ints().begin(), attr->ints().end());
  if (fallback) return *fallback;
  return Status::errorf("attribute '{}' is required", name);
}

Expected<std::vector<double>> NodeContext::attr_floats(std::string_view name) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::FLOATS));
  if (attr == nullptr) return Status::errorf("attribute '{}' is required", name);
  return std::vector<double>(attr->floats().begin(), attr->floats().end());
}

Expected<Array> NodeContext::attr_tensor(std::string_view name) const {
  KILN_ASSIGN_OR_RETURN(const onnx::AttributeProto* attr,
                        typed_attr(name, onnx::AttributeProto::TENSOR));
  if (attr == nullptr) return Status::errorf("attribute '{}' is required", name);
  // Constant tensors in attributes may not use external data: no base folder applies.
  if (attr->t().data_location() == onnx::TensorProto::EXTERNAL) {
    return Status::errorf(ErrorCode::unsupported,
                          "attribute '{}' holds external data, which is unsupported", name);
  }
  return array_from_tensor_proto(attr->t(), "");
}

Expected<std::vector<Operand>> NodeContext::emit_all(Op op, const std::vector<Operand>& inputs,
                                                     const Attrs& attrs) {
  return state_.apply(op, inputs, attrs);
}

Expected<Operand> NodeContext::emit(Op op, const std::vector<Operand>& inputs,
                                    const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(std::vector<Operand> outputs, state_.apply(op, inputs, attrs));
  KILN_CHECK(outputs.size() == 1, "emit() of multi-output op '{}'", op_def(op).name);
  return outputs[0];
}

Status NodeContext::set_output(int i, Operand operand) {
  KILN_CHECK(i >= 0, "output {} out of range", i);
  // An output the node omits (trailing, or named "") is not wanted.
  if (!wants_output(i)) return Status::ok();
  state_.define(node_.output(i), std::move(operand));
  return Status::ok();
}

Status NodeContext::unsupported(std::string_view what) const {
  return Status::errorf(ErrorCode::unsupported, "unsupported {}", what);
}

namespace {

// ---- the import of one model ---------------------------------------------------------------

// The default-domain opset the model imports, or 0 if it imports none.
Expected<int> default_opset(const onnx::ModelProto& model) {
  for (const onnx::OperatorSetIdProto& entry : model.opset_import()) {
    if (entry.domain().empty() || entry.domain() == "ai.onnx") {
      const int64_t version = entry.version();
      if (version < kMinOnnxOpset || version > kMaxOnnxOpset) {
        return Status::errorf("opset {} is outside the supported range {} to {}", version,
                              kMinOnnxOpset, kMaxOnnxOpset);
      }
      return static_cast<int>(version);
    }
  }
  return 0;  // no default-domain op may appear (import_node says so if one does)
}

// The static type of graph input `info`, with `override_dims` (if any) replacing its shape.
Expected<TensorType> input_type(const onnx::ValueInfoProto& info,
                                const std::vector<int64_t>* override_dims) {
  const auto context = [&](const Status& status) {
    return status.with_context(fmt::format("input '{}'", info.name()));
  };
  if (!info.type().has_tensor_type()) {
    return context(Status::error(ErrorCode::unsupported,
                                 "unsupported input type (only tensors are supported, not "
                                 "sequences, maps or optionals)"));
  }
  const onnx::TypeProto::Tensor& tensor = info.type().tensor_type();
  Expected<DType> dtype = dtype_from_onnx(tensor.elem_type());
  if (!dtype) return context(dtype.status());
  std::vector<int64_t> dims;
  if (override_dims != nullptr) {
    if (tensor.has_shape() && tensor.shape().dim_size() != static_cast<int>(override_dims->size())) {
      return context(Status::errorf("--shape gives rank {}, the model declares rank {}",
                                    override_dims->size(), tensor.shape().dim_size()));
    }
    for (int i = 0; tensor.has_shape() && i < tensor.shape().dim_size(); ++i) {
      const onnx::TensorShapeProto::Dimension& dim = tensor.shape().dim(i);
      if (dim.has_dim_value() && dim.dim_value() != (*override_dims)[static_cast<size_t>(i)]) {
        return context(Status::errorf("--shape gives {} for dimension {}, the model fixes it to {}",
                                      (*override_dims)[static_cast<size_t>(i)], i,
                                      dim.dim_value()));
      }
    }
    dims = *override_dims;
  } else {
    if (!tensor.has_shape()) {
      return context(Status::errorf("has no declared shape; give one with --shape {}=...",
                                    info.name()));
    }
    for (int i = 0; i < tensor.shape().dim_size(); ++i) {
      const onnx::TensorShapeProto::Dimension& dim = tensor.shape().dim(i);
      if (!dim.has_dim_value()) {
        const std::string symbol = dim.has_dim_param() ? "'" + dim.dim_param() + "'" : "unknown";
        return context(Status::errorf(
            "dimension {} is {}; give the input's full shape with --shape {}=...", i, symbol,
            info.name()));
      }
      dims.push_back(dim.dim_value());
    }
  }
  Expected<Shape> shape = Shape::make(std::move(dims));
  if (!shape) return context(shape.status());
  return TensorType{*dtype, std::move(*shape)};
}

Status import_graph_inputs(const onnx::GraphProto& graph, const std::string& base_dir,
                           const OnnxImportOptions& options, ImportState& state,
                           int& num_data_inputs) {
  if (graph.sparse_initializer_size() > 0)
    return Status::error(ErrorCode::unsupported, "sparse initializers are unsupported");
  std::set<std::string> initializer_names;
  for (const onnx::TensorProto& tensor : graph.initializer()) {
    Expected<Array> array = array_from_tensor_proto(tensor, base_dir);
    if (!array) return array.status().with_context(fmt::format("initializer '{}'", tensor.name()));
    state.define(tensor.name(), Operand::of(std::move(*array)));
    initializer_names.insert(tensor.name());
  }
  std::set<std::string> used_overrides;
  std::set<std::string> used_static;
  for (const onnx::ValueInfoProto& info : graph.input()) {
    // Models of IR version < 4 list initializers among the inputs too; they are weights.
    if (initializer_names.contains(info.name())) continue;
    if (auto it = options.static_inputs.find(info.name()); it != options.static_inputs.end()) {
      KILN_ASSIGN_OR_RETURN(TensorType declared, input_type(info, &it->second.shape.dims()));
      if (declared != it->second.type()) {
        return Status::errorf("the static value of input '{}' is {}, the model declares {}",
                              info.name(), it->second.type().to_string(), declared.to_string());
      }
      state.define(info.name(), Operand::of(it->second));
      used_static.insert(info.name());
      continue;
    }
    auto override_it = options.input_shapes.find(info.name());
    const std::vector<int64_t>* override_dims = nullptr;
    if (override_it != options.input_shapes.end()) {
      override_dims = &override_it->second;
      used_overrides.insert(info.name());
    }
    KILN_ASSIGN_OR_RETURN(TensorType type, input_type(info, override_dims));
    Value* value = state.graph().add_input(std::move(type), info.name());
    state.define(info.name(), Operand{value, nullptr});
    ++num_data_inputs;
  }
  for (const auto& [name, dims] : options.input_shapes) {
    if (!used_overrides.contains(name)) {
      return Status::errorf("--shape names '{}', which is not an input of the model", name);
    }
  }
  for (const auto& [name, value] : options.static_inputs) {
    if (!used_static.contains(name)) {
      return Status::errorf("a static value is given for '{}', which is not an input of the model",
                            name);
    }
  }
  return Status::ok();
}

std::string describe_node(const onnx::NodeProto& node, int opset) {
  const std::string name = node.name().empty() ? "(unnamed)" : "'" + node.name() + "'";
  return fmt::format("node {} ({}, opset {})", name, node.op_type(), opset);
}

Status import_node(const onnx::NodeProto& node, int opset, ImportState& state) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return Status::errorf(ErrorCode::unsupported, "unsupported operator domain '{}'",
                          node.domain());
  }
  if (opset == 0) return Status::error("the model imports no default-domain (ai.onnx) opset");
  Converter converter = find_converter(node.op_type());
  if (converter == nullptr)
    return Status::errorf(ErrorCode::unsupported, "unsupported operator '{}'", node.op_type());
  std::vector<Operand> inputs;
  for (const std::string& name : node.input()) {
    if (name.empty()) {
      inputs.push_back(Operand{});
      continue;
    }
    const Operand* operand = state.find(name);
    if (operand == nullptr) return Status::errorf("uses tensor '{}', which is not defined", name);
    inputs.push_back(*operand);
  }
  // Nodes are only appended during import, so the ones this node adds have larger ids.
  const std::span<Node* const> nodes_before = state.graph().nodes();
  const int last_old_node_id = nodes_before.empty() ? -1 : nodes_before.back()->id();
  NodeContext context(state, node, opset, std::move(inputs));
  KILN_RETURN_IF_ERROR(converter(context));
  if (std::optional<std::string> attr = context.unread_attr()) {
    return Status::errorf(ErrorCode::unsupported, "unsupported attribute '{}'", *attr);
  }
  for (int i = 0; i < node.output_size(); ++i) {
    const std::string& name = node.output(i);
    if (name.empty()) continue;
    const Operand* operand = state.find(name);
    if (operand == nullptr) {
      return Status::errorf(ErrorCode::unsupported,
                            "output {} ('{}') is not supported by Kiln's conversion", i, name);
    }
    // Values this node created carry the ONNX names, so the graph reads like the model.
    Value* value = operand->value;
    if (value != nullptr && !value->is_graph_input() &&
        value->producer()->id() > last_old_node_id) {
      state.give_name(value, name);
    }
  }
  return Status::ok();
}

Status import_graph_outputs(const onnx::GraphProto& graph, ImportState& state) {
  if (graph.output_size() == 0) return Status::error("the graph has no outputs");
  std::vector<Value*> outputs;
  std::set<const Value*> seen;
  for (const onnx::ValueInfoProto& info : graph.output()) {
    const Operand* operand = state.find(info.name());
    if (operand == nullptr) {
      return Status::errorf("graph output '{}' is not computed by any node", info.name());
    }
    KILN_ASSIGN_OR_RETURN(Value * value, state.materialize(*operand));
    // Each graph output carries its ONNX name; where the value already has another name (a
    // graph input passed through, or one value returned twice), an identity gives it one.
    if (value->name() != info.name() || value->is_graph_input() || seen.contains(value)) {
      KILN_ASSIGN_OR_RETURN(Node * node, state.graph().add_node(Op::identity, {value}));
      value = node->output();
      state.give_name(value, info.name(), seen);
    }
    seen.insert(value);
    outputs.push_back(value);
  }
  state.graph().set_outputs(std::move(outputs));
  return Status::ok();
}

}  // namespace
}  // namespace onnx_import

std::optional<std::string> static_input_needed(const Status& status) {
  const std::string& message = status.message();
  if (message.find(kStaticInputNeeded) == std::string::npos) return std::nullopt;
  const size_t start = message.find(kStaticInputNameMarker);
  if (start == std::string::npos) return std::nullopt;
  const size_t name_start = start + kStaticInputNameMarker.size() + 1;
  const size_t name_end = message.find("') ", name_start);
  if (name_end == std::string::npos) return std::nullopt;
  return message.substr(name_start, name_end - name_start);
}

namespace {

// Whether every name the graph reads (a node's input, a graph output) is defined before it is
// read, by a graph input, an initializer or an earlier node, and no node holds a subgraph
// (whose names reach outside it). ONNX's checker lets an undefined graph output through, on
// which the version converter crashes.
bool defined_before_use(const onnx::GraphProto& graph) {
  std::set<std::string> defined = {""};  // "" is an omitted optional input
  for (const onnx::ValueInfoProto& input : graph.input()) defined.insert(input.name());
  for (const onnx::TensorProto& initializer : graph.initializer()) {
    defined.insert(initializer.name());
  }
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input()) {
      if (!defined.contains(input)) return false;
    }
    for (const onnx::AttributeProto& attribute : node.attribute()) {
      if (attribute.has_g() || attribute.graphs_size() > 0) return false;
    }
    defined.insert(node.output().begin(), node.output().end());
  }
  return std::ranges::all_of(graph.output(), [&](const onnx::ValueInfoProto& output) {
    return defined.contains(output.name());
  });
}

// `model` upgraded to kUpgradeBelowOpset by ONNX's version converter, or why it could not be.
// The converter trusts its input (a malformed graph can crash it), so only a model that ONNX's
// checker accepts and whose names are all defined before use is converted; the importer reads
// the rest as written, with its own checks.
Expected<onnx::ModelProto> upgraded(const onnx::ModelProto& model, int opset) {
  if (!defined_before_use(model.graph())) {
    return Status::errorf("ONNX's version converter was not tried: the graph reads a name "
                          "before it is defined, or holds a subgraph");
  }
  try {
    onnx::checker::check_model(model);
    return onnx::version_conversion::ConvertVersion(model, kUpgradeBelowOpset);
  } catch (const std::exception& e) {
    return Status::errorf("ONNX's version converter could not upgrade it from opset {} to {}: {}",
                          opset, kUpgradeBelowOpset, e.what());
  }
}

// The import of a parsed model at its default-domain opset `opset`.
Expected<ImportedModel> import_model(const onnx::ModelProto& model, int opset,
                                     const std::string& base_dir,
                                     const OnnxImportOptions& options) {
  using namespace onnx_import;
  const onnx::GraphProto& onnx_graph = model.graph();
  ImportState state(onnx_graph.name().empty() ? "main" : onnx_graph.name());
  int num_data_inputs = 0;
  Status status = import_graph_inputs(onnx_graph, base_dir, options, state, num_data_inputs);
  if (!status) return status;
  for (const onnx::NodeProto& node : onnx_graph.node()) {
    status = import_node(node, opset, state);
    if (!status) return status.with_context(describe_node(node, opset));
  }
  status = import_graph_outputs(onnx_graph, state);
  if (!status) return status;
  status = verify(state.graph());
  KILN_CHECK(status.is_ok(), "imported graph does not verify: {}", status.message());

  ImportedModel imported{std::move(state.graph()), num_data_inputs, state.take_weights(),
                         opset, 0};
  return imported;
}


}  // namespace

Expected<ImportedModel> import_onnx_bytes(std::string_view bytes, const std::string& base_dir,
                                          std::string_view source,
                                          const OnnxImportOptions& options) {
  const auto context = [&](const Status& status) {
    return status.with_context(std::string(source));
  };
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return context(Status::error("model file is larger than 2 GiB"));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return context(Status::error("not a valid ONNX model (protobuf parse failed)"));
  }
  if (!model.has_graph()) return context(Status::error("the model has no graph"));
  Expected<int> opset = onnx_import::default_opset(model);
  if (!opset) return context(opset.status());
  if (*opset == 0 || *opset >= kUpgradeBelowOpset) {
    Expected<ImportedModel> imported = import_model(model, *opset, base_dir, options);
    return imported ? std::move(imported) : context(imported.status());
  }
  Expected<onnx::ModelProto> upgrade = upgraded(model, *opset);
  if (upgrade) {
    Expected<ImportedModel> imported =
        import_model(*upgrade, kUpgradeBelowOpset, base_dir, options);
    if (imported) imported->upgraded_from = *opset;
    return imported ? std::move(imported) : context(imported.status());
  }
  Expected<ImportedModel> as_written = import_model(model, *opset, base_dir, options);
  if (as_written) return as_written;
  return context(as_written.status().with_context(upgrade.status().message()));
}


Expected<ImportedModel> import_onnx_file(const std::string& path,
                                         const OnnxImportOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  const std::string base_dir = std::filesystem::path(path).parent_path().string();
  return import_onnx_bytes(bytes, base_dir.empty() ? "." : base_dir, path, options);
}

}  // namespace kiln
