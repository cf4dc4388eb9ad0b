// The compile pipeline from a graph to a runnable program: each group of nodes becomes one
// kernel (lowered, scheduled, emitted as C++, compiled through the cache and loaded), and the
// values between kernels get buffers: the caller's memory for graph inputs and outputs, a
// constant segment for `constant` nodes, and one planned arena for everything else. A
// reshape whose input is in memory anyway is a view (loop/lower_group.h: ViewOutput) with no
// bytes of its own, and a group that gives only views is no kernel.
//
// The unit is a *group*: `compile_groups` takes a partition of the nodes; `compile_graph`
// asks the fusion partitioner (fusion/partition.h) for one, or one group per node when fusion
// is off (the unfused baseline). Groups run in the order given,
// which must respect the graph's dependencies (every value a group reads is a graph input, a
// constant or computed by an earlier group). Constant nodes are never kernels: their values
// are encoded once into the program's constant segment.
//
// Arena buffers live from the step that writes them to the last step that reads them (a
// kernel's scratch buffers for its own step), and runtime/memory_plan.h packs them; graph
// outputs are written by their kernels straight into the caller's memory. A graph output that
// is a graph input, a constant, or an output listed twice gets a copy step.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "codegen/cuda/nvrtc_compiler.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "loop/lower_group.h"
#include "loop/schedule.h"
#include "passes/pipeline.h"
#include "runtime/cuda_launch.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln {

// What the kernels are compiled for.
enum class Device : uint8_t {
  cpu,   // C++ for this CPU (the default schedule, OpenMP), compiled and loaded
  // CUDA for an NVIDIA GPU: each group mapped onto the GPU (loop/gpu_mapping.h), emitted as
  // CUDA C and compiled by NVRTC into a cubin (codegen/cuda). Running it needs a GPU runtime,
  // which Kiln does not have yet, so such a compilation yields code and launches to read.
  cuda,
  // The GPU mapping's loop IR compiled for this CPU (GPU loops run serially): checks the
  // mapping against the interpreter on a machine without a GPU. Slow; for tests.
  cuda_mapping_on_cpu,
};

// "cpu", "cuda", "cuda-mapping-on-cpu".
Expected<Device> parse_device(std::string_view name);

struct CompileOptions {
  Device device = Device::cpu;
  codegen::cpu::CpuCompileOptions cpu;
  codegen::cuda::NvrtcOptions cuda;
  // The graph rewrites (passes/pipeline.h) Compiler::compile runs before partitioning;
  // compile_graph and compile_groups take the graph as it is.
  RewriteOptions rewrites;
  // Which nodes share a kernel (fusion/partition.h): by default the integer program over
  // this machine's cost model; FusionMode::off gives one kernel per node.
  fusion::FusionOptions fusion;
  // Apply the default schedule (loop/default_schedule.h) to every kernel; off leaves the
  // lowered loop nests serial, for comparing or bisecting.
  bool schedule = true;
};

// Per group: the nodes it computes and its lowered (and scheduled) loop IR; parameter i of
// the kernel is bound to the group's inputs, then its outputs, then its scratch buffers
// (loop/scratch.h: local buffers too large for the stack, which the program places in the
// arena for the kernel's step). Groups whose loop IR is identical (the same op on the same
// shapes, as in the repeated layers of a transformer) share one compiled kernel,
// `program_kernel`: loop IR names are Kiln's own and deterministic, so equal text means equal
// code.
struct KernelRecord {
  std::vector<const Node*> nodes;
  loop::Schedule schedule;  // the directives applied to the lowered kernel (on a CPU)
  loop::Kernel kernel;      // lowered, then scheduled (or mapped onto a GPU)
  int program_kernel = 0;
  std::vector<const Value*> inputs;
  std::vector<const Value*> outputs;
  std::vector<int64_t> scratch_bytes;  // per scratch parameter
};

struct CompileStats {
  double lower_seconds = 0;    // lowering and scheduling every group
  double codegen_seconds = 0;  // emitting, compiling (or finding in the cache) and loading
  int units = 0;               // translation units
  int units_compiled = 0;      // of which the compiler ran; the rest came from the cache
  int64_t arena_total_bytes = 0;  // the sum of every arena buffer: what no planning would cost
  int64_t arena_live_bound_bytes = 0;
};

// A compilation for Device::cuda: the CUDA C of every program kernel, its cubin, and the
// launches that run program kernel k (launches[k]).
struct CudaCompiled {
  std::string source;
  std::string cubin;
  std::string architecture;
  runtime::CudaKernelLaunches launches;
};

// Everything compiled from one graph. It points into the graph, which must outlive it.
struct CompiledGraph {
  std::shared_ptr<const runtime::Program> program;
  codegen::cpu::CompiledKernels kernels;  // program kernel k is kernels.function(k) (CPU)
  std::optional<CudaCompiled> cuda;       // for Device::cuda, instead of `kernels`
  std::vector<KernelRecord> records;      // per group that computes something
  std::vector<int> step_kernel_record;    // per program step: its record, or -1 for a copy
  CompileStats stats;
  fusion::Partition partition;            // compile_graph's: the groups and why
  RewriteReport rewrites;                 // Compiler::compile's, before partitioning
};

Expected<CompiledGraph> compile_groups(const Graph& graph,
                                       std::span<const std::vector<Node*>> groups,
                                       const CompileOptions& options = {});

// Partitions the graph as options.fusion says (one group per node with FusionMode::off: the
// unfused baseline), then compiles the groups.
Expected<CompiledGraph> compile_graph(const Graph& graph, const CompileOptions& options = {});

// The C++ source of every program kernel in one translation unit, kernel k as kiln_kernel_k
// (the cache compiles them in smaller units; the code is the same); for Device::cuda, the
// CUDA C NVRTC compiled.
Expected<std::string> kernel_source(const CompiledGraph& compiled);

}  // namespace kiln
