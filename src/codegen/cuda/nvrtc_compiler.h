// Compiling generated CUDA C to a cubin with NVRTC, through a content-addressed cache.
//
// NVRTC compiles for a named architecture without a GPU present, so the CUDA back end's code
// is compiled and checked on any machine with the CUDA toolkit. NVRTC is loaded at run time
// (dlopen: the library found when Kiln was built, else libnvrtc.so, .so.13 or .so.12), so Kiln
// starts where it is missing; nvrtc_available says whether it loads, and compiling without it
// is an error naming what was tried. Built without the toolkit's headers (CMake found no
// NVRTC), nvrtc_available is false and compiling is an error that says so.
//
// Options: --gpu-architecture=sm_XX (default sm_90, Hopper: H100 and H200), --std=c++17, and
// --fmad=false (no fused multiply-add contraction, as -ffp-contract=off on the CPU: loop IR
// rounds after every operation). Key: SHA-256 (codegen/cpu/compile_cache.h: cache_key) of
// NVRTC's version, the options and the source. Layout: `<dir>/<key>.cubin` and `<key>.cu`,
// written atomically (support/files.h); a source NVRTC rejects is an error carrying its log.
// A hit marks its cubin used, and a store keeps the folder within kMaxCubinCacheBytes by
// removing the least recently used files (support/files.h: prune_least_recently_used).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::codegen::cuda {

inline constexpr int64_t kMaxCubinCacheBytes = int64_t{1} << 30;

bool nvrtc_available();

struct NvrtcOptions {
  std::string architecture = "sm_90";
  std::filesystem::path cache_dir;  // empty: kiln_cache_root() / "cuda"
};

struct Cubin {
  std::string image;      // the cubin's bytes
  bool compiled = false;  // false: found in the cache
};

Expected<Cubin> compile_cuda(const std::string& source, const NvrtcOptions& options = {});

}  // namespace kiln::codegen::cuda
