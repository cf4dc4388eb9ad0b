#include "compiler/compilation_cache.h"
#include "kiln/kiln.h"
#include "passes/eliminate_loss.h"
#include "runtime/cuda_executor.h"
#include "target/target.h"

namespace kiln {

// A cached compilation with its kernels loaded (from the kernel cache, normally), or nullopt
// when the cache has none for the key.
Expected<std::optional<CompiledModel>> Compiler::load_cached(const std::string& key,
                                                             Graph& graph) const {
  std::optional<CachedCompilation> cached = load_compilation(key);
  if (!cached) return std::optional<CompiledModel>();
  auto compiled = std::make_unique<CompiledGraph>();
  compiled->program = std::make_shared<const runtime::Program>(std::move(cached->program));
  if (cached->cuda) {
    compiled->cuda = std::move(cached->cuda);
  } else {
    KILN_ASSIGN_OR_RETURN(compiled->kernels,
                          codegen::cpu::compile_kernels(cached->kernels, options_.cpu));
    compiled->stats.units = compiled->kernels.units();
    compiled->stats.units_compiled = compiled->kernels.units_compiled();
  }
  compiled->last_stage = Stage::codegen;
  compiled->cached_explanation = std::move(cached->explanation);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ProgramExecutor> executor,
                        target_of(options_).make_executor(*compiled, options_.device));
  return std::optional<CompiledModel>(CompiledModel(std::make_unique<Graph>(std::move(graph)),
                                                    std::move(compiled), std::move(executor)));
}

Expected<Compilation> Compiler::run_pipeline(Graph graph) const {
  auto owned = std::make_unique<Graph>(std::move(graph));
  KILN_ASSIGN_OR_RETURN(CompiledGraph compiled, kiln::run_pipeline(*owned, options_));
  return Compilation(std::move(owned), std::make_unique<CompiledGraph>(std::move(compiled)));
}

Expected<CompiledModel> Compiler::compile(Graph graph) const {
  std::optional<std::string> key;
  // Timing, dumping or stopping after the stages asks to watch them run, which loading skips.
  const PipelineOptions& watched = options_.pipeline;
  const bool watches_stages =
      watched.time_stages || !watched.dump_after.empty() || watched.stop_after.has_value();
  if (options_.reuse_compilations && !watches_stages) {
    // The cache only saves time: a key that cannot be made (Kiln's own binary unreadable)
    // means compiling as without it.
    Expected<std::optional<std::string>> made = compilation_key(graph, options_);
    if (made) key = std::move(*made);
    if (key) {
      KILN_ASSIGN_OR_RETURN(std::optional<CompiledModel> cached, load_cached(*key, graph));
      if (cached) return std::move(*cached);
    }
  }
  KILN_ASSIGN_OR_RETURN(Compilation compilation, run_pipeline(std::move(graph)));
  std::unique_ptr<CompiledGraph>& compiled_graph = compilation.compiled_;
  if (compiled_graph->last_stage != Stage::codegen) {
    return Status::errorf(
        "the pipeline stopped after stage {} (--stop-after): there is no "
        "program to run",
        stage_name(*compiled_graph->last_stage));
  }
  // A cache that cannot be written (a read-only disk) costs only the next compile its time. The
  // compilation is complete before its executor is made, so it is stored first: a GPU
  // compilation made where no GPU runs it is stored too, for a later run where one does.
  if (key) (void)store_compilation(*key, *compilation.graph_, *compiled_graph);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ProgramExecutor> executor,
                        target_of(options_).make_executor(*compiled_graph, options_.device));
  return CompiledModel(std::move(compilation.graph_), std::move(compiled_graph),
                       std::move(executor));
}

Expected<CompiledTrainingStep> Compiler::compile_training_step(Graph step,
                                                               bool eliminate_loss) const {
  std::optional<CompiledModel> loss_free;
  int eliminated = 0;
  if (eliminate_loss) {
    Graph without_loss = step.clone();
    KILN_ASSIGN_OR_RETURN(eliminated, kiln::eliminate_loss(without_loss));
    KILN_ASSIGN_OR_RETURN(CompiledModel compiled, compile(std::move(without_loss)));
    loss_free.emplace(std::move(compiled));
  }
  KILN_ASSIGN_OR_RETURN(CompiledModel full, compile(std::move(step)));
  if (loss_free) full.executor_->share_arena(*loss_free->executor_);
  return CompiledTrainingStep(std::move(full), std::move(loss_free), eliminated);
}

Expected<std::vector<Array>> CompiledTrainingStep::run(std::span<const Array> inputs,
                                                       bool with_loss) {
  if (with_loss || !loss_free_) {
    KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, full_.run(inputs));
    if (!with_loss) outputs.erase(outputs.begin());
    return outputs;
  }
  return loss_free_->run(inputs);
}

Expected<std::vector<Array>> CompiledModel::run(std::span<const Array> inputs,
                                                runtime::Profile* profile) {
  return run_compiled(*graph_, *executor_, inputs, {.profile = profile});
}

Status CompiledModel::run_raw(std::span<const void* const> inputs, std::span<void* const> outputs,
                              runtime::Profile* profile, bool io_on_device) {
  return executor_->run(inputs, outputs, {.profile = profile, .io_on_device = io_on_device});
}

Status CompiledModel::run_on_stream(std::span<const uint64_t> inputs,
                                    std::span<const uint64_t> outputs, void* stream,
                                    uint64_t arena) {
  auto* gpu = dynamic_cast<runtime::CudaExecutor*>(executor_.get());
  if (!gpu) return Status::error("run_on_stream: the model was compiled for the CPU");
  return gpu->run_on_stream(inputs, outputs, stream, arena);
}

Expected<CheckReport> CompiledModel::check(std::span<const Array> inputs) {
  if (compiled_->cached_explanation) {
    return Status::error(
        "the check mode needs the kernel records, which a compilation loaded from the cache "
        "does not keep: compile with reuse_compilations off");
  }
  return check_compiled(*graph_, *compiled_, *executor_, inputs);
}

}  // namespace kiln
