// kiln check, print, opt, ops and export: model files and the graph IR.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "driver/model_io.h"
#include "driver/model_source.h"
#include "frontend/onnx_export.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "interp/statistics.h"
#include "ir/op.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "loop/loop_passes.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "passes/pass_manager.h"
#include "support/files.h"

namespace kiln::cli {
namespace {

struct CheckOptions {
  std::string file;
  uint64_t seed = 0;
  int64_t int_range = 4;
};

int run_check(const CheckOptions& options) {
  Expected<std::string> text = read_file(options.file);
  if (!text) return report(text.status());
  Expected<Graph> graph = parse_graph(*text, options.file);
  if (!graph) return report(graph.status());
  fmt::print("{}: graph @{}: {}, {}, {}; verified\n", options.file, graph->name(),
             count_noun(graph->inputs().size(), "input"),
             count_noun(static_cast<size_t>(graph->num_nodes()), "node"),
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

struct FileOptions {
  std::string file;
  std::string passes;  // opt
};

int run_print(const FileOptions& options) {
  Expected<ImportedModel> model = load_model(options.file);
  if (!model) return report(model.status());
  if (!model->weights.empty()) {
    fmt::print("// inputs after the first {} are the model's weights\n", model->num_data_inputs);
  }
  fmt::print("{}", print_graph(model->graph));
  return 0;
}

// Runs loop passes by name on every kernel of a loop IR file (kernels.loop) and prints them.
int run_loop_opt(const FileOptions& options, const std::vector<std::string>& names) {
  Expected<std::string> text = read_file(options.file);
  if (!text) return report(text.status());
  Expected<std::vector<loop::Kernel>> kernels = loop::parse_kernels(*text, options.file);
  if (!kernels) return report(kernels.status());
  const PassManagerOptions environment = PassManagerOptions::from_environment();
  const loop::LoopPassOptions pass_options{.dump_after = environment.dump_after,
                                           .time_passes = environment.time_passes};
  for (size_t k = 0; k < kernels->size(); ++k) {
    loop::Kernel& kernel = (*kernels)[k];
    Expected<std::vector<loop::LoopPassRun>> runs =
        loop::run_loop_passes(kernel, names, pass_options);
    if (!runs) return report(runs.status().with_context(fmt::format("kernel {}", k)));
    fmt::print("{}{}", k == 0 ? "" : "\n", loop::print(kernel));
  }
  return 0;
}

// Runs graph passes by name on a model, or loop passes on a loop IR file (.loop), and prints
// the result.
int run_opt(const FileOptions& options) {
  Expected<std::vector<std::string>> names = parse_pass_list(options.passes);
  if (!names) return report(names.status().with_context("--passes"));
  if (options.file.ends_with(".loop")) return run_loop_opt(options, *names);
  Expected<ImportedModel> model = load_model(options.file);
  if (!model) return report(model.status());
  Expected<std::vector<PassRun>> runs =
      run_passes(model->graph, *names, PassManagerOptions::from_environment());
  if (!runs) return report(runs.status());
  fmt::print("{}", print_graph(model->graph));
  return 0;
}

struct OpsOptions {
  std::string name;
  bool onnx = false;
};

// How the op computes under --precision bf16 or fp16 (passes/precision.h).
std::string_view mixed_precision_text(PrecisionPolicy policy) {
  switch (policy) {
    case PrecisionPolicy::follow: return "in its operands' dtype";
    case PrecisionPolicy::low: return "in bf16 or f16, accumulating in f32";
    case PrecisionPolicy::f32: return "in f32";
  }
  return "";
}

void print_op(const OpDef& def) {
  fmt::print("{}({}{}) : {}\n  {}\n  under mixed precision: {}\n", def.name,
             fmt::join(def.input_names, ", "), def.max_inputs == kVariadic ? "..." : "",
             fusion_kind_name(def.fusion_kind), def.summary,
             mixed_precision_text(def.precision));
  for (const AttrSpec& spec : def.attrs) {
    const std::string default_text =
        spec.default_value ? "= " + print_attr_value(*spec.default_value) : "(required)";
    fmt::print("    {} : {} {}  {}\n", spec.name, attr_kind_name(spec.kind), default_text,
               spec.doc);
  }
}

int run_ops(const OpsOptions& options) {
  if (options.onnx) {
    const std::vector<std::string> types = supported_onnx_op_types();
    fmt::print("{}\n{} ONNX op types import\n", fmt::join(types, " "), types.size());
    return 0;
  }
  if (!options.name.empty()) {
    const OpDef* def = find_op(options.name);
    if (def == nullptr) return report(Status::errorf("unknown op '{}'", options.name));
    print_op(*def);
    return 0;
  }
  for (const OpDef& def : all_op_defs()) {
    fmt::print("{:<22} {:<12} {}\n", def.name, fusion_kind_name(def.fusion_kind), def.summary);
  }
  fmt::print("{} ops\n", all_op_defs().size());
  return 0;
}

struct ExportOptions {
  std::string model;
  std::vector<std::string> shapes;
  std::string output_file;
};

// Loads a model (IR text or ONNX) and writes it as ONNX; an ONNX model's weights go back in as
// initializers, so importing and exporting gives a self-contained model with static shapes.
int run_export(const ExportOptions& options) {
  Expected<OnnxImportOptions> import_options = import_options_from_shapes(options.shapes);
  if (!import_options) return report(import_options.status());
  Expected<ImportedModel> loaded = load_model(options.model, *import_options);
  if (!loaded) return report(loaded.status());
  const ImportedModel& model = *loaded;
  Status written = export_onnx_file(model, options.output_file);
  if (!written) return report(written.with_context(options.model));
  fmt::print("wrote {}: graph @{}: {}, {} weights, {} (ONNX opset {})\n", options.output_file,
             model.graph.name(), count_noun(static_cast<size_t>(model.num_data_inputs), "input"),
             model.weights.size(),
             count_noun(static_cast<size_t>(model.graph.num_nodes()), "Kiln node"),
             kOnnxExportOpset);
  return 0;
}

}  // namespace

void add_ir_commands(CLI::App& app, Action& action) {
  auto check = std::make_shared<CheckOptions>();
  CLI::App* check_cmd = app.add_subcommand(
      "check",
      "Parse and verify an IR text file, then run the reference interpreter on random "
      "inputs and print each output's shape and statistics.");
  check_cmd->add_option("file", check->file, "IR text file (.kiln)")->required();
  add_seed(check_cmd, check->seed, "Seed for the random inputs");
  check_cmd->add_option("--int-range", check->int_range, "Integer inputs are drawn from [0, N)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  on_parsed(check_cmd, action, check, run_check);

  auto print = std::make_shared<FileOptions>();
  CLI::App* print_cmd = app.add_subcommand(
      "print", "Load a model (IR text, or ONNX imported) and print it in canonical IR text.");
  add_model_argument(print_cmd, print->file, ModelArgument::file);
  on_parsed(print_cmd, action, print, run_print);

  auto opt = std::make_shared<FileOptions>();
  std::string pass_help = "Comma-separated passes to run in order. On graphs:";
  for (const PassInfo& pass : all_passes()) {
    pass_help += fmt::format(" {} ({});", pass.name, pass.summary);
  }
  pass_help += " On loop IR:";
  for (const loop::LoopPassInfo& pass : loop::all_loop_passes()) {
    pass_help += fmt::format(" {} ({});", pass.name, pass.summary);
  }
  CLI::App* opt_cmd = app.add_subcommand(
      "opt",
      "Run graph passes on a model (IR text or ONNX), or loop passes on the kernels of a "
      "loop IR file (.loop, as kiln compile and --dump-after write it), and print the "
      "result. KILN_DUMP_AFTER=PASS prints the result after that pass, "
      "KILN_TIME_PASSES=1 times each pass (both to stderr).");
  opt_cmd->add_option("file", opt->file, "Model file (.onnx, or IR text), or loop IR (.loop)")
      ->required();
  opt_cmd->add_option("--passes", opt->passes, pass_help)->required();
  on_parsed(opt_cmd, action, opt, run_opt);

  auto ops = std::make_shared<OpsOptions>();
  CLI::App* ops_cmd =
      app.add_subcommand("ops", "List the ops Kiln knows, or show one op's inputs and attributes.");
  ops_cmd->add_option("name", ops->name, "Op to describe");
  ops_cmd->add_flag("--onnx", ops->onnx, "List the ONNX op types the importer supports instead")
      ->excludes(ops_cmd->get_option("name"));
  on_parsed(ops_cmd, action, ops, run_ops);

  auto exported = std::make_shared<ExportOptions>();
  CLI::App* export_cmd =
      app.add_subcommand("export",
                         "Load a model (IR text or ONNX) and write it as an ONNX model that other "
                         "runtimes can run; weights become initializers.");
  add_model_argument(export_cmd, exported->model, ModelArgument::file);
  add_shapes(export_cmd, exported->shapes);
  add_output(export_cmd, exported->output_file, "ONNX file to write")->required();
  on_parsed(export_cmd, action, exported, run_export);
}

}  // namespace kiln::cli
