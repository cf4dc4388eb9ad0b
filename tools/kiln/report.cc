#include "report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "cli.h"

namespace kiln::cli {

std::string format_rewrites(const GraphRewrites& rewrites) {
  std::string text;
  if (const PrecisionSummary& precision = rewrites.precision; precision.low) {
    text += fmt::format("precision {}: {} in {}, {}\n", dtype_name(*precision.low),
                        count_noun(static_cast<size_t>(precision.low_precision_nodes), "node"),
                        dtype_name(*precision.low),
                        count_noun(static_cast<size_t>(precision.casts_inserted), "cast"));
  }
  const RewriteReport& report = rewrites.passes;
  if (report.rewrites.empty()) return text + "graph rewrites: off\n";
  std::vector<std::string> parts;
  for (const RewriteSummary& rewrite : report.rewrites) {
    std::string applied = rewrite.rounds_changed == 0 ? " (none applied)"
                          : rewrite.rounds_changed == 1
                              ? ""
                              : fmt::format(" ({} rounds)", rewrite.rounds_changed);
    parts.push_back(rewrite.name + applied);
  }
  text += fmt::format("graph rewrites: {} -> {}; {}\n",
                                 count_noun(static_cast<size_t>(report.nodes_before), "node"),
                                 rewrites.nodes_after, fmt::join(parts, ", "));
  if (!report.recognized.empty()) {
    std::vector<std::string> recognized;
    for (const auto& [rule, count] : report.recognized) {
      recognized.push_back(fmt::format("{} x{}", rule, count));
    }
    text += fmt::format("recognized (canonical rules): {}\n", fmt::join(recognized, ", "));
  }
  if (const std::optional<SubstitutionSummary>& search = rewrites.substitution) {
    size_t applications = 0;
    for (const SubstitutionStep& step : search->steps) {
      applications += static_cast<size_t>(step.applications);
    }
    text += fmt::format(
        "substitutions: {} in {} by {} proved rules ({} expanded, {} priced, {} alike "
        "one priced{}, {})\n",
        count_noun(applications, "rewrite"), count_noun(search->steps.size(), "step"),
        search->rules, count_noun(static_cast<size_t>(search->expanded), "graph"), search->priced,
        search->alike,
        search->stopped_at_limit    ? ", stopped at --substitute-max-expansions"
        : search->stopped_at_priced ? ", stopped at --substitute-max-priced"
        : search->stopped_at_time   ? ", stopped at --substitute-max-seconds"
                                    : "",
        format_seconds(search->seconds));
    for (const SubstitutionStep& step : search->steps) {
      const double saved = step.seconds_before - step.seconds_after;
      text += fmt::format("  {}: estimated {} -> {} ({} {})\n", step.rule,
                          format_seconds(step.seconds_before), format_seconds(step.seconds_after),
                          saved >= 0 ? "saves" : "costs", format_seconds(std::fabs(saved)));
    }
  }
  for (const DecompositionDecision& decision : rewrites.decompositions) {
    text += fmt::format("decompose {} ({}): estimated {} whole, {} decomposed: {}\n", decision.unit,
                        count_noun(static_cast<size_t>(decision.nodes), "node"),
                        format_seconds(decision.seconds_composite),
                        format_seconds(decision.seconds_decomposed),
                        decision.decomposed ? "decomposed" : "kept whole");
  }
  const ChannelsLastReport& layout = rewrites.channels_last;
  if (layout.converted > 0) {
    text += fmt::format(
        "layout: {} channels last through oneDNN ({} by Winograd's algorithm, the rest "
        "direct), {} moved with them, {} of them computed by the convolutions (bias adds and "
        "relus)\n",
        count_noun(static_cast<size_t>(layout.converted), "convolution"), layout.winograd,
        count_noun(static_cast<size_t>(layout.sunk), "elementwise op"), layout.fused);
  }
  for (const std::string& kept : layout.kept) text += fmt::format("layout: conv {} kept\n", kept);
  return text;
}

void print_compile_summary(const CompiledGraph& compiled) {
  if (compiled.cached_explanation) {
    fmt::print(
        "loaded from the compilation cache: {} ({} of {} units compiled, the rest "
        "cached)\n",
        count_noun(static_cast<size_t>(compiled.program->num_kernels), "distinct kernel"),
        compiled.stats.units_compiled, compiled.stats.units);
    fmt::print("arena {}\n", format_bytes(compiled.program->arena_bytes));
    return;
  }
  const auto reached = [&](Stage stage) { return compiled.last_stage >= stage; };
  if (reached(Stage::layout)) fmt::print("{}", format_rewrites(compiled.rewrites));
  if (!reached(Stage::partition)) return;
  const fusion::Partition& partition = compiled.partition;
  size_t nodes = 0;
  for (const fusion::Group& group : partition.groups) nodes += group.nodes.size();
  fmt::print("fusion {}: {} in {} (partitioned in {}; estimated {} per run)\n",
             fusion::fusion_mode_name(partition.mode), count_noun(nodes, "node"),
             count_noun(static_cast<size_t>(partition.num_kernels()), "kernel"),
             format_seconds(partition.stats.seconds),
             format_seconds(partition.estimated_seconds()));
  if (!reached(Stage::codegen)) return;
  const CompileStats& stats = compiled.stats;
  const double lowering =
      compiled.seconds_in({Stage::lower, Stage::schedule, Stage::scratch, Stage::pack_weights});
  const double codegen = compiled.seconds_in({Stage::codegen});
  fmt::print(
      "compiled {} as {} in {} (lowering {}, {} {}: {} of {} units compiled, the rest "
      "cached)\n",
      count_noun(compiled.records.size(), "kernel call"),
      count_noun(static_cast<size_t>(compiled.program->num_kernels), "distinct kernel"),
      format_seconds(lowering + codegen), format_seconds(lowering), compiled.cuda ? "CUDA" : "C++",
      format_seconds(codegen), stats.units_compiled, stats.units);
  fmt::print("arena {} planned for {} of intermediates (no plan can use less than {})\n",
             format_bytes(compiled.program->arena_bytes), format_bytes(stats.arena_total_bytes),
             format_bytes(stats.arena_live_bound_bytes));
}

int kernel_calls(const CompiledGraph& compiled) {
  if (!compiled.cached_explanation) return compiled.partition.num_kernels();
  return static_cast<int>(std::count_if(
      compiled.program->steps.begin(), compiled.program->steps.end(),
      [](const runtime::Step& step) { return step.kind == runtime::Step::Kind::kernel; }));
}

void print_profile(const runtime::Program& program, const runtime::Profile& profile) {
  std::vector<size_t> order(program.steps.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return profile.step_seconds[a] > profile.step_seconds[b];
  });
  double total = 0;
  for (double seconds : profile.step_seconds) total += seconds;
  const double runs = std::max(profile.runs, 1);
  fmt::print("profile: {} per run over {} steps ({} runs)\n", format_seconds(total / runs),
             program.steps.size(), profile.runs);
  fmt::print("  {:>5}  {:>10}  {:>6}  {}\n", "step", "time/run", "share", "kernel");
  for (size_t s : order) {
    const double seconds = profile.step_seconds[s];
    fmt::print("  {:>5}  {:>10}  {:>5.1f}%  {}\n", s, format_seconds(seconds / runs),
               total > 0 ? 100 * seconds / total : 0.0, program.steps[s].label);
  }
}

void print_fusion_profile(const FusionProfile& profile, const runtime::Program& fused) {
  fmt::print(
      "\nilp kernels against their nodes unfused (profiles of the runs above): {} fused, "
      "{} unfused\n",
      format_seconds(profile.fused_total), format_seconds(profile.unfused_kernels_total));
  if (profile.unfused_contractions > 0) {
    fmt::print(
        "contractions (matmul, conv, spmm) took {} of the unfused run's {}: even with "
        "every other op free, fusion could not run it more than {:.2f}x faster\n",
        format_seconds(profile.unfused_contractions), format_seconds(profile.unfused_total),
        profile.unfused_total / profile.unfused_contractions);
  }
  const auto print_row = [&](const FusedKernelTime& row) {
    fmt::print("  {:>5}  {:>10}  {:>10}  {:>+10.3f} ms  {}\n", row.step, format_seconds(row.fused),
               format_seconds(row.unfused), (row.fused - row.unfused) * 1e3,
               fused.steps[row.step].label);
  };
  constexpr size_t kShown = 12;
  fmt::print("  {:>5}  {:>10}  {:>10}  {:>13}  {}\n", "step", "fused", "unfused", "difference",
             "kernel (slowest against its nodes first)");
  // The kShown slowest against their nodes, then the kShown fastest (all rows when few).
  const std::vector<FusedKernelTime>& rows = profile.kernels;
  const size_t head = std::min(kShown, rows.size());
  const size_t tail_start = std::max(head, rows.size() - std::min(kShown, rows.size()));
  for (size_t r = 0; r < head; ++r) print_row(rows[r]);
  if (tail_start > head) fmt::print("  ...\n");
  for (size_t r = tail_start; r < rows.size(); ++r) print_row(rows[r]);
}

}  // namespace kiln::cli
