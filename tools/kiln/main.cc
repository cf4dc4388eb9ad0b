// The `kiln` command line. Thin by design: parse arguments, call the library, print. Each group
// of commands lives in a file of its own (commands.h); the options they share are defined once
// (cli.h). Nothing crashes: library errors arrive as Status values, and an escaping exception
// is reported as an internal error (exit 3).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"

namespace kiln::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"Kiln: a deep-learning compiler that fuses operators.", "kiln"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln 0.1");
  app.set_help_all_flag("--help-all", "Show help for all subcommands");

  Action action;
  add_ir_commands(app, action);
  add_run_command(app, action, ModelArgument::file_or_zoo);
  add_compile_commands(app, action, ModelArgument::file_or_zoo);
  add_bench_command(app, action, ModelArgument::file_or_zoo);
  add_zoo_commands(app, action);
  add_subst_commands(app, action);
  add_conformance_command(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; every other parse failure is a usage error.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  return action ? action() : kUsageError;
}

}  // namespace
}  // namespace kiln::cli

int main(int argc, char** argv) {
  try {
    return kiln::cli::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", e.what());
    return 3;
  }
}
