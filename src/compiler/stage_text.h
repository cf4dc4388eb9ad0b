// The text of what the pipeline's back-end stages made, shared by --dump-after and the files
// `kiln compile` writes: the loop IR of kernels, the program, and the CUDA launches. Loop IR
// text parses back (loop/parser.h): what is not loop IR is in `//` comments.
#pragma once

#include <span>
#include <string>

#include "compiler/compiled_graph.h"

namespace kiln {

// Every kernel call's loop IR, in order, each after a comment naming its nodes.
std::string kernel_calls_text(std::span<const KernelRecord> records);

// Every distinct kernel's loop IR once, after a comment naming the kernel calls that run it
// (the share-kernels stage's result).
std::string shared_kernels_text(std::span<const loop::Kernel> kernels,
                                std::span<const KernelRecord> records);

// Every distinct program kernel's loop IR once, in order, each after a comment with its
// number and, where it was scheduled, its schedule's directives (kernels.loop).
std::string program_kernels_text(const CompiledGraph& compiled);

// The program (buffers, arena offsets, steps) and, per kernel call, the kernel and the nodes
// it computes (plan.txt).
std::string plan_text(const CompiledGraph& compiled);

// Per kernel call, how its schedule was chosen (loop/schedule_search.h): searched, from the
// cache, or the default and why; its estimated and measured time beside the default's; its
// directives; and any candidate that computed something else (kiln explain --schedules).
std::string schedules_text(std::span<const KernelRecord> records);

// Per program kernel, its GPU launches: the function, grid and block (CUDA devices).
std::string cuda_launches_text(const CompiledGraph& compiled);

}  // namespace kiln
