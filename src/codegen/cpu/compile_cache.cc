#include "codegen/cpu/compile_cache.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "codegen/cpu/subprocess.h"
#include "support/check.h"
#include "support/files.h"

namespace kiln::codegen::cpu {
namespace {

// Removes a file when it goes out of scope, unless it was kept.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Renames the file to `destination` (atomically, in the same directory) and stops owning it.
  Status rename_to(const std::filesystem::path& destination) {
    std::error_code error;
    std::filesystem::rename(path_, destination, error);
    if (error) {
      return Status::errorf("cannot rename '{}' to '{}': {}", path_.string(),
                            destination.string(), error.message());
    }
    path_.clear();
    return Status::ok();
  }

 private:
  std::filesystem::path path_;
};

// "<dir>/<key>.tmp-<pid>-<n>": unique to this process and call.
std::string temporary_stem(const std::string& key) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp-{}-{}", key, getpid(), counter++);
}

Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::errorf("cannot write '{}'", path.string());
  return Status::ok();
}

Expected<CachedLibrary> load_with_symbols(const std::filesystem::path& path,
                                          std::span<const std::string> symbols) {
  KILN_ASSIGN_OR_RETURN(SharedLibrary library, SharedLibrary::open(path));
  CachedLibrary loaded{.library = std::move(library), .symbols = {}, .compiled = false};
  for (const std::string& name : symbols) {
    KILN_ASSIGN_OR_RETURN(void* address, loaded.library.symbol(name));
    loaded.symbols.push_back(address);
  }
  return loaded;
}

Expected<std::string> run_for_identity(std::vector<std::string> argv,
                                       std::chrono::seconds timeout) {
  KILN_ASSIGN_OR_RETURN(ProcessResult result, run_process(argv, timeout));
  if (result.exit_code != 0) {
    return Status::errorf("'{}' failed (exit code {}):\n{}", fmt::join(argv, " "),
                          result.exit_code, result.output);
  }
  return std::move(result.output);
}

}  // namespace

std::filesystem::path default_cache_dir() { return kiln_cache_root() / "cpu"; }

Expected<std::string> compiler_identity(const CompilerConfig& config) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<std::string>>, std::string> known;
  const auto request = std::make_pair(config.compiler, config.flags);
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(request); it != known.end()) return it->second;
  }
  KILN_ASSIGN_OR_RETURN(std::string version,
                        run_for_identity({config.compiler, "--version"}, config.timeout));
  std::vector<std::string> expand = {config.compiler};
  expand.insert(expand.end(), config.flags.begin(), config.flags.end());
  expand.insert(expand.end(), {"-###", "-x", "c++", "-E", "/dev/null"});
  KILN_ASSIGN_OR_RETURN(std::string expansion, run_for_identity(expand, config.timeout));
  std::string identity = fmt::format("{}\n{}\n{}", config.compiler, version, expansion);
  std::lock_guard lock(mutex);
  known.emplace(request, identity);
  return identity;
}

std::string cache_key(std::string_view compiler_identity, std::span<const std::string> flags,
                      std::string_view source) {
  std::string message;
  const auto append = [&](std::string_view part) {
    message += fmt::format("{}:", part.size());
    message += part;
  };
  append(compiler_identity);
  for (const std::string& flag : flags) append(flag);
  append(source);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  const int hashed =
      EVP_Digest(message.data(), message.size(), digest, &digest_size, EVP_sha256(), nullptr);
  KILN_CHECK(hashed == 1, "SHA-256 failed");
  std::string hex;
  for (unsigned int i = 0; i < digest_size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Expected<CachedLibrary> CompileCache::load_or_compile(const std::string& source,
                                                      const CompilerConfig& config,
                                                      std::span<const std::string> symbols) const {
  KILN_ASSIGN_OR_RETURN(std::string identity, compiler_identity(config));
  const std::string key = cache_key(identity, config.flags, source);
  const std::filesystem::path library_path = directory_ / (key + ".so");
  if (std::filesystem::exists(library_path)) {
    Expected<CachedLibrary> cached = load_with_symbols(library_path, symbols);
    if (cached) {
      touch(library_path);
      touch(directory_ / (key + ".cc"));
      return cached;
    }
    // A damaged entry: compiled again below and replaced.
  }

  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) {
    return Status::errorf("cannot create the compile cache '{}': {}", directory_.string(),
                          error.message());
  }
  const std::string stem = temporary_stem(key);
  TemporaryFile temp_source(directory_ / (stem + ".cc"));
  TemporaryFile temp_library(directory_ / (stem + ".so"));
  KILN_RETURN_IF_ERROR(write_file(temp_source.path(), source));

  std::vector<std::string> argv = {config.compiler};
  argv.insert(argv.end(), config.flags.begin(), config.flags.end());
  argv.insert(argv.end(), {"-o", temp_library.path().string(), temp_source.path().string()});
  KILN_ASSIGN_OR_RETURN(ProcessResult result, run_process(argv, config.timeout));
  if (result.exit_code != 0) {
    const std::filesystem::path kept = directory_ / (key + ".failed.cc");
    const Status renamed = temp_source.rename_to(kept);
    return Status::errorf("the C++ compiler '{}' rejected generated code{} (exit code {}):\n{}",
                          config.compiler,
                          renamed ? fmt::format(" '{}'", kept.string()) : std::string(),
                          result.exit_code, result.output);
  }

  KILN_ASSIGN_OR_RETURN(CachedLibrary compiled, load_with_symbols(temp_library.path(), symbols));
  compiled.compiled = true;
  KILN_RETURN_IF_ERROR(temp_source.rename_to(directory_ / (key + ".cc")));
  KILN_RETURN_IF_ERROR(temp_library.rename_to(library_path));
  return compiled;
}

void CompileCache::keep_within_budget() const {
  prune_least_recently_used(directory_, max_bytes_);
}

}  // namespace kiln::codegen::cpu
