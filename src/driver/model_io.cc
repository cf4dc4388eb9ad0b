#include "driver/model_io.h"

#include <charconv>

#include "frontend/aten_import.h"
#include "ir/parser.h"
#include "passes/freeze_inputs.h"
#include "support/files.h"

namespace kiln {
namespace {

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Expected<Array> load_tensor_file(const std::string& path) {
  if (ends_with(path, ".npy")) return read_npy(path);
  if (ends_with(path, ".pb")) {
    KILN_ASSIGN_OR_RETURN(NamedArray named, read_tensor_proto_file(path));
    return std::move(named.array);
  }
  return Status::errorf("{}: expected a .npy or .pb tensor file", path);
}

}  // namespace

Expected<ImportedModel> load_model(const std::string& path, const OnnxImportOptions& options) {
  if (ends_with(path, ".onnx")) return import_onnx_file(path, options);
  if (!options.input_shapes.empty()) {
    return Status::errorf("{}: --shape applies to ONNX models only", path);
  }
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  const bool aten = ends_with(path, ".json");
  Expected<Graph> graph = aten ? import_aten_graph(text) : parse_graph(text, path);
  if (!graph) return aten ? graph.status().with_context(path) : graph.status();
  const int inputs = static_cast<int>(graph->inputs().size());
  return ImportedModel{std::move(*graph), inputs, {}, 0, 0};
}

Status freeze_weights(ImportedModel& model) {
  std::map<std::string, Array> weights;
  std::vector<Array> kept;  // weights the graph returns unchanged stay inputs
  for (size_t i = 0; i < model.weights.size(); ++i) {
    const Value* input = model.graph.inputs()[static_cast<size_t>(model.num_data_inputs) + i];
    if (model.graph.is_output(input)) {
      kept.push_back(std::move(model.weights[i]));
    } else {
      weights.emplace(input->name(), std::move(model.weights[i]));
    }
  }
  model.weights = std::move(kept);
  return freeze_inputs(model.graph, weights);
}

Expected<OnnxImportOptions> import_options_from_shapes(const std::vector<std::string>& shapes) {
  OnnxImportOptions import_options;
  for (const std::string& spec : shapes) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0) {
      return Status::errorf("--shape '{}': expected NAME=DIMS, e.g. x=1x128", spec);
    }
    Expected<std::vector<int64_t>> dims = parse_dims(spec.substr(equals + 1));
    if (!dims) return dims.status().with_context("--shape");
    import_options.input_shapes[spec.substr(0, equals)] = std::move(*dims);
  }
  return import_options;
}

Expected<std::map<std::string, Array>> load_named_tensors(const std::vector<std::string>& specs) {
  std::map<std::string, Array> tensors;
  for (const std::string& spec : specs) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos) {
      if (!ends_with(spec, ".npz")) {
        return Status::errorf("'{}': expected NAME=FILE or a .npz file", spec);
      }
      KILN_ASSIGN_OR_RETURN(std::vector<NamedArray> entries, read_npz(spec));
      for (NamedArray& entry : entries) tensors[entry.name] = std::move(entry.array);
      continue;
    }
    const std::string name = spec.substr(0, equals);
    if (name.empty()) return Status::errorf("'{}': the tensor name is empty", spec);
    KILN_ASSIGN_OR_RETURN(Array array, load_tensor_file(spec.substr(equals + 1)));
    tensors[name] = std::move(array);
  }
  return tensors;
}

Expected<std::vector<int64_t>> parse_dims(const std::string& text) {
  std::vector<int64_t> dims;
  if (text.empty()) return dims;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find('x', start), text.size());
    int64_t dim = 0;
    const char* first = text.data() + start;
    const char* last = text.data() + end;
    const auto [ptr, error] = std::from_chars(first, last, dim);
    if (error != std::errc() || ptr != last || dim < 0) {
      return Status::errorf("'{}': expected dimensions like 1x128", text);
    }
    dims.push_back(dim);
    if (end == text.size()) break;
    start = end + 1;
  }
  return dims;
}

}  // namespace kiln
