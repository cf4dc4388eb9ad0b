#include <algorithm>

#include "compiler/compilation_cache.h"
#include "compiler/in_place.h"
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
  compiled->cached_kernels = std::move(cached->kernels);
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

std::vector<const loop::Kernel*> CompiledGraph::program_kernels() const {
  std::vector<const loop::Kernel*> loop_ir(program ? static_cast<size_t>(program->num_kernels)
                                                   : 0);
  for (const KernelRecord& record : records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (k < loop_ir.size() && loop_ir[k] == nullptr) loop_ir[k] = &record.kernel;
  }
  for (size_t k = 0; k < cached_kernels.size() && k < loop_ir.size(); ++k) {
    if (loop_ir[k] == nullptr) loop_ir[k] = &cached_kernels[k];
  }
  return loop_ir;
}

std::vector<std::pair<int64_t, int64_t>> CompiledModel::allow_in_place(
    std::span<const std::pair<int64_t, int64_t>> candidates) {
  const std::vector<const loop::Kernel*> kernels = compiled_->program_kernels();
  if (std::ranges::any_of(kernels, [](auto* k) { return k == nullptr; })) return {};
  const InPlaceCheck check(program(), kernels);
  for (const auto& [output, input] : candidates) {
    if (std::ranges::find(in_place_, std::pair(output, input)) != in_place_.end()) continue;
    if (check.check(output, input)) in_place_.emplace_back(output, input);
  }
  std::vector<std::pair<int64_t, int64_t>> allowed;
  for (const auto& pair : candidates) {
    if (std::ranges::find(in_place_, pair) != in_place_.end()) allowed.push_back(pair);
  }
  return allowed;
}

// The program reads each input while it writes its outputs: an output at an input's address is
// wrong unless allow_in_place allowed that pair. Tensors of no bytes may share an address. Only
// a model that allowed pairs is checked, as only its callers alias on purpose: the check stays
// off the path of every other run, which a benchmark times.
Status CompiledModel::check_no_overlap(std::span<const uint64_t> inputs,
                                       std::span<const uint64_t> outputs) const {
  const runtime::Program& p = program();
  std::vector<std::pair<uint64_t, int64_t>> by_address;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (p.input_bytes.at(i) > 0) by_address.emplace_back(inputs[i], static_cast<int64_t>(i));
  }
  std::ranges::sort(by_address);
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (p.output_bytes.at(o) == 0) continue;
    const auto found = std::ranges::lower_bound(by_address, std::pair(outputs[o], int64_t{0}));
    for (auto it = found; it != by_address.end() && it->first == outputs[o]; ++it) {
      const std::pair<int64_t, int64_t> pair(static_cast<int64_t>(o), it->second);
      if (std::ranges::find(in_place_, pair) == in_place_.end()) {
        return Status::errorf(
            "output {} is at the address of input {}, which the program does not allow: it "
            "may read the input after writing the output (CompiledModel::allow_in_place)",
            o, it->second);
      }
    }
  }
  return Status::ok();
}

Status CompiledModel::run_raw(std::span<const void* const> inputs, std::span<void* const> outputs,
                              runtime::Profile* profile, bool io_on_device, void* arena) {
  if (!in_place_.empty() && inputs.size() == program().input_bytes.size() &&
      outputs.size() == program().output_bytes.size()) {
    std::vector<uint64_t> in, out;
    for (const void* input : inputs) in.push_back(reinterpret_cast<uintptr_t>(input));
    for (void* output : outputs) out.push_back(reinterpret_cast<uintptr_t>(output));
    KILN_RETURN_IF_ERROR(check_no_overlap(in, out));
  }
  return executor_->run(inputs, outputs,
                        {.profile = profile, .io_on_device = io_on_device, .arena = arena});
}

Status CompiledModel::run_on_stream(std::span<const uint64_t> inputs,
                                    std::span<const uint64_t> outputs, void* stream,
                                    uint64_t arena) {
  auto* gpu = dynamic_cast<runtime::CudaExecutor*>(executor_.get());
  if (!gpu) return Status::error("run_on_stream: the model was compiled for the CPU");
  if (!in_place_.empty() && inputs.size() == program().input_bytes.size() &&
      outputs.size() == program().output_bytes.size()) {
    KILN_RETURN_IF_ERROR(check_no_overlap(inputs, outputs));
  }
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
