// The `kiln` command line. Thin by design: parse arguments, call the library, print.
//
// Exit codes: 0 success, 1 user error (bad file, invalid graph, failed evaluation),
// 2 usage error (unknown subcommand or option). Nothing crashes: library errors arrive as
// Status values, and any escaping exception is reported as an internal error (exit 3).
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/decompose_by_cost.h"
#include "cost/device_profile.h"
#include "compiler/tensor_bytes.h"
#include "compiler/training_loop.h"
#include "driver/compare.h"
#include "driver/conformance.h"
#include "driver/model_io.h"
#include "frontend/onnx_export.h"
#include "fusion/rules.h"
#include "interp/interpreter.h"
#include "kiln/kiln.h"
#include "loop/printer.h"
#include "interp/random_inputs.h"
#include "interp/statistics.h"
#include "ir/op.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/eliminate_loss.h"
#include "passes/freeze_inputs.h"
#include "passes/pass_manager.h"
#include "passes/pipeline.h"
#include "models/model.h"
#include "support/files.h"
#include "subst/generate.h"
#include "subst/prove.h"
#include "subst/rule.h"
#include "subst/search.h"

namespace kiln {
namespace {

constexpr int kUserError = 1;
constexpr int kUsageError = 2;

int report(const Status& status) {
  std::fprintf(stderr, "kiln: error: %s\n", status.message().c_str());
  return kUserError;
}

// "1 node", "3 nodes".
std::string count_noun(size_t count, std::string_view noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

// Random inputs are made whole before the interpreter's own memory limit applies, so a graph
// whose inputs alone exceed that limit is refused up front.
Status check_input_size(const Graph& graph) {
  int64_t total = 0;
  for (const Value* input : graph.inputs()) total += input->shape().num_elements();
  const int64_t limit = InterpreterOptions{}.max_live_elements;
  if (total > limit) {
    return Status::errorf("the graph's inputs hold {} elements, more than the reference "
                          "interpreter's limit of {}",
                          total, limit);
  }
  return Status::ok();
}

Expected<Graph> load_graph(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_graph(text, path);
}

struct CheckOptions {
  std::string file;
  uint64_t seed = 0;
  int64_t int_range = 4;
};

int run_check(const CheckOptions& options) {
  Expected<Graph> graph = load_graph(options.file);
  if (!graph) return report(graph.status());
  fmt::print("{}: graph @{}: {}, {}, {}; verified\n", options.file, graph->name(),
             count_noun(graph->inputs().size(), "input"), count_noun(static_cast<size_t>(graph->num_nodes()), "node"),
             count_noun(graph->outputs().size(), "output"));
  if (Status size = check_input_size(*graph); !size) return report(size);
  const std::vector<Array> inputs =
      random_inputs(*graph, {.seed = options.seed, .int_range = options.int_range});
  Expected<std::vector<Array>> outputs = interpret(*graph, inputs);
  if (!outputs) return report(outputs.status());
  fmt::print("reference interpreter (f64), random inputs with seed {}:\n", options.seed);
  for (size_t i = 0; i < outputs->size(); ++i) {
    const Value& value = *graph->outputs()[i];
    fmt::print("  {} {}: {}\n", print_value_ref(value), value.type().to_string(),
               format_statistics(compute_statistics((*outputs)[i])));
  }
  return 0;
}

int run_subst_check(const std::string& file) {
  Expected<std::vector<subst::Rule>> rules = subst::read_rules_file(file);
  if (!rules) return report(rules.status());
  int rejected = 0;
  for (const subst::Rule& rule : *rules) {
    const Status checked = subst::check_rule_numerically(rule);
    if (checked) {
      fmt::print("{}: {} -> {}: agrees on random inputs\n", rule.name,
                 count_noun(static_cast<size_t>(rule.source.num_nodes()), "node"),
                 count_noun(static_cast<size_t>(rule.target.num_nodes()), "node"));
    } else {
      fmt::print("{}: rejected: {}\n", rule.name, checked.message());
      ++rejected;
    }
  }
  fmt::print("{}: {} agree, {} rejected (a numeric check at the example shapes, not a proof)\n",
             count_noun(rules->size(), "rule"), rules->size() - static_cast<size_t>(rejected),
             rejected);
  return rejected == 0 ? 0 : kUserError;
}

int run_subst_verify(const std::string& file, int max_extent) {
  Expected<std::vector<subst::Rule>> rules = subst::read_rules_file(file);
  if (!rules) return report(rules.status());
  if (Status axioms = subst::prove_axioms_numerically(); !axioms) return report(axioms);
  int rejected = 0, refuted = 0, undecided = 0;
  for (const subst::Rule& rule : *rules) {
    const auto start = std::chrono::steady_clock::now();
    subst::Rejection rejection = subst::Rejection::unsupported;
    Expected<subst::Proof> proof =
        subst::prove_rule(rule, {.max_extent = max_extent}, &rejection);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (proof) {
      fmt::print("{}: proved at {} extent assignments up to {} ({} where it does not apply), "
                 "{:.2f} s\n",
                 rule.name, proof->instances, max_extent, proof->skipped, seconds);
    } else {
      fmt::print("{}: rejected: {}\n", rule.name, proof.status().message());
      ++rejected;
      refuted += rejection == subst::Rejection::refuted;
      undecided += rejection == subst::Rejection::undecided;
    }
  }
  // A refuted rule is false: for a generated rule, a fingerprint collision.
  fmt::print("{}: {} proved, {} rejected: {} refuted, {} undecided by Z3, {} not provable here "
             "(over the reals, extents up to {} and the example)\n",
             count_noun(rules->size(), "rule"), rules->size() - static_cast<size_t>(rejected),
             rejected, refuted, undecided, rejected - refuted - undecided, max_extent);
  return rejected == 0 ? 0 : kUserError;
}

int run_print(const std::string& file) {
  Expected<ImportedModel> model = load_model(file);
  if (!model) return report(model.status());
  if (!model->weights.empty()) {
    fmt::print("// inputs after the first {} are the model's weights\n", model->num_data_inputs);
  }
  fmt::print("{}", print_graph(model->graph));
  return 0;
}

// Runs graph passes by name on a model and prints the result (DESIGN's `kiln opt`).
int run_opt(const std::string& file, const std::string& passes) {
  Expected<std::vector<std::string>> names = parse_pass_list(passes);
  if (!names) return report(names.status().with_context("--passes"));
  Expected<ImportedModel> model = load_model(file);
  if (!model) return report(model.status());
  Expected<std::vector<PassRun>> runs =
      run_passes(model->graph, *names, PassManagerOptions::from_environment());
  if (!runs) return report(runs.status());
  fmt::print("{}", print_graph(model->graph));
  return 0;
}

// --fusion, --disable-rule, --rewrites and --disable-rewrite, shared by the commands that
// compile.
struct FusionCliOptions {
  std::string device = "cpu";
  std::string mode = "ilp";
  std::vector<std::string> disabled_rules;
  bool rewrites = true;
  std::vector<std::string> disabled_rewrites;
  bool substitute = RewriteOptions{}.substitute;
  int substitute_max_expansions = RewriteOptions{}.substitute_max_expansions;
  double substitute_max_seconds = RewriteOptions{}.substitute_max_seconds;
};

void add_rewrite_options(CLI::App* command, FusionCliOptions& options);

void add_fusion_options(CLI::App* command, FusionCliOptions& options) {
  std::vector<std::string> rules;
  std::string rule_help = "A fusion rule not to apply, for bisecting a wrong result (repeatable):";
  for (const fusion::FusionRule& rule : fusion::fusion_rules()) {
    rules.emplace_back(rule.name);
    rule_help += fmt::format(" {} ({});", rule.name, rule.summary);
  }
  command
      ->add_option("--fusion", options.mode,
                   "Which nodes share a kernel: off (one kernel per node), greedy (merge along "
                   "edges while the cost model gains), ilp (the partition of least estimated "
                   "time, by integer programming)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "greedy", "ilp"}));
  command->add_option("--disable-rule", options.disabled_rules, rule_help)
      ->check(CLI::IsMember(rules));
  command
      ->add_option("--device", options.device,
                   "What the kernels are compiled for: cpu (this machine); cuda (NVIDIA GPUs: "
                   "CUDA C compiled by NVRTC for sm_90; compile and explain only, Kiln has no "
                   "GPU runtime yet); cuda-mapping-on-cpu (the GPU mapping run on this CPU, "
                   "to check it)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "cuda-mapping-on-cpu"}));
  add_rewrite_options(command, options);
}

void add_rewrite_options(CLI::App* command, FusionCliOptions& options) {
  std::vector<std::string> rewrites;
  std::string rewrite_help = "A graph rewrite not to run before partitioning (repeatable):";
  for (std::string_view name : rewrite_names()) {
    rewrites.emplace_back(name);
    const std::string_view summary =
        name == kDecomposeRewrite
            ? "write a kind of composite as primitives where the estimate says it pays"
            : find_pass(name)->summary;
    rewrite_help += fmt::format(" {} ({});", name, summary);
  }
  command
      ->add_flag("--rewrites,!--no-rewrites", options.rewrites,
                 "Run the graph rewrites before partitioning (default), or not")
      ->capture_default_str();
  command->add_option("--disable-rewrite", options.disabled_rewrites, rewrite_help)
      ->check(CLI::IsMember(rewrites));
  command
      ->add_flag("--substitute,!--no-substitute", options.substitute,
                 "Search the rewrites by the shipped rules proved at build time that lower the "
                 "estimated time after fusion (TASO's search; on by default, not with "
                 "--fusion=off)")
      ->capture_default_str();
  command
      ->add_option("--substitute-max-expansions", options.substitute_max_expansions,
                   "With --substitute: stop after expanding this many graphs")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  command
      ->add_option("--substitute-max-seconds", options.substitute_max_seconds,
                   "With --substitute: the search's time budget (expands no graph after it)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
}

Expected<CompileOptions> compile_options_from(const FusionCliOptions& cli) {
  CompileOptions options;
  KILN_ASSIGN_OR_RETURN(options.device, parse_device(cli.device));
  KILN_ASSIGN_OR_RETURN(options.fusion.mode, fusion::parse_fusion_mode(cli.mode));
  options.fusion.disabled_rules.insert(cli.disabled_rules.begin(), cli.disabled_rules.end());
  options.rewrites.enabled = cli.rewrites;
  options.rewrites.disabled.insert(cli.disabled_rewrites.begin(), cli.disabled_rewrites.end());
  options.rewrites.substitute = cli.substitute;
  options.rewrites.substitute_max_expansions = cli.substitute_max_expansions;
  options.rewrites.substitute_max_seconds = cli.substitute_max_seconds;
  return options;
}

struct RunOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> expected;
  std::vector<std::string> shapes;
  std::string output_file;
  uint64_t seed = 0;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool interpret = false;  // the reference interpreter instead of compiled code
  bool freeze = false;     // the weights compiled in as constants
  bool check = false;
  bool profile = false;
  int repeat = 0;
  FusionCliOptions fusion;
};

// The model's data inputs: given ones by name, the rest random (and said so).
Expected<std::vector<Array>> gather_inputs(const ImportedModel& model, const RunOptions& options) {
  KILN_ASSIGN_OR_RETURN(auto given, load_named_tensors(options.inputs));
  std::vector<Array> arrays;
  std::vector<std::string> random_names;
  for (int i = 0; i < model.num_data_inputs; ++i) {
    const Value& input = *model.graph.inputs()[static_cast<size_t>(i)];
    auto it = given.find(input.name());
    if (it == given.end()) {
      random_names.push_back(print_value_ref(input));
      arrays.push_back(random_input(model.graph, static_cast<size_t>(i), {.seed = options.seed}));
      continue;
    }
    if (it->second.type() != input.type()) {
      return Status::errorf("input '{}' is {} in the model, the file gives {}", input.name(),
                            input.type().to_string(), it->second.type().to_string());
    }
    arrays.push_back(std::move(it->second));
    given.erase(it);
  }
  if (!given.empty()) {
    return Status::errorf("the model has no input named '{}'", given.begin()->first);
  }
  if (!random_names.empty()) {
    fmt::print("random inputs (seed {}): {}\n", options.seed, fmt::join(random_names, ", "));
  }
  return arrays;
}

// Import options from the --shape NAME=DIMS flags.
Expected<OnnxImportOptions> import_options_from_shapes(const std::vector<std::string>& shapes) {
  OnnxImportOptions import_options;
  for (const std::string& spec : shapes) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0) {
      return Status::errorf("--shape '{}': expected NAME=DIMS, e.g. x=1x128", spec);
    }
    Expected<std::vector<int64_t>> dims = parse_dims(spec.substr(equals + 1));
    if (!dims) return dims.status().with_context("--shape");
    import_options.input_shapes[spec.substr(0, equals)] = std::move(*dims);
  }
  return import_options;
}

// --freeze: an ONNX model's weights compiled in as constants (driver/model_io.h).
void add_freeze_flag(CLI::App* command, bool& freeze) {
  command->add_flag("--freeze", freeze,
                    "Compile an ONNX model's weights in as constants, so that what is computed "
                    "from them alone (a concatenation of weights made by a substitution) is "
                    "computed once, when compiling; the model's inputs are then its data");
}

// The model a run, compile or explain command works on, frozen when asked.
Expected<ImportedModel> load_command_model(const std::string& path,
                                           const std::vector<std::string>& shapes, bool freeze) {
  KILN_ASSIGN_OR_RETURN(const OnnxImportOptions import_options, import_options_from_shapes(shapes));
  KILN_ASSIGN_OR_RETURN(ImportedModel model, load_model(path, import_options));
  if (freeze) KILN_RETURN_IF_ERROR(freeze_weights(model));
  return model;
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string format_seconds(double seconds) {
  if (seconds >= 1) return fmt::format("{:.2f} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.3f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

int run_subst_generate(const subst::GeneratorOptions& options, const std::string& output) {
  Expected<subst::GeneratedRules> generated = subst::generate_rules(options);
  if (!generated) return report(generated.status());
  const subst::GeneratorCounts& c = generated->counts;
  fmt::print("enumerated {} distinct graphs of up to {} ops over {} variables ({}) in {:.2f} s\n",
             c.graphs, options.max_ops, options.variables,
             options.family == subst::Family::convolutions ? "an image and weights" : "matrices",
             c.enumerate_seconds);
  fmt::print("fingerprinted them in {:.2f} s: {} classes of equal fingerprints\n",
             c.fingerprint_seconds, c.classes);
  fmt::print("candidate rules {}, after variable renaming {}, after subsumption {}, after common "
             "subexpressions {}; {} written, {} with extents finer than the enumeration's ({:.2f} s)\n",
             c.pairs, c.after_renaming, c.after_subsumption, c.after_common,
             generated->rules.size(), c.generalised, c.prune_seconds);
  if (Status written = write_file_atomically(output, subst::print_rules(generated->rules)); !written) {
    return report(written);
  }
  fmt::print("wrote {}; prove them with `kiln subst verify {}`\n", output, output);
  return 0;
}

struct SubstSearchOptions {
  std::string rules_file;
  std::string model_file;
  double relaxation = 1.05;
  int max_expansions = 64;
  bool print = false;
};

// Only rules Z3 proves are searched with; the rest are listed and left out.
int run_subst_search(const SubstSearchOptions& options) {
  Expected<std::vector<subst::Rule>> rules = subst::read_rules_file(options.rules_file);
  if (!rules) return report(rules.status());
  Expected<ImportedModel> model = load_model(options.model_file);
  if (!model) return report(model.status());
  if (Status axioms = subst::prove_axioms_numerically(); !axioms) return report(axioms);
  std::vector<subst::Rule> proved;
  for (subst::Rule& rule : *rules) {
    if (Expected<subst::Proof> proof = subst::prove_rule(rule); !proof) {
      fmt::print("left out: {}\n", proof.status().message());
    } else {
      proved.push_back(std::move(rule));
    }
  }
  const fusion::FusionOptions fusion_options;
  const subst::CostFunction cost = [&](const Graph& graph) -> Expected<double> {
    KILN_ASSIGN_OR_RETURN(const fusion::Partition partition,
                          fusion::partition_graph(graph, fusion_options));
    return partition.estimated_seconds();
  };
  const auto start = std::chrono::steady_clock::now();
  Expected<subst::SearchResult> result = subst::search_substitutions(
      model->graph, proved, cost,
      {.relaxation = options.relaxation, .max_expansions = options.max_expansions});
  if (!result) return report(result.status());
  fmt::print("search with {} proved rules: {} graphs expanded, {} priced{}, {:.2f} s\n",
             proved.size(), result->expanded, result->priced,
             result->stopped_at_limit ? " (stopped at --max-expansions)" : "",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  size_t applications = 0;
  for (const subst::AppliedRewrite& rewrite : result->rewrites) {
    applications += static_cast<size_t>(rewrite.applications);
  }
  fmt::print("estimated {} fused, {} after {} in {}\n", format_seconds(result->initial_cost),
             format_seconds(result->cost), count_noun(applications, "rewrite"),
             count_noun(result->rewrites.size(), "step"));
  for (const subst::AppliedRewrite& rewrite : result->rewrites) {
    fmt::print("  {}: {} -> {}\n", rewrite.rule, format_seconds(rewrite.cost_before),
               format_seconds(rewrite.cost_after));
  }
  if (options.print) fmt::print("{}", print_graph(result->graph));
  return 0;
}

// "graph rewrites: 917 -> 842 nodes; fold-constants, fold-layout (2 rounds), eliminate-reductions
// (none applied)"
std::string format_rewrites(const RewriteReport& report) {
  if (report.rewrites.empty()) return "graph rewrites: off\n";
  std::vector<std::string> parts;
  for (const RewriteSummary& rewrite : report.rewrites) {
    std::string applied = rewrite.rounds_changed == 0   ? " (none applied)"
                          : rewrite.rounds_changed == 1 ? ""
                                                        : fmt::format(" ({} rounds)", rewrite.rounds_changed);
    parts.push_back(rewrite.name + applied);
  }
  std::string text = fmt::format("graph rewrites: {} -> {}; {}\n",
                                 count_noun(static_cast<size_t>(report.nodes_before), "node"),
                                 report.nodes_after, fmt::join(parts, ", "));
  if (const std::optional<SubstitutionSummary>& search = report.substitution) {
    size_t applications = 0;
    for (const SubstitutionStep& step : search->steps) {
      applications += static_cast<size_t>(step.applications);
    }
    text += fmt::format("substitutions: {} in {} by {} proved rules ({} expanded, {} "
                        "priced{}, {})\n",
                        count_noun(applications, "rewrite"),
                        count_noun(search->steps.size(), "step"), search->rules,
                        count_noun(static_cast<size_t>(search->expanded), "graph"), search->priced,
                        search->stopped_at_limit  ? ", stopped at --substitute-max-expansions"
                        : search->stopped_at_time ? ", stopped at --substitute-max-seconds"
                                                  : "",
                        format_seconds(search->seconds));
    for (const SubstitutionStep& step : search->steps) {
      const double saved = step.seconds_before - step.seconds_after;
      text += fmt::format("  {}: estimated {} -> {} ({} {})\n", step.rule,
                          format_seconds(step.seconds_before), format_seconds(step.seconds_after),
                          saved >= 0 ? "saves" : "costs", format_seconds(std::fabs(saved)));
    }
  }
  for (const DecompositionDecision& decision : report.decompositions) {
    text += fmt::format("decompose {} ({}): estimated {} whole, {} decomposed: {}\n",
                        decision.unit, count_noun(static_cast<size_t>(decision.nodes), "node"),
                        format_seconds(decision.seconds_composite),
                        format_seconds(decision.seconds_decomposed),
                        decision.decomposed ? "decomposed" : "kept whole");
  }
  return text;
}

void print_compile_summary(const CompiledModel& model) {
  fmt::print("{}", format_rewrites(model.compiled().rewrites));
  const fusion::Partition& partition = model.compiled().partition;
  size_t nodes = 0;
  for (const fusion::Group& group : partition.groups) nodes += group.nodes.size();
  fmt::print("fusion {}: {} in {} (partitioned in {}; estimated {} per run)\n",
             fusion::fusion_mode_name(partition.mode), count_noun(nodes, "node"),
             count_noun(static_cast<size_t>(partition.num_kernels()), "kernel"), format_seconds(partition.stats.seconds),
             format_seconds(partition.estimated_seconds()));
  const CompileStats& stats = model.stats();
  fmt::print("compiled {} as {} in {} (lowering {}, C++ {}: {} of {} units compiled, the rest "
             "cached)\n",
             count_noun(model.compiled().records.size(), "kernel call"),
             count_noun(static_cast<size_t>(model.program().num_kernels), "distinct kernel"),
             format_seconds(stats.lower_seconds + stats.codegen_seconds),
             format_seconds(stats.lower_seconds), format_seconds(stats.codegen_seconds),
             stats.units_compiled, stats.units);
  fmt::print("arena {} planned for {} of intermediates (no plan can use less than {})\n",
             format_bytes(model.program().arena_bytes), format_bytes(stats.arena_total_bytes),
             format_bytes(stats.arena_live_bound_bytes));
}

// Per-kernel times of `profile`, largest first, summed over steps with one label.
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

// What fusion did to the time of each kernel, measured: every kernel of `fused` next to the
// time its nodes took as kernels of their own in `unfused` (one node per step), from profiles
// of the same interleaved runs. Prints the totals and the kernels that lost and gained most.
void print_fusion_profile(const CompiledGraph& unfused, const runtime::Profile& unfused_profile,
                          const CompiledGraph& fused, const runtime::Profile& fused_profile) {
  std::map<int64_t, double> node_seconds;  // by node id: each mode compiles a clone
  const double unfused_runs = std::max(unfused_profile.runs, 1);
  double unfused_total = 0, unfused_contractions = 0;
  for (size_t s = 0; s < unfused.program->steps.size(); ++s) {
    const double seconds = unfused_profile.step_seconds[s] / unfused_runs;
    unfused_total += seconds;
    const int record = unfused.step_kernel_record[s];
    if (record < 0) continue;
    for (const Node* node : unfused.records[static_cast<size_t>(record)].nodes) {
      node_seconds[node->id()] += seconds;
      if (node->def().fusion_kind == FusionKind::contraction) unfused_contractions += seconds;
    }
  }
  struct Row {
    double fused, apart;
    size_t step;
  };
  std::vector<Row> rows;
  const double fused_runs = std::max(fused_profile.runs, 1);
  double total_fused = 0, total_apart = 0;
  for (size_t s = 0; s < fused.program->steps.size(); ++s) {
    const int record = fused.step_kernel_record[s];
    if (record < 0) continue;
    double apart = 0;
    for (const Node* node : fused.records[static_cast<size_t>(record)].nodes) {
      auto it = node_seconds.find(node->id());
      if (it != node_seconds.end()) apart += it->second;
    }
    rows.push_back({fused_profile.step_seconds[s] / fused_runs, apart, s});
    total_fused += rows.back().fused;
    total_apart += apart;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.fused - a.apart > b.fused - b.apart;
  });
  fmt::print("\nilp kernels against their nodes unfused (profiles of the runs above): {} fused, "
             "{} unfused\n",
             format_seconds(total_fused), format_seconds(total_apart));
  // Fusion leaves a contraction's library call as it is and saves the passes around it, so
  // the unfused run over its contractions bounds the speedup any partition can give.
  if (unfused_contractions > 0) {
    fmt::print("contractions (matmul, conv, spmm) took {} of the unfused run's {}: even with "
               "every other op free, fusion could not run it more than {:.2f}x faster\n",
               format_seconds(unfused_contractions), format_seconds(unfused_total),
               unfused_total / unfused_contractions);
  }
  const auto print_row = [&](const Row& row) {
    fmt::print("  {:>5}  {:>10}  {:>10}  {:>+10.3f} ms  {}\n", row.step, format_seconds(row.fused),
               format_seconds(row.apart), (row.fused - row.apart) * 1e3,
               fused.program->steps[row.step].label);
  };
  constexpr size_t kShown = 12;
  fmt::print("  {:>5}  {:>10}  {:>10}  {:>13}  {}\n", "step", "fused", "unfused", "difference",
             "kernel (slowest against its nodes first)");
  // The kShown slowest against their nodes, then the kShown fastest (all rows when few).
  const size_t head = std::min(kShown, rows.size());
  const size_t tail_start = std::max(head, rows.size() - std::min(kShown, rows.size()));
  for (size_t r = 0; r < head; ++r) print_row(rows[r]);
  if (tail_start > head) fmt::print("  ...\n");
  for (size_t r = tail_start; r < rows.size(); ++r) print_row(rows[r]);
}

// Checks every kernel of `model` against the reference; the largest absolute error, or the
// error naming the first kernel that disagrees.
Expected<double> check_kernels(CompiledModel& model, const std::vector<Array>& inputs) {
  KILN_ASSIGN_OR_RETURN(CheckReport report, model.check(inputs));
  if (!report.ok()) {
    const KernelCheck& bad = report.kernels.back();
    return Status::errorf("check: step {} ({}) disagrees with the reference: {}", bad.step,
                          bad.label, bad.mismatch);
  }
  double worst = 0;
  for (const KernelCheck& kernel : report.kernels) worst = std::max(worst, kernel.max_abs_error);
  return worst;
}

// A graph's inputs encoded once and one buffer per output, for timing compiled programs without
// converting Arrays on every run (for a zoo model, converting every weight can take as long as
// the run). Compiled variants of one graph share them, an output found by its name, so a step
// without its loss writes the full step's buffers: bert-base's Adam step has 1.3 GB of inputs
// and as much of outputs, and `zoo compare --ablate-rewrites` times seven variants.
class RunBuffers {
 public:
  RunBuffers(const Graph& graph, const std::vector<Array>& inputs) {
    for (const Array& input : inputs) {
      input_bytes_.push_back(encode_array(input));
      input_pointers_.push_back(input_bytes_.back().data());
    }
    for (const Value* output : graph.outputs()) add_output(*output);
  }

  std::span<const void* const> inputs() const { return input_pointers_; }

  // The buffer of the output named like `output`, made if there is none.
  void* output(const Value& output) {
    auto found = output_by_name_.find(output.name());
    if (found == output_by_name_.end()) return add_output(output);
    return output_bytes_[found->second].data();
  }

 private:
  void* add_output(const Value& output) {
    output_by_name_.emplace(output.name(), output_bytes_.size());
    return output_bytes_
        .emplace_back(static_cast<size_t>(output.shape().num_elements() *
                                          dtype_size_bytes(output.dtype())))
        .data();
  }

  std::vector<std::vector<std::byte>> input_bytes_;
  std::deque<std::vector<std::byte>> output_bytes_;  // a deque: pointers stay put
  std::map<std::string, size_t> output_by_name_;
  std::vector<const void*> input_pointers_;
};

// One compiled model ready to be timed alone, on buffers it may share with other variants of
// its graph. The caller runs it once before timing (the warm-up: page faults, first touch of
// the arena, OpenMP threads).
class TimedRun {
 public:
  TimedRun(CompiledModel& model, RunBuffers& buffers) : model_(model), buffers_(buffers) {
    for (const Value* output : model.graph().outputs()) {
      output_pointers_.push_back(buffers.output(*output));
    }
  }

  // Seconds one run takes.
  Expected<double> time_one(runtime::Profile* profile) {
    const auto start = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(model_.run_raw(buffers_.inputs(), output_pointers_, profile));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  CompiledModel& model_;
  RunBuffers& buffers_;
  std::vector<void*> output_pointers_;
};

// Times `repeat` runs of the program alone (see TimedRun), sorted.
Expected<std::vector<double>> time_runs(CompiledModel& model, const std::vector<Array>& inputs,
                                        int repeat, runtime::Profile* profile) {
  RunBuffers buffers(model.graph(), inputs);
  TimedRun run(model, buffers);
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    KILN_ASSIGN_OR_RETURN(const double seconds, run.time_one(profile));
    times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  return times;
}

// Compiles `graph`, optionally checks it kernel by kernel, and runs it (timed when asked).
Expected<std::vector<Array>> run_compiled_model(Graph graph, const std::vector<Array>& inputs,
                                                const RunOptions& options) {
  KILN_ASSIGN_OR_RETURN(CompileOptions compile_options, compile_options_from(options.fusion));
  KILN_ASSIGN_OR_RETURN(CompiledModel model,
                        Compiler(std::move(compile_options)).compile(std::move(graph)));
  print_compile_summary(model);
  if (options.check) {
    KILN_ASSIGN_OR_RETURN(const double worst, check_kernels(model, inputs));
    fmt::print("check: all {} agree with the reference (largest abs error {:.3g})\n",
               count_noun(model.compiled().records.size(), "kernel"), worst);
  }
  // The first run is the warm-up, never profiled: it touches the arena's pages for the first
  // time, and the page faults land on whichever kernel writes a region first (ResNet-50's
  // step: 1.41 s per profiled run against 1.03 s timed, a batch norm at 21 ms against 7).
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, model.run(inputs));
  runtime::Profile profile;
  runtime::Profile* profiling = options.profile ? &profile : nullptr;
  if (options.repeat > 0 || profiling != nullptr) {
    KILN_ASSIGN_OR_RETURN(const std::vector<double> times,
                          time_runs(model, inputs, std::max(options.repeat, 1), profiling));
    if (options.repeat > 0) {
      fmt::print("time per run ({} runs after a warm-up): median {}, min {}, max {}\n",
                 options.repeat, format_seconds(times[times.size() / 2]),
                 format_seconds(times.front()), format_seconds(times.back()));
    }
  }
  if (profiling != nullptr) print_profile(model.program(), profile);
  return outputs;
}

int run_run(const RunOptions& options) {
  Expected<ImportedModel> model = load_command_model(options.model, options.shapes, options.freeze);
  if (!model) return report(model.status());
  fmt::print("{}: graph @{}: {}, {} weights, {}\n", options.model, model->graph.name(),
             count_noun(static_cast<size_t>(model->num_data_inputs), "input"),
             model->weights.size(), count_noun(static_cast<size_t>(model->graph.num_nodes()), "node"));
  if (Status size = check_input_size(model->graph); !size) return report(size);
  Expected<std::vector<Array>> inputs = gather_inputs(*model, options);
  if (!inputs) return report(inputs.status());
  for (Array& weight : model->weights) inputs->push_back(std::move(weight));
  const bool compiled = !options.interpret;
  if (!compiled && (options.check || options.profile || options.repeat > 0)) {
    return report(Status::error("--check, --profile and --repeat apply to compiled runs, not "
                                "to --interpret"));
  }
  Expected<std::vector<Array>> outputs = compiled
                                             ? run_compiled_model(model->graph.clone(), *inputs, options)
                                             : interpret(model->graph, *inputs);
  if (!outputs) return report(outputs.status());

  Expected<std::map<std::string, Array>> expected = load_named_tensors(options.expected);
  if (!expected) return report(expected.status());
  bool all_match = true;
  std::vector<NamedArray> named_outputs;
  fmt::print("outputs ({}):\n", compiled ? "compiled" : "reference interpreter, f64");
  for (size_t i = 0; i < outputs->size(); ++i) {
    const Value& value = *model->graph.outputs()[i];
    fmt::print("  {} {}: {}\n", print_value_ref(value), value.type().to_string(),
               format_statistics(compute_statistics((*outputs)[i])));
    auto it = expected->find(value.name());
    if (it != expected->end()) {
      const Comparison comparison =
          compare_arrays((*outputs)[i], it->second, {.atol = options.atol, .rtol = options.rtol});
      fmt::print("    vs expected: max abs error {:.3g}, max rel error {:.3g}: {}\n",
                 comparison.max_abs_error, comparison.max_rel_error,
                 comparison.matches ? "within tolerance" : "MISMATCH, " + comparison.mismatch);
      all_match = all_match && comparison.matches;
      expected->erase(it);
    }
    named_outputs.push_back({value.name(), std::move((*outputs)[i])});
  }
  if (!expected->empty()) {
    return report(Status::errorf("expected values given for '{}', which is not an output",
                                 expected->begin()->first));
  }
  if (!options.output_file.empty()) {
    Status written = write_npz(options.output_file, named_outputs);
    if (!written) return report(written);
    fmt::print("wrote {}\n", options.output_file);
  }
  if (!all_match) {
    std::fprintf(stderr, "kiln: outputs differ from the expected values beyond tolerance\n");
    return kUserError;
  }
  return 0;
}

struct CompileCommandOptions {
  std::string model;
  std::string output_dir;
  std::vector<std::string> shapes;
  bool freeze = false;
  FusionCliOptions fusion;
};

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) return Status::errorf("cannot write {}", path.string());
  return Status::ok();
}

// The plan: the program (buffers, arena offsets, steps) and, per kernel call, the kernel and
// the nodes it computes.
std::string describe_plan(const CompiledModel& model) {
  std::string text = runtime::print_program(model.program());
  text += "\nkernel calls:\n";
  for (const KernelRecord& record : model.compiled().records) {
    std::vector<std::string> nodes;
    for (const Node* node : record.nodes) {
      nodes.push_back(fmt::format("{} -> {}", node->op_name(), print_value_ref(*node->output())));
    }
    text += fmt::format("kernel {}: {}\n", record.program_kernel, fmt::join(nodes, "; "));
  }
  return text;
}

// Writes the C++ source (kernels.cc), the loop IR (kernels.loop) and the plan (plan.txt) of a
// compiled model to `dir`, creating it.
Status write_compiled(const CompiledModel& model, const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::errorf("cannot create {}: {}", dir, error.message());
  KILN_ASSIGN_OR_RETURN(std::string source, model.source());
  std::string loop_ir;
  std::vector<bool> printed(static_cast<size_t>(model.program().num_kernels), false);
  for (const KernelRecord& record : model.compiled().records) {
    if (printed[static_cast<size_t>(record.program_kernel)]) continue;
    printed[static_cast<size_t>(record.program_kernel)] = true;
    std::string schedule = loop::print(record.schedule);
    if (schedule.empty()) schedule = "(none)\n";
    loop_ir += fmt::format("// kernel {}, scheduled by:\n{}{}\n", record.program_kernel, schedule,
                           loop::print(record.kernel));
  }
  const std::filesystem::path path(dir);
  KILN_RETURN_IF_ERROR(write_text(path / "kernels.cc", source));
  KILN_RETURN_IF_ERROR(write_text(path / "kernels.loop", loop_ir));
  return write_text(path / "plan.txt", describe_plan(model));
}

// Per program kernel, its GPU launches: the function, grid x block, and its arguments' count.
std::string format_cuda_launches(const CompiledGraph& compiled) {
  std::string text = fmt::format("\nCUDA ({}, {} bytes of cubin): launches per kernel\n",
                                 compiled.cuda->architecture, compiled.cuda->cubin.size());
  std::vector<bool> printed(compiled.cuda->launches.size(), false);
  for (const KernelRecord& record : compiled.records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (printed[k]) continue;
    printed[k] = true;
    std::vector<std::string_view> nodes;
    for (const Node* node : record.nodes) nodes.push_back(node->op_name());
    text += fmt::format("kernel {} ({}):\n", k, fmt::join(nodes, "+"));
    for (const runtime::CudaLaunch& launch : compiled.cuda->launches[k]) {
      text += fmt::format("  {} grid {} x block {}\n", launch.function,
                          fmt::join(launch.grid, "x"), fmt::join(launch.block, "x"));
    }
  }
  return text;
}

// Compiles `graph` for CUDA and writes the CUDA C (kernels.cu), the cubin (kernels.cubin), the
// GPU-mapped loop IR (kernels.loop) and the launches (launches.txt) to `dir`.
int compile_for_cuda(Graph graph, const CompileOptions& options, const std::string& dir) {
  Expected<RewriteReport> rewrites = rewrite_for_compile(graph, options);
  if (!rewrites) return report(rewrites.status());
  Expected<CompiledGraph> compiled = compile_graph(graph, options);
  if (!compiled) return report(compiled.status());
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return report(Status::errorf("cannot create {}: {}", dir, error.message()));
  std::string loop_ir;
  std::vector<bool> printed(compiled->cuda->launches.size(), false);
  for (const KernelRecord& record : compiled->records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (printed[k]) continue;
    printed[k] = true;
    loop_ir += fmt::format("// kernel {}, mapped onto the GPU\n{}\n", k,
                           loop::print(record.kernel));
  }
  const std::filesystem::path path(dir);
  const std::string launches = format_cuda_launches(*compiled);
  const std::pair<const char*, const std::string*> files[] = {
      {"kernels.cu", &compiled->cuda->source}, {"kernels.cubin", &compiled->cuda->cubin},
      {"kernels.loop", &loop_ir}, {"launches.txt", &launches}};
  for (const auto& [name, text] : files) {
    if (Status written = write_text(path / name, *text); !written) return report(written);
  }
  fmt::print("{} kernels, {} launches, {} bytes of cubin for {}\n",
             compiled->cuda->launches.size(),
             std::accumulate(compiled->cuda->launches.begin(), compiled->cuda->launches.end(),
                             size_t{0}, [](size_t n, const auto& l) { return n + l.size(); }),
             compiled->cuda->cubin.size(), compiled->cuda->architecture);
  fmt::print("wrote {}/kernels.cu, kernels.cubin, kernels.loop, launches.txt\n", dir);
  return 0;
}

// Rewrites `graph` and partitions it as `cli` says, and prints both.
int explain_graph(const Graph& graph, const FusionCliOptions& cli) {
  Expected<CompileOptions> options = compile_options_from(cli);
  if (!options) return report(options.status());
  Graph rewritten = graph.clone();
  Expected<RewriteReport> rewrites = rewrite_for_compile(rewritten, *options);
  if (!rewrites) return report(rewrites.status());
  fmt::print("{}", format_rewrites(*rewrites));
  Expected<fusion::Partition> partition = fusion::partition_graph(rewritten, options->fusion);
  if (!partition) return report(partition.status());
  fmt::print("{}", fusion::explain_partition(rewritten, *partition));
  if (options->device == Device::cuda) {
    Expected<CompiledGraph> compiled =
        compile_groups(rewritten, partition->node_groups(), *options);
    if (!compiled) return report(compiled.status());
    fmt::print("{}", format_cuda_launches(*compiled));
  }
  return 0;
}

int run_explain(const CompileCommandOptions& options) {
  Expected<ImportedModel> loaded = load_command_model(options.model, options.shapes, options.freeze);
  if (!loaded) return report(loaded.status());
  return explain_graph(loaded->graph, options.fusion);
}

int run_compile(const CompileCommandOptions& options) {
  Expected<ImportedModel> loaded = load_command_model(options.model, options.shapes, options.freeze);
  if (!loaded) return report(loaded.status());
  Expected<CompileOptions> compile_options = compile_options_from(options.fusion);
  if (!compile_options) return report(compile_options.status());
  if (compile_options->device == Device::cuda) {
    return compile_for_cuda(std::move(loaded->graph), *compile_options, options.output_dir);
  }
  Expected<CompiledModel> model = Compiler(*compile_options).compile(std::move(loaded->graph));
  if (!model) return report(model.status());
  print_compile_summary(*model);
  if (Status written = write_compiled(*model, options.output_dir); !written) {
    return report(written);
  }
  fmt::print("wrote {}/kernels.cc, kernels.loop, plan.txt\n", options.output_dir);
  return 0;
}

struct ExportOptions {
  std::string model;
  std::string output_file;
  std::vector<std::string> shapes;
};

// Loads a model (IR text or ONNX) and writes it as ONNX; an ONNX model's weights go back in as
// initializers, so importing and exporting gives a self-contained model with static shapes.
int run_export(const ExportOptions& options) {
  Expected<OnnxImportOptions> import_options = import_options_from_shapes(options.shapes);
  if (!import_options) return report(import_options.status());
  Expected<ImportedModel> model = load_model(options.model, *import_options);
  if (!model) return report(model.status());
  Status written = export_onnx_file(*model, options.output_file);
  if (!written) return report(written.with_context(options.model));
  fmt::print("wrote {}: graph @{}: {}, {} weights, {} (ONNX opset {})\n", options.output_file,
             model->graph.name(), count_noun(static_cast<size_t>(model->num_data_inputs), "input"),
             model->weights.size(),
             count_noun(static_cast<size_t>(model->graph.num_nodes()), "Kiln node"),
             kOnnxExportOpset);
  return 0;
}

int run_conformance(const std::string& dir, const std::string& filter, bool verbose,
                    bool compiled) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return report(Status::errorf("{}: not a directory", dir));
  }
  int counts[3] = {0, 0, 0};
  const ConformanceOptions options{
      .tolerance = {}, .engine = compiled ? Engine::compiled : Engine::interpreter};
  for (const std::string& case_dir : conformance_case_dirs(dir)) {
    if (std::filesystem::path(case_dir).filename().string().find(filter) == std::string::npos) {
      continue;
    }
    const CaseResult result = run_conformance_case(case_dir, options);
    ++counts[static_cast<int>(result.outcome)];
    if (result.outcome == CaseOutcome::failed ||
        (verbose && result.outcome == CaseOutcome::unsupported)) {
      fmt::print("{:<12} {}: {}\n", outcome_name(result.outcome), result.name, result.detail);
    }
  }
  fmt::print("conformance: {} passed, {} failed, {} unsupported\n",
             counts[static_cast<int>(CaseOutcome::passed)],
             counts[static_cast<int>(CaseOutcome::failed)],
             counts[static_cast<int>(CaseOutcome::unsupported)]);
  return 0;
}

void print_op(const OpDef& def) {
  fmt::print("{}({}{}) : {}\n  {}\n", def.name, fmt::join(def.input_names, ", "),
             def.max_inputs == kVariadic ? "..." : "", fusion_kind_name(def.fusion_kind),
             def.summary);
  for (const AttrSpec& spec : def.attrs) {
    const std::string default_text =
        spec.default_value ? "= " + print_attr_value(*spec.default_value) : "(required)";
    fmt::print("    {} : {} {}  {}\n", spec.name, attr_kind_name(spec.kind), default_text,
               spec.doc);
  }
}

int run_ops(const std::string& name, bool onnx) {
  if (onnx) {
    const std::vector<std::string> types = supported_onnx_op_types();
    fmt::print("{}\n{} ONNX op types import\n", fmt::join(types, " "), types.size());
    return 0;
  }
  if (!name.empty()) {
    const OpDef* def = find_op(name);
    if (def == nullptr) return report(Status::errorf("unknown op '{}'", name));
    print_op(*def);
    return 0;
  }
  for (const OpDef& def : all_op_defs()) {
    fmt::print("{:<22} {:<12} {}\n", def.name, fusion_kind_name(def.fusion_kind), def.summary);
  }
  fmt::print("{} ops\n", all_op_defs().size());
  return 0;
}

// "109,512,762".
std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n);
  for (auto i = static_cast<ptrdiff_t>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(digits.begin() + i, ',');
  }
  return digits;
}

int run_zoo_list() {
  fmt::print("{:<14} {:>13} {:>12} {:>12}  {}\n", "model", "parameters", "fwd GFLOP", "step GFLOP",
             "architecture and default sizes");
  for (const PresetInfo& preset : zoo_presets()) {
    Expected<ModelInstance> model = build_model(preset.name);
    if (!model) return report(model.status());
    Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
    if (!step) return report(step.status());
    fmt::print("{:<14} {:>13} {:>12.4g} {:>12.4g}  {}\n", preset.name,
               with_thousands(model->parameter_count()), graph_flops(model->loss.graph) * 1e-9,
               graph_flops(step->graph) * 1e-9, preset.description);
  }
  fmt::print("fwd: the forward pass with the loss; step: forward, backward and Adam update, "
             "counted on the training-step graph\n");
  return 0;
}

// "sgd", "adam", "adamw" or "none" (gradients only).
Expected<std::optional<Optimizer>> parse_optimizer(const std::string& name) {
  if (name == "none") return std::optional<Optimizer>();
  if (name == "sgd") return std::optional<Optimizer>(Optimizer::sgd());
  if (name == "adam") return std::optional<Optimizer>(Optimizer::adam());
  if (name == "adamw") return std::optional<Optimizer>(Optimizer::adamw());
  return Status::errorf("unknown optimizer '{}' (sgd, adam, adamw or none)", name);
}

struct ZooOptions {
  std::string name;
  ModelOptions model;
  bool train = false;
  std::string optimizer = "adam";
  bool inference = false;
  bool without_loss = false;  // with --train: the loss-free step (passes/eliminate_loss.h)
  bool freeze = false;        // parameters and state as constants (passes/freeze_inputs.h)
  std::string output_file;
  RunOptions run;  // for `zoo run`: --check, --profile, --repeat
  int compare_repeat = 5;  // for `zoo compare`
  bool ablate_rewrites = false;  // for `zoo compare`
  bool ablate_substitution = false;  // for `zoo compare`
  TrainingLoopOptions loop;      // for `zoo train`
  bool eliminate_loss = true;    // for `zoo train`
};

// The training step: forward, backward and the optimizer's update in one graph.
int run_zoo_show_step(const ZooOptions& options, const ModelInstance& model) {
  Expected<std::optional<Optimizer>> optimizer = parse_optimizer(options.optimizer);
  if (!optimizer) return report(optimizer.status());
  Expected<TrainingStep> step = build_training_step(model, *optimizer);
  if (!step) return report(step.status());
  fmt::print("// {} training step ({}): inputs after the first {} are {}; outputs: the loss, then "
             "per parameter its {}{}\n",
             model.preset, options.optimizer, step->num_forward_inputs,
             !*optimizer                    ? "none"
             : (*optimizer)->needs_step_count() ? "the learning rate, the step count and the state"
                                                : "the learning rate and the state",
             *optimizer ? "updated value" : "gradient",
             *optimizer ? ", then the updated state" : "");
  fmt::print("{}", print_graph(step->graph));
  return 0;
}

int run_zoo_show(const ZooOptions& options) {
  Expected<ModelInstance> model = build_model(options.name, options.model);
  if (!model) return report(model.status());
  if (options.train) return run_zoo_show_step(options, *model);
  const ModelGraph& graph = options.inference ? model->inference : model->loss;
  std::vector<std::string> data;
  size_t weights = 0;
  for (size_t i = 0; i < graph.input_kinds.size(); ++i) {
    if (graph.input_kinds[i] == InputKind::data) {
      data.push_back(print_value_ref(*graph.graph.inputs()[i]));
    } else {
      ++weights;
    }
  }
  fmt::print("// {}: data inputs {}; the other {} inputs are parameters and state\n", model->preset,
             fmt::join(data, ", "), weights);
  fmt::print("{}", print_graph(graph.graph));
  return 0;
}

// The graph a zoo command works on: the loss graph (default), the inference graph, or the
// training step.
Expected<Graph> zoo_graph(const ZooOptions& options, const ModelInstance& model) {
  if (!options.train) {
    const ModelGraph& source = options.inference ? model.inference : model.loss;
    Graph graph = source.graph.clone();
    if (options.freeze) {
      KILN_ASSIGN_OR_RETURN(const auto weights, model.weights(source));
      KILN_RETURN_IF_ERROR(freeze_inputs(graph, weights));
    }
    return graph;
  }
  KILN_ASSIGN_OR_RETURN(std::optional<Optimizer> optimizer, parse_optimizer(options.optimizer));
  KILN_ASSIGN_OR_RETURN(TrainingStep step, build_training_step(model, optimizer));
  if (options.without_loss) KILN_RETURN_IF_ERROR(eliminate_loss(step.graph).status());
  return std::move(step.graph);
}

// The inputs of zoo_graph's graph: the preset's own values; for the training step, those of a
// first step (models/model.h: first_step_inputs).
Expected<std::vector<Array>> zoo_inputs(const ZooOptions& options, const ModelInstance& model,
                                        const Graph& graph) {
  if (options.train) return first_step_inputs(model, graph);
  const ModelGraph& source = options.inference ? model.inference : model.loss;
  KILN_ASSIGN_OR_RETURN(std::vector<Array> values, model.input_values(source));
  if (!options.freeze) return values;
  std::vector<Array> data;  // frozen: the parameters and state are constants now
  for (size_t i = 0; i < values.size(); ++i) {
    if (source.input_kinds[i] == InputKind::data) data.push_back(std::move(values[i]));
  }
  return data;
}

std::string zoo_graph_kind(const ZooOptions& options) {
  if (options.train) {
    return fmt::format("training step ({}{})", options.optimizer,
                       options.without_loss ? ", without the loss" : "");
  }
  return fmt::format("{}{}", options.inference ? "inference graph" : "loss graph",
                     options.freeze ? " (parameters frozen)" : "");
}

// "bert-tiny training step (adam): 917 nodes"
void announce(const ZooOptions& options, const ModelInstance& model, const Graph& graph) {
  fmt::print("{} {}: {}\n", model.preset, zoo_graph_kind(options),
             count_noun(static_cast<size_t>(graph.num_nodes()), "node"));
}

// What most zoo commands start from: the preset, its graph (announced) and, when asked, the
// graph's inputs.
struct ZooWork {
  ModelInstance model;
  Graph graph;
  std::vector<Array> inputs;
};

Expected<ZooWork> prepare_zoo_work(const ZooOptions& options, bool with_inputs) {
  KILN_ASSIGN_OR_RETURN(ModelInstance model, build_model(options.name, options.model));
  KILN_ASSIGN_OR_RETURN(Graph graph, zoo_graph(options, model));
  announce(options, model, graph);
  std::vector<Array> inputs;
  if (with_inputs) {
    KILN_ASSIGN_OR_RETURN(inputs, zoo_inputs(options, model, graph));
  }
  return ZooWork{std::move(model), std::move(graph), std::move(inputs)};
}

// Compiles a preset's graph and writes what `kiln compile` writes when -o is given.
int run_zoo_compile(const ZooOptions& options) {
  Expected<ZooWork> work = prepare_zoo_work(options, /*with_inputs=*/false);
  if (!work) return report(work.status());
  Expected<CompileOptions> compile_options = compile_options_from(options.run.fusion);
  if (!compile_options) return report(compile_options.status());
  if (compile_options->device == Device::cuda) {
    if (options.output_file.empty()) return report(Status::error("--device cuda needs -o DIR"));
    return compile_for_cuda(std::move(work->graph), *compile_options, options.output_file);
  }
  Expected<CompiledModel> compiled = Compiler(*compile_options).compile(std::move(work->graph));
  if (!compiled) return report(compiled.status());
  print_compile_summary(*compiled);
  if (options.output_file.empty()) return 0;
  if (Status written = write_compiled(*compiled, options.output_file); !written) {
    return report(written);
  }
  fmt::print("wrote {}/kernels.cc, kernels.loop, plan.txt\n", options.output_file);
  return 0;
}

int run_zoo_explain(const ZooOptions& options) {
  Expected<ZooWork> work = prepare_zoo_work(options, /*with_inputs=*/false);
  if (!work) return report(work.status());
  return explain_graph(work->graph, options.run.fusion);
}

// Compiles a preset's graph unfused, fused greedily and fused by the ILP, checks each against
// the reference when asked, times them, and prints one row per mode: kernels, the cost
// model's estimate of time and bytes moved, the arena's peak, compile time, the median
// measured time (with the fastest and slowest run) and the speedup over unfused. The modes
// take turns (off, greedy, ilp, off, ...), so a change in the machine's load during the
// measurement touches every mode alike. With --ablate-rewrites the rows are the ILP's plans
// without graph rewrites, with all of them, and with all but one, each in turn (for a training
// step, loss elimination is one of them: "all but eliminate-loss" is the full step); the
// speedup is over no rewrites. With --ablate-substitution they are the ILP's plans without and
// with the substitution search (--freeze makes its merges of weights pay).
int run_zoo_compare(const ZooOptions& options) {
  Expected<ModelInstance> model = build_model(options.name, options.model);
  if (!model) return report(model.status());
  Expected<Graph> graph = zoo_graph(options, *model);
  if (!graph) return report(graph.status());
  Expected<std::vector<Array>> inputs = zoo_inputs(options, *model, *graph);
  if (!inputs) return report(inputs.status());
  const int repeat = options.compare_repeat;
  // The ablation of a training step includes loss elimination: the rows with it compile the
  // loss-free step (the same inputs, the outputs without the loss).
  std::optional<Graph> loss_free;
  if (options.ablate_rewrites && options.train && !options.without_loss) {
    loss_free.emplace(graph->clone());
    if (Expected<int> eliminated = eliminate_loss(*loss_free); !eliminated) {
      return report(eliminated.status());
    }
  }
  const Graph& with_all_rewrites = loss_free ? *loss_free : *graph;
  struct ModeRun {
    std::string label;
    CompileOptions compile_options;
    const Graph* graph;
    std::optional<CompiledModel> compiled = std::nullopt;
    double compile_seconds = 0;
    std::string check = {};
    std::optional<TimedRun> run = std::nullopt;
    std::vector<double> times = {};
    runtime::Profile profile = {};
  };
  Expected<CompileOptions> cli_options = compile_options_from(options.run.fusion);
  if (!cli_options) return report(cli_options.status());
  std::vector<ModeRun> modes;
  if (options.ablate_rewrites) {
    CompileOptions none = *cli_options;
    none.rewrites.enabled = false;
    CompileOptions all = *cli_options;
    all.rewrites = RewriteOptions{};
    modes.push_back({.label = "no rewrites", .compile_options = none, .graph = &*graph});
    modes.push_back({.label = "all rewrites", .compile_options = all, .graph = &with_all_rewrites});
    if (loss_free) {
      modes.push_back(
          {.label = "all but eliminate-loss", .compile_options = all, .graph = &*graph});
    }
    for (std::string_view name : rewrite_names()) {
      CompileOptions but_one = all;
      but_one.rewrites.disabled.emplace(name);
      modes.push_back({.label = fmt::format("all but {}", name),
                       .compile_options = but_one,
                       .graph = &with_all_rewrites});
    }
  } else if (options.ablate_substitution) {
    for (const bool substitute : {false, true}) {
      CompileOptions mode_options = *cli_options;
      mode_options.rewrites.substitute = substitute;
      modes.push_back({.label = substitute ? "substitution" : "no substitution",
                       .compile_options = mode_options,
                       .graph = &*graph});
    }
  } else {
    for (fusion::FusionMode mode : {fusion::FusionMode::off, fusion::FusionMode::greedy,
                                    fusion::FusionMode::ilp}) {
      CompileOptions mode_options = *cli_options;
      mode_options.fusion.mode = mode;
      modes.push_back({.label = std::string(fusion::fusion_mode_name(mode)),
                       .compile_options = mode_options,
                       .graph = &*graph});
    }
  }
  // Each TimedRun refers to its entry's model: `modes` is not resized from here on.
  RunBuffers buffers(*graph, *inputs);
  for (ModeRun& entry : modes) {
    const auto start = std::chrono::steady_clock::now();
    Expected<CompiledModel> compiled = Compiler(entry.compile_options).compile(entry.graph->clone());
    if (!compiled) return report(compiled.status());
    entry.compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    entry.compiled.emplace(std::move(*compiled));
    if (options.run.check) {
      Expected<double> worst = check_kernels(*entry.compiled, *inputs);
      if (!worst) return report(worst.status());
      entry.check = fmt::format("  ok ({:.3g})", *worst);
    }
    entry.run.emplace(*entry.compiled, buffers);
    if (Expected<double> warm = entry.run->time_one(nullptr); !warm) return report(warm.status());
  }
  // Each turn runs a mode twice and times the second run: a training loop runs the same step
  // over and over, so a step starts with the caches as its previous step left them, not as
  // another mode's program did.
  for (int r = 0; r < repeat; ++r) {
    for (ModeRun& entry : modes) {
      Expected<double> seconds = entry.run->time_one(nullptr);
      if (seconds) seconds = entry.run->time_one(options.run.profile ? &entry.profile : nullptr);
      if (!seconds) return report(seconds.status());
      entry.times.push_back(*seconds);
    }
  }
  fmt::print("{} {}: {}; median of {} after a warm-up, modes interleaved\n", model->preset,
             zoo_graph_kind(options), count_noun(static_cast<size_t>(graph->num_nodes()), "node"),
             count_noun(static_cast<size_t>(repeat), "run"));
  size_t width = 0;
  for (const ModeRun& entry : modes) width = std::max(width, entry.label.size());
  fmt::print("{:<{}} {:>8} {:>11} {:>12} {:>11} {:>11} {:>11} {:>23} {:>7}{}\n",
             options.ablate_rewrites || options.ablate_substitution ? "ilp with" : "fusion", width, "kernels", "est. time",
             "est. bytes", "arena peak", "compile", "median", "(min - max)", "speedup",
             options.run.check ? "  check (largest abs error)" : "");
  double first_median = 0;  // the speedups are over the first row
  for (ModeRun& entry : modes) {
    std::sort(entry.times.begin(), entry.times.end());
    const double median = entry.times[entry.times.size() / 2];
    if (first_median == 0) first_median = median;
    const fusion::Partition& partition = entry.compiled->compiled().partition;
    fmt::print("{:<{}} {:>8} {:>11} {:>12} {:>11} {:>11} {:>11} {:>23} {:>6.2f}x{}\n",
               entry.label, width, partition.num_kernels(),
               format_seconds(partition.estimated_seconds()),
               format_bytes(partition.estimated_bytes()),
               format_bytes(entry.compiled->program().arena_bytes),
               format_seconds(entry.compile_seconds), format_seconds(median),
               fmt::format("({} - {})", format_seconds(entry.times.front()),
                           format_seconds(entry.times.back())),
               first_median / median, entry.check);
  }
  if (options.run.profile) print_fusion_profile(modes.front().compiled->compiled(),
                                                modes.front().profile,
                                                modes.back().compiled->compiled(),
                                                modes.back().profile);
  return 0;
}

// Compiles a preset (loss graph, inference graph or training step) and runs it on the preset's
// deterministic inputs.
int run_zoo_run(const ZooOptions& options) {
  Expected<ZooWork> work = prepare_zoo_work(options, /*with_inputs=*/true);
  if (!work) return report(work.status());
  const std::string first_output = work->graph.outputs()[0]->name();
  Expected<std::vector<Array>> outputs =
      run_compiled_model(std::move(work->graph), work->inputs, options.run);
  if (!outputs) return report(outputs.status());
  // The loss (or the logits) says whether the run is sane; the other outputs are many.
  fmt::print("output %{} {}: {}\n", first_output, (*outputs)[0].type().to_string(),
             format_statistics(compute_statistics((*outputs)[0])));
  return 0;
}

// The protocol of `kiln zoo bench`, for a harness that times Kiln beside other systems in one
// process tree (bench/peers): compile once, run once, write the inputs and outputs, print
// "ready"; then each line read from standard input is a count N, answered by one line
// "seconds T1 ... TN" of N timed runs. End of input ends the command.
int run_zoo_bench(const ZooOptions& options) {
  Expected<ZooWork> work = prepare_zoo_work(options, /*with_inputs=*/true);
  if (!work) return report(work.status());
  const Graph& graph = work->graph;
  std::vector<Array>& inputs = work->inputs;
  Expected<CompileOptions> compile_options = compile_options_from(options.run.fusion);
  if (!compile_options) return report(compile_options.status());
  std::vector<NamedArray> saved;
  for (size_t i = 0; i < inputs.size(); ++i) {
    saved.push_back({graph.inputs()[i]->name(), inputs[i]});
  }
  const auto start = std::chrono::steady_clock::now();
  Expected<CompiledModel> compiled = Compiler(*compile_options).compile(graph.clone());
  if (!compiled) return report(compiled.status());
  const double compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_compile_summary(*compiled);
  Expected<std::vector<Array>> outputs = compiled->run(inputs);
  if (!outputs) return report(outputs.status());
  // The first output (the loss, or the logits) and each updated parameter: enough to check the
  // step against another implementation. The optimizer's state follows from the same gradients
  // and would double the file.
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string& name = graph.outputs()[i]->name();
    const std::string_view next = ".next";
    const bool updated_parameter =
        name.ends_with(next) &&
        work->model.inputs.contains(name.substr(0, name.size() - next.size()));
    if (i == 0 || updated_parameter) {
      saved.push_back({"output/" + name, std::move((*outputs)[i])});
    }
  }
  outputs->clear();
  if (Status written = write_npz(options.output_file, saved); !written) return report(written);
  saved.clear();
  RunBuffers buffers(graph, inputs);
  inputs.clear();
  TimedRun run(*compiled, buffers);
  // The roofline's inputs: the graph's flops, the bytes it cannot avoid moving (each input
  // read once, each output written once) and this machine's measured peaks.
  Expected<cost::DeviceProfile> device = cost::host_device_profile();
  if (!device) return report(device.status());
  int64_t io_bytes = 0;
  for (const auto* values : {&graph.inputs(), &graph.outputs()}) {
    for (const Value* value : *values) {
      io_bytes += value->shape().num_elements() * dtype_size_bytes(value->dtype());
    }
  }
  fmt::print("graph flops {:.6g}\ngraph io bytes {}\n", graph_flops(graph), io_bytes);
  fmt::print("device matmul flops {:.6g}\ndevice bandwidth {:.6g}\n", device->matmul_flops,
             device->memory_bandwidth);
  fmt::print("compile seconds {:.6f}\nready\n", compile_seconds);
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    int count = 0;
    const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), count);
    if (error != std::errc() || end != line.data() + line.size() || count < 1) {
      return report(Status::errorf("zoo bench: expected a positive run count, read '{}'", line));
    }
    std::string times = "seconds";
    for (int r = 0; r < count; ++r) {
      Expected<double> seconds = run.time_one(nullptr);
      if (!seconds) return report(seconds.status());
      times += fmt::format(" {:.9f}", *seconds);
    }
    fmt::print("{}\n", times);
    std::fflush(stdout);
  }
  return 0;
}

// Compiles a preset's training step with and without its loss and runs a training loop over it
// (compiler/training_loop.h) on the preset's fixed batch: the loss printed on the steps that
// compute it, then the time of the steps with and without the loss.
int run_zoo_train(const ZooOptions& options) {
  if (options.optimizer == "none") {
    return report(Status::error("a training loop needs an optimizer (sgd, adam or adamw)"));
  }
  Expected<ModelInstance> model = build_model(options.name, options.model);
  if (!model) return report(model.status());
  ZooOptions step_options = options;
  step_options.train = true;
  Expected<Graph> graph = zoo_graph(step_options, *model);
  if (!graph) return report(graph.status());
  announce(step_options, *model, *graph);
  Expected<std::vector<Array>> inputs = zoo_inputs(step_options, *model, *graph);
  if (!inputs) return report(inputs.status());
  Expected<CompileOptions> compile_options = compile_options_from(options.run.fusion);
  if (!compile_options) return report(compile_options.status());
  Expected<CompiledTrainingStep> step =
      Compiler(*compile_options).compile_training_step(std::move(*graph), options.eliminate_loss);
  if (!step) return report(step.status());
  const int full_kernels = step->full_step().compiled().partition.num_kernels();
  if (CompiledModel* loss_free = step->loss_free_step()) {
    fmt::print("loss elimination: the steps that do not log the loss run {} fewer, in {} "
               "(the full step: {})\n",
               count_noun(static_cast<size_t>(step->loss_nodes_eliminated()), "node"),
               count_noun(static_cast<size_t>(loss_free->compiled().partition.num_kernels()),
                          "kernel"),
               full_kernels);
  } else {
    fmt::print("loss elimination off: every step computes the loss; {} kernels\n", full_kernels);
  }
  Expected<TrainingLoopResult> result = run_training_loop(*step, *inputs, options.loop);
  if (!result) return report(result.status());
  for (const LoggedLoss& logged : result->losses) {
    fmt::print("step {:>{}}  loss {:.6g}\n", logged.step,
               fmt::formatted_size("{}", options.loop.steps), logged.loss);
  }
  // The first step pays for page faults and thread start-up; the medians leave it out.
  auto describe = [](std::vector<double> seconds, bool first_included) {
    if (first_included) seconds.erase(seconds.begin());
    if (seconds.empty()) return std::string("none timed");
    std::sort(seconds.begin(), seconds.end());
    return fmt::format("median {} over {}", format_seconds(seconds[seconds.size() / 2]),
                       count_noun(seconds.size(), "step"));
  };
  const bool first_logs_loss = options.loop.loss_every == 1 || options.loop.steps == 1;
  fmt::print("time per step (the first left out): with the loss {}; without {}\n",
             describe(result->seconds_with_loss, first_logs_loss),
             describe(result->seconds_without_loss, !first_logs_loss));
  return 0;
}

int run_zoo_export(const ZooOptions& options) {
  ModelOptions model_options = options.model;
  model_options.portable = true;
  Expected<ModelInstance> model = build_model(options.name, model_options);
  if (!model) return report(model.status());
  Status written = export_inference_onnx(*model, options.output_file);
  if (!written) return report(written);
  fmt::print("wrote {}: {} inference graph, {} parameters (ONNX opset {})\n", options.output_file,
             model->preset, with_thousands(model->parameter_count()), kOnnxExportOpset);
  return 0;
}

// Every input of the loss graph by name, its outputs as output/loss and output/logits, and each
// parameter's gradient as grad/NAME, for comparing with another implementation (tests/zoo/).
int run_zoo_dump(const ZooOptions& options) {
  Expected<ModelInstance> model = build_model(options.name, options.model);
  if (!model) return report(model.status());
  Expected<std::vector<Array>> inputs = model->input_values(model->loss);
  if (!inputs) return report(inputs.status());
  Expected<std::vector<Array>> outputs = interpret(model->loss.graph, *inputs);
  if (!outputs) return report(outputs.status());
  Expected<TrainingStep> step = build_training_step(*model, std::nullopt);
  if (!step) return report(step.status());
  Expected<std::vector<Array>> gradients = interpret(step->graph, *inputs);
  if (!gradients) return report(gradients.status());
  const double loss = (*outputs)[0][0];
  std::vector<NamedArray> entries;
  for (size_t i = 0; i < inputs->size(); ++i) {
    entries.push_back({model->loss.graph.inputs()[i]->name(), std::move((*inputs)[i])});
  }
  entries.push_back({"output/loss", std::move((*outputs)[0])});
  entries.push_back({"output/logits", std::move((*outputs)[1])});
  for (size_t i = 0; i < step->parameters.size(); ++i) {
    entries.push_back({"grad/" + step->parameters[i], std::move((*gradients)[i + 1])});
  }
  Status written = write_npz(options.output_file, entries);
  if (!written) return report(written);
  fmt::print("wrote {}: {} loss-graph inputs and outputs; loss {}\n", options.output_file,
             model->preset, loss);
  return 0;
}

// The size and seed options every `kiln zoo` command that builds a model takes.
// --inference, --train and --optimizer: which of a preset's graphs a zoo command works on.
void add_graph_choice(CLI::App* command, ZooOptions& zoo) {
  command->add_flag("--inference", zoo.inference, "The inference graph (logits, no loss)");
  command->add_flag("--train", zoo.train, "The training step (forward, backward, update)")
      ->excludes("--inference");
  command->add_option("--optimizer", zoo.optimizer, "With --train: sgd, adam, adamw or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "none"}));
  command->add_flag("--without-loss", zoo.without_loss,
                    "With --train: the step without its loss output (loss elimination), as a "
                    "training loop runs it between the steps that log the loss")
      ->needs("--train");
  command->add_flag("--freeze", zoo.freeze,
                    "Compile the parameters and state in as constants, so that what is computed "
                    "from them alone (a concatenation of weights made by a substitution) is "
                    "computed once, when compiling; the graph's inputs are then its data")
      ->excludes("--train");
}

void add_model_options(CLI::App* cmd, ZooOptions& options) {
  cmd->add_option("name", options.name, "Model preset (kiln zoo lists them)")->required();
  cmd->add_option("--batch", options.model.batch, "Batch size")->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", options.model.seq_len, "Sequence length (bert, xml-cnn)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--image-size", options.model.image_size, "Image height and width (vit, resnet)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--nodes", options.model.nodes, "Graph nodes (gcn)")->check(CLI::PositiveNumber);
  cmd->add_option("--avg-degree", options.model.avg_degree, "Average node degree (gcn)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options.model.seed, "Seed of the weights and data")
      ->capture_default_str();
}

int run(int argc, char** argv) {
  CLI::App app{"Kiln: a deep-learning compiler that fuses operators.", "kiln"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1");
  app.set_help_all_flag("--help-all", "Show help for all subcommands");

  CheckOptions check;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "Parse and verify an IR text file, then run the reference interpreter on random "
               "inputs and print each output's shape and statistics.");
  check_cmd->add_option("file", check.file, "IR text file (.kiln)")->required();
  check_cmd->add_option("--seed", check.seed, "Seed for the random inputs")->capture_default_str();
  check_cmd
      ->add_option("--int-range", check.int_range,
                   "Integer inputs are drawn from [0, N)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));

  std::string subst_rules_file;
  CLI::App* subst_cmd = app.add_subcommand(
      "subst", "Graph substitution rules: rule files of source and target graphs.");
  subst_cmd->require_subcommand(1);
  CLI::App* subst_check_cmd = subst_cmd->add_subcommand(
      "check", "Read a rule file and compare each rule's source and target graphs on random "
               "inputs in the reference interpreter (a fingerprint, not a proof).");
  subst_check_cmd->add_option("file", subst_rules_file, "Rule file (.rules)")->required();
  SubstSearchOptions subst_search;
  CLI::App* subst_search_cmd = subst_cmd->add_subcommand(
      "search", "Search for the rewrites of a model (IR text or ONNX) by the rules of a rule "
                "file that lower the fusion partitioner's estimate (TASO's search, scored after "
                "fusion); only rules Z3 proves are used.");
  subst_search_cmd->add_option("rules", subst_search.rules_file, "Rule file (.rules)")->required();
  subst_search_cmd->add_option("model", subst_search.model_file, "Model file (.onnx, or IR text)")
      ->required();
  subst_search_cmd
      ->add_option("--relaxation", subst_search.relaxation,
                   "Explore graphs estimated up to this factor above the best so far")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 10.0));
  subst_search_cmd
      ->add_option("--max-expansions", subst_search.max_expansions,
                   "Stop after expanding this many graphs")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  subst_search_cmd->add_flag("--print", subst_search.print, "Print the best graph in IR text");
  subst::GeneratorOptions generator;
  std::string generated_file;
  CLI::App* subst_generate_cmd = subst_cmd->add_subcommand(
      "generate", "Enumerate small graphs, pair those with equal fingerprints on random inputs "
                  "and prune the implied pairs (TASO's generator); print the counts at each "
                  "stage and write the rules.");
  subst_generate_cmd->add_option("--max-ops", generator.max_ops, "Ops per enumerated graph")
      ->capture_default_str()
      ->check(CLI::Range(1, 3));
  subst_generate_cmd->add_option("--variables", generator.variables, "Input variables")
      ->capture_default_str()
      ->check(CLI::Range(1, 3));
  subst_generate_cmd
      ->add_option("--family", generator.family,
                   "What the variables are: matrices (square) or convolutions (an image x0 "
                   "and convolution weights, with conv among the ops)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, subst::Family>{{"matrices", subst::Family::matrices},
                                               {"convolutions", subst::Family::convolutions}},
          CLI::ignore_case))
      ->default_str("matrices");
  subst_generate_cmd->add_option("-o,--output", generated_file, "Rule file to write")->required();
  int subst_max_extent = 3;
  CLI::App* subst_verify_cmd = subst_cmd->add_subcommand(
      "verify", "Prove each rule of a rule file with Z3: both graphs evaluated symbolically at "
                "every assignment of small extents, every result element proved equal over the "
                "reals. Rules that cannot be proved are rejected and listed.");
  subst_verify_cmd->add_option("file", subst_rules_file, "Rule file (.rules)")->required();
  subst_verify_cmd
      ->add_option("--max-extent", subst_max_extent,
                   "Each example extent takes every value from 1 to N")
      ->capture_default_str()
      ->check(CLI::Range(1, 6));

  std::string print_file;
  CLI::App* print_cmd = app.add_subcommand(
      "print", "Load a model (IR text, or ONNX imported) and print it in canonical IR text.");
  print_cmd->add_option("file", print_file, "Model file (.onnx, or IR text)")->required();

  std::string opt_file;
  std::string opt_passes;
  std::string pass_help = "Comma-separated passes to run in order:";
  for (const PassInfo& pass : all_passes()) {
    pass_help += fmt::format(" {} ({});", pass.name, pass.summary);
  }
  CLI::App* opt_cmd = app.add_subcommand(
      "opt", "Run graph passes on a model (IR text or ONNX) and print the result in IR text. "
             "KILN_DUMP_AFTER=PASS prints the graph after that pass, KILN_TIME_PASSES=1 times "
             "each pass (both to stderr).");
  opt_cmd->add_option("file", opt_file, "Model file (.onnx, or IR text)")->required();
  opt_cmd->add_option("--passes", opt_passes, pass_help)->required();

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Compile a model (ONNX file or IR text) for this CPU, run it and print its outputs; "
             "compare them with expected values if given.");
  run_cmd->add_option("model", run.model, "Model file (.onnx, or IR text)")->required();
  run_cmd->add_option("--input", run.inputs,
                      "Input tensor: NAME=FILE (.npy or TensorProto .pb) or FILE.npz; inputs "
                      "not given are random");
  run_cmd->add_option("--expected", run.expected,
                      "Expected outputs, as for --input; the run fails beyond tolerance");
  run_cmd->add_option("--shape", run.shapes,
                      "Static shape of an ONNX input with symbolic dimensions: NAME=1x128");
  run_cmd->add_option("--output", run.output_file, "Write the outputs to this .npz file");
  run_cmd->add_option("--seed", run.seed, "Seed for random inputs")->capture_default_str();
  run_cmd->add_option("--atol", run.atol, "Absolute tolerance against --expected")
      ->capture_default_str();
  run_cmd->add_option("--rtol", run.rtol, "Relative tolerance against --expected")
      ->capture_default_str();
  run_cmd->add_flag("--interpret", run.interpret,
                    "Run the fp64 reference interpreter instead of compiled code");
  run_cmd->add_flag("--check", run.check,
                    "Compare every kernel's outputs with the reference evaluation of its nodes on "
                    "the same inputs; fail naming the first kernel that disagrees");
  run_cmd->add_flag("--profile", run.profile,
                    "Print the time of every kernel, largest first, over the runs after the "
                    "warm-up (one, or --repeat N)");
  run_cmd->add_option("--repeat", run.repeat,
                      "Run N more times after the first (warm-up) run and print the median, min "
                      "and max time per run (compile time apart)")
      ->check(CLI::NonNegativeNumber);
  add_fusion_options(run_cmd, run.fusion);
  add_freeze_flag(run_cmd, run.freeze);

  CompileCommandOptions compile_options;
  CLI::App* compile_cmd = app.add_subcommand(
      "compile", "Compile a model and write the generated C++ (kernels.cc), the kernels' loop IR "
                 "(kernels.loop) and the memory plan and kernel list (plan.txt) to a directory.");
  compile_cmd->add_option("model", compile_options.model, "Model file (.onnx, or IR text)")
      ->required();
  compile_cmd->add_option("--output,-o", compile_options.output_dir, "Directory to write")
      ->required();
  compile_cmd->add_option("--shape", compile_options.shapes,
                          "Static shape of an ONNX input with symbolic dimensions: NAME=1x128");
  add_fusion_options(compile_cmd, compile_options.fusion);
  add_freeze_flag(compile_cmd, compile_options.freeze);

  CompileCommandOptions explain_options;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "Partition a model into fused kernels and explain it: each kernel's nodes, "
                 "estimated time and bytes saved, and every edge between kernels with the "
                 "reason it was cut.");
  explain_cmd->add_option("model", explain_options.model, "Model file (.onnx, or IR text)")
      ->required();
  explain_cmd->add_option("--shape", explain_options.shapes,
                          "Static shape of an ONNX input with symbolic dimensions: NAME=1x128");
  add_fusion_options(explain_cmd, explain_options.fusion);
  add_freeze_flag(explain_cmd, explain_options.freeze);

  ExportOptions export_options;
  CLI::App* export_cmd = app.add_subcommand(
      "export", "Load a model (IR text or ONNX) and write it as an ONNX model that other "
                "runtimes can run; weights become initializers.");
  export_cmd->add_option("model", export_options.model, "Model file (.onnx, or IR text)")
      ->required();
  export_cmd->add_option("--output,-o", export_options.output_file, "ONNX file to write")
      ->required();
  export_cmd->add_option("--shape", export_options.shapes,
                         "Static shape of an ONNX input with symbolic dimensions: NAME=1x128");

  std::string conformance_dir;
  std::string conformance_filter;
  bool conformance_verbose = false;
  bool conformance_compiled = false;
  CLI::App* conformance_cmd = app.add_subcommand(
      "conformance", "Run ONNX backend test cases (folders holding model.onnx and "
                     "test_data_set_0/) and print a pass/fail/unsupported summary.");
  conformance_cmd->add_option("dir", conformance_dir, "Folder of test case folders")->required();
  conformance_cmd->add_option("--filter", conformance_filter,
                              "Only cases whose name contains this text");
  conformance_cmd->add_flag("--compiled", conformance_compiled,
                            "Run the cases compiled (one kernel per node) instead of with the "
                            "reference interpreter");
  conformance_cmd->add_flag("--verbose,-v", conformance_verbose,
                            "Also list unsupported cases with the reason");

  std::string op_name;
  CLI::App* ops_cmd =
      app.add_subcommand("ops", "List the ops Kiln knows, or show one op's inputs and attributes.");
  ops_cmd->add_option("name", op_name, "Op to describe");
  bool ops_onnx = false;
  ops_cmd->add_flag("--onnx", ops_onnx, "List the ONNX op types the importer supports instead")
      ->excludes(ops_cmd->get_option("name"));

  ZooOptions zoo;
  CLI::App* zoo_cmd = app.add_subcommand(
      "zoo", "List the model zoo's presets with parameter counts and flops, or build one: print "
             "its graph, export it to ONNX, or dump its weights, data and outputs.");
  zoo_cmd->require_subcommand(0, 1);
  CLI::App* zoo_show_cmd = zoo_cmd->add_subcommand(
      "show", "Print a preset's graph in IR text: the forward pass with the loss (default), the "
              "inference graph, or the training step.");
  add_model_options(zoo_show_cmd, zoo);
  zoo_show_cmd->add_flag("--inference", zoo.inference, "The inference graph (logits, no loss)");
  zoo_show_cmd->add_flag("--train", zoo.train, "The training step (forward, backward, update)")
      ->excludes("--inference");
  zoo_show_cmd
      ->add_option("--optimizer", zoo.optimizer,
                   "With --train: sgd (momentum 0.9), adam, adamw (weight decay 0.01), or none "
                   "(the step returns the gradients)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "none"}));
  CLI::App* zoo_run_cmd = zoo_cmd->add_subcommand(
      "run", "Compile a preset (the loss graph by default, the inference graph, or the training "
             "step) and run it on the preset's own inputs; with --check, --profile, --repeat as "
             "for `kiln run`.");
  add_model_options(zoo_run_cmd, zoo);
  add_graph_choice(zoo_run_cmd, zoo);
  zoo_run_cmd->add_flag("--check", zoo.run.check,
                        "Compare every kernel with the reference evaluation of its nodes");
  zoo_run_cmd->add_flag("--profile", zoo.run.profile,
                        "Print the time of every kernel, over the runs after the warm-up");
  zoo_run_cmd->add_option("--repeat", zoo.run.repeat, "Time N runs after a warm-up run")
      ->check(CLI::NonNegativeNumber);
  add_fusion_options(zoo_run_cmd, zoo.run.fusion);
  CLI::App* zoo_compile_cmd = zoo_cmd->add_subcommand(
      "compile", "Compile a preset's graph (loss graph, inference graph or training step) and "
                 "print the kernel count, compile time and memory plan; with -o, write the "
                 "generated code and plan as `kiln compile` does.");
  add_model_options(zoo_compile_cmd, zoo);
  add_graph_choice(zoo_compile_cmd, zoo);
  zoo_compile_cmd->add_option("--output,-o", zoo.output_file, "Directory to write");
  add_fusion_options(zoo_compile_cmd, zoo.run.fusion);
  CLI::App* zoo_compare_cmd = zoo_cmd->add_subcommand(
      "compare", "Compile a preset's graph (loss graph, inference graph or training step) "
                 "unfused, fused greedily and fused by the ILP; check each against the "
                 "reference with --check; time each; print kernels, estimated time and bytes, "
                 "arena peak, compile time, median time and speedup over unfused.");
  add_model_options(zoo_compare_cmd, zoo);
  add_graph_choice(zoo_compare_cmd, zoo);
  zoo_compare_cmd->add_flag("--check", zoo.run.check,
                            "Compare every kernel of every mode with the reference evaluation");
  CLI::Option* compare_profile = zoo_compare_cmd->add_flag("--profile", zoo.run.profile,
                            "Time every kernel and print the ILP's kernels against the unfused "
                            "time of their nodes, the ones fusion made slower first");
  zoo_compare_cmd->add_option("--repeat", zoo.compare_repeat,
                              "Timed runs per mode, after a warm-up; the modes take turns")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  zoo_compare_cmd->add_flag("--ablate-rewrites", zoo.ablate_rewrites,
                            "Instead of the fusion modes, compare the ILP's plans with no graph "
                            "rewrites, with all, and with all but one in turn (with --train, "
                            "loss elimination is one of them)")
      ->excludes(compare_profile);
  zoo_compare_cmd
      ->add_flag("--ablate-substitution", zoo.ablate_substitution,
                 "Instead of the fusion modes, compare the ILP's plans without and with the "
                 "substitution search (with --freeze, merged weights are folded once)")
      ->excludes("--ablate-rewrites")
      ->excludes(compare_profile);
  add_rewrite_options(zoo_compare_cmd, zoo.run.fusion);
  CLI::App* zoo_train_cmd = zoo_cmd->add_subcommand(
      "train", "Compile a preset's training step with and without its loss and run a training "
               "loop on the preset's fixed batch: each step's updated weights and optimizer state "
               "feed the next; the loss is computed (and printed) every --loss-every steps and "
               "on the last, and the other steps run the loss-free step.");
  add_model_options(zoo_train_cmd, zoo);
  zoo_train_cmd
      ->add_option("--optimizer", zoo.optimizer,
                   "sgd (momentum 0.9), adam, or adamw (weight decay 0.01)")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  zoo_train_cmd->add_option("--steps", zoo.loop.steps, "Training steps to run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  zoo_train_cmd->add_option("--loss-every", zoo.loop.loss_every, "Compute the loss every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  zoo_train_cmd->add_flag("--loss-elimination,!--no-loss-elimination", zoo.eliminate_loss,
                          "Run the steps that do not log the loss without computing it (on by "
                          "default)");
  add_fusion_options(zoo_train_cmd, zoo.run.fusion);
  CLI::App* zoo_explain_cmd = zoo_cmd->add_subcommand(
      "explain", "Partition a preset's graph (loss graph, inference graph or training step) into "
                 "fused kernels and explain it, as `kiln explain` does.");
  add_model_options(zoo_explain_cmd, zoo);
  add_graph_choice(zoo_explain_cmd, zoo);
  add_fusion_options(zoo_explain_cmd, zoo.run.fusion);
  CLI::App* zoo_export_cmd = zoo_cmd->add_subcommand(
      "export", "Write a preset's inference graph as ONNX, parameters as initializers.");
  add_model_options(zoo_export_cmd, zoo);
  zoo_export_cmd->add_option("--output,-o", zoo.output_file, "ONNX file to write")->required();
  CLI::App* zoo_bench_cmd = zoo_cmd->add_subcommand(
      "bench", "For benchmark harnesses (bench/peers): compile a preset's graph once, run it, "
               "write its inputs by name and its first output and updated parameters as "
               "output/NAME to an .npz file, and print 'ready'; then answer each line N read "
               "from standard input with 'seconds' and the times of N runs.");
  add_model_options(zoo_bench_cmd, zoo);
  add_graph_choice(zoo_bench_cmd, zoo);
  zoo_bench_cmd->add_option("--output,-o", zoo.output_file, ".npz file to write")->required();
  add_fusion_options(zoo_bench_cmd, zoo.run.fusion);
  CLI::App* zoo_dump_cmd = zoo_cmd->add_subcommand(
      "dump", "Write a preset's loss-graph inputs (parameters and data, by name) and its outputs "
              "(output/loss, output/logits from the reference interpreter) to an .npz file, for "
              "cross-checking with another implementation.");
  add_model_options(zoo_dump_cmd, zoo);
  zoo_dump_cmd->add_option("--output,-o", zoo.output_file, ".npz file to write")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse failure is a usage error.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  if (check_cmd->parsed()) return run_check(check);
  if (subst_check_cmd->parsed()) return run_subst_check(subst_rules_file);
  if (subst_verify_cmd->parsed()) return run_subst_verify(subst_rules_file, subst_max_extent);
  if (subst_search_cmd->parsed()) return run_subst_search(subst_search);
  if (subst_generate_cmd->parsed()) return run_subst_generate(generator, generated_file);
  if (print_cmd->parsed()) return run_print(print_file);
  if (opt_cmd->parsed()) return run_opt(opt_file, opt_passes);
  if (ops_cmd->parsed()) return run_ops(op_name, ops_onnx);
  if (run_cmd->parsed()) return run_run(run);
  if (compile_cmd->parsed()) return run_compile(compile_options);
  if (explain_cmd->parsed()) return run_explain(explain_options);
  if (export_cmd->parsed()) return run_export(export_options);
  if (zoo_show_cmd->parsed()) return run_zoo_show(zoo);
  if (zoo_export_cmd->parsed()) return run_zoo_export(zoo);
  if (zoo_run_cmd->parsed()) return run_zoo_run(zoo);
  if (zoo_compile_cmd->parsed()) return run_zoo_compile(zoo);
  if (zoo_explain_cmd->parsed()) return run_zoo_explain(zoo);
  if (zoo_compare_cmd->parsed()) return run_zoo_compare(zoo);
  if (zoo_train_cmd->parsed()) return run_zoo_train(zoo);
  if (zoo_dump_cmd->parsed()) return run_zoo_dump(zoo);
  if (zoo_bench_cmd->parsed()) return run_zoo_bench(zoo);
  if (zoo_cmd->parsed()) return run_zoo_list();
  if (conformance_cmd->parsed()) {
    return run_conformance(conformance_dir, conformance_filter, conformance_verbose,
                           conformance_compiled);
  }
  return kUsageError;
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  try {
    return kiln::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", e.what());
    return 3;
  }
}
