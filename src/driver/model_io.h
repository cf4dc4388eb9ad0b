// Loading models and their input and expected-output tensors for `kiln run` and the tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "frontend/onnx_import.h"
#include "frontend/tensor_io.h"
#include "ir/array.h"
#include "support/status.h"

namespace kiln {

// An ONNX file (by its .onnx extension), an ATen graph (.json, as the Python package writes
// it: frontend/aten_import.h) or an IR text file (anything else). For the last two, every
// graph input is a data input and there are no weights.
Expected<ImportedModel> load_model(const std::string& path, const OnnxImportOptions& options = {});

// Import options giving ONNX inputs static shapes: "NAME=1x128" per input (the --shape flag).
Expected<OnnxImportOptions> import_options_from_shapes(const std::vector<std::string>& shapes);

// Compiles an imported model's weights in as constants (passes/freeze_inputs.h): the graph's
// inputs are then its data inputs, and `weights` is empty, but for a weight the graph returns
// unchanged, which stays an input (freezing it would leave an output with no computation).
Status freeze_weights(ImportedModel& model);

// Tensors named on the command line: "name=FILE" with FILE a .npy or a TensorProto .pb, or a
// bare .npz FILE whose members are named. Later entries replace earlier ones of the same name.
Expected<std::map<std::string, Array>> load_named_tensors(const std::vector<std::string>& specs);

// "1x3x224x224" -> {1, 3, 224, 224}; "" -> {} (a scalar).
Expected<std::vector<int64_t>> parse_dims(const std::string& text);

}  // namespace kiln
