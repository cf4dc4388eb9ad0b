// The CUDA driver API, loaded at run time: the same `kiln` binary runs on machines with no GPU
// and no NVIDIA driver, and says so when asked to use one. Internal to src/runtime: only the
// CUDA executor (runtime/cuda_executor.h) and its tests include it.
//
// libcuda.so.1 is opened with dlopen once per process and the entry points this runtime uses
// are looked up by the names the driver exports for them (cuda.h maps cuMemAlloc to
// cuMemAlloc_v2 and so on; the table takes the exported name from that mapping, so the
// function types and names cannot disagree). Loading says what is missing in words: no driver
// library, no device, or a driver older than the CUDA 12 API this runtime calls. Every call is
// checked by `check`, whose error carries the driver's name and description of the code and
// what was being done.
//
// Built without the CUDA toolkit's headers (KILN_HAVE_CUDA_HEADERS unset), Kiln has no GPU
// runtime, and load_cuda_driver says that instead.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

#ifdef KILN_HAVE_CUDA_HEADERS
#include <cuda.h>
#endif

namespace kiln::runtime {

// The oldest driver API version (cuDriverGetVersion: 1000 * major + 10 * minor) the runtime
// calls: the entry points of the table below exist from CUDA 12.0 on.
inline constexpr int kMinCudaDriverVersion = 12000;

#ifdef KILN_HAVE_CUDA_HEADERS

// Each entry point: the member's name (cuda.h's, which the header may map to a versioned
// symbol) and the symbol the driver exports for it.
#define KILN_CUDA_DRIVER_ENTRY_POINTS(X) \
  X(cuInit)                              \
  X(cuDriverGetVersion)                  \
  X(cuDeviceGetCount)                    \
  X(cuDeviceGet)                         \
  X(cuDeviceGetName)                     \
  X(cuDeviceGetAttribute)                \
  X(cuDevicePrimaryCtxRetain)            \
  X(cuDevicePrimaryCtxRelease)           \
  X(cuCtxSetCurrent)                     \
  X(cuModuleLoadData)                    \
  X(cuModuleUnload)                      \
  X(cuModuleGetFunction)                 \
  X(cuMemAlloc)                          \
  X(cuMemFree)                           \
  X(cuMemGetInfo)                        \
  X(cuMemcpyHtoDAsync)                   \
  X(cuMemcpyDtoHAsync)                   \
  X(cuMemcpyDtoDAsync)                   \
  X(cuStreamCreate)                      \
  X(cuStreamDestroy)                     \
  X(cuStreamSynchronize)                 \
  X(cuLaunchKernel)                      \
  X(cuEventCreate)                       \
  X(cuEventRecord)                       \
  X(cuEventSynchronize)                  \
  X(cuEventElapsedTime)                  \
  X(cuEventDestroy)                      \
  X(cuStreamWaitEvent)                   \
  X(cuStreamBeginCapture)                \
  X(cuStreamEndCapture)                  \
  X(cuGraphInstantiate)                  \
  X(cuGraphLaunch)                       \
  X(cuGraphExecDestroy)                  \
  X(cuGraphDestroy)                      \
  X(cuGetErrorName)                      \
  X(cuGetErrorString)

// The driver's entry points. A test may fill one with functions of its own.
struct CudaDriver {
#define KILN_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_ENTRY_POINTS(KILN_CUDA_DRIVER_MEMBER)
#undef KILN_CUDA_DRIVER_MEMBER

  // OK for CUDA_SUCCESS; else an error "WHAT: CUDA_ERROR_NAME (description)".
  Status check(CUresult result, std::string_view what) const;
};

// The process's driver, loaded and initialised (cuInit) on first use; the same error on every
// call when it cannot be.
Expected<const CudaDriver*> load_cuda_driver();

#else

struct CudaDriver;
Expected<const CudaDriver*> load_cuda_driver();

#endif

}  // namespace kiln::runtime
