// The stages of the compiler pipeline as functions, each with a typed input and output.
// compiler/pipeline.h calls them in order, times them and shows their results; they are
// declared here so that each can be read, and tested, on its own.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "loop/lower_group.h"
#include "loop/stmt.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln {

// --- The graph stages: each rewrites the graph in place and says what it did. --------------

// The mixed-precision policy (passes/precision.h) for options.precision: casts inserted
// around the contractions the target computes in f16 or bf16 and the ops that stay in f32;
// nothing for fp32 and tf32.
Expected<PrecisionSummary> precision_stage(Graph& graph, const CompileOptions& options);
// The graph rewrites (passes/rewrite_graph.h).
Expected<RewriteReport> rewrite_stage(Graph& graph, const CompileOptions& options);
// The substitution search (compiler/substitute_by_cost.h); nullopt when it does not run (off,
// rewrites off, or fusion off: it prices graphs after fusion).
Expected<std::optional<SubstitutionSummary>> substitute_stage(Graph& graph,
                                                              const CompileOptions& options);
// Decomposition by cost (compiler/decompose_by_cost.h); no decisions when it does not run
// (disabled, fusion off: a composite's pieces would each be a kernel, or a target that keeps
// composites whole).
Expected<std::vector<DecompositionDecision>> decompose_stage(Graph& graph,
                                                             const CompileOptions& options);

// The layout stage: an inference graph's convolutions channels last (passes/channels_last.h)
// where the target computes them so (the CPU, through oneDNN); an empty report when it does
// not run (another target, rewrites or options.channels_last off, no convolutions).
Expected<ChannelsLastReport> layout_stage(Graph& graph, const CompileOptions& options);

// --- The partition. -------------------------------------------------------------------------

// The fusion partitioner's groups, or, when `given` is not empty, those groups as they are
// (nodes of `graph` in dependency order; unchecked, for tests that compile chosen groups).
Expected<fusion::Partition> partition_stage(const Graph& graph, const CompileOptions& options,
                                            std::span<const std::vector<Node*>> given);

// --- The back-end stages: the groups become a program. --------------------------------------

// A kernel's name in steps, errors and profiles: "exp #3", or "fused matmul+add+gelu #7".
std::string kernel_label(std::span<const Node* const> nodes);

// Every group lowered (loop/lower_group.h), in the partition's order; groups that store
// nothing (whose values nobody needs, or that give only views) are no kernel.
struct LoweredKernels {
  std::vector<KernelRecord> records;
  std::vector<loop::ViewOutput> views;
};
Expected<LoweredKernels> lower_stage(const Graph& graph, const fusion::Partition& partition);

// The target's schedule of every kernel (target/target.h): on the CPU, the default schedule for
// this machine (unless options.schedule is off); on a GPU target, the mapping onto the GPU,
// which also sizes its scratch buffers.
Status schedule_stage(std::vector<KernelRecord>& records, const CompileOptions& options);

// Local buffers too large for the target's local memory become scratch parameters in the arena
// (on the CPU, those too large for the stack: loop/scratch.h); the GPU mapping placed its own.
void scratch_stage(std::vector<KernelRecord>& records, const CompileOptions& options);

// Unless options.pack_weights is off, the target keeps the constant weights of its library
// calls packed in the library's layout (target/target.h: pack_weights). On the CPU, a gemm
// whose B is a weight compiled in as a constant keeps B packed in oneDNN's layout for this
// machine, made on the kernel's first run, in a state parameter of its own (loop/stmt.h:
// packed_b); a conv statement's constant weights likewise (packed_w).
void pack_weights_stage(std::vector<KernelRecord>& records, const CompileOptions& options);

// Numbers the distinct kernels of `records` (by their printed loop IR) in order of first use,
// sets each record's program_kernel, and returns the distinct kernels.
std::vector<loop::Kernel> share_kernels_stage(std::vector<KernelRecord>& records);

// --- Collectives: program steps of their own. -----------------------------------------------

// A collective node (ir/op.h: collective) and where its step goes: after the steps of the
// first `records_before` kernel records.
struct CollectiveCall {
  const Node* node = nullptr;
  size_t records_before = 0;
};

// The partition less its collectives, which the fusion rules leave each in a group of its own
// (fusion/rules.h): what lower_stage makes kernels of.
fusion::Partition kernel_groups(const fusion::Partition& partition);

// The partition's collectives placed among `records` (lower_stage's, from kernel_groups of the
// same partition) in the partition's order. An error for a collective that shares a group (a
// partition given to compile_groups) and for a target that runs no collectives (a GPU's needs
// NCCL, not yet).
Expected<std::vector<CollectiveCall>> place_collectives(const fusion::Partition& partition,
                                                        std::span<const KernelRecord> records,
                                                        const CompileOptions& options);

// The program: a step per kernel call, per collective and per output copy, each value's
// buffer, and the arena planned over the buffers' lifetimes.
struct PlannedProgram {
  runtime::Program program;
  std::vector<int> step_kernel_record;  // per step: its record, or -1 for a copy or collective
  int64_t arena_total_bytes = 0;
  int64_t arena_live_bound_bytes = 0;
};
Expected<PlannedProgram> plan_memory_stage(const Graph& graph,
                                           std::span<const KernelRecord> records,
                                           std::span<const CollectiveCall> collectives,
                                           std::span<const loop::ViewOutput> views,
                                           int num_kernels);

// The distinct kernels as the target's code (target/target.h: generate_code).
Expected<GeneratedCode> codegen_stage(std::span<const loop::Kernel> kernels,
                                      const CompileOptions& options);

}  // namespace kiln
