// CUDA C from GPU-mapped loop IR (loop/gpu_mapping.h): one translation unit for NVRTC, and
// the launches that run each kernel (runtime/cuda_launch.h).
//
// Each launch of a mapped kernel becomes
//  - for a gemm statement: a launch of the prelude's kiln_gemm_f32 / kiln_gemm_f64 with the
//    regions' addresses (parameter plus offset) and sizes as arguments;
//  - for a gpu_block loop: an `extern "C" __global__` function taking every parameter of the
//    kernel (`T* __restrict__ b0, ...`: buffers never overlap, as on the CPU) and then the
//    host values the launch reads (the lets around the loop) as int64_t, launched with one
//    block per iteration of the gpu_block loop and kGpuThreadsPerBlock threads. Launches whose
//    functions are the same text (the iterations of an unrolled host loop) share a function.
//
// Inside a function, statements of the block's body outside thread loops run in step on all
// threads: each computes values and conditions (so every thread reaches the barriers a block
// reduction holds), thread 0 stores, and a barrier follows every store and thread loop, so the
// next statement sees what the block wrote. A gpu_thread loop is a block-strided loop
// (`for (v = min + threadIdx.x; v < end; v += blockDim.x)`). A vectorized reduction outside
// thread loops is computed by the whole block (each thread a strided partial result, then the
// prelude's kiln_block_reduce); elsewhere reductions run serially in the thread, in order.
// Local buffers outside thread loops are __shared__, inside them per-thread arrays.
//
// Values, constants, casts and operators are spelled as in the CPU back end
// (codegen/c_syntax.h); math functions are the argument type's (expf for float). Nothing from
// loop IR's names reaches the source (parameters b0, ..., variables vN, host values hN).
// NVRTC compiles with --fmad=false: no fused multiply-add, so arithmetic rounds after every
// operation as loop IR defines.
#pragma once

#include <span>
#include <string>

#include "loop/stmt.h"
#include "runtime/cuda_launch.h"
#include "support/status.h"

namespace kiln::codegen::cuda {

struct CudaUnit {
  std::string source;                     // the prelude, then every function
  runtime::CudaKernelLaunches launches;   // per kernel given, in order
};

struct CudaEmitOptions {
  // f32 gemms run on tensor cores in TF32 (--precision tf32; runtime/cuda_launch.h:
  // CudaGemm::tf32); f16, bf16 and f64 ones are unaffected.
  bool tf32 = false;
};

// `kernels` are GPU-mapped (loop/gpu_mapping.h); each is verified first, and errors name the
// kernel's position.
Expected<CudaUnit> emit_cuda_unit(std::span<const loop::Kernel> kernels,
                                  const CudaEmitOptions& options = {});

}  // namespace kiln::codegen::cuda
