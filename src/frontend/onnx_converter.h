// The interface between the ONNX importer and its op converters. Internal to src/frontend.
//
// Each ONNX op type has one converter, a function that reads the node through a NodeContext
// and emits Kiln ops for it. Converters never touch the Graph directly: NodeContext::emit
// folds an op whose inputs are all known constants (evaluating it with the op's reference
// evaluation) and otherwise adds a node, so shape arithmetic disappears during import without
// any converter having to think about it. Converters live by family in onnx_ops_*.cc and are
// listed in one table (onnx_ops.cc).
//
// A converter must either reproduce the ONNX semantics exactly or fail with an error saying
// which attribute value or input is unsupported; nothing is silently approximated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "ir/array.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln::onnx_import {

// Folding evaluates in f64 with the reference evaluation; results larger than this are left to
// the compiled graph rather than computed (slowly) at import time. Converters that build a
// constant themselves (Range) reject larger ones.
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

// An ONNX tensor during import: a known constant, a Kiln value, or absent (an optional input
// left empty). A constant may also have been materialized into a value already.
struct Operand {
  Value* value = nullptr;
  std::shared_ptr<const Array> constant;

  bool present() const { return value != nullptr || constant != nullptr; }
  bool is_constant() const { return constant != nullptr; }
  TensorType type() const { return constant ? constant->type() : value->type(); }
  const Shape& shape() const { return constant ? constant->shape : value->shape(); }
  DType dtype() const { return type().dtype; }
  int rank() const { return shape().rank(); }

  static Operand of(Array array) {
    return Operand{nullptr, std::make_shared<const Array>(std::move(array))};
  }
};

class ImportState;

class NodeContext {
 public:
  NodeContext(ImportState& state, const onnx::NodeProto& node, int opset,
              std::vector<Operand> inputs)
      : state_(state), node_(node), opset_(opset), inputs_(std::move(inputs)) {}

  const onnx::NodeProto& node() const { return node_; }
  int opset() const { return opset_; }

  // Inputs, counting trailing optional inputs given as "" (absent).
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const;
  // Error naming the input when it is absent.
  Expected<Operand> input(int i) const;
  // The input's contents when they are known at import time; an error saying that `what` must
  // be static otherwise (e.g. Reshape's target shape computed from data).
  Expected<Array> constant_input(int i, std::string_view what) const;
  // An integer constant input as a list (shape, axes, pads), checked to be at most 1-d.
  Expected<std::vector<int64_t>> ints_input(int i, std::string_view what) const;

  int num_outputs() const { return node_.output_size(); }
  bool wants_output(int i) const;

  // Attributes. Every attribute the node carries must be read (or explicitly ignored) by its
  // converter; the importer rejects a node with an attribute nobody read, so a new or unusual
  // attribute is an "unsupported attribute" error instead of being silently dropped.
  bool has_attr(std::string_view name) const;
  // Marks an attribute as deliberately without effect on the conversion.
  void ignore_attr(std::string_view name) const { read_attrs_.insert(std::string(name)); }
  // The first attribute of the node that the converter did not read, if any.
  std::optional<std::string> unread_attr() const;
  Expected<int64_t> attr_int(std::string_view name, std::optional<int64_t> fallback = {}) const;
  Expected<double> attr_float(std::string_view name, std::optional<double> fallback = {}) const;
  Expected<std::string> attr_string(std::string_view name,
                                    std::optional<std::string> fallback = {}) const;
  Expected<std::vector<int64_t>> attr_ints(std::string_view name,
                                           std::optional<std::vector<int64_t>> fallback = {}) const;
  Expected<std::vector<double>> attr_floats(std::string_view name) const;
  Expected<Array> attr_tensor(std::string_view name) const;

  // Applies `op`: folded to a constant when every input is constant, a new node otherwise.
  Expected<std::vector<Operand>> emit_all(Op op, const std::vector<Operand>& inputs,
                                          const Attrs& attrs = {});
  // The same for single-output ops.
  Expected<Operand> emit(Op op, const std::vector<Operand>& inputs, const Attrs& attrs = {});

  // Defines output i as `operand`; nothing when the node omits that output.
  Status set_output(int i, Operand operand);

  // "unsupported <what>" error.
  Status unsupported(std::string_view what) const;

 private:
  const onnx::AttributeProto* find_attr(std::string_view name) const;
  Expected<const onnx::AttributeProto*> typed_attr(std::string_view name,
                                                   onnx::AttributeProto::AttributeType type) const;

  ImportState& state_;
  const onnx::NodeProto& node_;
  int opset_;
  std::vector<Operand> inputs_;
  mutable std::set<std::string, std::less<>> read_attrs_;
};

using Converter = Status (*)(NodeContext&);

struct ConverterEntry {
  std::string_view op_type;
  Converter convert;
};

// The converters of each family (onnx_ops_*.cc).
std::vector<ConverterEntry> elementwise_converters();
std::vector<ConverterEntry> layout_converters();
std::vector<ConverterEntry> nn_converters();

// A constant scalar of `dtype`.
inline Operand scalar(DType dtype, double value) {
  return Operand::of(Array::scalar(dtype, value));
}

// The converter for a default-domain ONNX op type, or nullptr if Kiln does not support it.
Converter find_converter(std::string_view op_type);

}  // namespace kiln::onnx_import
