#include "codegen/cuda/nvrtc_compiler.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include "codegen/cpu/compile_cache.h"
#include "support/files.h"

#ifdef KILN_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace kiln::codegen::cuda {

#ifndef KILN_HAVE_NVRTC

bool nvrtc_available() { return false; }

Expected<Cubin> compile_cuda(const std::string&, const NvrtcOptions&) {
  return Status::error(
      "this Kiln was built without the CUDA toolkit (no NVRTC): install it and "
      "configure again to compile for CUDA");
}

#else

namespace {

// NVRTC's entry points, loaded at run time (see the header).
struct Nvrtc {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
};

template <typename Function>
bool resolve(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  return function != nullptr;
}

// The NVRTC found when Kiln was built, else the newest the loader finds by name.
Expected<Nvrtc> open_nvrtc() {
  const char* const candidates[] = {KILN_NVRTC_LIBRARY, "libnvrtc.so", "libnvrtc.so.13",
                                    "libnvrtc.so.12"};
  void* library = nullptr;
  std::string tried;
  for (const char* candidate : candidates) {
    library = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    tried += fmt::format("{}{}", tried.empty() ? "" : ", ", candidate);
  }
  if (library == nullptr) {
    return Status::errorf(
        "NVRTC cannot be loaded (tried {}): compiling for CUDA needs the CUDA "
        "toolkit's NVRTC (libnvrtc)",
        tried);
  }
  Nvrtc nvrtc;
  const bool found = resolve(library, "nvrtcVersion", nvrtc.version) &&
                     resolve(library, "nvrtcGetErrorString", nvrtc.error_string) &&
                     resolve(library, "nvrtcCreateProgram", nvrtc.create) &&
                     resolve(library, "nvrtcCompileProgram", nvrtc.compile) &&
                     resolve(library, "nvrtcGetProgramLogSize", nvrtc.log_size) &&
                     resolve(library, "nvrtcGetProgramLog", nvrtc.log) &&
                     resolve(library, "nvrtcGetCUBINSize", nvrtc.cubin_size) &&
                     resolve(library, "nvrtcGetCUBIN", nvrtc.cubin) &&
                     resolve(library, "nvrtcDestroyProgram", nvrtc.destroy);
  if (!found)
    return Status::errorf("the NVRTC loaded lacks an entry point Kiln calls ({})", dlerror());
  return nvrtc;
}

// The process's NVRTC, loaded once; the same error on every call when it cannot be.
Expected<const Nvrtc*> load_nvrtc() {
  static const Expected<Nvrtc> nvrtc = open_nvrtc();
  if (!nvrtc) return nvrtc.status();
  return &*nvrtc;
}

std::string nvrtc_version(const Nvrtc& nvrtc) {
  int major = 0, minor = 0;
  nvrtc.version(&major, &minor);
  return fmt::format("nvrtc {}.{}", major, minor);
}

Status nvrtc_error(const Nvrtc& nvrtc, nvrtcResult result, std::string_view what) {
  return Status::errorf("NVRTC {}: {}", what, nvrtc.error_string(result));
}

// The source compiled by NVRTC into a cubin, or its log as the error.
Expected<std::string> run_nvrtc(const Nvrtc& nvrtc, const std::string& source,
                                const std::vector<std::string>& flags) {
  nvrtcProgram program = nullptr;
  nvrtcResult result =
      nvrtc.create(&program, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS) return nvrtc_error(nvrtc, result, "could not create a program");
  std::vector<const char*> options;
  for (const std::string& flag : flags) options.push_back(flag.c_str());
  result = nvrtc.compile(program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  nvrtc.log_size(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtc.log(program, log.data());
  if (result != NVRTC_SUCCESS) {
    nvrtc.destroy(&program);
    return Status::errorf("NVRTC rejected the generated CUDA: {}\n{}", nvrtc.error_string(result),
                          log);
  }
  size_t cubin_size = 0;
  result = nvrtc.cubin_size(program, &cubin_size);
  std::string cubin(cubin_size, '\0');
  if (result == NVRTC_SUCCESS) result = nvrtc.cubin(program, cubin.data());
  nvrtc.destroy(&program);
  if (result != NVRTC_SUCCESS) return nvrtc_error(nvrtc, result, "gave no cubin");
  return cubin;
}

}  // namespace

bool nvrtc_available() { return load_nvrtc().has_value(); }

Expected<Cubin> compile_cuda(const std::string& source, const NvrtcOptions& options) {
  KILN_ASSIGN_OR_RETURN(const Nvrtc* nvrtc, load_nvrtc());
  const std::vector<std::string> flags = {"--gpu-architecture=" + options.architecture,
                                          "--std=c++17", "--fmad=false"};
  const std::filesystem::path dir =
      options.cache_dir.empty() ? kiln_cache_root() / "cuda" : options.cache_dir;
  const std::string key = cpu::cache_key(nvrtc_version(*nvrtc), flags, source);
  const std::filesystem::path cubin_path = dir / (key + ".cubin");
  if (std::filesystem::exists(cubin_path)) {
    Expected<std::string> cached = read_file(cubin_path.string());
    if (cached && !cached->empty()) {
      touch(cubin_path);
      return Cubin{std::move(*cached), false};
    }
  }
  KILN_ASSIGN_OR_RETURN(std::string cubin, run_nvrtc(*nvrtc, source, flags));
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  // A cache that cannot be written costs a compilation next time, nothing else.
  if (write_file_atomically(dir / (key + ".cu"), source)) {
    (void)write_file_atomically(cubin_path, cubin);
    prune_least_recently_used(dir, kMaxCubinCacheBytes);
  }
  return Cubin{std::move(cubin), true};
}

#endif

}  // namespace kiln::codegen::cuda
