// C++ source from loop IR: one translation unit holding one extern "C" function per kernel.
//
// The ABI. Every generated kernel is
//
//   extern "C" void kiln_kernel_N(void* const* buffers);
//
// where buffers[i] is the base address of the kernel's i-th parameter buffer (Kernel::params
// order) and loads and stores address element offsets from it. Elements are stored as
// f32: float, f64: double, i32: int32_t, i64: int64_t, f16 and bf16: their 16-bit patterns
// (uint16_t), bool: one byte holding 0 or 1 (the prelude's kiln_bool). The runtime calls
// kernels through a KernelFunction pointer with an array of base pointers into its arena.
// The buffers of one call never overlap (the memory plan gives every buffer live at a step
// its own bytes; a caller's outputs must not overlap its inputs), so parameters are
// `__restrict` pointers: the compiler may keep a value loaded from one buffer while the
// kernel stores to another, and load a per-channel statistic once instead of once per element.
//
// Nothing from the loop IR's names reaches the source: parameters are b0, b1, ..., and
// local buffers (tN), variables (vN, one per binder) and reduction accumulators (rN) are
// numbered by the emitter; the kernel's own name is not used at all, so names that came from a model file cannot inject code. The emitted
// code computes exactly what loop/expr.h and loop/stmt.h define (prelude.h lists the helpers
// for the places where C++'s operators differ); the notable translations:
//  - f16 and bf16 values are held in float and rounded after every operation (exact: f32
//    carries more than twice their precision, so rounding twice is innocuous);
//  - Let expressions become GNU statement expressions (no captures, so loops around them
//    vectorize); Reduce expressions immediately invoked lambdas. Floating sums start from
//    -0.0, the identity that makes `acc + body(min)` equal body(min) for every value, and an
//    empty range returns the op's identity. A vectorized reduction keeps partial results in
//    an array of lanes updated by an `omp simd` loop (emitter.cc: emit_vectorized_reduce);
//  - select is kiln_select(c, a, b): both branches evaluated, as loop IR defines it, so the
//    compiler can blend vectors instead of branching;
//  - `parallel` loops become `#pragma omp parallel for` (only the outermost: nested ones run
//    serially inside it), `vectorized` ones `#pragma omp simd`, `unrolled` ones
//    `#pragma GCC unroll N`; `gpu_block` and `gpu_thread` loops (a GPU mapping, which runs on
//    the CPU for checking it) are plain serial loops;
//  - a gemm calls the prelude's kiln_gemm, which calls OpenBLAS's cblas_sgemm or cblas_dgemm
//    on row-major data (the kernel library links OpenBLAS: kernel_compiler.h). Inside a
//    parallel loop the OpenMP build of OpenBLAS runs each call on the calling thread; outside
//    one it uses the OpenMP threads the kernels share (one pool, no oversubscription);
//  - local allocations up to kMaxStackAllocationBytes live on the stack, larger ones on the
//    heap (std::unique_ptr), freed when their scope ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "loop/scratch.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::codegen::cpu {

using KernelFunction = void (*)(void* const* buffers);

// Larger local buffers are scratch parameters (loop/scratch.h) unless a parallel loop holds
// them (one per thread).
inline constexpr int64_t kMaxStackAllocationBytes = loop::kMaxKernelLocalBytes;

// "kiln_kernel_N": the symbol of the index-th kernel of a translation unit.
std::string kernel_symbol(size_t index);

// The prelude followed by one function per kernel, the i-th named kernel_symbol(i). Each
// kernel is verified first; an ill-formed one is an error naming its position.
Expected<std::string> emit_translation_unit(std::span<const loop::Kernel> kernels);

}  // namespace kiln::codegen::cpu
