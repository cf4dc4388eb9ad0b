// What a compilation is asked to do: the device, each stage's options, and what the pipeline
// (compiler/pipeline.h) shows of itself along the way.
//
// The stages are named here, in the order they run, so that options, the command line
// (--dump-after, --time-stages, --stop-after) and the pipeline speak of the same list.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "codegen/cpu/kernel_compiler.h"
#include "codegen/cuda/nvrtc_compiler.h"
#include "fusion/partition.h"
#include "loop/schedule_search.h"
#include "passes/precision.h"
#include "passes/rewrite_graph.h"
#include "support/status.h"
#include "target/device.h"

namespace kiln {

// The pipeline's stages, in the order they run: the one list from which the Stage enum,
// kStages and the stages' names come, and against which the docs test checks the docs' lists
// of them (tests/docs/check_references.py). The first six work on the graph, the rest turn
// its partition into a program; compiler/stages.h says what each does. X(identifier, name).
#define KILN_STAGES(X)                                                        \
  X(verify, "verify")               /* the graph is well formed */            \
  X(precision, "precision")         /* the mixed-precision policy's casts */  \
  X(rewrite, "rewrite")             /* graph rewrites */                      \
  X(substitute, "substitute")       /* the search over proved rules */        \
  X(decompose, "decompose")         /* composites as primitives if cheaper */ \
  X(layout, "layout")               /* convolutions channels last */          \
  X(partition, "partition")         /* nodes into fused groups */             \
  X(lower, "lower")                 /* each group to a loop-IR kernel */      \
  X(schedule, "schedule")           /* the schedule, or the GPU mapping */    \
  X(scratch, "scratch")             /* large local buffers to the arena */    \
  X(pack_weights, "pack-weights")   /* constant weights kept packed */        \
  X(share_kernels, "share-kernels") /* identical kernels compiled once */     \
  X(plan_memory, "plan-memory")     /* buffers, steps and the arena */        \
  X(codegen, "codegen")             /* the target's code, compiled */

enum class Stage : uint8_t {
#define KILN_STAGE_ENUMERATOR(identifier, name) identifier,
  KILN_STAGES(KILN_STAGE_ENUMERATOR)
#undef KILN_STAGE_ENUMERATOR
};

inline constexpr std::array kStages = {
#define KILN_STAGE_ELEMENT(identifier, name) Stage::identifier,
    KILN_STAGES(KILN_STAGE_ELEMENT)
#undef KILN_STAGE_ELEMENT
};

// "verify", "rewrite", ..., "share-kernels", "plan-memory", "codegen".
std::string_view stage_name(Stage stage);
Expected<Stage> parse_stage(std::string_view name);

// What the pipeline shows of itself.
struct PipelineOptions {
  // After each of these stages, its result in text: the graph (graph stages), the partition
  // explained, every kernel's loop IR, the program, or the generated code.
  std::set<Stage> dump_after = {};
  bool time_stages = false;  // one line per stage with its wall time
  // Stop after this stage: the compilation then holds what the stages up to it made.
  std::optional<Stage> stop_after = std::nullopt;
  // Where dumps and stage times are written; standard error when empty.
  std::function<void(std::string_view)> print = nullptr;
};

// The substitution search (compiler/substitute_by_cost.h), after the graph rewrites and before
// decomposition, within its expansion limit and time budget. It runs only with rewrites on and
// fusion on (it prices graphs after fusion).
struct SubstitutionOptions {
  bool enabled = true;
  int max_expansions = 8;
  // The search's budget: at most `max_priced` graphs priced, each a partition of the whole
  // graph, so the budget's time grows with the graph, and never more than `max_seconds`.
  // Matches alike are priced once (subst/search.h), so the pricings a search needs do not grow
  // with a model's layers.
  int max_priced = 32;
  double max_seconds = 60;
};

struct CompileOptions {
  // What the kernels are compiled for, and where they run (target/device.h).
  Device device;
  // On a GPU, no atomic adds (loop/gpu_mapping.h: GpuMappingOptions): every run gives the
  // same bits.
  bool deterministic = false;
  // The precision the graph computes in (passes/precision.h): fp32 as it is written; bf16 and
  // fp16 cast contractions down and sums, normalizations and losses up, by each op's policy;
  // tf32 leaves the dtypes; on a GPU its f32 gemms run in TF32 (runtime/cuda_launch.h:
  // CudaGemm::tf32), on the CPU as fp32.
  Precision precision = Precision::fp32;
  codegen::cpu::CpuCompileOptions cpu;
  codegen::cuda::NvrtcOptions cuda;
  // The graph rewrites Compiler::compile runs before partitioning.
  RewriteOptions rewrites;
  SubstitutionOptions substitution;
  // Which nodes share a kernel (fusion/partition.h): by default the integer program over
  // this machine's cost model; FusionMode::off gives one kernel per node.
  fusion::FusionOptions fusion;
  // Apply the default schedule (loop/default_schedule.h) to every kernel; off leaves the
  // lowered loop nests serial, for comparing or bisecting.
  bool schedule = true;
  // On a CPU, each kernel's schedule chosen by the schedule search (loop/schedule_search.h)
  // within the mode's budget, from the schedule cache when it searched the kernel before;
  // off keeps the default schedule.
  loop::SearchMode schedule_search = loop::SearchMode::off;
  // On a CPU, gemms whose B is a weight compiled in as a constant keep it packed in the
  // library's layout from the first run on (compiler/stages.h: pack_weights_stage).
  bool pack_weights = true;
  // On a CPU, the convolutions of an inference graph compute channels last, through oneDNN's
  // direct convolutions (compiler/stages.h: layout_stage); off keeps them im2col and gemm.
  bool channels_last = true;
  // Compiler::compile loads a graph compiled before with the same options from the compilation
  // cache, and stores what it compiles there (compiler/compilation_cache.h; CPU and GPU);
  // never while `pipeline` times, dumps or stops after stages. The CLI's run, bench and zoo
  // train and the Python backend set it.
  bool reuse_compilations = false;
  PipelineOptions pipeline;
};

}  // namespace kiln
