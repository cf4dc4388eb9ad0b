// The `kiln` command line. Thin by design: parse arguments, call the library, print.
//
// Exit codes: 0 success, 1 user error (bad file, invalid graph, failed evaluation),
// 2 usage error (unknown subcommand or option). Nothing crashes: library errors arrive as
// Status values, and any escaping exception is reported as an internal error (exit 3).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "interp/statistics.h"
#include "ir/op.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "support/files.h"

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

int run_print(const std::string& file) {
  Expected<Graph> graph = load_graph(file);
  if (!graph) return report(graph.status());
  fmt::print("{}", print_graph(*graph));
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

int run_ops(const std::string& name) {
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

  std::string print_file;
  CLI::App* print_cmd = app.add_subcommand(
      "print", "Parse and verify an IR text file and print it in canonical form.");
  print_cmd->add_option("file", print_file, "IR text file (.kiln)")->required();

  std::string op_name;
  CLI::App* ops_cmd =
      app.add_subcommand("ops", "List the ops Kiln knows, or show one op's inputs and attributes.");
  ops_cmd->add_option("name", op_name, "Op to describe");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse failure is a usage error.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  if (check_cmd->parsed()) return run_check(check);
  if (print_cmd->parsed()) return run_print(print_file);
  if (ops_cmd->parsed()) return run_ops(op_name);
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
