// Compiling loop-IR kernels for the CPU: emit C++ (codegen/cpu/emitter.h), compile it with the
// system compiler through the compile cache (codegen/cpu/compile_cache.h) and load it.
//
// Kernels are grouped in order into translation units of `kernels_per_unit`; units compile
// concurrently, up to `jobs` compiler processes at once, and each unit is one cache entry
// (a unit shared by two models, or by two runs of one, is compiled once). The grouping does
// not depend on the number of cores, so neither do cache keys.
//
// Default flags: -std=c++17 -O3 -march=native -fopenmp -fPIC -shared, and
//  - -ffp-contract=off: no fused multiply-add contraction, so float arithmetic rounds after
//    every operation exactly as the loop IR defines (and the evaluator computes); an FMA
//    would be a scheduling decision made explicit in the IR, not one the C++ compiler takes;
//  - -fno-math-errno: math functions need not set errno (nothing reads it), which lets sqrt
//    compile to an instruction; it changes no value;
//  - OpenBLAS for gemm statements: -I, -L and -rpath for the folders of the OpenBLAS found
//    when Kiln was built (pkg-config), then -Wl,--no-as-needed -lopenblas. The library is
//    named explicitly because the system's libblas.so may be the slow reference BLAS, and
//    --no-as-needed keeps it even where the toolchain defaults to --as-needed (the flags come
//    before the source file on the command line). Kiln's kernels and the OpenMP build of
//    OpenBLAS share libgomp's one thread pool. oneDNN likewise, for the f32 gemm.
//  - in a bundle (scripts/gpu-bundle: a binary in bin/, or the Python extension in
//    python/kiln/, beside include/ and lib/, marked by share/kiln/bundle), the bundle's
//    include/ and lib/ instead of the build's folders, so the kernels compile on a machine
//    without Kiln's packages.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codegen/cpu/emitter.h"
#include "codegen/cpu/shared_library.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::codegen::cpu {

std::vector<std::string> default_compile_flags();

// The bundle this process's binary, or the library holding Kiln's code, runs from (see above):
// the nearest folder above either that holds share/kiln/bundle.
std::optional<std::filesystem::path> bundle_root();

struct CpuCompileOptions {
  std::string compiler;  // a program name or path; empty: $CXX, else "c++"
  std::vector<std::string> flags = default_compile_flags();
  std::filesystem::path cache_dir;  // empty: default_cache_dir()
  int jobs = 0;                     // concurrent compiler runs; 0: the hardware's threads
  int kernels_per_unit = 8;
  std::chrono::seconds timeout{300};  // per translation unit
};

// Loaded kernels: function(i) is the i-th kernel given to compile_kernels, valid as long as
// this object lives.
class CompiledKernels {
 public:
  size_t size() const { return functions_.size(); }
  KernelFunction function(size_t index) const { return functions_.at(index); }
  int units() const { return static_cast<int>(libraries_.size()); }
  // Units the compiler ran for; the others were loaded from the cache.
  int units_compiled() const { return units_compiled_; }

 private:
  friend Expected<CompiledKernels> compile_kernels(std::span<const loop::Kernel> kernels,
                                                   const CpuCompileOptions& options);
  std::vector<SharedLibrary> libraries_;
  std::vector<KernelFunction> functions_;
  int units_compiled_ = 0;
};

Expected<CompiledKernels> compile_kernels(std::span<const loop::Kernel> kernels,
                                          const CpuCompileOptions& options = {});

}  // namespace kiln::codegen::cpu
