// The content-addressed compile cache: generated C++ compiled once into a shared library,
// found again by the hash of everything that determines the binary.
//
// Key: SHA-256 of the source, the compiler flags and the compiler's identity (the program
// name, its `--version` output and its `-###` expansion of the flags, which names the CPU
// that `-march=native` resolves to, so a cache shared between machines never hands one a
// binary for another's instruction set). Layout: `<dir>/<key>.so`, the library, and
// `<dir>/<key>.cc`, its source, kept for reading; a source the compiler rejected is left as
// `<dir>/<key>.failed.cc`.
//
// Atomicity: the source is written and compiled under names unique to the process and call
// (`<key>.tmp-<pid>-<n>.cc`, `.so`), the library is loaded from there, and only a library
// that loaded and exports every requested symbol is renamed to its final name. rename(2) is
// atomic within a directory, so a reader sees either no entry or a complete one, a crash
// leaves at most a stray temporary file, and two processes compiling the same key at once
// both succeed (the second rename replaces an identical library; the first process's mapping
// stays valid). An entry that is damaged anyway (truncated, not loadable, missing a symbol)
// is compiled again and replaced, never trusted.
//
// Size: a hit marks its entry used (support/files.h: touch), and keep_within_budget, which a
// caller runs after publishing (once per batch of units: a scan of a folder of 15,000 entries
// took 55 ms), removes the least recently used files until the folder is within the cache's
// byte budget (kMaxKernelCacheBytes by default). A library removed while a process has it
// loaded stays mapped in that process; one removed between another process's check and load
// is a miss there, compiled again.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "codegen/cpu/shared_library.h"
#include "support/status.h"

namespace kiln::codegen::cpu {

inline constexpr int64_t kMaxKernelCacheBytes = int64_t{2} << 30;

// How sources are compiled: the compiler program (a name searched in PATH or a path; never a
// command line: it is run without a shell), its flags (which must make a shared library) and
// a time limit for one compilation.
struct CompilerConfig {
  std::string compiler;
  std::vector<std::string> flags;
  std::chrono::seconds timeout{300};
};

// A library from the cache with the addresses of the symbols that were asked for, in order.
struct CachedLibrary {
  SharedLibrary library;
  std::vector<void*> symbols;
  bool compiled = false;  // false: found in the cache, the compiler did not run
};

// kiln_cache_root() (support/files.h) with "cpu" appended.
std::filesystem::path default_cache_dir();

// What identifies `compiler` with `flags` (see the key above). Runs the compiler twice per
// process and pair, then remembers the answer.
Expected<std::string> compiler_identity(const CompilerConfig& config);

// The cache key: lowercase hexadecimal SHA-256 of the three parts, each length-prefixed.
std::string cache_key(std::string_view compiler_identity, std::span<const std::string> flags,
                      std::string_view source);

class CompileCache {
 public:
  explicit CompileCache(std::filesystem::path directory,
                        int64_t max_bytes = kMaxKernelCacheBytes)
      : directory_(std::move(directory)), max_bytes_(max_bytes) {}

  // `source` compiled with `config` and loaded, with `symbols` looked up: the cache entry
  // when a sound one exists, else a fresh compilation that is then published. Safe to call
  // from several threads and processes at once.
  Expected<CachedLibrary> load_or_compile(const std::string& source, const CompilerConfig& config,
                                          std::span<const std::string> symbols) const;

  const std::filesystem::path& directory() const { return directory_; }

  // Removes the least recently used files while the folder holds more than the budget.
  void keep_within_budget() const;

 private:
  std::filesystem::path directory_;
  int64_t max_bytes_;
};

}  // namespace kiln::codegen::cpu
