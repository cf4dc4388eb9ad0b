// Kiln's public API: compile a graph for this machine's CPU, or for its NVIDIA GPU
// (CompileOptions::device), and run it.
//
//   kiln::Compiler compiler;                                  // default options
//   kiln::Expected<kiln::CompiledModel> model = compiler.compile(std::move(graph));
//   if (!model) { report(model.status()); }
//   kiln::Expected<std::vector<kiln::Array>> outputs = model->run(inputs);
//
// `compile` runs the whole pipeline (compiler/pipeline.h); `run_pipeline` runs it as far as the
// options say (PipelineOptions::stop_after) and returns what it made, for reading: the rewritten
// graph, the partition, loop IR, the program or the generated code (a CUDA compilation made on a
// machine without a GPU is read this way).
//
// A CompiledModel owns its graph, its loaded kernels and its arena (on a GPU: the device's, with
// the constants resident; runtime/cuda_executor.h). `run` takes and returns Arrays (encoding
// them to each dtype's bytes); `run_raw` takes the caller's own memory, laid out as the kernel
// ABI says (codegen/cpu/emitter.h), and copies nothing on a CPU (a GPU copies it to the device
// and back). Runs of one model
// must not overlap: they share the arena. `check` runs kernel by kernel against the reference
// evaluation and names the first kernel that disagrees.
//
// A training step (autodiff/training_step.h: the loss first, then the updated parameters and
// state) compiles with `compile_training_step` into a CompiledTrainingStep, which holds it
// twice: the full step, and the step without its loss (passes/eliminate_loss.h), which a
// training loop runs between the steps whose loss it logs. The two share one arena.
//
// The types it speaks (Graph, Array, Status, Program) are Kiln's own, from the libraries
// under src/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/run.h"
#include "ir/array.h"
#include "ir/graph.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln {

// What the pipeline made of a graph: the graph as the graph stages left it, and the
// compilation, complete or up to the stage it stopped after.
class Compilation {
 public:
  const Graph& graph() const { return *graph_; }
  const CompiledGraph& compiled() const { return *compiled_; }

 private:
  friend class Compiler;
  Compilation(std::unique_ptr<Graph> graph, std::unique_ptr<CompiledGraph> compiled)
      : graph_(std::move(graph)), compiled_(std::move(compiled)) {}

  // Held by pointer so that moving keeps the addresses the compilation refers to.
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<CompiledGraph> compiled_;
};

class CompiledModel {
 public:
  const Graph& graph() const { return *graph_; }
  const runtime::Program& program() const { return *compiled_->program; }
  const CompiledGraph& compiled() const { return *compiled_; }
  const CompileStats& stats() const { return compiled_->stats; }
  // Where it runs: "this CPU", or the GPU and what runs its gemms (runtime/executor.h).
  std::string runs_on() const { return executor_->description(); }

  // One Array per graph input, of its exact type; the graph outputs.
  Expected<std::vector<Array>> run(std::span<const Array> inputs,
                                   runtime::Profile* profile = nullptr);
  // One pointer per graph input and output, each to its tensor's bytes. With `io_on_device`,
  // a GPU run reuses the inputs an earlier run copied and leaves its outputs on the device;
  // `arena`, on the CPU, is the caller's memory for the intermediates (runtime/executor.h:
  // RunHooks).
  Status run_raw(std::span<const void* const> inputs, std::span<void* const> outputs,
                 runtime::Profile* profile = nullptr, bool io_on_device = false,
                 void* arena = nullptr);
  // Whether it was compiled for the GPU (CompileOptions::device).
  bool on_gpu() const { return compiled_->cuda.has_value(); }
  // A GPU model's run on the caller's device memory, in order with the caller's CUstream,
  // returning before the GPU finishes (runtime/cuda_executor.h: run_on_stream): one device
  // address per graph input and output, and the arena's (0: the executor's own). An error for
  // a model compiled for the CPU.
  Status run_on_stream(std::span<const uint64_t> inputs, std::span<const uint64_t> outputs,
                       void* stream, uint64_t arena = 0);
  Expected<CheckReport> check(std::span<const Array> inputs);

  // Which of `candidates`, (output, input) pairs, may run with the output at the input's
  // address: a training step's new parameters and optimizer state written over the old, so
  // that the caller holds them once (compiler/in_place.h says when the program allows it).
  // Later runs may pass the outputs of the pairs it returns so; once it allowed any, any other
  // output at an input's address is refused, since the program may read the input after
  // writing there.
  std::vector<std::pair<int64_t, int64_t>> allow_in_place(
      std::span<const std::pair<int64_t, int64_t>> candidates);

  // The generated C++ of every kernel, in one translation unit.
  Expected<std::string> source() const { return kernel_source(*compiled_); }

 private:
  friend class Compiler;
  CompiledModel(std::unique_ptr<Graph> graph, std::unique_ptr<CompiledGraph> compiled,
                std::unique_ptr<runtime::ProgramExecutor> executor)
      : graph_(std::move(graph)), compiled_(std::move(compiled)),
        executor_(std::move(executor)) {}

  Status check_no_overlap(std::span<const uint64_t> inputs,
                          std::span<const uint64_t> outputs) const;

  // Held by pointer so that moving the model keeps the addresses the compiled code and the
  // executor refer to.
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<CompiledGraph> compiled_;
  std::unique_ptr<runtime::ProgramExecutor> executor_;
  std::vector<std::pair<int64_t, int64_t>> in_place_;  // allowed by allow_in_place
};

class CompiledTrainingStep {
 public:
  // The step's outputs; with_loss = false runs the loss-free variant, whose outputs are the
  // full step's without the first (computed by the full step where loss elimination is off).
  Expected<std::vector<Array>> run(std::span<const Array> inputs, bool with_loss);

  CompiledModel& full_step() { return full_; }
  // Null when compiled with loss elimination off.
  CompiledModel* loss_free_step() { return loss_free_ ? &*loss_free_ : nullptr; }
  int loss_nodes_eliminated() const { return loss_nodes_eliminated_; }

 private:
  friend class Compiler;
  CompiledTrainingStep(CompiledModel full, std::optional<CompiledModel> loss_free,
                       int loss_nodes_eliminated)
      : full_(std::move(full)), loss_free_(std::move(loss_free)),
        loss_nodes_eliminated_(loss_nodes_eliminated) {}

  CompiledModel full_;
  std::optional<CompiledModel> loss_free_;
  int loss_nodes_eliminated_ = 0;
};

class Compiler {
 public:
  explicit Compiler(CompileOptions options = {}) : options_(std::move(options)) {}

  // Compiles `graph` through every stage of the pipeline: verifies it, applies the graph
  // rewrites the options enable (the model's graph() is the rewritten graph, with the same
  // inputs and outputs), fuses it as the options say (by default, the partition of least
  // estimated time on this machine), and loads the code for this CPU (or, with
  // options.device, for the GPU). With
  // options.reuse_compilations, a graph compiled before comes from the compilation cache
  // (compiler/compilation_cache.h): its graph() is then the graph as given, and its compiled()
  // holds the program and kernels but no records (so check() needs a fresh compile).
  Expected<CompiledModel> compile(Graph graph) const;

  // The pipeline up to options.pipeline.stop_after (every stage when unset).
  Expected<Compilation> run_pipeline(Graph graph) const;

  // Compiles a training step whose first output is its loss (a floating scalar): the full step
  // and, when `eliminate_loss`, the step without the loss, each as `compile` does.
  Expected<CompiledTrainingStep> compile_training_step(Graph step,
                                                       bool eliminate_loss = true) const;

 private:
  Expected<std::optional<CompiledModel>> load_cached(const std::string& key, Graph& graph) const;

  CompileOptions options_;
};

}  // namespace kiln
