// Scratch parameters: a kernel's large local buffers, handed to it by the caller instead of
// allocated on every call.
//
// A local buffer in generated code is memory the kernel allocates when it runs. Small ones
// live on the stack; a large one (a fused group's 25 MiB intermediate, a convolution's column
// buffer) comes from the heap, whose allocator returns it to the operating system when it
// is freed, so every call pays for fresh pages: a page fault and the zeroing of every page
// (clear_page took a large share of a ResNet-50 training step, docs/benchmarks.md).
// promote_scratch turns each such allocation into a *scratch parameter* after the kernel's
// others, which the runtime places in its planned arena (live for that one step), touched
// once and reused on every run; the memory plan then also counts these bytes, which it did
// not see before.
//
//   allocate t0: f32[6422528] in local { ... t0[i] ... }
//     -> kernel(..., t0: f32[6422528]) { ... t0[i] ... }
//
// Allocations inside a parallel loop stay local: each thread needs its own copy. One inside a
// serial loop is hoisted out of it by the promotion (its contents never outlive an iteration:
// an allocation starts uninitialised, so no kernel reads what an earlier iteration left).
#pragma once

#include <cstdint>
#include <vector>

#include "loop/stmt.h"
#include "loop/tuning.h"  // kMaxKernelLocalBytes

namespace kiln::loop {

// Local buffers larger than kMaxKernelLocalBytes outside every parallel loop become
// parameters appended to kernel.params, in order of appearance, keeping their names; the
// result is verified. `scratch` receives their sizes in bytes.
Kernel promote_scratch(const Kernel& kernel, std::vector<int64_t>& scratch);

// For a GPU (loop/gpu_mapping.h): every local buffer outside the loops that run inside one
// launch (those without a gemm) becomes a scratch parameter, whatever its size: the launches
// that share it reach it in device memory.
Kernel promote_gpu_scratch(const Kernel& kernel, std::vector<int64_t>& scratch);

// The bytes of scratch promote_scratch would give `kernel` (for the fusion partitioner's
// memory bound, which counts a kernel's scratch in the arena during its step).
int64_t scratch_bytes(const Kernel& kernel);

}  // namespace kiln::loop
