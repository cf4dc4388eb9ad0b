// One Target per kind of device: every decision the compiler makes because of the device it
// compiles for. The pipeline's stages (compiler/stages.h) name no device; each asks the
// compilation's target whether and how its work is done:
//   - which graph stages run (decomposition by cost, convolutions channels last);
//   - the cost profile the graph stages and the partitioner price kernels with, and for a GPU
//     its own figures (target/gpu_profile.h);
//   - which library runs each library call (loop/stmt.h), by operation and dtypes;
//   - each kernel's schedule, or its mapping onto the GPU, and where its scratch lives;
//   - which library calls keep their constant weights packed;
//   - the code generator, and the executor that runs the program;
//   - whether compilations are cached.
//
// The targets: the CPU (C++ compiled and loaded, the default schedule, oneDNN and OpenBLAS),
// CUDA (the GPU mapping, CUDA C through NVRTC, the CUDA executor with cuBLASLt), and the CUDA
// mapping on the CPU (the GPU mapping's loop IR compiled for this CPU, to check the mapping
// where no GPU is). Targets hold no state: the device's ordinal, which only the executor
// needs, is the caller's.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "cost/device_profile.h"
#include "loop/schedule_search.h"
#include "loop/stmt.h"
#include "runtime/executor.h"
#include "support/status.h"
#include "target/device.h"
#include "target/gpu_profile.h"

namespace kiln {

// What one compilation's schedule stage keeps from kernel to kernel: on the CPU, the schedule
// search (loop/schedule_search.h) with its timer and cache, made for the first kernel.
struct ScheduleSession {
  std::unique_ptr<loop::KernelTimer> timer;
  std::unique_ptr<loop::ScheduleCache> cache;
  std::unique_ptr<loop::ScheduleSearch> search;
};

class Target {
 public:
  virtual ~Target() = default;

  virtual DeviceKind kind() const = 0;

  // --- The graph stages. ----------------------------------------------------------------------

  // Whether composites are decomposed where the cost model prices their pieces cheaper
  // (compiler/decompose_by_cost.h).
  virtual bool decomposes_by_cost() const = 0;
  // Whether an inference graph's convolutions may move channels last (passes/channels_last.h):
  // only where a library computes them in that layout.
  virtual bool computes_convolutions_channels_last() const = 0;
  // Whether mixed precision (passes/precision.h) computes `op`, a contraction, in f16 or bf16
  // here: only where a library runs it so, as autocast's lists of ops differ by device; the
  // others compute in f32.
  virtual bool computes_in_low_precision(Op op) const = 0;
  // The profile the graph stages price kernels with: the options' pinned one, else this
  // machine's (cost::given_or_host_profile).
  Expected<cost::DeviceProfile> cost_profile(const CompileOptions& options) const;
  // Which profile cost_profile prices with, named without measuring (cost::profile_identity).
  Expected<std::string> cost_profile_identity(const CompileOptions& options) const;
  // The GPU's own figures, for a GPU target; nullopt for the CPU.
  virtual std::optional<cost::GpuProfile> gpu_profile(const CompileOptions& options) const = 0;

  // --- Library calls. -------------------------------------------------------------------------

  // The library that runs `call` here ("oneDNN", "OpenBLAS", "cuBLASLt"), from the target's
  // table of operations and dtypes; or, as unsupported, why none does.
  virtual Expected<std::string_view> library_for(const loop::LibraryCall& call) const = 0;
  // Every library call of `kernel` has a library here; else the first that has none.
  Status runs_library_calls(const loop::Kernel& kernel) const;
  // The options' fusion options with this target's check of library calls, so that the
  // partitioner rejects a group whose kernel makes a call no library here runs.
  fusion::FusionOptions fusion_options(const CompileOptions& options) const;

  // --- The kernel stages. ---------------------------------------------------------------------

  // Schedules `record`'s kernel for the device: the default schedule (unless
  // options.schedule is off) or the search's choice (options.schedule_search), or the mapping
  // onto the GPU, which also sizes its scratch. `session` is the compilation's, shared by its
  // kernels.
  virtual Status schedule(KernelRecord& record, const CompileOptions& options,
                          ScheduleSession& session) const = 0;
  // Moves local buffers too large for the device's local memory into scratch parameters.
  virtual void place_scratch(KernelRecord& record) const = 0;
  // Keeps the constant weights of `record`'s library calls packed in the library's layout,
  // where the device's library gains by it.
  virtual void pack_weights(KernelRecord& record) const = 0;
  // The distinct kernels as the device's code, compiled.
  virtual Expected<GeneratedCode> generate_code(std::span<const loop::Kernel> kernels,
                                                const CompileOptions& options) const = 0;

  // --- Running. -------------------------------------------------------------------------------

  // The executor of a complete compilation, on `device` (its ordinal picks the GPU).
  virtual Expected<std::unique_ptr<runtime::ProgramExecutor>> make_executor(
      const CompiledGraph& compiled, const Device& device) const = 0;
  // Whether the compilation cache keeps compilations for this target
  // (compiler/compilation_cache.h).
  virtual bool caches_compilations() const = 0;
};

// "gemm of (f32, f32, f32, f32)": a library call's operation and dtypes, for the targets'
// refusals; and whether they are all `dtype`.
std::string library_call_signature(const loop::LibraryCall& call);
bool all_dtypes(const loop::LibraryCall& call, DType dtype);
// A call of f16 or bf16 operands and result, accumulating in f32: mixed precision's
// contraction; and such a call that is a gemm.
bool is_mixed_precision_call(const loop::LibraryCall& call);
bool is_mixed_precision_gemm(const loop::LibraryCall& call);
// A gemm of f16 or bf16 operands into an f32 C: a mixed-precision sum that goes on past the
// gemm (loop/lower_conv.h: a convolution's gradients).
bool is_widening_gemm(const loop::LibraryCall& call);

// The target of every device of `kind`.
const Target& target_for(DeviceKind kind);

// The target of the device `options` compile for.
inline const Target& target_of(const CompileOptions& options) {
  return target_for(options.device.kind);
}

}  // namespace kiln
