// The Python package's extension module, kiln._kiln: compile an ATen graph (the JSON text of
// frontend/aten_import.h, written by kiln/_aten.py) with Kiln's whole pipeline, and run it on
// the caller's tensors.
//
// Tensors cross by DLPack (nanobind's ndarray): `run` reads the inputs and writes the outputs
// where the caller's tensors hold them, so the caller allocates the outputs (it knows their
// types from the graph's metadata). Every tensor is checked against the graph's type and must
// be dense and row-major, on the CPU for a graph compiled for it (nothing is copied), or on the
// first GPU for a graph compiled for CUDA (the run is ordered on the caller's stream, and the
// executor copies device to device at the graph's edge: runtime/cuda_executor.h).
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "frontend/aten_import.h"
#include "fusion/partition.h"
#include "kiln/kiln.h"

namespace nb = nanobind;

namespace kiln {
namespace {

// kiln.CompileError: the graph did not import (the message names the node and its ATen op) or
// did not compile.
struct CompileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

// Checks that `array` holds a dense row-major tensor of `value`'s type, on the CPU or (`gpu`)
// the first GPU; its data pointer. Runs for every tensor of every run, so the message is only
// made for an error.
void* checked_data(const nb::ndarray<>& array, const Value& value, std::string_view role,
                   bool gpu) {
  const TensorType& type = value.type();
  const auto refuse = [&](std::string_view why) {
    throw std::invalid_argument(
        fmt::format("{} '{}' ({}): {}", role, value.name(), type.to_string(), why));
  };
  if (gpu) {
    // The executor runs in the first GPU's primary context, as PyTorch's cuda:0 does.
    if (array.device_type() != nb::device::cuda::value || array.device_id() != 0) {
      refuse("the graph was compiled for the GPU, and the tensor is not on cuda:0");
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

// A compiled graph and what Python asks of it.
class CompiledGraphHandle {
 public:
  explicit CompiledGraphHandle(CompiledModel model) : model_(std::move(model)) {}

  // Runs the graph: one tensor per graph input and per output, in the graph's order. On the
  // GPU, in order with `stream` (a CUstream's address; 0 is the legacy default stream), and
  // returning before the GPU finishes.
  void run(const std::vector<nb::ndarray<>>& inputs, const std::vector<nb::ndarray<>>& outputs,
           uintptr_t stream) {
    const Graph& graph = model_.graph();
    if (inputs.size() != graph.inputs().size() || outputs.size() != graph.outputs().size()) {
      throw std::invalid_argument(fmt::format(
          "run: the graph takes {} inputs and {} outputs, given {} and {}", graph.inputs().size(),
          graph.outputs().size(), inputs.size(), outputs.size()));
    }
    const bool gpu = model_.on_gpu();
    std::vector<const void*> in;
    std::vector<void*> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in.push_back(checked_data(inputs[i], *graph.inputs()[i], "input", gpu));
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      out.push_back(checked_data(outputs[i], *graph.outputs()[i], "output", gpu));
    }
    Status status;
    {
      nb::gil_scoped_release release;
      if (gpu) {
        const auto address = [](const void* data) { return reinterpret_cast<uint64_t>(data); };
        std::vector<uint64_t> in_device, out_device;
        std::ranges::transform(in, std::back_inserter(in_device), address);
        std::ranges::transform(out, std::back_inserter(out_device), address);
        status = model_.run_on_stream(in_device, out_device, reinterpret_cast<void*>(stream));
      } else {
        status = model_.run_raw(in, out);
      }
    }
    if (!status) throw std::runtime_error(status.message());
  }

  // "cpu" or "cuda", as compile_aten_graph was asked.
  std::string device() const { return model_.on_gpu() ? "cuda" : "cpu"; }

  // The fused kernels and why (fusion/partition.h: explain_partition).
  std::string explain() const {
    const CompiledGraph& compiled = model_.compiled();
    if (compiled.cached_explanation) return *compiled.cached_explanation;
    return fusion::explain_partition(model_.graph(), compiled.partition);
  }

  // Whether the compilation came from the compilation cache.
  bool from_cache() const { return model_.compiled().cached_explanation.has_value(); }

  int num_kernels() const { return model_.program().num_kernels; }

  // Whether the graph has random ops, and so takes a seed after the ATen graph's inputs.
  bool takes_rng_seed() const {
    const std::vector<Value*>& inputs = model_.graph().inputs();
    return !inputs.empty() && inputs.back()->name() == kAtenRngSeedInput;
  }

 private:
  CompiledModel model_;
};

CompiledGraphHandle compile_aten_graph(const std::string& text, bool substitution,
                                       bool reuse_compilations, const std::string& device) {
  CompileOptions options;
  if (device == "cuda") {
    options.device = Device::cuda;
  } else if (device != "cpu") {
    throw std::invalid_argument(
        fmt::format("compile_aten_graph: device '{}': Kiln compiles for 'cpu' or 'cuda'", device));
  }
  options.substitution.enabled = substitution;
  options.reuse_compilations = reuse_compilations;
  Expected<CompiledModel> model = Status::error("not compiled");
  {
    nb::gil_scoped_release release;
    Expected<Graph> graph = import_aten_graph(text);
    model = graph ? Compiler(options).compile(std::move(*graph)) : graph.status();
  }
  if (!model) throw CompileError(model.status().message());
  return CompiledGraphHandle(std::move(*model));
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
  nb::exception<CompileError>(m, "CompileError");

  m.def("supported_aten_ops", &supported_aten_ops,
        "The ATen overloads Kiln converts, as 'aten.addmm.default', sorted.");
  m.def("import_error", &import_error, nb::arg("graph_json"),
        "Why an ATen graph (JSON text) does not import into Kiln, or '' when it does.");
  m.def("compile_aten_graph", &compile_aten_graph, nb::arg("graph_json"),
        nb::arg("substitution") = true, nb::arg("reuse_compilations") = true,
        nb::arg("device") = "cpu",
        "Compiles an ATen graph (JSON text) for this CPU ('cpu') or for the first NVIDIA GPU "
        "('cuda'), or loads it from Kiln's compilation cache when this build compiled it "
        "before with the same options. Raises CompileError naming the node and op that "
        "failed, or saying why the GPU cannot run it.");

  nb::class_<CompiledGraphHandle>(m, "CompiledGraph")
      .def("run", &CompiledGraphHandle::run, nb::arg("inputs"), nb::arg("outputs"),
           nb::arg("stream") = 0,
           "Runs the graph on dense tensors (any DLPack producer) on its device, writing the "
           "outputs in place. On the GPU (tensors on cuda:0), in order with `stream`, a "
           "CUstream's address (torch.cuda.current_stream().cuda_stream), and without waiting "
           "for the GPU to finish.")
      .def_prop_ro("device", &CompiledGraphHandle::device, "'cpu' or 'cuda'.")
      .def("explain", &CompiledGraphHandle::explain, "The fused kernels and why.")
      .def_prop_ro("num_kernels", &CompiledGraphHandle::num_kernels)
      .def_prop_ro("takes_rng_seed", &CompiledGraphHandle::takes_rng_seed,
                   "Whether the graph has random ops (dropout): `run` then takes one more input "
                   "after the ATen graph's, a new 0-d int64 seed below 2**53 at every run.")
      .def_prop_ro("from_cache", &CompiledGraphHandle::from_cache,
                   "Whether the compilation came from the compilation cache.");
}
