// kiln zoo compare: a preset's graph compiled in several ways (the fusion modes, or the graph
// rewrites ablated one by one, or without and with the substitution search), each checked
// against the reference when asked, timed taking turns, and printed one row per way.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "commands.h"
#include "driver/timing.h"
#include "kiln/kiln.h"
#include "passes/eliminate_loss.h"
#include "report.h"

namespace kiln::cli {
namespace {

struct CompareOptions {
  ModelSourceOptions source;
  bool check = false;
  bool profile = false;
  int repeat = 5;
  bool ablate_rewrites = false;
  bool ablate_substitution = false;
  CompileFlags compile;
};

// One way of compiling the graph, and what its runs measured.
struct Variant {
  std::string label;
  CompileOptions options;
  const Graph* graph;
  std::optional<CompiledModel> compiled = std::nullopt;
  double compile_seconds = 0;
  std::string check = {};
  std::optional<TimedRun> run = std::nullopt;
  std::vector<double> times = {};
  runtime::Profile profile = {};
};

// The rows of --ablate-rewrites: the ILP's plans without graph rewrites, with all, and with all
// but one in turn. A training step's ablation includes loss elimination: the rows with it
// compile the loss-free step (the same inputs, the outputs without the loss).
std::vector<Variant> rewrite_ablation(const CompileOptions& base, const Graph& graph,
                                      const Graph& with_all_rewrites) {
  CompileOptions none = base;
  none.rewrites.enabled = false;
  CompileOptions all = base;
  all.rewrites = RewriteOptions{};
  std::vector<Variant> variants;
  variants.push_back({.label = "no rewrites", .options = none, .graph = &graph});
  variants.push_back({.label = "all rewrites", .options = all, .graph = &with_all_rewrites});
  if (&with_all_rewrites != &graph) {
    variants.push_back({.label = "all but eliminate-loss", .options = all, .graph = &graph});
  }
  for (std::string_view name : rewrite_names()) {
    CompileOptions but_one = all;
    but_one.rewrites.disabled.emplace(name);
    variants.push_back({.label = fmt::format("all but {}", name),
                        .options = but_one,
                        .graph = &with_all_rewrites});
  }
  return variants;
}

std::vector<Variant> variants_of(const CompareOptions& options, const CompileOptions& base,
                                 const Graph& graph, const Graph& with_all_rewrites) {
  if (options.ablate_rewrites) return rewrite_ablation(base, graph, with_all_rewrites);
  std::vector<Variant> variants;
  if (options.ablate_substitution) {
    for (const bool substitute : {false, true}) {
      CompileOptions with = base;
      with.substitution.enabled = substitute;
      variants.push_back({.label = substitute ? "substitution" : "no substitution",
                          .options = with,
                          .graph = &graph});
    }
    return variants;
  }
  for (fusion::FusionMode mode :
       {fusion::FusionMode::off, fusion::FusionMode::greedy, fusion::FusionMode::ilp}) {
    CompileOptions with = base;
    with.fusion.mode = mode;
    variants.push_back(
        {.label = std::string(fusion::fusion_mode_name(mode)), .options = with, .graph = &graph});
  }
  return variants;
}

// Compiles a variant, checks it when asked, and runs it once untimed (the warm-up).
Status prepare(Variant& variant, const std::vector<Array>& inputs, RunBuffers& buffers,
               bool check) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(CompiledModel compiled,
                        Compiler(variant.options).compile(variant.graph->clone()));
  variant.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  variant.compiled.emplace(std::move(compiled));
  if (check) {
    KILN_ASSIGN_OR_RETURN(const double worst, check_kernels(*variant.compiled, inputs));
    variant.check = fmt::format("  ok ({:.3g})", worst);
  }
  // On a GPU, the program alone: a step's inputs and outputs stay on the device.
  variant.run.emplace(*variant.compiled, buffers, variant.options.device.kind == DeviceKind::cuda);
  return variant.run->time_one().status();
}

void print_table(const CompareOptions& options, const SourceModel& model,
                 std::vector<Variant>& variants) {
  fmt::print("{}; median of {} after a warm-up, modes interleaved\n", model.description,
             count_noun(static_cast<size_t>(options.repeat), "run"));
  size_t width = 0;
  for (const Variant& variant : variants) width = std::max(width, variant.label.size());
  fmt::print("{:<{}} {:>8} {:>11} {:>12} {:>11} {:>11} {:>11} {:>23} {:>7}{}\n",
             options.ablate_rewrites || options.ablate_substitution ? "ilp with" : "fusion", width,
             "kernels", "est. time", "est. bytes", "arena peak", "compile", "median", "(min - max)",
             "speedup", options.check ? "  check (largest abs error)" : "");
  const double first_median = median_of(variants.front().times);  // speedups are over it
  for (const Variant& variant : variants) {
    const double median = median_of(variant.times);
    const fusion::Partition& partition = variant.compiled->compiled().partition;
    fmt::print("{:<{}} {:>8} {:>11} {:>12} {:>11} {:>11} {:>11} {:>23} {:>6.2f}x{}\n",
               variant.label, width, partition.num_kernels(),
               format_seconds(partition.estimated_seconds()),
               format_bytes(partition.estimated_bytes()),
               format_bytes(variant.compiled->program().arena_bytes),
               format_seconds(variant.compile_seconds), format_seconds(median),
               fmt::format("({} - {})", format_seconds(variant.times.front()),
                           format_seconds(variant.times.back())),
               first_median / median, variant.check);
  }
}

Status compare(const CompareOptions& options) {
  KILN_ASSIGN_OR_RETURN(SourceModel model, load_model_source(options.source, options.compile));
  std::vector<std::string> unused;
  KILN_ASSIGN_OR_RETURN(const std::vector<Array> inputs,
                        model_inputs(model, options.source, {}, unused));
  std::optional<Graph> loss_free;
  if (options.ablate_rewrites && options.source.graph.train && !options.source.graph.without_loss) {
    loss_free.emplace(model.graph.clone());
    KILN_RETURN_IF_ERROR(eliminate_loss(*loss_free).status());
  }
  KILN_ASSIGN_OR_RETURN(CompileOptions base, compile_options_from(options.compile));
  // The table and the fusion profile read each variant's partition and records, which a
  // cached compilation does not keep.
  base.reuse_compilations = false;
  std::vector<Variant> variants =
      variants_of(options, base, model.graph, loss_free ? *loss_free : model.graph);
  // Each TimedRun refers to its variant's model: `variants` is not resized from here on.
  RunBuffers buffers(model.graph, inputs);
  for (Variant& variant : variants) {
    KILN_RETURN_IF_ERROR(prepare(variant, inputs, buffers, options.check));
  }
  std::vector<TimedRun*> runs;
  std::vector<runtime::Profile*> profiles;
  for (Variant& variant : variants) {
    runs.push_back(&*variant.run);
    profiles.push_back(options.profile ? &variant.profile : nullptr);
  }
  KILN_ASSIGN_OR_RETURN(const std::vector<std::vector<double>> times,
                        time_interleaved(runs, options.repeat, profiles));
  for (size_t i = 0; i < variants.size(); ++i) variants[i].times = times[i];
  print_table(options, model, variants);
  if (options.profile) {
    const CompiledGraph& fused = variants.back().compiled->compiled();
    print_fusion_profile(
        join_fusion_profile(variants.front().compiled->compiled(), variants.front().profile, fused,
                            variants.back().profile),
        *fused.program);
  }
  return Status::ok();
}

int run_compare(const CompareOptions& options) {
  const Status done = compare(options);
  return done ? 0 : report(done);
}

}  // namespace

void add_compare_command(CLI::App& zoo, Action& action) {
  auto compare = std::make_shared<CompareOptions>();
  CLI::App* command = zoo.add_subcommand(
      "compare",
      "Compile a preset's graph (loss graph, inference graph or training step) "
      "unfused, fused greedily and fused by the ILP; check each against the "
      "reference with --check; time each; print kernels, estimated time and bytes, "
      "arena peak, compile time, median time and speedup over unfused.");
  add_model_source(command, compare->source, ModelArgument::zoo_preset);
  add_check(command, compare->check,
            "Compare every kernel of every mode with the reference evaluation");
  add_profile(command, compare->profile,
              "Time every kernel and print the ILP's kernels against the unfused time of their "
              "nodes, the ones fusion made slower first");
  add_repeat(command, compare->repeat, "Timed runs per mode, after a warm-up; the modes take turns",
             /*positive=*/true);
  command
      ->add_flag("--ablate-rewrites", compare->ablate_rewrites,
                 "Instead of the fusion modes, compare the ILP's plans with no graph rewrites, "
                 "with all, and with all but one in turn (with --train, loss elimination is one "
                 "of them)")
      ->excludes("--profile");
  command
      ->add_flag("--ablate-substitution", compare->ablate_substitution,
                 "Instead of the fusion modes, compare the ILP's plans without and with the "
                 "substitution search (with --freeze, merged weights are folded once)")
      ->excludes("--ablate-rewrites")
      ->excludes("--profile");
  add_device_flag(command, compare->compile);
  add_rewrite_flags(command, compare->compile);
  add_pipeline_flags(command, compare->compile);
  on_parsed(command, action, compare, run_compare);
}

}  // namespace kiln::cli
