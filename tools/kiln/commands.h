// The `kiln` command groups, one file each: each adds its subcommands to the program's
// CLI::App, and the one the command line names sets the Action that main runs.
#pragma once

#include <CLI/CLI.hpp>

#include "cli.h"

namespace kiln::cli {

// check, print, opt, ops, export: model files and the IR (cmd_ir.cc).
void add_ir_commands(CLI::App& app, Action& action);
// run (cmd_run.cc).
void add_run_command(CLI::App& parent, Action& action, ModelArgument model);
// compile and explain (cmd_compile.cc).
void add_compile_commands(CLI::App& parent, Action& action, ModelArgument model);
// bench: the timing protocol for benchmark harnesses (cmd_bench.cc).
void add_bench_command(CLI::App& parent, Action& action, ModelArgument model);
// zoo: list, show, export, dump, compare, train, and run, compile, explain and bench for a
// preset, which are the top-level commands on zoo:NAME (cmd_zoo.cc, cmd_compare.cc).
void add_zoo_commands(CLI::App& app, Action& action);
void add_compare_command(CLI::App& zoo, Action& action);
// subst check, verify, search, generate (cmd_subst.cc).
void add_subst_commands(CLI::App& app, Action& action);
// conformance (cmd_conformance.cc).
void add_conformance_command(CLI::App& app, Action& action);

}  // namespace kiln::cli
