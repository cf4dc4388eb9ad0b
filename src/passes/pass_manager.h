// The pass manager: graph passes by name, run in sequence with the verifier after each.
//
// A pass is a free function `bool pass(Graph&)` (returning whether it changed the graph) given a
// kebab-case name here, so pipelines are readable lists of names and `kiln opt --passes=a,b`
// can run any of them on IR text. After each pass the manager verifies the graph (a pass that
// leaves an invalid graph is a compiler bug, reported naming the pass), can print the graph
// after a named pass (KILN_DUMP_AFTER=cse) and can time every pass (KILN_TIME_PASSES=1), both
// to stderr.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

struct PassInfo {
  std::string_view name;     // kebab-case, as in pipelines
  std::string_view summary;  // one line, for help text
  bool (*run)(Graph&);
};

// Every registered pass, in a fixed order.
std::span<const PassInfo> all_passes();
const PassInfo* find_pass(std::string_view name);  // nullptr if unknown

struct PassManagerOptions {
  bool verify_each = true;
  std::string dump_after;  // a pass name; the graph is printed to stderr after each run of it
  bool time_passes = false;

  // Defaults, with dump_after from KILN_DUMP_AFTER and time_passes from KILN_TIME_PASSES.
  static PassManagerOptions from_environment();
};

struct PassRun {
  std::string name;
  bool changed = false;
  double seconds = 0;
};

// Runs the named passes in order. Unknown names are an error before anything runs.
Expected<std::vector<PassRun>> run_passes(Graph& graph, std::span<const std::string> names,
                                          const PassManagerOptions& options = {});

// "dce,cse" -> {"dce", "cse"}; empty entries are an error.
Expected<std::vector<std::string>> parse_pass_list(std::string_view text);

}  // namespace kiln
