// cuBLASLt, NVIDIA's matrix-product library, loaded at run time as the driver is
// (runtime/cuda_driver.h): the CUDA executor runs a program's gemm launches through it where it
// loads, and through the launch's own template kernel where it does not. Internal to
// src/runtime: only the CUDA executor and its tests include it.
//
// libcublasLt.so.13, else .so.12, is opened with dlopen once per process; its entry points are
// looked up by the names cublasLt.h declares, so their types cannot disagree. Every call is
// checked by `check`, whose error carries the library's name and description of the status.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/cuda_launch.h"
#include "support/status.h"

#if defined(KILN_HAVE_CUDA_HEADERS) && __has_include(<cublasLt.h>)
#define KILN_HAVE_CUBLASLT_HEADERS
#include <cublasLt.h>
#include <cuda.h>
#endif

namespace kiln::runtime {

#ifdef KILN_HAVE_CUBLASLT_HEADERS

#define KILN_CUBLASLT_ENTRY_POINTS(X)    \
  X(cublasLtCreate)                      \
  X(cublasLtDestroy)                     \
  X(cublasLtGetVersion)                  \
  X(cublasLtGetStatusName)               \
  X(cublasLtGetStatusString)             \
  X(cublasLtMatmulDescCreate)            \
  X(cublasLtMatmulDescDestroy)           \
  X(cublasLtMatmulDescSetAttribute)      \
  X(cublasLtMatrixLayoutCreate)          \
  X(cublasLtMatrixLayoutDestroy)         \
  X(cublasLtMatrixLayoutSetAttribute)    \
  X(cublasLtMatmulPreferenceCreate)      \
  X(cublasLtMatmulPreferenceDestroy)     \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)      \
  X(cublasLtMatmul)

// The library's entry points. A test may fill one with functions of its own.
struct CublasLt {
#define KILN_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUBLASLT_ENTRY_POINTS(KILN_CUBLASLT_MEMBER)
#undef KILN_CUBLASLT_MEMBER

  // OK for CUBLAS_STATUS_SUCCESS; else an error "WHAT: CUBLAS_STATUS_NAME (description)".
  Status check(cublasStatus_t status, std::string_view what) const;
};

// The process's cuBLASLt, loaded on first use; the same error on every call when it cannot be.
Expected<const CublasLt*> load_cublaslt();

// "cuBLASLt 13.0.2": the loaded library's version.
std::string cublaslt_version(const CublasLt& lt);

// One row-major gemm (runtime/cuda_launch.h) planned for cuBLASLt on fixed device addresses:
// its descriptors, and the algorithm cuBLASLt's heuristic chose for its sizes, precision,
// transposes and the addresses' alignment. cuBLASLt is column-major, so the product is asked
// for transposed: C^T = op(B)^T op(A)^T, each row-major matrix read as its column-major
// transpose. f32 products compute in f32 (CUBLAS_COMPUTE_32F), or in TF32 on tensor cores
// when the gemm says so (CudaGemm::tf32: CUBLAS_COMPUTE_32F_FAST_TF32); f64 in f64. A batch is
// one strided-batch product (each layout's batch count and stride).
class LtMatmul {
 public:
  static Expected<std::unique_ptr<LtMatmul>> plan(const CublasLt& lt, cublasLtHandle_t handle,
                                                  const CudaGemm& gemm, CUdeviceptr a,
                                                  CUdeviceptr b, CUdeviceptr c,
                                                  size_t workspace_bytes);
  ~LtMatmul();
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Issues the product on `stream` (capturable into a CUDA graph).
  Status run(CUdeviceptr workspace, CUstream stream) const;

  // The product of other operands, as plan takes them: each at the alignment (up to 256 bytes)
  // of the one planned for, which the algorithm was chosen for.
  void rebind(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c);

 private:
  LtMatmul(const CublasLt& lt, cublasLtHandle_t handle) : lt_(lt), handle_(handle) {}

  const CublasLt& lt_;
  cublasLtHandle_t handle_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, c_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
  CUdeviceptr a_ = 0, b_ = 0, c_ = 0;  // cuBLASLt's A and B: the gemm's B and A
  double alpha_ = 1, beta_ = 0;
  float alpha_f32_ = 1, beta_f32_ = 0;
  bool f64_ = false;
};

#else

struct CublasLt;
Expected<const CublasLt*> load_cublaslt();

#endif

}  // namespace kiln::runtime
