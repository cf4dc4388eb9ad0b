// Running a Program on an NVIDIA GPU, through the CUDA driver API loaded at run time
// (runtime/cuda_driver.h).
//
// The executor is made once per compiled model, on the GPU it is given (an ordinal, as the
// driver numbers the machine's GPUs), in that GPU's primary context:
//  - the cubin is loaded once and every function the launches name is looked up;
//  - one device allocation each holds the constant segment (uploaded once and kept resident),
//    the arena (the memory plan's size) and the program's inputs and outputs, the last two
//    made when a run first needs them: a run on the caller's memory (run_on_stream) needs none;
//  - its launches go to one stream of its own.
// A run copies the caller's inputs to the device, runs the steps, and copies the outputs back:
// memory crosses between host and device only at the program's edge (and not at all for a run
// with RunHooks::io_on_device, which reuses the inputs an earlier run copied). A kernel step is its
// program kernel's launches in order (runtime/cuda_launch.h: a launch's buffer arguments are
// device addresses plus byte offsets), a copy step a device-to-device copy.
//
// A run without hooks replays a CUDA graph: the steps are captured once, on the first such run
// (once per set of input and output addresses, for run_on_stream), and each run then launches
// the whole graph (static shapes, so the launches never change), which removes the per-launch
// host cost. A run with a profile times each step with events; a
// run with `after_step` runs step by step and hands the hook the step's buffers copied to the
// host, so the check mode is the CPU's. Runs of one executor must not overlap.
//
// A gemm launch (runtime/cuda_launch.h: CudaGemm) runs through cuBLASLt, planned once per
// launch when the launches are resolved (runtime/cublaslt.h: LtMatmul); where cuBLASLt is
// missing, has no algorithm for a product, or KILN_CUDA_GEMM=template is set, through the
// launch's template kernel, and gemm_library() says which.
//
// Errors say what failed in words: no driver, no device, the GPU unable to run the cubin, a
// launch (naming the step's kernel and nodes, the function and the CUDA error), and running
// out of device memory (what the executor needed and what was free).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/cuda_launch.h"
#include "runtime/executor.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln::runtime {

struct CudaDriver;
struct CublasLt;

// A GPU, as the driver describes it.
struct CudaDeviceInfo {
  std::string name;
  int compute_capability = 0;  // 10 * major + minor: 90 for an H100
  int driver_version = 0;      // 1000 * major + 10 * minor: 13000 for CUDA 13.0
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

// GPU `ordinal` of this machine, or why there is none to use.
Expected<CudaDeviceInfo> cuda_device_info(int ordinal);

class CudaExecutor final : public ProgramExecutor {
 public:
  // `cubin` holds every function `launches` names; launches[k] runs program kernel k; it runs
  // on GPU `ordinal`. The process's driver (load_cuda_driver) and cuBLASLt (load_cublaslt)
  // unless `driver` is given (tests), with `lt` or, when that is null, the gemms' template
  // kernels.
  static Expected<std::unique_ptr<CudaExecutor>> create(std::shared_ptr<const Program> program,
                                                        std::string cubin,
                                                        CudaKernelLaunches launches, int ordinal,
                                                        const CudaDriver* driver = nullptr,
                                                        const CublasLt* lt = nullptr);
  ~CudaExecutor() override;

  Status run(std::span<const void* const> inputs, std::span<void* const> outputs,
             const RunHooks& hooks = {}) override;
  // Runs on the caller's device memory, in order with the caller's stream (a CUstream; null is
  // the legacy default stream), as a framework's tensors on a GPU are: the run begins after
  // the work queued on `stream` so far, work queued there later begins after the run (an event
  // each way), and the call returns without waiting for the GPU. `inputs` and `outputs` are
  // device addresses in the primary context of the executor's GPU, and an output must not
  // overlap an input. The kernels read and write them where they lie when they have the
  // alignment of the executor's own buffers (256 bytes, which cuBLASLt's algorithms and vector
  // accesses were chosen for; a caching allocator's blocks have it), else through those
  // buffers with a device-to-device copy. A CUDA graph holds the addresses it was captured
  // with: one is captured for each set of addresses and kept (a few), so a caller whose
  // allocator gives a few sets in turn replays them. `arena`, when not 0, is device memory of
  // at least program().arena_bytes at that alignment, for the run's intermediates: the
  // caller's allocator's (PyTorch's caching allocator counts it and reuses it between calls);
  // with 0, the executor's own arena, made on first use.
  Status run_on_stream(std::span<const uint64_t> inputs, std::span<const uint64_t> outputs,
                       void* stream, uint64_t arena = 0);
  const Program& program() const override { return *program_; }
  // "NVIDIA H100 80GB HBM3, gemms through cuBLASLt 13.0.2".
  std::string description() const override;
  void share_arena(ProgramExecutor& other) override;

  // Whether runs without hooks replay a CUDA graph (the default); off, they launch every
  // kernel each time.
  void use_graphs(bool on);

  // What runs the gemm launches: "cuBLASLt 13.0.2", with how many of them cuBLASLt declined
  // (they run their template kernels), or "template kernel (why)".
  std::string gemm_library() const;

 private:
  struct Device;  // the driver's handles and the device memory

  CudaExecutor(std::shared_ptr<const Program> program, CudaKernelLaunches launches,
               std::unique_ptr<Device> device);

  std::shared_ptr<const Program> program_;
  CudaKernelLaunches launches_;
  std::unique_ptr<Device> device_;
};

}  // namespace kiln::runtime
