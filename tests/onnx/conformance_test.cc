// The ONNX conformance gate: runs every case of ONNX's own backend node tests (and its small
// multi-node models) from ../shared/onnx-node-tests through import and the reference
// interpreter. tests/onnx/known_failures.txt lists every case that does not pass, with its
// outcome; the test fails when a case's outcome differs from the list (a regression, or a fix
// whose entry should be removed) and prints the line to put in the list.
//
// The same cases run compiled (one kernel per node, through the system C++ compiler): every
// case the interpreter passes must pass compiled too, except those listed in
// tests/onnx/known_compiled_failures.txt. The compiled run is split into shards, separate
// tests, so that CTest runs them side by side.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "driver/conformance.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() {
  const char* dir = std::getenv("KILN_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(".");
}

// The suite folder: $KILN_ONNX_NODE_TESTS, or ../shared/onnx-node-tests beside the source tree.
fs::path suite_dir() {
  if (const char* dir = std::getenv("KILN_ONNX_NODE_TESTS")) return dir;
  return source_dir() / ".." / "shared" / "onnx-node-tests";
}

// "node/test_acos" -> "unsupported", from lines "node/test_acos unsupported  # reason".
std::map<std::string, std::string> read_known_failures(const fs::path& path) {
  std::map<std::string, std::string> known;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, outcome;
    if (words >> name >> outcome) known[name] = outcome;
  }
  return known;
}

TEST(OnnxConformance, EveryCaseHasItsListedOutcome) {
  const fs::path suite = suite_dir();
  if (!fs::is_directory(suite / "node")) GTEST_SKIP() << "no ONNX node tests at " << suite;
  const fs::path list_path = source_dir() / "tests" / "onnx" / "known_failures.txt";
  std::map<std::string, std::string> known = read_known_failures(list_path);
  ASSERT_FALSE(known.empty()) << "cannot read " << list_path;

  int counts[3] = {0, 0, 0};
  for (const char* group : {"node", "simple"}) {
    for (const CaseResult& result : run_conformance_suite((suite / group).string())) {
      ++counts[static_cast<int>(result.outcome)];
      const std::string name = std::string(group) + "/" + result.name;
      const std::string outcome = outcome_name(result.outcome);
      auto it = known.find(name);
      const std::string listed = it == known.end() ? "passed" : it->second;
      if (it != known.end()) known.erase(it);
      if (outcome == listed) continue;
      ADD_FAILURE() << name << ": " << outcome << ", but the list says " << listed << "\n  "
                    << result.detail << "\n  list line: "
                    << (outcome == "passed" ? "(remove the entry)" : name + " " + outcome);
    }
  }
  for (const auto& [name, outcome] : known) {
    ADD_FAILURE() << "known_failures.txt lists " << name << ", which is not a case";
  }
  std::printf("ONNX conformance: %d passed, %d failed, %d unsupported\n",
              counts[static_cast<int>(CaseOutcome::passed)],
              counts[static_cast<int>(CaseOutcome::failed)],
              counts[static_cast<int>(CaseOutcome::unsupported)]);
}

constexpr int kCompiledShards = 4;

class OnnxConformanceCompiled : public ::testing::TestWithParam<int> {};

TEST_P(OnnxConformanceCompiled, InterpreterPassesAlsoPassCompiled) {
  const fs::path suite = suite_dir();
  if (!fs::is_directory(suite / "node")) GTEST_SKIP() << "no ONNX node tests at " << suite;
  const std::map<std::string, std::string> known =
      read_known_failures(source_dir() / "tests" / "onnx" / "known_failures.txt");
  const std::map<std::string, std::string> known_compiled =
      read_known_failures(source_dir() / "tests" / "onnx" / "known_compiled_failures.txt");
  ASSERT_FALSE(known.empty());
  int index = 0, passed = 0;
  for (const char* group : {"node", "simple"}) {
    for (const std::string& dir : conformance_case_dirs((suite / group).string())) {
      if (index++ % kCompiledShards != GetParam()) continue;
      const std::string name = std::string(group) + "/" + fs::path(dir).filename().string();
      if (known.contains(name)) continue;  // the interpreter does not pass it either
      const CaseResult result = run_conformance_case(dir, {.tolerance = {},
                                                           .engine = Engine::compiled});
      const bool listed = known_compiled.contains(name);
      passed += result.outcome == CaseOutcome::passed ? 1 : 0;
      if ((result.outcome == CaseOutcome::passed) == !listed) continue;
      ADD_FAILURE() << name << ": compiled " << outcome_name(result.outcome)
                    << (listed ? ", but known_compiled_failures.txt lists it" : "") << "\n  "
                    << result.detail;
    }
  }
  std::printf("ONNX conformance compiled, shard %d: %d passed\n", GetParam(), passed);
}

INSTANTIATE_TEST_SUITE_P(Shards, OnnxConformanceCompiled, ::testing::Range(0, kCompiledShards));

}  // namespace
}  // namespace kiln
