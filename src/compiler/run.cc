#include "compiler/run.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "compiler/tensor_bytes.h"
#include "ir/printer.h"

namespace kiln {
namespace {

double tolerance_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return 1e-9;
    case DType::f32: return 1e-4;
    case DType::f16:
    case DType::bf16: return 1e-2;
    default: return 0;
  }
}

// Compares one kernel output with its reference; fills the errors, and the mismatch (empty if
// none).
void compare_output(const Array& actual, const Array& expected, std::string_view what,
                    KernelCheck& check) {
  const double tolerance = tolerance_of(expected.dtype);
  double scale = 0;
  for (double v : expected.data) {
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  }
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double got = actual[i], want = expected[i];
    bool same;
    if (std::isnan(want) || std::isnan(got)) {
      same = std::isnan(want) && std::isnan(got);
    } else if (std::isinf(want) || std::isinf(got)) {
      same = got == want;
    } else {
      const double error = std::fabs(got - want);
      check.max_abs_error = std::max(check.max_abs_error, error);
      if (want != 0) check.max_rel_error = std::max(check.max_rel_error, error / std::fabs(want));
      same = error <= tolerance * (std::fabs(want) + std::max(1.0, scale) * 0.1);
    }
    if (!same && check.mismatch.empty()) {
      check.mismatch = fmt::format("{} element {}: compiled {} vs reference {}", what, i, got, want);
    }
  }
}

}  // namespace

Expected<std::vector<Array>> run_compiled(const Graph& graph, runtime::ProgramExecutor& executor,
                                          std::span<const Array> inputs,
                                          const runtime::RunHooks& hooks) {
  if (inputs.size() != graph.inputs().size()) {
    return Status::errorf("the graph takes {} inputs, {} given", graph.inputs().size(),
                          inputs.size());
  }
  std::vector<std::vector<std::byte>> input_bytes;
  std::vector<const void*> input_pointers;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].type() != graph.inputs()[i]->type()) {
      return Status::errorf("input {} is {}, the graph takes {}", i, inputs[i].type().to_string(),
                            graph.inputs()[i]->type().to_string());
    }
    input_bytes.push_back(encode_array(inputs[i]));
    input_pointers.push_back(input_bytes.back().data());
  }
  std::vector<std::vector<std::byte>> output_bytes;
  std::vector<void*> output_pointers;
  for (const Value* output : graph.outputs()) {
    output_bytes.emplace_back(static_cast<size_t>(output->shape().num_elements() *
                                                  dtype_size_bytes(output->dtype())));
    output_pointers.push_back(output_bytes.back().data());
  }
  KILN_RETURN_IF_ERROR(executor.run(input_pointers, output_pointers, hooks));
  std::vector<Array> outputs;
  for (size_t o = 0; o < output_bytes.size(); ++o) {
    outputs.push_back(decode_array(graph.outputs()[o]->type(), output_bytes[o].data()));
  }
  return outputs;
}

Expected<CheckReport> check_compiled(const Graph& graph, const CompiledGraph& compiled,
                                     runtime::ProgramExecutor& executor, std::span<const Array> inputs) {
  CheckReport report;
  auto check_step = [&](int step, std::span<void* const> buffers) -> Status {
    const int record_index = compiled.step_kernel_record.at(static_cast<size_t>(step));
    if (record_index < 0) return Status::ok();  // a copy
    const KernelRecord& record = compiled.records[static_cast<size_t>(record_index)];
    std::map<const Value*, Array> values;
    for (size_t i = 0; i < record.inputs.size(); ++i) {
      values[record.inputs[i]] =
          decode_array(record.inputs[i]->type(), static_cast<const std::byte*>(buffers[i]));
    }
    for (const Node* node : record.nodes) {
      std::vector<Array> args;
      for (const Value* input : node->inputs()) args.push_back(values.at(input));
      KILN_ASSIGN_OR_RETURN(std::vector<Array> results,
                            node->def().eval(args, node->attrs(), node->output_types()));
      for (int o = 0; o < node->num_outputs(); ++o) {
        results[static_cast<size_t>(o)].round_to_dtype();
        values[node->output(o)] = std::move(results[static_cast<size_t>(o)]);
      }
    }
    KernelCheck check{.step = step,
                      .label = compiled.program->steps[static_cast<size_t>(step)].label};
    for (size_t o = 0; o < record.outputs.size(); ++o) {
      const Value& value = *record.outputs[o];
      const Array actual = decode_array(
          value.type(), static_cast<const std::byte*>(buffers[record.inputs.size() + o]));
      compare_output(actual, values.at(&value),
                     fmt::format("output {} {}", print_value_ref(value), value.type().to_string()),
                     check);
    }
    report.kernels.push_back(std::move(check));
    if (!report.kernels.back().mismatch.empty()) {
      return Status::errorf("step {} ({}) disagrees with the reference: {}", step,
                            report.kernels.back().label, report.kernels.back().mismatch);
    }
    return Status::ok();
  };
  Expected<std::vector<Array>> outputs =
      run_compiled(graph, executor, inputs, {.profile = nullptr, .after_step = check_step});
  // A mismatch stops the run; the report says where. Any other error is the caller's.
  if (!outputs && report.ok()) return outputs.status();
  return report;
}

}  // namespace kiln
