// Scratch parameters: a kernel's large local buffers, handed to it by the caller instead of
// allocated on every call.
//
// A local buffer in generated code is memory the kernel allocates when it runs. Small ones
// live on the stack; a large one (a fused group's 25 MiB intermediate, a convolution's column
// buffer) comes from the heap, whose allocator returns it to the operating system when it
// is freed, so every call pays for fresh pages: a page fault and the zeroing of every page
// (clear_page was 13% of a ResNet-50 training step's time). promote_scratch turns each such
// allocation into a *scratch parameter* after the kernel's others, which the runtime places in
// its planned arena (live for that one step), touched once and reused on every run; the
// memory plan then also counts these bytes, which it did not see before.
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

namespace kiln::loop {

// Local buffers of at least `min_bytes` outside every parallel loop become parameters
// appended to kernel.params, in order of appearance, keeping their names; the result is
// verified. `scratch` receives their sizes in bytes.
Kernel promote_scratch(const Kernel& kernel, int64_t min_bytes, std::vector<int64_t>& scratch);

}  // namespace kiln::loop
