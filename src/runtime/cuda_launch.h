// What a GPU runs for one program kernel: the launches the CUDA code generator made of it
// (codegen/cuda/emitter.h), as data the runtime needs no compiler to read.
//
// A kernel of a Program (runtime/program.h) is, on a GPU, an ordered list of launches of
// functions in one CUDA module. Each launch names its function, its grid and block, and its
// arguments: a parameter buffer of the program kernel (its base address plus an element
// offset, in bytes), or a 64-bit integer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

struct CudaLaunchArg {
  enum class Kind : uint8_t { buffer, i64 };
  Kind kind = Kind::buffer;
  int param = 0;            // buffer: the program kernel's parameter number
  int64_t byte_offset = 0;  // buffer: added to the parameter's base address
  int64_t value = 0;        // i64
};

struct CudaLaunch {
  std::string function;  // an extern "C" __global__ function of the module
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  std::vector<CudaLaunchArg> args;
};

// Per program kernel, its launches in order.
using CudaKernelLaunches = std::vector<std::vector<CudaLaunch>>;

}  // namespace kiln::runtime
