// The Python package's extension module, kiln._kiln: compile an ATen graph (the JSON text of
// frontend/aten_import.h, written by kiln/_aten.py) with Kiln's whole pipeline, and run it on
// the caller's tensors.
//
// Tensors cross by DLPack (nanobind's ndarray): `run` reads the inputs and writes the outputs
// where the caller's tensors hold them, so the caller allocates the outputs (it knows their
// types from the graph's metadata). Every tensor is checked against the graph's type and must
// be dense and row-major, on the CPU for a graph compiled for it (nothing is copied), or on the
// GPU a graph was compiled for (cuda:N; the run is ordered on the caller's stream, its kernels
// read and write the tensors where they lie, and its intermediates may live in an arena of the
// caller's allocator: runtime/cuda_executor.h).
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontend/aten_import.h"
#include "fusion/partition.h"
#include "kiln/kiln.h"
#include "support/check.h"

namespace nb = nanobind;

namespace kiln {
namespace {

// kiln.CompileError: the graph did not import (the message names the node and its ATen op),
// did not compile, or failed to run. Its subclasses carry the Status's code
// (support/status.h), so that the backend leaves to PyTorch only what Kiln does not support.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct InvalidInputError : CompileError {
  using CompileError::CompileError;
};
struct UnsupportedError : CompileError {
  using CompileError::CompileError;
};
struct ResourceExhaustedError : CompileError {
  using CompileError::CompileError;
};
struct InternalError : CompileError {
  using CompileError::CompileError;
};

// Raises `status` (an error) as the kiln exception of its code.
[[noreturn]] void raise(const Status& status) {
  switch (status.code()) {
    case ErrorCode::unsupported:
      throw UnsupportedError(status.message());
    case ErrorCode::resource_exhausted:
      throw ResourceExhaustedError(status.message());
    case ErrorCode::internal:
      throw InternalError(status.message());
    case ErrorCode::ok:
    case ErrorCode::invalid_input:
      break;
  }
  throw InvalidInputError(status.message());
}

// A failed KILN_CHECK inside the module raises kiln.InternalError instead of aborting the
// user's Python process (support/check.h).
[[noreturn]] void raise_failed_check(const std::string& message) { throw InternalError(message); }

// The DLPack type of a Kiln dtype, to compare with a tensor's.
nb::dlpack::dtype dlpack_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return nb::dtype<float>();
    case DType::f64:
      return nb::dtype<double>();
    case DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::bf16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
    case DType::i32:
      return nb::dtype<int32_t>();
    case DType::i64:
      return nb::dtype<int64_t>();
    case DType::boolean:
      return nb::dtype<bool>();
  }
  return {};
}

// Checks that `array` holds a dense row-major tensor of `value`'s type on `device` (the CPU, or
// a GPU); its data pointer. Runs for every tensor of every run, so the message is only made for
// an error.
void* checked_data(const nb::ndarray<>& array, const Value& value, std::string_view role,
                   const Device& device) {
  const TensorType& type = value.type();
  const auto refuse = [&](std::string_view why) {
    throw std::invalid_argument(
        fmt::format("{} '{}' ({}): {}", role, value.name(), type.to_string(), why));
  };
  if (device.kind == DeviceKind::cuda) {
    // The executor runs in the GPU's primary context, as PyTorch's tensors on it do.
    if (array.device_type() != nb::device::cuda::value ||
        array.device_id() != static_cast<int32_t>(device.ordinal)) {
      refuse(fmt::format("the graph was compiled for cuda:{}, and the tensor is not there",
                         device.ordinal));
    }
  } else if (array.device_type() != nb::device::cpu::value) {
    refuse("the graph was compiled for the CPU, and the tensor is not on the CPU");
  }
  if (array.dtype() != dlpack_dtype(type.dtype)) refuse("the tensor's dtype differs");
  if (static_cast<int>(array.ndim()) != type.shape.rank()) {
    refuse(fmt::format("the tensor has {} dims", array.ndim()));
  }
  int64_t stride = 1;
  for (int i = type.shape.rank() - 1; i >= 0; --i) {
    const int64_t dim = type.shape.dim(i);
    if (static_cast<int64_t>(array.shape(static_cast<size_t>(i))) != dim) {
      refuse("the tensor's shape differs");
    }
    if (dim > 1 && array.stride(static_cast<size_t>(i)) != stride) {
      refuse("the tensor is not contiguous");
    }
    stride *= dim;
  }
  return array.data();
}

uintptr_t address_of(const void* data) { return reinterpret_cast<uintptr_t>(data); }

// A compiled graph and what Python asks of it.
class CompiledGraphHandle {
 public:
  CompiledGraphHandle(CompiledModel model, Device device)
      : model_(std::move(model)), device_(device) {}

  // Runs the graph: one tensor per graph input and per output, in the graph's order. On the
  // GPU, in order with `stream` (a CUstream's address; 0 is the legacy default stream), and
  // returning before the GPU finishes.
  void run(const std::vector<nb::ndarray<>>& inputs, const std::vector<nb::ndarray<>>& outputs,
           uintptr_t stream, uintptr_t arena) {
    check_counts(inputs.size(), outputs.size());
    const Graph& graph = model_.graph();
    std::vector<uintptr_t> in, out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in.push_back(address_of(checked_data(inputs[i], *graph.inputs()[i], "input", device_)));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      out.push_back(address_of(checked_data(outputs[i], *graph.outputs()[i], "output", device_)));
    }
    run_addresses(in, out, stream, arena);
  }

  // The same on the tensors' addresses, for the backend: its callers vouch that each is a
  // dense row-major tensor of the graph's type on its device (AOTAutograd's graphs are called
  // with tensors of the traced metadata, which dynamo's guards hold), so that a call costs no
  // DLPack conversion per tensor (about 2 us each, most of a small graph's call). Only the
  // counts are checked.
  void run_addresses(const std::vector<uintptr_t>& inputs, const std::vector<uintptr_t>& outputs,
                     uintptr_t stream, uintptr_t arena) {
    check_counts(inputs.size(), outputs.size());
    Status status;
    {
      nb::gil_scoped_release release;
      if (model_.on_gpu()) {
        const std::vector<uint64_t> in(inputs.begin(), inputs.end());
        const std::vector<uint64_t> out(outputs.begin(), outputs.end());
        status = model_.run_on_stream(in, out, reinterpret_cast<void*>(stream), arena);
      } else {
        std::vector<const void*> in;
        std::vector<void*> out;
        for (const uintptr_t address : inputs) in.push_back(reinterpret_cast<const void*>(address));
        for (const uintptr_t address : outputs) out.push_back(reinterpret_cast<void*>(address));
        status = model_.run_raw(in, out, nullptr, false, reinterpret_cast<void*>(arena));
      }
    }
    if (!status) raise(status);
  }

  // "cpu" or "cuda:N", as compile_aten_graph was asked.
  std::string device() const { return device_name(device_); }

  // The fused kernels and why (fusion/partition.h: explain_partition).
  std::string explain() const {
    const CompiledGraph& compiled = model_.compiled();
    if (compiled.cached_explanation) return *compiled.cached_explanation;
    return fusion::explain_partition(model_.graph(), compiled.partition);
  }

  // Whether the compilation came from the compilation cache.
  bool from_cache() const { return model_.compiled().cached_explanation.has_value(); }

  int num_kernels() const { return model_.program().num_kernels; }

  int64_t arena_bytes() const { return model_.program().arena_bytes; }

  std::vector<std::pair<int64_t, int64_t>> allow_in_place(
      const std::vector<std::pair<int64_t, int64_t>>& candidates) {
    return model_.allow_in_place(candidates);
  }

  // Whether the graph has random ops, and so takes a seed after the ATen graph's inputs.
  bool takes_rng_seed() const {
    const std::vector<Value*>& inputs = model_.graph().inputs();
    return !inputs.empty() && inputs.back()->name() == kAtenRngSeedInput;
  }

 private:
  void check_counts(size_t inputs, size_t outputs) const {
    const Graph& graph = model_.graph();
    if (inputs != graph.inputs().size() || outputs != graph.outputs().size()) {
      throw std::invalid_argument(
          fmt::format("run: the graph takes {} inputs and {} outputs, given {} and {}",
                      graph.inputs().size(), graph.outputs().size(), inputs, outputs));
    }
  }

  CompiledModel model_;
  Device device_;
};

CompiledGraphHandle compile_aten_graph(const std::string& text, bool substitution,
                                       bool reuse_compilations, const std::string& device,
                                       const std::string& precision) {
  CompileOptions options;
  Expected<Precision> parsed_precision = parse_precision(precision);
  if (!parsed_precision) {
    throw std::invalid_argument("compile_aten_graph: " + parsed_precision.status().message());
  }
  options.precision = *parsed_precision;
  Expected<Device> parsed = parse_device(device);
  if (!parsed || parsed->kind == DeviceKind::cuda_mapping_on_cpu) {
    throw std::invalid_argument(fmt::format(
        "compile_aten_graph: device '{}': Kiln compiles for 'cpu', 'cuda' or 'cuda:N'", device));
  }
  options.device = *parsed;
  options.substitution.enabled = substitution;
  options.reuse_compilations = reuse_compilations;
  Expected<CompiledModel> model = Status::error("not compiled");
  {
    nb::gil_scoped_release release;
    Expected<Graph> graph = import_aten_graph(text);
    model = graph ? Compiler(options).compile(std::move(*graph)) : graph.status();
  }
  if (!model) raise(model.status());
  return CompiledGraphHandle(std::move(*model), options.device);
}

// The import's error for a graph, or "" when it imports.
std::string import_error(const std::string& text) {
  Expected<Graph> graph = import_aten_graph(text);
  return graph ? "" : graph.status().message();
}

}  // namespace
}  // namespace kiln

NB_MODULE(_kiln, m) {
  using namespace kiln;
  m.doc() = "Kiln's compiler and runtime, as the kiln package uses them.";
  // torch.compile's caches keep compiled graphs alive until the interpreter is torn down, after
  // nanobind's leak check runs; those are not leaks of this module.
  nb::set_leak_warnings(false);
  // Base first: nanobind tries the translators last registered first, so each subclass is
  // matched before its base.
  const nb::exception<CompileError> compile_error(m, "CompileError");
  nb::exception<InvalidInputError>(m, "InvalidInputError", compile_error);
  nb::exception<UnsupportedError>(m, "UnsupportedError", compile_error);
  nb::exception<ResourceExhaustedError>(m, "ResourceExhaustedError", compile_error);
  nb::exception<InternalError>(m, "InternalError", compile_error);
  set_check_failure_handler(raise_failed_check);

  m.def("supported_aten_ops", &supported_aten_ops,
        "The ATen overloads Kiln converts, as 'aten.addmm.default', sorted.");
  m.def("import_error", &import_error, nb::arg("graph_json"),
        "Why an ATen graph (JSON text) does not import into Kiln, or '' when it does.");
  m.def("compile_aten_graph", &compile_aten_graph, nb::arg("graph_json"),
        nb::arg("substitution") = true, nb::arg("reuse_compilations") = true,
        nb::arg("device") = "cpu", nb::arg("precision") = "fp32",
        "Compiles an ATen graph (JSON text) for this CPU ('cpu') or for an NVIDIA GPU "
        "('cuda:N'; 'cuda' is cuda:0), in a precision ('fp32' as traced; 'bf16' or 'fp16': "
        "mixed precision as torch.autocast computes, passes/precision.h), or loads it from Kiln's "
        "compilation cache when this build compiled it before with the same options. Raises a "
        "kiln.CompileError naming the node and op that failed: UnsupportedError for what Kiln "
        "does not compile (an op, a dtype, a shape the GPU cannot take), InvalidInputError, "
        "ResourceExhaustedError, or InternalError for a bug in Kiln.");

  nb::class_<CompiledGraphHandle>(m, "CompiledGraph")
      .def("run", &CompiledGraphHandle::run, nb::arg("inputs"), nb::arg("outputs"),
           nb::arg("stream") = 0, nb::arg("arena") = 0,
           "Runs the graph on dense tensors (any DLPack producer) on its device, writing the "
           "outputs in place. On a GPU (tensors on its cuda:N), in order with `stream`, a "
           "CUstream's address (torch.cuda.current_stream().cuda_stream), and without waiting "
           "for the GPU to finish. `arena`, when not 0, is the address of arena_bytes bytes on "
           "the graph's device (256-byte aligned on a GPU, 64 on the CPU) for the intermediates: "
           "a torch.empty of the caller's, which its allocator counts and takes back between "
           "calls; else the graph's own arena, kept from call to call, is used.")
      .def("run_addresses", &CompiledGraphHandle::run_addresses, nb::arg("inputs"),
           nb::arg("outputs"), nb::arg("stream") = 0, nb::arg("arena") = 0,
           "As run, on the tensors' addresses (tensor.data_ptr()), unchecked but for their "
           "counts: each must be a dense row-major tensor of the graph's type on its device. "
           "The backend's calls, whose tensors AOTAutograd's traced metadata fixes.")
      .def_prop_ro("device", &CompiledGraphHandle::device, "'cpu' or 'cuda:N'.")
      .def("explain", &CompiledGraphHandle::explain, "The fused kernels and why.")
      .def_prop_ro("num_kernels", &CompiledGraphHandle::num_kernels)
      .def("allow_in_place", &CompiledGraphHandle::allow_in_place, nb::arg("candidates"),
           "Of `candidates`, (output, input) index pairs, those whose output may be written over "
           "its input's memory (a step's new parameters over the old): later runs may pass "
           "that input's tensor as the output too. Once it allowed any, any other output at an "
           "input's address is refused.")
      .def_prop_ro("arena_bytes", &CompiledGraphHandle::arena_bytes,
                   "The bytes of intermediates a run needs (the memory plan's arena).")
      .def_prop_ro("takes_rng_seed", &CompiledGraphHandle::takes_rng_seed,
                   "Whether the graph has random ops (dropout): `run` then takes one more input "
                   "after the ATen graph's, a new 0-d int64 seed below 2**53 at every run.")
      .def_prop_ro("from_cache", &CompiledGraphHandle::from_cache,
                   "Whether the compilation came from the compilation cache.");
}
