#include "kiln/kiln.h"
#include "passes/eliminate_loss.h"
#include "runtime/cuda_executor.h"

namespace kiln {

Expected<Compilation> Compiler::run_pipeline(Graph graph) const {
  auto owned = std::make_unique<Graph>(std::move(graph));
  KILN_ASSIGN_OR_RETURN(CompiledGraph compiled, kiln::run_pipeline(*owned, options_));
  return Compilation(std::move(owned), std::make_unique<CompiledGraph>(std::move(compiled)));
}

Expected<CompiledModel> Compiler::compile(Graph graph) const {
  KILN_ASSIGN_OR_RETURN(Compilation compilation, run_pipeline(std::move(graph)));
  std::unique_ptr<CompiledGraph>& compiled_graph = compilation.compiled_;
  if (compiled_graph->last_stage != Stage::codegen) {
    return Status::errorf(
        "the pipeline stopped after stage {} (--stop-after): there is no "
        "program to run",
        stage_name(*compiled_graph->last_stage));
  }
  if (compiled_graph->cuda) {
    const CudaCompiled& cuda = *compiled_graph->cuda;
    KILN_ASSIGN_OR_RETURN(
        std::unique_ptr<runtime::CudaExecutor> executor,
        runtime::CudaExecutor::create(compiled_graph->program, cuda.cubin, cuda.launches));
    return CompiledModel(std::move(compilation.graph_), std::move(compiled_graph),
                         std::move(executor));
  }
  std::vector<runtime::KernelFunction> functions;
  for (size_t k = 0; k < compiled_graph->kernels.size(); ++k) {
    functions.push_back(compiled_graph->kernels.function(k));
  }
  KILN_ASSIGN_OR_RETURN(runtime::Executor executor,
                        runtime::Executor::create(compiled_graph->program, std::move(functions)));
  return CompiledModel(std::move(compilation.graph_), std::move(compiled_graph),
                       std::make_unique<runtime::Executor>(std::move(executor)));
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

Expected<CheckReport> CompiledModel::check(std::span<const Array> inputs) {
  return check_compiled(*graph_, *compiled_, *executor_, inputs);
}

}  // namespace kiln
