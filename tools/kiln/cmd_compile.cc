// kiln compile and explain: what the compiler makes of a model (a file or zoo:NAME), written to
// a folder or explained. `kiln zoo compile NAME` and `kiln zoo explain NAME` are these commands
// on zoo:NAME.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "commands.h"
#include "compiler/stage_text.h"
#include "kiln/kiln.h"
#include "report.h"

namespace kiln::cli {
namespace {

struct CompileCommandOptions {
  ModelSourceOptions source;
  std::string output_dir;
  CompileFlags compile;
  bool schedules = false;  // explain: each kernel's schedule and how it was chosen
};

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) return Status::errorf("cannot write {}", path.string());
  return Status::ok();
}

// Writes the generated code, the kernels' loop IR and the plan (or, for CUDA, the launches) of
// a complete compilation to `dir`, creating it; says what it wrote.
Status write_compiled(const CompiledGraph& compiled, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::errorf("cannot create {}: {}", dir, error.message());
  const std::filesystem::path path(dir);
  KILN_RETURN_IF_ERROR(write_text(path / "kernels.loop", program_kernels_text(compiled)));
  if (compiled.cuda) {
    KILN_RETURN_IF_ERROR(write_text(path / "kernels.cu", compiled.cuda->source));
    KILN_RETURN_IF_ERROR(write_text(path / "kernels.cubin", compiled.cuda->cubin));
    KILN_RETURN_IF_ERROR(write_text(path / "launches.txt", cuda_launches_text(compiled)));
    fmt::print("wrote {}/kernels.cu, kernels.cubin, kernels.loop, launches.txt\n", dir);
    return Status::ok();
  }
  KILN_ASSIGN_OR_RETURN(std::string source, kernel_source(compiled));
  KILN_RETURN_IF_ERROR(write_text(path / "kernels.cc", source));
  KILN_RETURN_IF_ERROR(write_text(path / "plan.txt", plan_text(compiled)));
  fmt::print("wrote {}/kernels.cc, kernels.loop, plan.txt\n", dir);
  return Status::ok();
}

// "12 kernels, 15 launches, 40 launches per step, 48210 bytes of cubin for sm_90": a step runs
// each kernel's launches once per call of it.
void print_cuda_summary(const CompiledGraph& compiled) {
  const CudaCompiled& cuda = *compiled.cuda;
  const size_t launches =
      std::accumulate(cuda.launches.begin(), cuda.launches.end(), size_t{0},
                      [](size_t n, const auto& kernel) { return n + kernel.size(); });
  size_t per_step = 0;
  for (const runtime::Step& step : compiled.program->steps) {
    if (step.kind == runtime::Step::Kind::kernel) {
      per_step += cuda.launches[static_cast<size_t>(step.kernel)].size();
    }
  }
  fmt::print("{} kernels, {} launches, {} launches per step, {} bytes of cubin for {}\n",
             cuda.launches.size(), launches, per_step, cuda.cubin.size(), cuda.architecture);
}

int run_compile(const CompileCommandOptions& options) {
  Expected<SourceModel> model = load_model_source(options.source, options.compile);
  if (!model) return report(model.status());
  fmt::print("{}\n", model->description);
  Expected<CompileOptions> compile_options = compile_options_from(options.compile);
  if (!compile_options) return report(compile_options.status());
  if (compile_options->device.kind == DeviceKind::cuda && options.output_dir.empty()) {
    return report(Status::error("--device cuda needs -o DIR"));
  }
  Expected<Compilation> compilation =
      Compiler(*compile_options).run_pipeline(std::move(model->graph));
  if (!compilation) return report(compilation.status());
  const CompiledGraph& compiled = compilation->compiled();
  print_compile_summary(compiled);
  if (compiled.cuda) print_cuda_summary(compiled);
  if (options.output_dir.empty() || compiled.last_stage != Stage::codegen) return 0;
  if (Status written = write_compiled(compiled, options.output_dir); !written) {
    return report(written);
  }
  return 0;
}

// Explaining needs the stages up to the partition (through code generation for CUDA's
// launches, through the schedule for the schedules), and any stage asked to be dumped.
std::optional<Stage> explain_stop(const CompileOptions& options, bool schedules) {
  if (options.pipeline.stop_after) return options.pipeline.stop_after;
  if (options.device.kind == DeviceKind::cuda) return std::nullopt;
  Stage last = schedules ? Stage::schedule : Stage::partition;
  for (const Stage stage : options.pipeline.dump_after) last = std::max(last, stage);
  return last;
}

int run_explain(const CompileCommandOptions& options) {
  Expected<SourceModel> model = load_model_source(options.source, options.compile);
  if (!model) return report(model.status());
  fmt::print("{}\n", model->description);
  Expected<CompileOptions> compile_options = compile_options_from(options.compile);
  if (!compile_options) return report(compile_options.status());
  compile_options->pipeline.stop_after = explain_stop(*compile_options, options.schedules);
  Expected<Compilation> compilation =
      Compiler(*compile_options).run_pipeline(std::move(model->graph));
  if (!compilation) return report(compilation.status());
  const CompiledGraph& compiled = compilation->compiled();
  if (compiled.last_stage < Stage::layout) return 0;
  fmt::print("{}", format_rewrites(compiled.rewrites));
  if (compiled.last_stage < Stage::partition) return 0;
  fmt::print("{}", fusion::explain_partition(compilation->graph(), compiled.partition));
  if (compiled.cuda) fmt::print("{}", cuda_launches_text(compiled));
  if (options.schedules && compiled.last_stage >= Stage::schedule) {
    fmt::print("{}", schedules_text(compiled.records));
  }
  return 0;
}

}  // namespace

void add_compile_commands(CLI::App& parent, Action& action, ModelArgument model) {
  const bool zoo = model == ModelArgument::zoo_preset;
  auto compile = std::make_shared<CompileCommandOptions>();
  CLI::App* compile_cmd = parent.add_subcommand(
      "compile", zoo ? "Compile a preset's graph (loss graph, inference graph or training step) "
                       "and print the kernel count, compile time and memory plan; with -o, write "
                       "the generated code and plan as `kiln compile` does."
                     : "Compile a model and write the generated C++ (kernels.cc), the kernels' "
                       "loop IR (kernels.loop) and the memory plan and kernel list (plan.txt) to "
                       "a directory (for --device cuda: kernels.cu, kernels.cubin, kernels.loop "
                       "and launches.txt).");
  add_model_source(compile_cmd, compile->source, model);
  add_output(compile_cmd, compile->output_dir, "Directory to write")->required(!zoo);
  add_compile_flags(compile_cmd, compile->compile);
  on_parsed(compile_cmd, action, compile, run_compile);

  auto explain = std::make_shared<CompileCommandOptions>();
  CLI::App* explain_cmd = parent.add_subcommand(
      "explain",
      "Partition a model into fused kernels and explain it: the graph rewrites, each "
      "kernel's nodes, estimated time and bytes saved, and every edge between "
      "kernels with the reason it was cut.");
  add_model_source(explain_cmd, explain->source, model);
  add_compile_flags(explain_cmd, explain->compile);
  explain_cmd->add_flag("--schedules", explain->schedules,
                        "Also each kernel's schedule: how it was chosen (with --schedule-search: "
                        "searched or from the cache, its estimated and measured time beside the "
                        "default's) and its directives");
  on_parsed(explain_cmd, action, explain, run_explain);
}

}  // namespace kiln::cli
