// Small helpers shared by the unit tests: checking error messages by the parts that matter,
// and temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::testing {

// Passes when `text` contains every one of `parts`; on failure shows the whole text.
inline ::testing::AssertionResult contains_all(std::string_view text,
                                               std::initializer_list<std::string_view> parts) {
  for (std::string_view part : parts) {
    if (text.find(part) == std::string_view::npos) {
      return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// Passes when `status` is an error whose message contains every one of `parts`.
inline ::testing::AssertionResult is_error_with(const Status& status,
                                                std::initializer_list<std::string_view> parts) {
  if (status.is_ok()) return ::testing::AssertionFailure() << "succeeded; expected an error";
  return contains_all(status.message(), parts);
}

// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
    const char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "cannot create a temporary directory";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::testing
