// kiln conformance: ONNX's backend test cases, run interpreted or compiled.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "driver/conformance.h"

namespace kiln::cli {
namespace {

struct ConformanceCommandOptions {
  std::string dir;
  std::string filter;
  bool verbose = false;
  bool compiled = false;
};

int run_conformance(const ConformanceCommandOptions& command) {
  const std::string& dir = command.dir;
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return report(Status::errorf("{}: not a directory", dir));
  }
  int counts[3] = {0, 0, 0};
  const ConformanceOptions options{
      .tolerance = {}, .engine = command.compiled ? Engine::compiled : Engine::interpreter};
  for (const std::string& case_dir : conformance_case_dirs(dir)) {
    const std::string name = std::filesystem::path(case_dir).filename().string();
    if (name.find(command.filter) == std::string::npos) continue;
    const CaseResult result = run_conformance_case(case_dir, options);
    ++counts[static_cast<int>(result.outcome)];
    if (result.outcome == CaseOutcome::failed ||
        (command.verbose && result.outcome == CaseOutcome::unsupported)) {
      fmt::print("{:<12} {}: {}\n", outcome_name(result.outcome), result.name, result.detail);
    }
  }
  fmt::print("conformance: {} passed, {} failed, {} unsupported\n",
             counts[static_cast<int>(CaseOutcome::passed)],
             counts[static_cast<int>(CaseOutcome::failed)],
             counts[static_cast<int>(CaseOutcome::unsupported)]);
  return 0;
}

}  // namespace

void add_conformance_command(CLI::App& app, Action& action) {
  auto conformance = std::make_shared<ConformanceCommandOptions>();
  CLI::App* command =
      app.add_subcommand("conformance",
                         "Run ONNX backend test cases (folders holding model.onnx and "
                         "test_data_set_0/) and print a pass/fail/unsupported summary.");
  command->add_option("dir", conformance->dir, "Folder of test case folders")->required();
  command->add_option("--filter", conformance->filter, "Only cases whose name contains this text");
  command->add_flag("--compiled", conformance->compiled,
                    "Run the cases compiled (one kernel per node) instead of with the reference "
                    "interpreter");
  command->add_flag("--verbose,-v", conformance->verbose,
                    "Also list unsupported cases with the reason");
  on_parsed(command, action, conformance, run_conformance);
}

}  // namespace kiln::cli
