#include "passes/pass_manager.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/common_subexpressions.h"
#include "passes/dead_code.h"
#include "passes/decompose.h"
#include "passes/eliminate_reductions.h"
#include "passes/fold_constants.h"
#include "passes/fold_layout.h"

namespace kiln {
namespace {

constexpr PassInfo kPasses[] = {
    {"dce", "remove nodes whose results reach no graph output", eliminate_dead_code},
    {"cse", "merge nodes applying the same op and attributes to the same inputs",
     eliminate_common_subexpressions},
    {"fold-constants", "evaluate nodes whose inputs are all constants at compile time",
     fold_constants},
    {"fold-layout",
     "fold transposes, reshapes, broadcasts and copies into their readers' indexing",
     fold_layout},
    {"eliminate-reductions",
     "merge batch sums into matmuls and nested reductions into one; drop reductions over "
     "extent-1 and broadcast axes",
     eliminate_reductions},
    {"decompose",
     "write composites (softmax, log_softmax, layer_norm, batch_norm_train, the losses) as "
     "primitive ops",
     decompose_all_composites},
};

}  // namespace

std::span<const PassInfo> all_passes() { return kPasses; }

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& pass : kPasses) {
    if (pass.name == name) return &pass;
  }
  return nullptr;
}

PassManagerOptions PassManagerOptions::from_environment() {
  PassManagerOptions options;
  if (const char* dump = std::getenv("KILN_DUMP_AFTER")) options.dump_after = dump;
  if (const char* time = std::getenv("KILN_TIME_PASSES")) {
    options.time_passes = std::string_view(time) != "" && std::string_view(time) != "0";
  }
  return options;
}

Expected<std::vector<PassRun>> run_passes(Graph& graph, std::span<const std::string> names,
                                          const PassManagerOptions& options) {
  std::vector<const PassInfo*> passes;
  for (const std::string& name : names) {
    const PassInfo* pass = find_pass(name);
    if (pass == nullptr) return Status::errorf("unknown pass '{}'", name);
    passes.push_back(pass);
  }
  std::vector<PassRun> runs;
  for (const PassInfo* pass : passes) {
    const auto start = std::chrono::steady_clock::now();
    const bool changed = pass->run(graph);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    runs.push_back({std::string(pass->name), changed, seconds});
    if (options.time_passes) {
      fmt::print(stderr, "pass {:<12} {:10.3f} ms{}\n", pass->name, seconds * 1e3,
                 changed ? "  changed" : "");
    }
    if (options.verify_each) {
      if (Status valid = verify(graph); !valid) {
        return Status::errorf(ErrorCode::internal,
                              "internal compiler error: pass '{}' left an invalid graph: {}",
                              pass->name, valid.message());
      }
    }
    if (options.dump_after == pass->name) {
      fmt::print(stderr, "// after pass {}\n{}", pass->name, print_graph(graph));
    }
  }
  return runs;
}

Expected<std::vector<std::string>> parse_pass_list(std::string_view text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view name = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (name.empty()) return Status::errorf("empty pass name in '{}'", text);
    names.emplace_back(name);
    if (comma == std::string_view::npos) return names;
    start = comma + 1;
  }
}

}  // namespace kiln
