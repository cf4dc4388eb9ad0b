// What a GPU runs for one program kernel: the launches the CUDA code generator made of it
// (codegen/cuda/emitter.h), as data the runtime needs no compiler to read.
//
// A kernel of a Program (runtime/program.h) is, on a GPU, an ordered list of launches of
// functions in one CUDA module. Each launch names its function, its grid and block, and its
// arguments: a parameter buffer of the program kernel (its base address plus an element
// offset, in bytes), or a 64-bit integer. A matrix product also says so, for the runtime to
// run it through NVIDIA's library.
//
// serialize_launches writes the launches as bytes (runtime/byte_format.h: a tag and format
// version, then every field) for the compilation cache (compiler/compilation_cache.h);
// deserialize_launches reads them back, checking every count against the bytes left and every
// value against its range, so damaged bytes are an error.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

struct CudaLaunchArg {
  enum class Kind : uint8_t { buffer, i64 };
  Kind kind = Kind::buffer;
  int param = 0;            // buffer: the program kernel's parameter number
  int64_t byte_offset = 0;  // buffer: added to the parameter's base address
  int64_t value = 0;        // i64
};

// A matrix product C = op(A) op(B), or C += op(A) op(B), of row-major matrices: C is m x n
// with leading dimension ldc; op(A) is m x k, A stored k x m when transposed; op(B) is k x n,
// B stored n x k when transposed. A batch of such products has its i-th matrices i * stride
// elements after the first (a batched matmul's heads; a stride of 0 shares the operand). Its
// type is its operands' and C's; f16 and bf16 products accumulate in f32. The
// runtime runs it through cuBLASLt where the library loads (runtime/cublaslt.h), else through
// the launch's function, a template kernel that takes the same arguments (a block per tile
// of C, the grid's z the batch).
struct CudaGemm {
  enum class Type : uint8_t { f32, f64, f16, bf16 };
  Type type = Type::f32;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool transpose_a = false, transpose_b = false, accumulate = false;
  // An f32 product on tensor cores in TF32 (10-bit mantissas, f32 accumulation:
  // CUBLAS_COMPUTE_32F_FAST_TF32), as --precision tf32 asks; exact f32 otherwise.
  bool tf32 = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

struct CudaLaunch {
  std::string function;  // an extern "C" __global__ function of the module
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  std::vector<CudaLaunchArg> args;
  // A gemm: args begin with the buffers A, B and C.
  std::optional<CudaGemm> gemm;
};

// "f32", "f64", "f16", "bf16": a gemm's type as the launch list and the templates name it
// (kiln_gemm_bf16), and its elements' size.
std::string_view gemm_type_name(CudaGemm::Type type);
int64_t gemm_element_bytes(CudaGemm::Type type);

// Per program kernel, its launches in order.
using CudaKernelLaunches = std::vector<std::vector<CudaLaunch>>;

std::string serialize_launches(const CudaKernelLaunches& launches);
Expected<CudaKernelLaunches> deserialize_launches(std::string_view bytes);

}  // namespace kiln::runtime
