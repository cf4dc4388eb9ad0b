// Test support for lowering: builds a graph, runs it through the reference interpreter and
// through lower_group + the loop-IR evaluator on the same random inputs, and compares.
//
// Built with KILN_LOWERING_CHECK_COMPILED defined (the kiln_compiled_ops_tests executable), the
// same cases go through the whole compiler instead: the group is lowered, scheduled, emitted
// as C++, compiled, loaded and run by the runtime's executor. Every op is then checked
// compiled alone, in the same shapes.
//
// Built with KILN_LOWERING_CHECK_GPU_MAPPED defined (kiln_gpu_mapped_ops_tests), the lowered
// group is mapped onto a GPU (loop/gpu_mapping.h) and the mapped kernel runs on the loop
// evaluator; its CUDA is emitted and, where the toolkit is present, compiled by NVRTC.
//
// Built with KILN_LOWERING_CHECK_ON_GPU defined (kiln_gpu_ops_tests, which the GPU bundle
// carries), the whole case graph is compiled for CUDA as one group and run on the GPU by the
// CUDA executor, twice: from host memory (`run`), and from device memory in order with a
// stream of the test's own (`run_on_stream`, as a framework's tensors run), which must agree;
// on a machine without a GPU every test is skipped, saying why (or fails, where
// KILN_REQUIRE_GPU is set).
//
// Inputs are drawn fresh per call from a generator seeded by KILN_LOOP_SEED (default fixed;
// printed on failure). Tolerances are per dtype: f64 results agree to 1e-12 relative; f32
// results to 1e-5 relative plus 1e-5 * scale absolute, `scale` covering reductions whose
// f32 accumulation rounds more often than the interpreter's single rounding.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "interp/interpreter.h"
#include "ir/graph.h"
#include "loop/evaluator.h"
#include "loop/lower_group.h"
#include "loop/printer.h"

#ifdef KILN_LOWERING_CHECK_GPU_MAPPED
#include "codegen/cuda/emitter.h"
#include "codegen/cuda/nvrtc_compiler.h"
#include "loop/gpu_mapping.h"
#endif

#ifdef KILN_LOWERING_CHECK_COMPILED
#include "compiler/pipeline.h"
#include "compiler/tensor_bytes.h"
#include "runtime/executor.h"
#endif

#ifdef KILN_LOWERING_CHECK_ON_GPU
#include "compiler/pipeline.h"
#include "compiler/tensor_bytes.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_executor.h"
#endif

namespace kiln::loop::testing {

enum class Fill {
  signed_values,  // floats in [-2, 2]; integers in [-5, 5] without 0
  positive,       // floats in [0.1, 3]; integers in [1, 5]
  range,          // integers in [lo, hi)
  boolean,
};

struct InputSpec {
  TensorType type;
  Fill fill = Fill::signed_values;
  int64_t lo = 0, hi = 0;          // for Fill::range
  std::optional<Array> fixed = {};  // used as is when set
};

inline InputSpec in(DType dtype, std::vector<int64_t> dims, Fill fill = Fill::signed_values) {
  return {{dtype, Shape(std::move(dims))}, fill};
}
inline InputSpec indices(DType dtype, std::vector<int64_t> dims, int64_t lo, int64_t hi) {
  return {{dtype, Shape(std::move(dims))}, Fill::range, lo, hi};
}
inline InputSpec fixed(Array value) { return {value.type(), Fill::signed_values, 0, 0, value}; }

inline uint64_t test_seed() {
  const char* text = std::getenv("KILN_LOOP_SEED");
  return text != nullptr ? std::strtoull(text, nullptr, 10) : 20240517;
}

inline Array random_array(const InputSpec& spec, std::mt19937_64& rng) {
  if (spec.fixed) return *spec.fixed;
  Array array(spec.type.dtype, spec.type.shape);
  const bool floating = is_floating(spec.type.dtype);
  for (double& v : array.data) {
    switch (spec.fill) {
      case Fill::signed_values:
        if (floating) {
          v = std::uniform_real_distribution<double>(-2, 2)(rng);
        } else {
          v = static_cast<double>(std::uniform_int_distribution<int64_t>(1, 5)(rng));
          if (rng() % 2 == 0) v = -v;
        }
        break;
      case Fill::positive:
        v = floating ? std::uniform_real_distribution<double>(0.1, 3)(rng)
                     : static_cast<double>(std::uniform_int_distribution<int64_t>(1, 5)(rng));
        break;
      case Fill::range:
        v = static_cast<double>(std::uniform_int_distribution<int64_t>(spec.lo, spec.hi - 1)(rng));
        break;
      case Fill::boolean: v = static_cast<double>(rng() % 2); break;
    }
  }
  array.round_to_dtype();
  return array;
}

// Random values for every input of `graph`, as random_array draws them.
inline std::vector<Array> random_inputs(const Graph& graph, uint64_t salt = 0) {
  std::mt19937_64 rng(test_seed() + salt);
  std::vector<Array> inputs;
  for (const Value* value : graph.inputs()) inputs.push_back(random_array({value->type()}, rng));
  return inputs;
}

inline bool close(double actual, double expected, DType dtype, double scale) {
  if (std::isnan(expected) || std::isnan(actual)) return std::isnan(expected) && std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  const bool wide = dtype == DType::f64 || !is_floating(dtype);
  const double rtol = wide ? 1e-12 : 1e-5;
  const double atol = (wide ? 1e-12 : 1e-5) * scale;
  return std::fabs(actual - expected) <= atol + rtol * std::fabs(expected);
}

// Runs `lowered` on `inputs` with the loop evaluator; the outputs' values in order.
inline Expected<std::vector<std::vector<double>>> run_lowered(const LoweredGroup& lowered,
                                                              const std::vector<Array>& inputs) {
  std::vector<std::vector<double>> args;
  for (const Array& input : inputs) args.push_back(input.data);
  for (size_t i = inputs.size(); i < lowered.kernel.params.size(); ++i) {
    args.emplace_back(static_cast<size_t>(lowered.kernel.params[i].flat_size()), -12345.0);
  }
  KILN_RETURN_IF_ERROR(run_kernel(lowered.kernel, args));
  return std::vector<std::vector<double>>(args.begin() + static_cast<ptrdiff_t>(inputs.size()),
                                          args.end());
}

#if defined(KILN_LOWERING_CHECK_GPU_MAPPED)
// The outputs of the group mapped onto a GPU, run by the loop evaluator, after its CUDA
// compiled (the scratch parameters after the outputs are poisoned like them).
inline Expected<std::vector<std::vector<double>>> run_group(const Graph&,
                                                            const LoweredGroup& lowered,
                                                            std::span<Node* const>,
                                                            const std::vector<Array>& inputs) {
  KILN_ASSIGN_OR_RETURN(GpuMapping mapping, map_to_gpu(lowered.kernel));
  // A row statistic computed again for every element of its row is right but O(row^2).
  if (const std::vector<std::string> recomputed = recomputed_reductions(mapping.kernel);
      !recomputed.empty()) {
    return Status::errorf("the GPU mapping recomputes reductions: {}\n{}",
                          fmt::join(recomputed, "; "), print(mapping.kernel));
  }
  KILN_ASSIGN_OR_RETURN(codegen::cuda::CudaUnit unit,
                        codegen::cuda::emit_cuda_unit({&mapping.kernel, 1}));
  if (codegen::cuda::nvrtc_available()) {
    Expected<codegen::cuda::Cubin> cubin = codegen::cuda::compile_cuda(unit.source);
    if (!cubin) return cubin.status().with_context(print(mapping.kernel));
  }
  std::vector<std::vector<double>> args;
  for (const Array& input : inputs) args.push_back(input.data);
  for (size_t i = inputs.size(); i < mapping.kernel.params.size(); ++i) {
    args.emplace_back(static_cast<size_t>(mapping.kernel.params[i].flat_size()), -12345.0);
  }
  KILN_RETURN_IF_ERROR(run_kernel(mapping.kernel, args));
  const auto first_output = args.begin() + static_cast<ptrdiff_t>(inputs.size());
  return std::vector<std::vector<double>>(
      first_output, first_output + static_cast<ptrdiff_t>(lowered.outputs.size()));
}
#elif defined(KILN_LOWERING_CHECK_ON_GPU)
// Every test skipped, with the reason, where there is no GPU to run on; failed instead where
// KILN_REQUIRE_GPU is set (tests/gpu/gpu-check, on a machine that has one).
class GpuPresent : public ::testing::Environment {
 public:
  void SetUp() override {
    Expected<runtime::CudaDeviceInfo> device = runtime::cuda_device_info(0);
    if (device) return;
    if (std::getenv("KILN_REQUIRE_GPU") != nullptr) {
      FAIL() << "KILN_REQUIRE_GPU is set, but no GPU can be used: " << device.status().message();
    }
    GTEST_SKIP() << "no GPU to run on: " << device.status().message();
  }
};
inline ::testing::Environment* const kGpuPresent =
    ::testing::AddGlobalTestEnvironment(new GpuPresent);

#ifdef KILN_HAVE_CUDA_HEADERS
// Runs `executor` with run_on_stream on copies of `inputs` in device memory, ordered on a stream
// of its own; the outputs copied back, each the size of its `outputs` entry.
inline Expected<std::vector<std::vector<std::byte>>> run_from_device_memory(
    runtime::CudaExecutor& executor, const std::vector<std::vector<std::byte>>& inputs,
    const std::vector<std::vector<std::byte>>& outputs) {
  KILN_ASSIGN_OR_RETURN(const runtime::CudaDriver* driver, runtime::load_cuda_driver());
  // The executor left the first GPU's primary context current on this thread.
  CUstream stream = nullptr;
  KILN_RETURN_IF_ERROR(driver->check(driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
                                     "creating the caller's stream"));
  std::vector<CUdeviceptr> memory;
  const auto release = [&] {
    for (CUdeviceptr address : memory) driver->cuMemFree(address);
    driver->cuStreamDestroy(stream);
  };
  const auto allocate = [&](size_t bytes) -> Expected<CUdeviceptr> {
    CUdeviceptr address = 0;
    KILN_RETURN_IF_ERROR(driver->check(driver->cuMemAlloc(&address, std::max<size_t>(bytes, 1)),
                                       "allocating the caller's memory"));
    memory.push_back(address);
    return address;
  };
  std::vector<uint64_t> in, out;
  Status status = Status::ok();
  for (const std::vector<std::byte>& bytes : inputs) {
    Expected<CUdeviceptr> address = allocate(bytes.size());
    if (!address) status = address.status();
    if (!status) break;
    status = driver->check(driver->cuMemcpyHtoDAsync(*address, bytes.data(), bytes.size(), stream),
                           "copying an input to the caller's memory");
    in.push_back(*address);
  }
  for (size_t o = 0; status && o < outputs.size(); ++o) {
    Expected<CUdeviceptr> address = allocate(outputs[o].size());
    if (!address) status = address.status();
    if (status) out.push_back(*address);
  }
  if (status) status = executor.run_on_stream(in, out, stream);
  std::vector<std::vector<std::byte>> results(outputs.size());
  for (size_t o = 0; status && o < outputs.size(); ++o) {
    results[o].resize(outputs[o].size());
    status = driver->check(
        driver->cuMemcpyDtoHAsync(results[o].data(), out[o], results[o].size(), stream),
        "copying an output from the caller's memory");
  }
  if (status) {
    status = driver->check(driver->cuStreamSynchronize(stream), "waiting for the caller's stream");
  }
  release();
  if (!status) return status;
  return results;
}
#endif

// Compiles the whole case graph (`group`, every node) for CUDA as one group and runs it on the
// GPU; the outputs of `lowered` in its order, read from the program's outputs.
inline Expected<std::vector<std::vector<double>>> run_group(const Graph& graph,
                                                            const LoweredGroup& lowered,
                                                            std::span<Node* const> group,
                                                            const std::vector<Array>& inputs) {
  const std::vector<Node*> nodes(group.begin(), group.end());
  CompileOptions options;
  options.device.kind = DeviceKind::cuda;
  KILN_ASSIGN_OR_RETURN(
      CompiledGraph compiled,
      compile_groups(graph, std::span<const std::vector<Node*>>(&nodes, 1), options));
  if (!compiled.cuda) return Status::error("the group compiled to no CUDA");
  const CudaCompiled& cuda = *compiled.cuda;
  KILN_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::CudaExecutor> executor,
      runtime::CudaExecutor::create(compiled.program, cuda.cubin, cuda.launches, 0));
  // The program takes the graph's inputs in the graph's order; `inputs` are the group's.
  std::vector<std::vector<std::byte>> input_bytes;
  for (const Value* input : graph.inputs()) {
    const auto it = std::find(lowered.inputs.begin(), lowered.inputs.end(), input);
    input_bytes.push_back(it == lowered.inputs.end()
                              ? std::vector<std::byte>(static_cast<size_t>(
                                    input->shape().num_elements() * dtype_size_bytes(input->dtype())))
                              : encode_array(inputs[static_cast<size_t>(it - lowered.inputs.begin())]));
  }
  std::vector<std::vector<std::byte>> output_bytes;
  for (const Value* output : graph.outputs()) {
    Array poison(output->dtype(), output->shape());
    for (double& v : poison.data) v = is_floating(output->dtype()) ? -12345.0 : 123;
    output_bytes.push_back(encode_array(poison));
  }
  std::vector<const void*> input_pointers;
  for (const std::vector<std::byte>& bytes : input_bytes) input_pointers.push_back(bytes.data());
  std::vector<void*> output_pointers;
  for (std::vector<std::byte>& bytes : output_bytes) output_pointers.push_back(bytes.data());
  KILN_RETURN_IF_ERROR(executor->run(input_pointers, output_pointers));
#ifdef KILN_HAVE_CUDA_HEADERS
  KILN_ASSIGN_OR_RETURN(const std::vector<std::vector<std::byte>> on_stream,
                        run_from_device_memory(*executor, input_bytes, output_bytes));
  for (size_t o = 0; o < output_bytes.size(); ++o) {
    const Value* output = graph.outputs()[o];
    const std::vector<double> host = decode_array(output->type(), output_bytes[o].data()).data;
    const std::vector<double> device = decode_array(output->type(), on_stream[o].data()).data;
    for (size_t i = 0; i < host.size(); ++i) {
      // Atomic adds may sum in another order from one run to the next.
      if (std::fabs(host[i] - device[i]) > 1e-5 * (1 + std::fabs(host[i])) &&
          !(std::isnan(host[i]) && std::isnan(device[i]))) {
        return Status::errorf("run_on_stream gave output {} element {} as {}, run as {}", o, i,
                              device[i], host[i]);
      }
    }
  }
#endif
  std::vector<std::vector<double>> results;
  for (const Value* output : lowered.outputs) {
    const auto it = std::find(graph.outputs().begin(), graph.outputs().end(), output);
    if (it == graph.outputs().end()) return Status::error("a kernel output is no graph output");
    results.push_back(
        decode_array(output->type(),
                     output_bytes[static_cast<size_t>(it - graph.outputs().begin())].data())
            .data);
  }
  return results;
}
#elif !defined(KILN_LOWERING_CHECK_COMPILED)
// The outputs of `group` of `graph`, lowered as `lowered`, on `inputs`: by the loop evaluator.
inline Expected<std::vector<std::vector<double>>> run_group(const Graph&,
                                                            const LoweredGroup& lowered,
                                                            std::span<Node* const>,
                                                            const std::vector<Array>& inputs) {
  return run_lowered(lowered, inputs);
}
#else
// Compiles `group` as one kernel through the whole pipeline and runs it with the executor on
// buffers of its own: the kernel's inputs, then its outputs, bound as lower_group binds them.
inline Expected<std::vector<std::vector<double>>> run_group(const Graph& graph,
                                                            const LoweredGroup& lowered,
                                                            std::span<Node* const> group,
                                                            const std::vector<Array>& inputs) {
  const std::vector<Node*> nodes(group.begin(), group.end());
  KILN_ASSIGN_OR_RETURN(CompiledGraph compiled,
                        compile_groups(graph, std::span<const std::vector<Node*>>(&nodes, 1)));
  if (compiled.records.size() != 1) return Status::error("expected one kernel");
  // Run the kernel directly on its parameters, in lower_group's order, with the output
  // buffers poisoned so that an element the kernel fails to write shows.
  std::vector<std::vector<std::byte>> buffers;
  for (const Array& input : inputs) buffers.push_back(encode_array(input));
  for (const Value* output : lowered.outputs) {
    Array poison(output->dtype(), output->shape());
    for (double& v : poison.data) v = is_floating(output->dtype()) ? -12345.0 : 123;
    buffers.push_back(encode_array(poison));
  }
  std::vector<void*> pointers;
  for (std::vector<std::byte>& buffer : buffers) pointers.push_back(buffer.data());
  compiled.kernels.function(0)(pointers.data());
  std::vector<std::vector<double>> results;
  for (size_t o = 0; o < lowered.outputs.size(); ++o) {
    results.push_back(decode_array(lowered.outputs[o]->type(),
                                   buffers[inputs.size() + o].data()).data);
  }
  return results;
}
#endif

// Compares lowering `group` (default: every node) of `graph` with the interpreter; every graph
// output must be an output of the group, and the graph inputs are its inputs, in order.
inline ::testing::AssertionResult matches_interpreter(const Graph& graph,
                                                      const std::vector<Array>& inputs,
                                                      double scale = 1,
                                                      std::span<Node* const> group = {}) {
  const std::span<Node* const> nodes = group.empty() ? graph.nodes() : group;
  Expected<LoweredGroup> lowered = lower_group(graph, nodes);
  if (!lowered) return ::testing::AssertionFailure() << lowered.status().message();
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  if (!expected) return ::testing::AssertionFailure() << expected.status().message();
  std::vector<Array> bound;
  for (const Value* value : lowered->inputs) {
    const auto it = std::find(graph.inputs().begin(), graph.inputs().end(), value);
    if (it == graph.inputs().end()) return ::testing::AssertionFailure() << "input not a graph input";
    bound.push_back(inputs[static_cast<size_t>(it - graph.inputs().begin())]);
  }
  Expected<std::vector<std::vector<double>>> actual = run_group(graph, *lowered, nodes, bound);
  if (!actual) {
    return ::testing::AssertionFailure() << actual.status().message() << "\n"
                                         << print(lowered->kernel);
  }
  for (size_t o = 0; o < graph.outputs().size(); ++o) {
    const auto it =
        std::find(lowered->outputs.begin(), lowered->outputs.end(), graph.outputs()[o]);
    if (it == lowered->outputs.end()) {
      return ::testing::AssertionFailure() << "graph output " << o << " is not a kernel output";
    }
    const std::vector<double>& got = (*actual)[static_cast<size_t>(it - lowered->outputs.begin())];
    const Array& want = (*expected)[o];
    for (int64_t i = 0; i < want.size(); ++i) {
      if (!close(got[static_cast<size_t>(i)], want[i], want.dtype, scale)) {
        return ::testing::AssertionFailure()
               << fmt::format("output {} ({}) element {}: lowered {} vs interpreter {} (seed {})\n",
                              o, want.type().to_string(), i, got[static_cast<size_t>(i)], want[i],
                              test_seed())
               << print(lowered->kernel);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A graph of one node of `op` on inputs of `specs`' types, every output a graph output.
inline Expected<Graph> one_op_graph(Op op, const std::vector<InputSpec>& specs,
                                    const Attrs& attrs) {
  Graph graph;
  std::vector<Value*> values;
  for (const InputSpec& spec : specs) values.push_back(graph.add_input(spec.type));
  KILN_ASSIGN_OR_RETURN(Node * node, graph.add_node(op, values, attrs));
  graph.set_outputs(node->outputs());
  return graph;
}

// One node of `op` on random inputs, every output a graph output, lowered as a one-op group.
inline ::testing::AssertionResult op_matches_interpreter(Op op, const std::vector<InputSpec>& specs,
                                                         const Attrs& attrs = {},
                                                         double scale = 1) {
  Expected<Graph> graph = one_op_graph(op, specs, attrs);
  if (!graph) return ::testing::AssertionFailure() << graph.status().message();
  std::vector<Array> inputs;
  std::mt19937_64 rng(test_seed() + static_cast<uint64_t>(op));
  for (const InputSpec& spec : specs) inputs.push_back(random_array(spec, rng));
  return matches_interpreter(*graph, inputs, scale);
}

}  // namespace kiln::loop::testing
