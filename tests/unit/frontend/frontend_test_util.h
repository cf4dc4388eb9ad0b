// Helpers for the frontend tests: a scratch folder per test, whole-file reads and writes, and
// where the committed fixtures and the shared ONNX test files are.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::testing {

// A fresh empty folder, removed with everything in it when the object goes away.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kiln_frontend_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << pattern;
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out) << "cannot write " << path;
}

// tests/data/npy in the source tree. ctest sets KILN_SOURCE_DIR; running the test binary by
// hand needs it set too.
inline std::string npy_fixture(std::string_view name) {
  const char* source_dir = std::getenv("KILN_SOURCE_DIR");
  if (source_dir == nullptr) {
    ADD_FAILURE() << "KILN_SOURCE_DIR is not set (ctest sets it to the source tree)";
    return std::string(name);
  }
  return (std::filesystem::path(source_dir) / "tests/data/npy" / name).string();
}

// The ONNX node tests: $KILN_SHARED_DIR/onnx-node-tests/node, else ../shared beside the source
// tree; nullopt when neither exists.
inline std::optional<std::filesystem::path> onnx_node_tests_dir() {
  std::filesystem::path shared;
  if (const char* dir = std::getenv("KILN_SHARED_DIR")) {
    shared = dir;
  } else if (const char* source_dir = std::getenv("KILN_SOURCE_DIR")) {
    shared = std::filesystem::path(source_dir) / ".." / "shared";
  } else {
    return std::nullopt;
  }
  const std::filesystem::path node = shared / "onnx-node-tests" / "node";
  if (!std::filesystem::is_directory(node)) return std::nullopt;
  return node;
}

}  // namespace kiln::testing
