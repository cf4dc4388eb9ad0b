// ONNX import: turns an ONNX model (default domain, opsets up to 18) into a Kiln graph.
//
// Every tensor whose contents are known at import time (initializers, Constant nodes, and
// anything computed only from those and from static shapes, such as the Shape -> Gather ->
// Concat -> Reshape chains exporters emit) is folded while importing, so the graph holds only
// real compute. Folded tensors that the graph still needs become either `constant` nodes (up to
// kEmbedElements elements) or *weight inputs*: graph inputs after the model's own, whose values
// the import returns alongside the graph.
//
// A model below opset kUpgradeBelowOpset is first upgraded to it by ONNX's own version converter
// (libonnx's version_conversion), which rewrites what old opsets wrote (Add's and Mul's legacy
// broadcast attribute, BatchNormalization's `spatial` and `consumed_inputs`, PRelu's slope)
// into today's ops. A model the converter cannot upgrade (an op it has no adapter for) is
// imported as written, the old forms the importer knows read by their opset; if that fails,
// the error says why the converter could not help.
//
// Input shapes must be static. A symbolic dimension ("batch") needs a size from
// ImportOptions::input_shapes (`kiln run --shape x=1x128`). Errors name the node (its name, op
// type and the opset) or the input; a malformed or truncated file is an error, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// Folded tensors of at most this many elements are embedded as `constant` nodes; larger ones
// become weight inputs, so that IR text stays readable.
inline constexpr int64_t kEmbedElements = 16;

inline constexpr int kMinOnnxOpset = 1;

// Every error for an input that must be known at import time contains this text.
inline constexpr std::string_view kStaticInputNeeded = "must be known at import time";
inline constexpr std::string_view kStaticInputNameMarker = "tensor ";
// Opsets 19 to 21 changed, of the op types Kiln imports, only the element types they take
// (float8 and int4 ones, which Kiln refuses as types), Cast's `saturate` (float8 only), Pad's
// `wrap` mode and AveragePool's dilations (both refused), and added Gelu. PyTorch 2.9's
// exporter writes opset 20 by default.
inline constexpr int kMaxOnnxOpset = 21;
inline constexpr int kUpgradeBelowOpset = 11;

struct OnnxImportOptions {
  // Full shapes for graph inputs, overriding what the model declares (needed for symbolic
  // dimensions). Keys are ONNX input names.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Values for graph inputs that are to be fixed at import: each becomes a constant (and is no
  // longer an input), so that ops needing it static (a Reshape's shape, Unsqueeze's axes) can
  // import. Its type must agree with what the model declares.
  std::map<std::string, Array> static_inputs;
};

struct ImportedModel {
  Graph graph;
  // The graph's first `num_data_inputs` inputs are the model's own inputs, in ONNX order. Every
  // later input i is a weight whose value is weights[i - num_data_inputs].
  int num_data_inputs = 0;
  std::vector<Array> weights;
  int opset = 0;           // the opset imported
  int upgraded_from = 0;   // the model's own opset, when the version converter upgraded it
};

// The ONNX tensor an import error says must be known at import time, if it is such an error.
// (ONNX's node tests pass such tensors as inputs; see OnnxImportOptions::static_inputs.)
std::optional<std::string> static_input_needed(const Status& status);

// Reads `path`. External tensor data must lie in the model file's folder.
Expected<ImportedModel> import_onnx_file(const std::string& path,
                                         const OnnxImportOptions& options = {});

// Imports a serialized ModelProto. `base_dir` is where external tensor data is looked up;
// `source` names the model in error messages.
Expected<ImportedModel> import_onnx_bytes(std::string_view bytes, const std::string& base_dir,
                                          std::string_view source,
                                          const OnnxImportOptions& options = {});

// The default-domain ONNX op types the importer converts, sorted.
std::vector<std::string> supported_onnx_op_types();

}  // namespace kiln
