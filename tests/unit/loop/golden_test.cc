// Golden files (tests/unit/loop/golden/*.txt): an input, the stage it goes through and the loop
// IR the stage gives, compared as text. A file reads
//
//   // what the file shows (comment lines)
//   stage: lower,schedule
//   --- input
//   graph @g(...) { ... }     graph IR when the stage begins with `lower`, else a loop-IR kernel
//   --- expected
//   kernel kernel(...) { ... }
//
// The stage is `lower` (every node of the graph lowered as one group, loop/lower_group.h) and
// loop passes by name (loop/loop_passes.h), in order. The default schedule depends on the
// machine (its cores, vector width and vector math), so schedules are made for kGoldenTarget,
// not the host: the files hold on every machine. KILN_UPDATE_GOLDEN=1 rewrites each file's
// expected text with what its stage gives. ctest sets KILN_SOURCE_DIR, which locates the files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ir/parser.h"
#include "loop/loop_passes.h"
#include "loop/lower_group.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "support/files.h"

namespace kiln::loop {
namespace {

constexpr ScheduleTarget kGoldenTarget{.cores = 4, .vector_bytes = 32, .vector_math = false};
constexpr std::string_view kInputMarker = "--- input\n";
constexpr std::string_view kExpectedMarker = "--- expected\n";

struct Golden {
  std::string head;  // the comment lines and the stage line, up to the input marker
  std::vector<std::string> stage;
  std::string input;
  std::string expected;
};

// "a,b" -> {"a", "b"}.
std::vector<std::string> split_stage(std::string_view text) {
  std::vector<std::string> names;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    names.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

Expected<Golden> read_golden(const std::filesystem::path& path) {
  KILN_ASSIGN_OR_RETURN(const std::string text, read_file(path.string()));
  const size_t input = text.find(kInputMarker), expected = text.find(kExpectedMarker);
  if (input == std::string::npos || expected == std::string::npos || expected < input) {
    return Status::errorf("{}: no '--- input' line before an '--- expected' line",
                          path.string());
  }
  Golden golden;
  golden.head = text.substr(0, input);
  golden.input = text.substr(input + kInputMarker.size(), expected - input - kInputMarker.size());
  golden.expected = text.substr(expected + kExpectedMarker.size());
  const size_t stage = golden.head.find("stage: ");
  if (stage == std::string::npos) return Status::errorf("{}: no 'stage:' line", path.string());
  const size_t end = golden.head.find('\n', stage);
  golden.stage = split_stage(golden.head.substr(stage + 7, end - stage - 7));
  return golden;
}

// The kernel the golden's input is: its graph lowered when the stage begins with `lower`.
Expected<Kernel> input_kernel(const Golden& golden, const std::string& filename) {
  if (golden.stage.front() != "lower") return parse_kernel(golden.input, filename);
  KILN_ASSIGN_OR_RETURN(const Graph graph, parse_graph(golden.input, filename));
  KILN_ASSIGN_OR_RETURN(LoweredGroup lowered, lower_group(graph, graph.nodes()));
  return std::move(lowered.kernel);
}

// The loop IR the golden's stage makes of its input.
Expected<std::string> run_stage(const Golden& golden, const std::string& filename) {
  KILN_ASSIGN_OR_RETURN(Kernel kernel, input_kernel(golden, filename));
  const bool lowers = golden.stage.front() == "lower";
  const std::vector<std::string> passes(golden.stage.begin() + (lowers ? 1 : 0),
                                        golden.stage.end());
  const LoopPassOptions options{.dump_after = {}, .time_passes = false, .target = kGoldenTarget};
  KILN_RETURN_IF_ERROR(run_loop_passes(kernel, passes, options).status());
  return print(kernel);
}

std::vector<std::filesystem::path> golden_files() {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  if (source_dir == nullptr) {
    ADD_FAILURE() << "KILN_SOURCE_DIR is not set (ctest sets it to the source tree)";
    return {};
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(source_dir) / "tests/unit/loop/golden")) {
    if (entry.path().extension() == ".txt") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(LoopGolden, EachStageGivesTheExpectedLoopIR) {
  const std::vector<std::filesystem::path> files = golden_files();
  const char* update = std::getenv("KILN_UPDATE_GOLDEN");
  const bool updating = update != nullptr && std::string_view(update) == "1";
  EXPECT_FALSE(files.empty()) << "no golden files";
  for (const std::filesystem::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    Expected<Golden> golden = read_golden(path);
    ASSERT_TRUE(golden.has_value()) << golden.status().message();
    Expected<std::string> actual = run_stage(*golden, path.filename().string());
    ASSERT_TRUE(actual.has_value()) << actual.status().message();
    if (updating) {
      const std::string text = golden->head + std::string(kInputMarker) + golden->input +
                               std::string(kExpectedMarker) + *actual;
      EXPECT_TRUE(write_file_atomically(path, text).is_ok()) << path;
      continue;
    }
    EXPECT_EQ(*actual, golden->expected) << "KILN_UPDATE_GOLDEN=1 rewrites the expected text";
    Expected<Kernel> reread = parse_kernel(*actual);  // the text form is loop IR that reads back
    EXPECT_TRUE(reread.has_value() && print(*reread) == *actual) << reread.status().message();
  }
}

}  // namespace
}  // namespace kiln::loop
