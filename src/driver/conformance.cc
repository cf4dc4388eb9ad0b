#include "driver/conformance.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "frontend/onnx_import.h"
#include "frontend/tensor_io.h"
#include "interp/interpreter.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

Expected<std::vector<Array>> compile_and_run(const Graph& graph, std::span<const Array> inputs) {
  KILN_ASSIGN_OR_RETURN(CompiledModel model, Compiler().compile(graph.clone()));
  return model.run(inputs);
}

// The tensors in files prefix_0.pb, prefix_1.pb, ... of `dir`, in index order.
Expected<std::vector<NamedArray>> read_numbered_tensors(const fs::path& dir,
                                                       const std::string& prefix) {
  std::vector<NamedArray> arrays;
  for (int i = 0;; ++i) {
    const fs::path path = dir / fmt::format("{}_{}.pb", prefix, i);
    std::error_code error;
    if (!fs::exists(path, error)) break;
    KILN_ASSIGN_OR_RETURN(NamedArray named, read_tensor_proto_file(path.string()));
    arrays.push_back(std::move(named));
  }
  return arrays;
}

// Errors that say Kiln lacks something (an operator, attribute value or element type) make a
// case unsupported; any other error is a failure.
CaseOutcome outcome_of(const Status& status) {
  return status.message().find("unsupported") != std::string::npos ? CaseOutcome::unsupported
                                                                    : CaseOutcome::failed;
}

}  // namespace

const char* outcome_name(CaseOutcome outcome) {
  switch (outcome) {
    case CaseOutcome::passed: return "passed";
    case CaseOutcome::failed: return "failed";
    case CaseOutcome::unsupported: return "unsupported";
  }
  return "?";
}

CaseResult run_conformance_case(const std::string& case_dir, const ConformanceOptions& options) {
  CaseResult result;
  result.name = fs::path(case_dir).filename().string();
  const auto fail = [&](CaseOutcome outcome, std::string detail) {
    result.outcome = outcome;
    result.detail = std::move(detail);
    return result;
  };

  // Node tests often pass what real models hold as constants (a Reshape's shape, Unsqueeze's
  // axes) as inputs. Where the import needs one static, it is fixed to its test value, as an
  // exporter would have written it, and the import retried.
  const fs::path data_dir = fs::path(case_dir) / "test_data_set_0";
  const std::string model_path = (fs::path(case_dir) / "model.onnx").string();
  OnnxImportOptions import_options;
  Expected<ImportedModel> model = import_onnx_file(model_path, import_options);
  std::vector<NamedArray> inputs;
  if (model || static_input_needed(model.status())) {
    Expected<std::vector<NamedArray>> read = read_numbered_tensors(data_dir, "input");
    if (!read) return fail(outcome_of(read.status()), read.status().message());
    inputs = std::move(*read);
  }
  while (!model) {
    const std::optional<std::string> needed = static_input_needed(model.status());
    if (!needed || import_options.static_inputs.contains(*needed)) break;
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const NamedArray& input) { return input.name == *needed; });
    if (it == inputs.end()) break;
    import_options.static_inputs[*needed] = it->array;
    model = import_onnx_file(model_path, import_options);
  }
  if (!model) return fail(outcome_of(model.status()), model.status().message());
  Expected<std::vector<NamedArray>> expected = read_numbered_tensors(data_dir, "output");
  if (!expected) return fail(outcome_of(expected.status()), expected.status().message());

  std::vector<Array> arguments;
  for (NamedArray& input : inputs) {
    if (!import_options.static_inputs.contains(input.name)) {
      arguments.push_back(std::move(input.array));
    }
  }
  if (static_cast<int>(arguments.size()) != model->num_data_inputs) {
    return fail(CaseOutcome::failed, fmt::format("the case gives {} inputs, the model takes {}",
                                                 arguments.size(), model->num_data_inputs));
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    const TensorType& type = model->graph.inputs()[i]->type();
    if (arguments[i].type() != type) {
      return fail(CaseOutcome::failed,
                  fmt::format("input {} is {}, the model declares {}", i,
                              arguments[i].type().to_string(), type.to_string()));
    }
  }
  for (Array& weight : model->weights) arguments.push_back(std::move(weight));

  Expected<std::vector<Array>> outputs = options.engine == Engine::interpreter
                                             ? interpret(model->graph, arguments)
                                             : compile_and_run(model->graph, arguments);
  if (!outputs) return fail(CaseOutcome::failed, outputs.status().message());
  if (outputs->size() != expected->size()) {
    return fail(CaseOutcome::failed, fmt::format("{} outputs, expected {}", outputs->size(),
                                                 expected->size()));
  }
  for (size_t i = 0; i < outputs->size(); ++i) {
    const Comparison comparison =
        compare_arrays((*outputs)[i], (*expected)[i].array, options.tolerance);
    if (!comparison.matches) {
      return fail(CaseOutcome::failed, fmt::format("output {} ('{}'): {}", i,
                                                   model->graph.outputs()[i]->name(),
                                                   comparison.mismatch));
    }
  }
  result.outcome = CaseOutcome::passed;
  return result;
}

std::vector<std::string> conformance_case_dirs(const std::string& suite_dir) {
  std::vector<std::string> cases;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(suite_dir, error)) {
    if (fs::exists(entry.path() / "model.onnx")) cases.push_back(entry.path().string());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

std::vector<CaseResult> run_conformance_suite(const std::string& suite_dir,
                                              const ConformanceOptions& options) {
  std::vector<CaseResult> results;
  for (const std::string& dir : conformance_case_dirs(suite_dir)) {
    results.push_back(run_conformance_case(dir, options));
  }
  return results;
}

}  // namespace kiln
