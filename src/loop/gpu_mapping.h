// Mapping a lowered kernel onto a GPU: which statements become kernel launches, and how each
// launch spreads its loops over thread blocks and threads.
//
// The result is loop IR (so it prints, verifies, and runs on the evaluator and on the CPU back
// end, which is how the mapping is tested where there is no GPU): a kernel whose body is a
// sequence of *launches*, each either
//  - a gemm statement with constant sizes and offsets (a library or template GEMM call), or
//  - a `gpu_block` loop, possibly inside let statements that bind host values it reads (the
//    iteration of a loop the mapping unrolled on the host), whose body runs once per thread
//    block; `gpu_thread` loops inside it spread over the block's kGpuThreadsPerBlock threads
//    (loop/stmt.h states the semantics).
// Launches run in order, each after the previous one finished.
//
// How statements become launches. A statement that holds a gemm runs on the host: its loops
// are unrolled (each iteration's launches in turn), its lets and conditions evaluated, and
// every local buffer outside the launches becomes a scratch parameter in device memory
// (loop/scratch.h: promote_gpu_scratch). Nests that merge into one pass over their rows (the
// CPU default schedule's rule 0: a row reduction and the nests that read it) are merged first,
// so all of a layer norm or softmax is one launch, and host loops whose iterations are
// independent are distributed (loop/distribute_host_loops.h), so that a statement runs as one
// launch over all of them rather than one per iteration. Each other statement is one launch:
//  - Its *band* is the perfect nest of outer loops with constant extents whose iterations are
//    proven independent (loop/schedule_analysis.h); a let between two of them whose value has
//    no reduction (a channel's batch-norm scale) is computed at every band point instead.
//  - When what runs inside the band is a row's worth of work (at least kGpuThreadsPerBlock
//    loop iterations or reduction terms per band point, nested reductions' terms multiplying,
//    and its local buffers fit in shared memory), each band point is a thread block: the
//    inner loops whose iterations are independent become thread loops (with the independent
//    loops of constant extent nested in them, as one loop, so that neighbouring threads take
//    neighbouring elements), and the innermost reductions of each block-level value (not
//    inside a logical operator, and of at least kMinGpuBlockReductionTerms terms) are marked
//    `vectorized`, which a GPU code generator computes with all of the block's threads
//    (loop/expr.h: a vectorized reduction may combine its terms in any order); a reduction
//    around them runs in every thread in step. Local buffers of the row live in shared memory.
//    An inner loop that only adds across its iterations (below) is a thread loop too, its
//    adds atomic (max_pool_grad's rows of windows, each adding into its maximum's element).
//  - Otherwise each band point is a thread: the band is flattened into blocks of
//    kGpuThreadsPerBlock threads, and a thread runs everything inside the band serially.
//  - A statement whose outer loop only adds into buffers across its iterations (scatter_add's
//    rows, a sparse product's transpose: each store `b[i] = b[i] + v`, b read nowhere else)
//    takes that loop into its band when the iterations are otherwise independent, its adds
//    becoming atomic stores (loop/stmt.h), unless `options.atomics` is off: they then add in
//    any order, and floating sums differ by rounding from run to run.
//  - A statement with no band (a loop that accumulates in order, such as scatter_add without
//    atomics) runs in one block: its loops in order, the independent loops inside them spread over the block's
//    threads (a scatter_add of rows: each row's columns), with a barrier after each; on one
//    thread where its local buffers do not fit in shared memory.
//
//   for (i0, 0, 64) for (i1, 0, 128) out0[i0*128 + i1] = exp(in0[i0*128 + i1])
//     -> for (gpu_block, 0, 32) gpu_block { for (gpu_thread, 0, 256) gpu_thread {
//          let gpu_point = gpu_block * 256 + gpu_thread; if (gpu_point < 8192) {
//          let i0 = gpu_point / 128; let i1 = gpu_point % 128; out0[...] = ... } } }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loop/stmt.h"
#include "loop/tuning.h"  // kGpuThreadsPerBlock and the mapping's limits
#include "support/status.h"

namespace kiln::loop {

struct GpuMapping {
  Kernel kernel;                       // the lowered kernel's parameters, then scratch ones
  std::vector<int64_t> scratch_bytes;  // per scratch parameter
};

struct GpuMappingOptions {
  // Adds across the iterations of a loop as atomic stores (above); off, such a loop runs in
  // order and every run gives the same bits.
  bool atomics = true;
};

// `lowered` is an unscheduled kernel (serial loops), as loop/lower_group.h makes it. Errors
// name what cannot run on a GPU (a local buffer too large for a thread, too many launches).
Expected<GpuMapping> map_to_gpu(const Kernel& lowered, const GpuMappingOptions& options = {});

// The reductions of a mapped kernel that are computed again for each element a store writes:
// one in a stored value that depends on fewer of the store's index variables than the index
// does (a row statistic inside the element loop, where the mapping should have hoisted it and
// computed it once per row). Each is described in a line naming the store and the variables
// it is recomputed over. Empty for a good mapping.
std::vector<std::string> recomputed_reductions(const Kernel& mapped);

}  // namespace kiln::loop
