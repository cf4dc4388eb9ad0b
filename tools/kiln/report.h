// What the commands print about a compilation and its runs: the graph stages' report, the
// compile summary, per-kernel profiles and the fusion profile.
#pragma once

#include <string>

#include "compiler/compiled_graph.h"
#include "driver/timing.h"
#include "runtime/executor.h"
#include "runtime/program.h"

namespace kiln::cli {

// "graph rewrites: 917 -> 842 nodes; fold-constants, fold-layout (2 rounds), ...", then the
// substitution search's path and the decomposition decisions, a line each.
std::string format_rewrites(const GraphRewrites& rewrites);

// The graph stages' report, the partition (kernels and estimate), the compile time and the
// arena, as far as the compilation went.
void print_compile_summary(const CompiledGraph& compiled);

// The kernels a compilation runs per step: its partition's, or for a compilation loaded from
// the cache (which keeps no partition) its program's kernel steps.
int kernel_calls(const CompiledGraph& compiled);

// Per-kernel times of `profile`, largest first.
void print_profile(const runtime::Program& program, const runtime::Profile& profile);

// The fused program's kernels against the unfused time of their nodes (driver/timing.h), the
// ones fusion made slower first, and the bound the contractions put on any partition.
void print_fusion_profile(const FusionProfile& profile, const runtime::Program& fused);

}  // namespace kiln::cli
