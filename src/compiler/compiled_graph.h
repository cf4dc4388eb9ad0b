// What the compiler pipeline (compiler/pipeline.h) makes of a graph: the reports of the graph
// stages, the partition, a record per kernel, the program and its compiled code.
//
// Each group of nodes becomes one kernel, and the values between kernels get buffers: the
// caller's memory for graph inputs and outputs, a constant segment for `constant` nodes, and
// one planned arena for everything else. A reshape whose input is in memory anyway is a view
// (loop/lower_group.h: ViewOutput) with no bytes of its own, and a group that gives only views
// is no kernel. Constant nodes are never kernels: their values are encoded once into the
// program's constant segment.
//
// Arena buffers live from the step that writes them to the last step that reads them (a
// kernel's scratch buffers for its own step), and runtime/memory_plan.h packs them; graph
// outputs are written by their kernels straight into the caller's memory. A graph output that
// is a graph input, a constant, or an output listed twice gets a copy step.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "compiler/options.h"
#include "fusion/partition.h"
#include "ir/graph.h"
#include "loop/schedule.h"
#include "loop/schedule_search.h"
#include "loop/stmt.h"
#include "passes/channels_last.h"
#include "passes/rewrite_graph.h"
#include "runtime/cuda_launch.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln {

// Whether a kind of composite (a DecompositionUnit, passes/decompose.h) was decomposed, and the
// estimates that decided it.
struct DecompositionDecision {
  std::string unit;
  int nodes = 0;                  // the composites of that kind in the graph
  double seconds_composite = 0;   // estimated time of the partition with them whole
  double seconds_decomposed = 0;  // and decomposed
  bool decomposed = false;
};

// A step of the substitution search's path (subst/search.h: AppliedRewrite), with the
// partitioner's estimates before and after.
struct SubstitutionStep {
  std::string rule;
  int applications = 1;
  double seconds_before = 0;
  double seconds_after = 0;
};

// What the substitution search did: its path from the graph to the best one it found.
struct SubstitutionSummary {
  std::vector<SubstitutionStep> steps;
  int rules = 0;                   // proved rules searched with
  int expanded = 0;                // graphs expanded
  int priced = 0;                  // graphs partitioned to estimate their cost
  int alike = 0;                   // matches not priced, for one alike was (subst/search.h)
  bool stopped_at_limit = false;   // at the most expansions allowed
  bool stopped_at_time = false;    // at the time budget
  bool stopped_at_priced = false;  // at the most graphs priced
  double seconds = 0;
};

// What the graph stages did, for `kiln explain`.
struct GraphRewrites {
  PrecisionSummary precision;                         // the precision stage
  RewriteReport passes;                               // the rewrite stage
  std::optional<SubstitutionSummary> substitution;    // the substitute stage, when it searched
  std::vector<DecompositionDecision> decompositions;  // the decompose stage
  ChannelsLastReport channels_last;                   // the layout stage
  int nodes_after = 0;                                // after all of them
};

// Per group: the nodes it computes and its lowered (and scheduled) loop IR; parameter i of
// the kernel is bound to the group's inputs, then its outputs, then its scratch buffers
// (loop/scratch.h: local buffers too large for the stack, which the program places in the
// arena for the kernel's step). Groups whose loop IR is identical (the same op on the same
// shapes, as in the repeated layers of a transformer) share one compiled kernel,
// `program_kernel`: loop IR names are Kiln's own and deterministic, so equal text means equal
// code.
struct KernelRecord {
  std::vector<const Node*> nodes;
  loop::Schedule schedule;    // the directives applied to the lowered kernel (on a CPU)
  loop::SearchReport search;  // how the schedule was chosen (on a CPU)
  loop::Kernel kernel;        // lowered, then scheduled (or mapped onto a GPU)
  int program_kernel = 0;
  std::vector<const Value*> inputs;
  std::vector<const Value*> outputs;
  std::vector<int64_t> scratch_bytes;  // per scratch parameter
  std::vector<int64_t> state_bytes;    // per state parameter (a packed weight), after scratch
};

struct CompileStats {
  int units = 0;                  // translation units
  int units_compiled = 0;         // of which the compiler ran; the rest came from the cache
  int64_t arena_total_bytes = 0;  // the sum of every arena buffer: what no planning would cost
  int64_t arena_live_bound_bytes = 0;
};

// A compilation for a CUDA device: the CUDA C of every program kernel, its cubin, and the
// launches that run program kernel k (launches[k]).
struct CudaCompiled {
  std::string source;
  std::string cubin;
  std::string architecture;
  runtime::CudaKernelLaunches launches;
};

// The distinct kernels as code (target/target.h: generate_code): C++ compiled through the
// cache and loaded (the CPU, and the CUDA mapping on it), or CUDA C compiled by NVRTC to a
// cubin with its launches (CUDA).
struct GeneratedCode {
  codegen::cpu::CompiledKernels cpu;
  std::optional<CudaCompiled> cuda;
  int units = 0;
  int units_compiled = 0;
};

// Everything compiled from one graph. It points into the graph, which must outlive it. A
// compilation stopped after a stage (PipelineOptions::stop_after) holds what the stages up to
// `last_stage` made; the rest is empty.
struct CompiledGraph {
  GraphRewrites rewrites;             // the graph stages'
  fusion::Partition partition;        // the groups and why
  std::vector<KernelRecord> records;  // per group that computes something
  std::shared_ptr<const runtime::Program> program;
  std::vector<int> step_kernel_record;    // per step: its record, or -1 (copy, collective)
  codegen::cpu::CompiledKernels kernels;  // program kernel k is kernels.function(k) (CPU)
  std::optional<CudaCompiled> cuda;       // for a CUDA device, instead of `kernels`
  CompileStats stats;
  std::vector<std::pair<Stage, double>> stage_seconds;  // each stage run, in order
  std::optional<Stage> last_stage;                      // the last stage run
  // Set when loaded from the compilation cache (compiler/compilation_cache.h): the partition's
  // explanation as the compilation that stored it wrote it. The graph stages' reports, the
  // partition and the records are then empty.
  std::optional<std::string> cached_explanation;
  // Set when loaded from the compilation cache: program kernel k's loop IR, as scheduled (or
  // mapped onto a GPU), which the records hold otherwise.
  std::vector<loop::Kernel> cached_kernels;

  // The time the stages among `stages` took.
  double seconds_in(std::initializer_list<Stage> stages) const;
  // Program kernel k's loop IR, from its first record or the cache; null where neither has it.
  std::vector<const loop::Kernel*> program_kernels() const;
};

// The C++ source of every program kernel in one translation unit, kernel k as kiln_kernel_k
// (the cache compiles them in smaller units; the code is the same); for a CUDA device, the
// CUDA C NVRTC compiled.
Expected<std::string> kernel_source(const CompiledGraph& compiled);

}  // namespace kiln
