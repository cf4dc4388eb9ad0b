// The tuning constants of loop lowering, weight packing, scheduling and GPU mapping, in one
// place. Each is a size or threshold that decides how a kernel runs, not what it computes:
// changing one changes the generated loops (block sizes, which loops run in parallel, what is
// batched) and never a result. Where a measurement set a value, docs/benchmarks.md ("Tuning
// constants") records it; code comments say only what a constant controls and why.
#pragma once

#include <cstdint>

namespace kiln::loop {

// --- Lowering (loop/lowering/gemm.h, loop/lower_conv.h) -----------------------------------

// A matmul product with epilogues of at most this many bytes is computed by one gemm call.
inline constexpr int64_t kWholeProductBytes = int64_t{16} << 20;
// Bytes of C per gemm call when a larger product with epilogues is cut into row blocks.
inline constexpr int64_t kGemmBlockBytes = int64_t{4} << 20;
// The fewest rows of C in such a block.
inline constexpr int64_t kMinGemmBlockRows = 256;
// A batched matmul whose matrices each take at most this many multiply-adds runs its
// matrices in parallel, a whole gemm and its epilogues per thread at a time: so small a
// product (attention's scores, 128 x 128 x 64) cannot keep the library's threads busy.
inline constexpr int64_t kParallelBatchMaxGemmWork = int64_t{1} << 22;
// A convolution with fewer output positions per image runs one gemm over the whole batch.
inline constexpr int64_t kBatchColumnsBelow = 256;
// The largest column buffer, in bytes, of such a batched convolution.
inline constexpr int64_t kMaxBatchColumnBytes = int64_t{64} << 20;
// A 1-D convolution at stride 1 with at least this many input channels per group runs one
// gemm per kernel tap over its padded input instead of one over a column buffer: each tap's
// gemm then has this many as its depth.
inline constexpr int64_t kTapGemmsFromChannels = 64;

// --- Packed weights (compiler/stages.h: pack_weights_stage) ------------------------------

// The most rows of a gemm that keeps its constant B packed.
inline constexpr int64_t kPackedGemmMaxRows = 512;
// The fewest multiply-adds of a gemm that keeps its constant B packed.
inline constexpr int64_t kPackedGemmMinWork = int64_t{1} << 24;

// --- Scheduling (loop/default_schedule.h, loop/schedule.h, loop/scratch.h) -----------------

// The fewest operations in a nest for the default schedule to run it on several cores.
inline constexpr int64_t kMinParallelWork = 16 * 1024;
// Parallel iterations the default schedule aims for per core.
inline constexpr int64_t kIterationsPerCore = 4;
// Simple operations one math-library call (exp, erf, tanh, ...) counts as in a nest's work.
inline constexpr int64_t kMathCallWork = 16;
// The most columns one block of accumulated column reductions holds.
inline constexpr int64_t kMaxAccumulatedColumns = 1024;
// The most copies of a loop body an unroll directive may make.
inline constexpr int64_t kMaxUnroll = 1024;
// The most elements a cache directive may stage.
inline constexpr int64_t kMaxCacheElements = int64_t{1} << 24;
// Local buffers up to this many bytes stay in the kernel; larger ones may become scratch.
inline constexpr int64_t kMaxKernelLocalBytes = 16 * 1024;

// --- GPU mapping (loop/gpu_mapping.h, loop/distribute_host_loops.h) --------------------

// Threads in each block of a mapped kernel.
inline constexpr int64_t kGpuThreadsPerBlock = 256;
// Static shared memory a block may use (the CUDA limit without opting in to more).
inline constexpr int64_t kMaxGpuSharedBytes = 48 * 1024;
// A thread's local buffers above this size are an error rather than slow local memory.
inline constexpr int64_t kMaxGpuThreadLocalBytes = 16 * 1024;
// A block-level reduction of fewer constant terms is computed by each thread, not the block.
inline constexpr int64_t kMinGpuBlockReductionTerms = 32;
// The most launches host loops may be unrolled into for one kernel.
inline constexpr int64_t kMaxGpuLaunchesPerKernel = 4096;
// The most bytes the local buffers of a loop around a gemm may grow to when the loop is
// distributed (one slice per iteration, loop/distribute_host_loops.h).
inline constexpr int64_t kMaxGpuDistributedBytes = int64_t{256} << 20;

}  // namespace kiln::loop
