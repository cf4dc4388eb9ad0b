#include "codegen/cuda/nvrtc_compiler.h"

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
  return Status::error("this Kiln was built without the CUDA toolkit (no NVRTC): install it and "
                       "configure again to compile for CUDA");
}

#else

namespace {

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("nvrtc {}.{}", major, minor);
}

Status nvrtc_error(nvrtcResult result, std::string_view what) {
  return Status::errorf("NVRTC {}: {}", what, nvrtcGetErrorString(result));
}

// The source compiled by NVRTC into a cubin, or its log as the error.
Expected<std::string> run_nvrtc(const std::string& source, const std::vector<std::string>& flags) {
  nvrtcProgram program = nullptr;
  nvrtcResult result =
      nvrtcCreateProgram(&program, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS) return nvrtc_error(result, "could not create a program");
  std::vector<const char*> options;
  for (const std::string& flag : flags) options.push_back(flag.c_str());
  result = nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(program, log.data());
  if (result != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    return Status::errorf("NVRTC rejected the generated CUDA: {}\n{}", nvrtcGetErrorString(result),
                          log);
  }
  size_t cubin_size = 0;
  result = nvrtcGetCUBINSize(program, &cubin_size);
  std::string cubin(cubin_size, '\0');
  if (result == NVRTC_SUCCESS) result = nvrtcGetCUBIN(program, cubin.data());
  nvrtcDestroyProgram(&program);
  if (result != NVRTC_SUCCESS) return nvrtc_error(result, "gave no cubin");
  return cubin;
}

}  // namespace

bool nvrtc_available() { return true; }

Expected<Cubin> compile_cuda(const std::string& source, const NvrtcOptions& options) {
  const std::vector<std::string> flags = {"--gpu-architecture=" + options.architecture,
                                          "--std=c++17", "--fmad=false"};
  const std::filesystem::path dir =
      options.cache_dir.empty() ? kiln_cache_root() / "cuda" : options.cache_dir;
  const std::string key = cpu::cache_key(nvrtc_version(), flags, source);
  const std::filesystem::path cubin_path = dir / (key + ".cubin");
  if (std::filesystem::exists(cubin_path)) {
    Expected<std::string> cached = read_file(cubin_path.string());
    if (cached && !cached->empty()) return Cubin{std::move(*cached), false};
  }
  KILN_ASSIGN_OR_RETURN(std::string cubin, run_nvrtc(source, flags));
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  // A cache that cannot be written costs a compilation next time, nothing else.
  if (write_file_atomically(dir / (key + ".cu"), source)) {
    (void)write_file_atomically(cubin_path, cubin);
  }
  return Cubin{std::move(cubin), true};
}

#endif

}  // namespace kiln::codegen::cuda
