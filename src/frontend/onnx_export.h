// ONNX export: writes a Kiln graph as an ONNX model (opset 17, IR version 8, producer "kiln"),
// the inverse of onnx_import.h, so that a graph can run in other runtimes and be compared.
//
// Every Kiln op has one export rule: a converter that emits ONNX nodes computing exactly what
// the op computes (rsqrt becomes Sqrt then Reciprocal, gelu an Erf or Tanh composition,
// cross_entropy with its class axis last a Transpose then SoftmaxCrossEntropyLoss, scatter_add
// a ScatterND with reduction "add"), or the reason the op has none. Ops without an ONNX
// counterpart (spmm, conv_grad_weight, max_pool_grad, avg_pool_grad) and attribute values ONNX
// cannot express (dropout with a non-zero ratio: Kiln's counter-based mask has no ONNX
// equivalent) are errors naming the node.
//
// ONNX tensors carry the Kiln value names; tensors a converter adds are named after the value
// the node computes ("y/erf", "y/shape"), made unique, and each ONNX node is named after its
// first output. Graph inputs stay inputs unless given a value (OnnxExportOptions::initializers,
// or the weights of an ImportedModel), which is then written as an initializer. Every Kiln
// value's type is declared (graph inputs and outputs, value_info for the rest), and the model
// is run through ONNX's checker and strict shape inference before it is returned: a model ONNX
// would reject (an op on a dtype its ONNX schema lacks, such as Sin on bf16) or whose ONNX
// types differ from Kiln's is an error here rather than a file that fails elsewhere. The
// inference also declares the types of the intermediates converters add.
//
// ONNX float attributes are f32: an epsilon of layer_norm or batch_norm is written rounded to
// f32. Constants that converters add (gelu's 0.5, a pad value) are tensors of the op's dtype.
#pragma once

#include <map>
#include <string>

#include "frontend/onnx_import.h"
#include "ir/array.h"
#include "ir/graph.h"
#include "ir/op.h"
#include "support/status.h"

namespace kiln {

inline constexpr int kOnnxExportOpset = 17;
inline constexpr int kOnnxExportIrVersion = 8;

struct OnnxExportOptions {
  // Values for graph inputs, by input name: each such input is written as an initializer (a
  // constant of the model) instead of a model input. Its type must be the input's.
  std::map<std::string, Array> initializers;
};

// Serialized ModelProto bytes for `graph`.
Expected<std::string> export_onnx(const Graph& graph, const OnnxExportOptions& options = {});
// The imported model with its weights written as initializers (as well as any in `options`;
// where both give a value for one input, `options` wins).
Expected<std::string> export_onnx(const ImportedModel& model,
                                  const OnnxExportOptions& options = {});

// The same, written to `path`.
Status export_onnx_file(const Graph& graph, const std::string& path,
                        const OnnxExportOptions& options = {});
Status export_onnx_file(const ImportedModel& model, const std::string& path,
                        const OnnxExportOptions& options = {});

// Whether `op` has an ONNX export. (An export may still reject particular attribute values:
// dropout exports only with ratio 0.)
bool has_onnx_export(Op op);

}  // namespace kiln
