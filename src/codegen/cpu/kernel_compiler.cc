#include "codegen/cpu/kernel_compiler.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "codegen/cpu/compile_cache.h"

namespace kiln::codegen::cpu {
namespace {

struct Unit {
  size_t first_kernel = 0;  // index of its first kernel in the caller's list
  std::string source;
  std::vector<std::string> symbols;
};

Expected<std::vector<Unit>> emit_units(std::span<const loop::Kernel> kernels, size_t per_unit) {
  std::vector<Unit> units;
  for (size_t first = 0; first < kernels.size(); first += per_unit) {
    const auto group = kernels.subspan(first, std::min(per_unit, kernels.size() - first));
    Expected<std::string> source = emit_translation_unit(group);
    if (!source) {
      return source.status().with_context(
          fmt::format("kernels {} to {}", first, first + group.size() - 1));
    }
    Unit unit{.first_kernel = first, .source = std::move(*source), .symbols = {}};
    for (size_t i = 0; i < group.size(); ++i) unit.symbols.push_back(kernel_symbol(i));
    units.push_back(std::move(unit));
  }
  return units;
}

CompilerConfig compiler_config(const CpuCompileOptions& options) {
  std::string compiler = options.compiler;
  if (compiler.empty()) {
    const char* from_env = std::getenv("CXX");
    compiler = from_env != nullptr && *from_env != '\0' ? from_env : "c++";
  }
  return {.compiler = std::move(compiler), .flags = options.flags, .timeout = options.timeout};
}

// Runs load_or_compile for every unit on up to `jobs` threads; results in unit order.
std::vector<std::optional<Expected<CachedLibrary>>> build_units(const std::vector<Unit>& units,
                                                                const CompileCache& cache,
                                                                const CompilerConfig& config,
                                                                int jobs) {
  std::vector<std::optional<Expected<CachedLibrary>>> results(units.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < units.size(); i = next++) {
      results[i].emplace(cache.load_or_compile(units[i].source, config, units[i].symbols));
    }
  };
  std::vector<std::jthread> workers;
  const size_t threads = std::min(units.size(), static_cast<size_t>(std::max(jobs, 1)));
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  return results;
}

std::vector<std::string_view> split_list(std::string_view list) {
  std::vector<std::string_view> items;
  while (!list.empty()) {
    const size_t end = std::min(list.find(';'), list.size());
    if (end > 0) items.push_back(list.substr(0, end));
    list.remove_prefix(std::min(end + 1, list.size()));
  }
  return items;
}

}  // namespace

std::optional<std::filesystem::path> bundle_root() {
  std::vector<std::filesystem::path> places;
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) places.push_back(binary);
  // Kiln's code may be a library loaded into another program: Python's, for the extension.
  Dl_info library;
  if (dladdr(reinterpret_cast<const void*>(&bundle_root), &library) != 0 && library.dli_fname) {
    places.push_back(std::filesystem::absolute(library.dli_fname, error));
  }
  for (const std::filesystem::path& place : places) {
    for (std::filesystem::path folder = place.parent_path(); folder != folder.parent_path();
         folder = folder.parent_path()) {
      if (std::filesystem::exists(folder / "share" / "kiln" / "bundle", error)) return folder;
    }
  }
  return std::nullopt;
}

std::vector<std::string> default_compile_flags() {
  std::vector<std::string> flags = {"-std=c++17", "-O3",     "-march=native",
                                    "-fopenmp",   "-fPIC",   "-shared",
                                    "-ffp-contract=off",     "-fno-math-errno"};
  std::vector<std::string> include_dirs, library_dirs;
  if (const std::optional<std::filesystem::path> bundle = bundle_root()) {
    include_dirs.push_back((*bundle / "include").string());
    library_dirs.push_back((*bundle / "lib").string());
  } else {
    // The folders of the OpenBLAS and the oneDNN found at build time
    // (src/codegen/cpu/CMakeLists.txt); OpenBLAS's are ';'-separated CMake lists of (usually)
    // one folder.
    for (const std::string_view folder : split_list(KILN_OPENBLAS_INCLUDE_DIRS)) {
      include_dirs.emplace_back(folder);
    }
    include_dirs.emplace_back(KILN_DNNL_INCLUDE_DIR);
    for (const std::string_view folder : split_list(KILN_OPENBLAS_LIBRARY_DIRS)) {
      library_dirs.emplace_back(folder);
    }
    library_dirs.emplace_back(KILN_DNNL_LIBRARY_DIR);
  }
  for (const std::string& folder : include_dirs) flags.push_back("-I" + folder);
  for (const std::string& folder : library_dirs) {
    flags.push_back("-L" + folder);
    flags.push_back("-Wl,-rpath," + folder);
  }
  flags.insert(flags.end(), {"-Wl,--no-as-needed", "-lopenblas", "-ldnnl"});
#if defined(__x86_64__) && defined(__GLIBC__)
  flags.push_back("-lmvec");  // the prelude's vector math functions
#endif
  return flags;
}

Expected<CompiledKernels> compile_kernels(std::span<const loop::Kernel> kernels,
                                          const CpuCompileOptions& options) {
  if (options.kernels_per_unit < 1) {
    return Status::errorf("kernels_per_unit must be at least 1, not {}",
                          options.kernels_per_unit);
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Unit> units,
                        emit_units(kernels, static_cast<size_t>(options.kernels_per_unit)));
  const CompileCache cache(options.cache_dir.empty() ? default_cache_dir() : options.cache_dir);
  const int jobs = options.jobs > 0 ? options.jobs
                                    : static_cast<int>(std::thread::hardware_concurrency());
  auto results = build_units(units, cache, compiler_config(options), jobs);

  CompiledKernels compiled;
  for (size_t u = 0; u < units.size(); ++u) {
    Expected<CachedLibrary>& result = *results[u];
    if (!result) {
      return result.status().with_context(fmt::format(
          "kernels {} to {}", units[u].first_kernel,
          units[u].first_kernel + units[u].symbols.size() - 1));
    }
    for (void* address : result->symbols) {
      compiled.functions_.push_back(reinterpret_cast<KernelFunction>(address));
    }
    compiled.units_compiled_ += result->compiled ? 1 : 0;
    compiled.libraries_.push_back(std::move(result->library));
  }
  if (compiled.units_compiled_ > 0) cache.keep_within_budget();
  return compiled;
}

}  // namespace kiln::codegen::cpu
