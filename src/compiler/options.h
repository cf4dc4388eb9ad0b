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
#include "passes/rewrite_graph.h"
#include "support/status.h"

namespace kiln {

// What the kernels are compiled for.
enum class Device : uint8_t {
  cpu,  // C++ for this CPU (the default schedule, OpenMP), compiled and loaded
  // CUDA for an NVIDIA GPU: each group mapped onto the GPU (loop/gpu_mapping.h), emitted as
  // CUDA C and compiled by NVRTC into a cubin (codegen/cuda), run by the CUDA executor
  // (runtime/cuda_executor.h); on a machine without a GPU, a compilation to read.
  cuda,
  // The GPU mapping's loop IR compiled for this CPU (GPU loops run serially): checks the
  // mapping against the interpreter on a machine without a GPU. Slow; for tests.
  cuda_mapping_on_cpu,
};

// "cpu", "cuda", "cuda-mapping-on-cpu".
Expected<Device> parse_device(std::string_view name);

// The pipeline's stages, in the order they run. The first five work on the graph, the rest
// turn its partition into a program.
enum class Stage : uint8_t {
  verify,         // the graph as given is well formed (ir/verifier.h)
  rewrite,        // graph rewrites (passes/rewrite_graph.h)
  substitute,     // the search over proved rules (compiler/substitute_by_cost.h)
  decompose,      // composites as primitives if cheaper (compiler/decompose_by_cost.h)
  layout,         // convolutions channels last on a CPU (passes/channels_last.h)
  partition,      // nodes into fused groups (fusion/partition.h)
  lower,          // each group to a loop-IR kernel (loop/lower_group.h)
  schedule,       // the default schedule (loop/default_schedule.h), or the GPU mapping
  scratch,        // large local buffers become arena parameters (loop/scratch.h)
  pack_weights,   // gemms keep a constant weight packed for this CPU (compiler/stages.h)
  share_kernels,  // groups of identical loop IR share one compiled kernel
  plan_memory,    // buffers, steps and the arena (runtime/program.h, runtime/memory_plan.h)
  codegen,        // C++ compiled and loaded, or CUDA compiled to a cubin
};

inline constexpr std::array<Stage, 13> kStages = {
    Stage::verify,  Stage::rewrite,      Stage::substitute,    Stage::decompose,
    Stage::layout,  Stage::partition,    Stage::lower,         Stage::schedule,
    Stage::scratch, Stage::pack_weights, Stage::share_kernels, Stage::plan_memory,
    Stage::codegen};

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
  Device device = Device::cpu;
  // On a GPU, no atomic adds (loop/gpu_mapping.h: GpuMappingOptions): every run gives the
  // same bits.
  bool deterministic = false;
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
  // On a CPU, gemms whose B is a weight compiled in as a constant keep it packed in the
  // library's layout from the first run on (compiler/stages.h: pack_weights_stage).
  bool pack_weights = true;
  // On a CPU, the convolutions of an inference graph compute channels last, through oneDNN's
  // direct convolutions (compiler/stages.h: layout_stage); off keeps them im2col and gemm.
  bool channels_last = true;
  // Compiler::compile loads a graph compiled before with the same options from the compilation
  // cache, and stores what it compiles there (compiler/compilation_cache.h; CPU and GPU).
  bool reuse_compilations = false;
  PipelineOptions pipeline;
};

}  // namespace kiln
