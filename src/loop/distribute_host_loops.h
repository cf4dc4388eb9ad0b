// Distributing the host loops of a GPU kernel, so that each of its statements runs as one
// launch over all iterations instead of one launch per iteration.
//
// A GPU runs the loops around a gemm on the host (loop/gpu_mapping.h): attention's loop over
// images and heads, say, runs a gemm into a local buffer and then the softmax that reads it,
// iteration after iteration, two launches each (bert-base: 4,608 launches per step). When the
// loop's iterations are independent, every instance of a statement may run before every
// instance of the next, so the loop is split into one loop per statement of its body (loop
// distribution). The local buffers the body allocates would then be shared by all
// iterations, so each is first expanded to one slice per iteration:
//
//   for (h, 0, 48) { allocate s: f32[16384] { gemm s[0] = q[h*8192] * k[h*8192]^T;
//                                              for (r, 0, 128) ... s[r*128 + c] ... } }
//     -> allocate s: f32[786432] { for (h, 0, 48) gemm s[h*16384] = q[h*8192] * k[h*8192]^T;
//                                  for (h, 0, 48) for (r, 0, 128) ... s[h*16384 + r*128 + c] ... }
//
// The gemm loop then unrolls into gemms of one size at a constant stride, which the CUDA
// emitter issues as one strided-batch launch, and the softmax loop is an ordinary nest whose
// band now includes h: one launch. Independence is proven by loop/schedule_analysis.h's
// check, with each gemm read as the loop nest it stands for. A loop is left whole when its
// bounds are not constants, when its body binds a value that loads memory (which the split
// would have to recompute or store), or when the expanded buffers would exceed
// kMaxGpuDistributedBytes (a convolution's column buffer times a large batch).
#pragma once

#include "loop/stmt.h"

namespace kiln::loop {

// `kernel` with its independent loops around gemms distributed, innermost first; a kernel
// without such loops is returned unchanged.
Kernel distribute_host_loops(const Kernel& kernel);

}  // namespace kiln::loop
