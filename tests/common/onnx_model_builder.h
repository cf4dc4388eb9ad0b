// Builds ONNX models in C++ with the ONNX protobuf API, one call per input, initializer, node
// and output, for the ONNX import tests (tests/unit/frontend/onnx_import_test.cc) and the
// import fuzz test (tests/fuzz/onnx_import_fuzz_test.cc).
//
//   ModelBuilder m(13);
//   m.input("x", onnx::TensorProto::FLOAT, {"batch", 4});
//   attr_float(m.node("LeakyRelu", {"x"}, {"y"}), "alpha", 0.1f);
//   m.output("y");
//   Expected<ImportedModel> model = m.import();
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frontend/onnx_import.h"
#include "frontend/onnx_tensor.h"
#include "ir/array.h"

namespace kiln::testing {

// A declared input dimension: a size or a symbol ("batch").
struct Dim {
  Dim(int value) : size(value) {}          // NOLINT(google-explicit-constructor)
  Dim(int64_t value) : size(value) {}      // NOLINT(google-explicit-constructor)
  Dim(const char* name) : symbol(name) {}  // NOLINT(google-explicit-constructor)
  std::optional<int64_t> size;
  std::string symbol;
};

class ModelBuilder {
 public:
  // A model importing the default-domain `opset`.
  explicit ModelBuilder(int opset = 18, int ir_version = 8) {
    model_.set_ir_version(ir_version);
    onnx::OperatorSetIdProto* entry = model_.add_opset_import();
    entry->set_domain("");
    entry->set_version(opset);
    model_.mutable_graph()->set_name("test");
  }

  ModelBuilder& input(const std::string& name, int32_t elem_type, const std::vector<Dim>& dims) {
    typed(*graph().add_input(), name, elem_type, dims);
    return *this;
  }

  // A graph output with its type, which ONNX's checker requires (output(name) alone suffices
  // for Kiln's importer).
  ModelBuilder& output(const std::string& name, int32_t elem_type, const std::vector<Dim>& dims) {
    typed(*graph().add_output(), name, elem_type, dims);
    return *this;
  }

  // `info` named, of a tensor type of `elem_type` and `dims`.
  static void typed(onnx::ValueInfoProto& info, const std::string& name, int32_t elem_type,
                    const std::vector<Dim>& dims) {
    info.set_name(name);
    onnx::TypeProto::Tensor* tensor = info.mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(elem_type);
    onnx::TensorShapeProto* shape = tensor->mutable_shape();
    for (const Dim& dim : dims) {
      if (dim.size) {
        shape->add_dim()->set_dim_value(*dim.size);
      } else {
        shape->add_dim()->set_dim_param(dim.symbol);
      }
    }
  }

  // An initializer holding `value` in raw_data.
  ModelBuilder& initializer(const std::string& name, const Array& value) {
    *graph().add_initializer() = tensor_proto_from_array(name, value);
    return *this;
  }

  onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* node = graph().add_node();
    node->set_op_type(op_type);
    node->set_name(name);
    for (const std::string& input : inputs) node->add_input(input);
    for (const std::string& output : outputs) node->add_output(output);
    return *node;
  }

  ModelBuilder& output(const std::string& name) {
    graph().add_output()->set_name(name);
    return *this;
  }

  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  const onnx::ModelProto& proto() const { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }

  // Imports the serialized model, named "test.onnx" in errors, without external data.
  Expected<ImportedModel> import(const OnnxImportOptions& options = {}) const {
    return import_onnx_bytes(bytes(), "", "test.onnx", options);
  }

 private:
  onnx::ModelProto model_;
};

inline onnx::AttributeProto& add_attr(onnx::NodeProto& node, const std::string& name,
                                      onnx::AttributeProto::AttributeType type) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(type);
  return *attr;
}
inline void attr_int(onnx::NodeProto& node, const std::string& name, int64_t value) {
  add_attr(node, name, onnx::AttributeProto::INT).set_i(value);
}
inline void attr_float(onnx::NodeProto& node, const std::string& name, float value) {
  add_attr(node, name, onnx::AttributeProto::FLOAT).set_f(value);
}
inline void attr_string(onnx::NodeProto& node, const std::string& name, const std::string& value) {
  add_attr(node, name, onnx::AttributeProto::STRING).set_s(value);
}
inline void attr_ints(onnx::NodeProto& node, const std::string& name,
                      const std::vector<int64_t>& values) {
  onnx::AttributeProto& attr = add_attr(node, name, onnx::AttributeProto::INTS);
  for (int64_t value : values) attr.add_ints(value);
}
inline void attr_tensor(onnx::NodeProto& node, const std::string& name, const Array& value) {
  *add_attr(node, name, onnx::AttributeProto::TENSOR).mutable_t() =
      tensor_proto_from_array("", value);
}

inline Array f32(Shape shape, std::vector<double> values) {
  return Array(DType::f32, std::move(shape), std::move(values));
}
inline Array i64(Shape shape, std::vector<double> values) {
  return Array(DType::i64, std::move(shape), std::move(values));
}

}  // namespace kiln::testing
