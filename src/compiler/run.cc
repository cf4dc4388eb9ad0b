#include "compiler/run.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

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

// The tolerance of a kernel's floating outputs (integers and bool compare exactly): the
// loosest of the dtypes its nodes compute, since an output computed from an f16 or bf16 value
// inside the kernel carries that value's error whatever its own dtype (a rounding to bf16 that
// f32 and f64 arithmetic place on either side of a tie moves the value by one bf16 unit).
double kernel_tolerance(const KernelRecord& record) {
  double tolerance = 0;
  for (const Node* node : record.nodes) {
    for (const Value* output : node->outputs()) {
      tolerance = std::max(tolerance, tolerance_of(output->dtype()));
    }
  }
  return tolerance;
}

// A product in TF32 (--precision tf32 on the GPU) rounds its f32 operands to 10-bit mantissas,
// 2^-11 relative where f32 keeps 2^-24: its kernel's outputs are judged as bf16's are, scaled
// by the ratio of the two roundings (bf16's 2^-8 to TF32's 2^-11), with the same margin.
constexpr double kTf32Tolerance = 2e-3;

bool computes_in_tf32(const CompiledGraph& compiled, const KernelRecord& record) {
  if (!compiled.cuda) return false;
  for (const runtime::CudaLaunch& launch :
       compiled.cuda->launches.at(static_cast<size_t>(record.program_kernel))) {
    if (launch.gemm && launch.gemm->tf32) return true;
  }
  return false;
}

// The relative size of the perturbation of a kernel's floating inputs and of each node's
// results that measures how sensitive each output element is to rounding: 2^-16, the backward
// error of an f32 sum of a few hundred terms in the worst case (each term perturbed by at most k
// units in the last place) and of far longer ones in the typical case.
constexpr double kPerturbation = 1.0 / 65536;

// Compares one kernel output with its reference within `tolerance` (relative); fills the
// errors, and the mismatch (empty if none). `slack`, when given, is per element how far the
// reference itself moves under the perturbations of `sensitivity` (below): an element that
// rounding-sized changes move that far (an Adam update of a gradient that cancels to near its
// epsilon) is judged against that, not against the tolerance alone.
void compare_output(const Array& actual, const Array& expected, std::string_view what,
                    double tolerance, KernelCheck& check,
                    const std::vector<double>* slack = nullptr) {
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
      const double allowed = tolerance * (std::fabs(want) + std::max(1.0, scale) * 0.1);
      same = error <= allowed + (slack != nullptr ? 2 * (*slack)[static_cast<size_t>(i)] : 0.0);
    }
    if (!same && check.mismatch.empty()) {
      check.mismatch = fmt::format("{} element {}: compiled {} vs reference {}", what, i, got, want);
    }
  }
}

// Scales every element of a floating `array` by 1 +- kPerturbation, the signs drawn from
// `signs`.
void perturb(Array& array, std::mt19937_64& signs) {
  if (!is_floating(array.dtype)) return;
  for (double& v : array.data) v *= 1 + ((signs() & 1) ? kPerturbation : -kPerturbation);
}

// The kernel's nodes evaluated by their reference on `values` (the kernel's inputs, to which
// the outputs are added), each result rounded to its dtype as the compiled kernel stores it.
// With `signs`, each result but a constant's is perturbed too (the rounding of every step).
Status evaluate_reference(const KernelRecord& record, std::map<const Value*, Array>& values,
                          std::mt19937_64* signs = nullptr) {
  for (const Node* node : record.nodes) {
    std::vector<Array> args;
    for (const Value* input : node->inputs()) args.push_back(values.at(input));
    KILN_ASSIGN_OR_RETURN(std::vector<Array> results,
                          node->def().eval(args, node->attrs(), node->output_types()));
    for (int o = 0; o < node->num_outputs(); ++o) {
      Array& result = results[static_cast<size_t>(o)];
      if (signs != nullptr && node->op_name() != "constant") perturb(result, *signs);
      result.round_to_dtype();
      values[node->output(o)] = std::move(result);
    }
  }
  return Status::ok();
}

// Per kernel output, per element: how far its reference may move.
using Slack = std::map<const Value*, std::vector<double>>;

// Per kernel output, per element, the most its reference moves under kSensitivitySamples
// perturbations of the kernel's inputs and of each node's results, independent of each other
// (perturbing the inputs alone would leave x - 1 unmoved when x and the 1 move together; each
// node's result alone would miss a sum that cancels), each sample with its own signs.
Expected<Slack> sensitivity(
    const KernelRecord& record, const std::map<const Value*, Array>& inputs,
    const std::map<const Value*, Array>& reference) {
  constexpr int kSensitivitySamples = 3;
  Slack moved;
  for (const Value* output : record.outputs) {
    moved[output].assign(static_cast<size_t>(reference.at(output).size()), 0.0);
  }
  for (int sample = 0; sample < kSensitivitySamples; ++sample) {
    std::mt19937_64 signs(0x6b696c6e + static_cast<uint64_t>(sample));
    std::map<const Value*, Array> values = inputs;
    // In the kernel's input order: the map's order is the values' addresses, which differ from
    // run to run, and so would the signs each input draws.
    for (const Value* input : record.inputs) perturb(values.at(input), signs);
    KILN_RETURN_IF_ERROR(evaluate_reference(record, values, &signs));
    for (auto& [output, most] : moved) {
      const Array& want = reference.at(output);
      const Array& got = values.at(output);
      for (size_t i = 0; i < most.size(); ++i) {
        const double change = std::fabs(got.data[i] - want.data[i]);
        if (std::isfinite(change)) most[i] = std::max(most[i], change);
      }
    }
  }
  return moved;
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
    if (record_index < 0) return Status::ok();  // a copy or a collective
    const KernelRecord& record = compiled.records[static_cast<size_t>(record_index)];
    std::map<const Value*, Array> kernel_inputs;
    for (size_t i = 0; i < record.inputs.size(); ++i) {
      kernel_inputs[record.inputs[i]] =
          decode_array(record.inputs[i]->type(), static_cast<const std::byte*>(buffers[i]));
    }
    std::map<const Value*, Array> values = kernel_inputs;
    KILN_RETURN_IF_ERROR(evaluate_reference(record, values));
    std::vector<Array> actual;
    for (size_t o = 0; o < record.outputs.size(); ++o) {
      actual.push_back(decode_array(record.outputs[o]->type(),
                                    static_cast<const std::byte*>(buffers[record.inputs.size() + o])));
    }
    const double tolerance = std::max(kernel_tolerance(record),
                                      computes_in_tf32(compiled, record) ? kTf32Tolerance : 0.0);
    const auto judge = [&](const Slack* slack) {
      KernelCheck check{.step = step,
                        .label = compiled.program->steps[static_cast<size_t>(step)].label};
      for (size_t o = 0; o < record.outputs.size(); ++o) {
        const Value& value = *record.outputs[o];
        compare_output(
            actual[o], values.at(&value),
            fmt::format("output {} {}", print_value_ref(value), value.type().to_string()),
            is_floating(value.dtype()) ? tolerance : 0.0, check,
            slack != nullptr ? &slack->at(&value) : nullptr);
      }
      return check;
    };
    // Judged against the dtype's tolerance; where that fails, again with each element's
    // sensitivity to rounding measured (more evaluations, only then).
    KernelCheck check = judge(nullptr);
    if (!check.mismatch.empty()) {
      KILN_ASSIGN_OR_RETURN(const Slack slack, sensitivity(record, kernel_inputs, values));
      check = judge(&slack);
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
