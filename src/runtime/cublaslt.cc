#include "runtime/cublaslt.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace kiln::runtime {

#ifdef KILN_HAVE_CUBLASLT_HEADERS

namespace {

#define KILN_CUBLASLT_STRINGIFY(name) #name

Expected<CublasLt> open_cublaslt() {
  // Never closed, as the driver is not. CUDA 13's library first, then CUDA 12's: the entry
  // points Kiln calls are the same in both.
  void* library = nullptr;
  std::string errors;
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12"}) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    errors += (errors.empty() ? "" : "; ") + std::string(dlerror());
  }
  if (library == nullptr) {
    return Status::errorf("cuBLASLt cannot be loaded ({})", errors);
  }
  CublasLt lt;
#define KILN_CUBLASLT_RESOLVE(name)                                                      \
  if (void* address = dlsym(library, KILN_CUBLASLT_STRINGIFY(name)); address != nullptr) { \
    lt.name = reinterpret_cast<decltype(lt.name)>(address);                               \
  } else {                                                                               \
    return Status::errorf("cuBLASLt has no {}: it is older than CUDA 12",                 \
                          KILN_CUBLASLT_STRINGIFY(name));                                 \
  }
  KILN_CUBLASLT_ENTRY_POINTS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
  return lt;
}

}  // namespace

Status CublasLt::check(cublasStatus_t status, std::string_view what) const {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const char* name = cublasLtGetStatusName != nullptr ? cublasLtGetStatusName(status) : nullptr;
  const char* description =
      cublasLtGetStatusString != nullptr ? cublasLtGetStatusString(status) : nullptr;
  return Status::errorf("{}: {} ({})", what,
                        name != nullptr ? std::string(name)
                                        : "cuBLAS status " + std::to_string(status),
                        description != nullptr ? description : "no description");
}

std::string cublaslt_version(const CublasLt& lt) {
  const size_t version = lt.cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return "cuBLASLt " + std::to_string(version / 10000) + "." +
         std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
}

namespace {

// The largest power of two, at most 256, that divides `address`: what cuBLASLt may assume.
uint32_t alignment_of(CUdeviceptr address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

template <typename T>
cublasStatus_t set_desc(const CublasLt& lt, cublasLtMatmulDesc_t desc,
                        cublasLtMatmulDescAttributes_t attribute, const T& value) {
  return lt.cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
}

template <typename T>
cublasStatus_t set_preference(const CublasLt& lt, cublasLtMatmulPreference_t preference,
                              cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  return lt.cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value));
}

cudaDataType_t data_type(CudaGemm::Type type) {
  switch (type) {
    case CudaGemm::Type::f32: return CUDA_R_32F;
    case CudaGemm::Type::f64: return CUDA_R_64F;
    case CudaGemm::Type::f16: return CUDA_R_16F;
    case CudaGemm::Type::bf16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

}  // namespace

Expected<std::unique_ptr<LtMatmul>> LtMatmul::plan(const CublasLt& lt, cublasLtHandle_t handle,
                                                   const CudaGemm& gemm, CUdeviceptr a,
                                                   CUdeviceptr b, CUdeviceptr c,
                                                   size_t workspace_bytes) {
  std::unique_ptr<LtMatmul> matmul(new LtMatmul(lt, handle));
  // f16 and bf16 operands accumulate in f32 (CUBLAS_COMPUTE_32F, tensor cores), with f32
  // scalars; f32 ones in f32, or on tensor cores in TF32 when the gemm asks; f64 in f64.
  matmul->f64_ = gemm.type == CudaGemm::Type::f64;
  const cudaDataType_t type = data_type(gemm.type);
  const bool tf32 = gemm.tf32 && gemm.type == CudaGemm::Type::f32;
  const cublasComputeType_t compute = matmul->f64_ ? CUBLAS_COMPUTE_64F
                                      : tf32       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                   : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale = matmul->f64_ ? CUDA_R_64F : CUDA_R_32F;
  matmul->beta_ = gemm.accumulate ? 1 : 0;
  matmul->beta_f32_ = gemm.accumulate ? 1.0f : 0.0f;
  matmul->workspace_bytes_ = workspace_bytes;
  // Column-major: C^T (n x m) = op'(B^T) (n x k) * op'(A^T) (k x m).
  matmul->a_ = b;
  matmul->b_ = a;
  matmul->c_ = c;
  const cublasOperation_t op_a = gemm.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = gemm.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto rows = [](bool transposed, int64_t plain, int64_t swapped) {
    return transposed ? swapped : plain;
  };
  const auto as_u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  KILN_RETURN_IF_ERROR(lt.check(lt.cublasLtMatmulDescCreate(&matmul->desc_, compute, scale),
                                "creating a cuBLASLt matmul descriptor"));
  KILN_RETURN_IF_ERROR(lt.check(set_desc(lt, matmul->desc_, CUBLASLT_MATMUL_DESC_TRANSA, op_a),
                                "setting cuBLASLt's transpose of A"));
  KILN_RETURN_IF_ERROR(lt.check(set_desc(lt, matmul->desc_, CUBLASLT_MATMUL_DESC_TRANSB, op_b),
                                "setting cuBLASLt's transpose of B"));
  const int64_t a_rows = rows(op_a == CUBLAS_OP_T, gemm.n, gemm.k);
  const int64_t a_cols = rows(op_a == CUBLAS_OP_T, gemm.k, gemm.n);
  const int64_t b_rows = rows(op_b == CUBLAS_OP_T, gemm.k, gemm.m);
  const int64_t b_cols = rows(op_b == CUBLAS_OP_T, gemm.m, gemm.k);
  KILN_RETURN_IF_ERROR(lt.check(lt.cublasLtMatrixLayoutCreate(&matmul->a_layout_, type,
                                                              as_u64(a_rows), as_u64(a_cols),
                                                              gemm.ldb),
                                "describing the gemm's B to cuBLASLt"));
  KILN_RETURN_IF_ERROR(lt.check(lt.cublasLtMatrixLayoutCreate(&matmul->b_layout_, type,
                                                              as_u64(b_rows), as_u64(b_cols),
                                                              gemm.lda),
                                "describing the gemm's A to cuBLASLt"));
  KILN_RETURN_IF_ERROR(lt.check(lt.cublasLtMatrixLayoutCreate(&matmul->c_layout_, type,
                                                              as_u64(gemm.n), as_u64(gemm.m),
                                                              gemm.ldc),
                                "describing the gemm's C to cuBLASLt"));
  if (gemm.batch > 1) {
    const auto batch = static_cast<int32_t>(gemm.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
        {matmul->a_layout_, gemm.stride_b}, {matmul->b_layout_, gemm.stride_a},
        {matmul->c_layout_, gemm.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      KILN_RETURN_IF_ERROR(lt.check(
          lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof(batch)),
          "setting a cuBLASLt batch count"));
      KILN_RETURN_IF_ERROR(lt.check(
          lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof(stride)),
          "setting a cuBLASLt batch stride"));
    }
  }
  cublasLtMatmulPreference_t preference = nullptr;
  KILN_RETURN_IF_ERROR(lt.check(lt.cublasLtMatmulPreferenceCreate(&preference),
                                "creating a cuBLASLt preference"));
  const uint64_t workspace = workspace_bytes;
  cublasStatus_t status = set_preference(lt, preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         workspace);
  const uint32_t alignments[] = {alignment_of(b), alignment_of(a), alignment_of(c)};
  const cublasLtMatmulPreferenceAttributes_t alignment_attributes[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES};
  for (int i = 0; i < 3 && status == CUBLAS_STATUS_SUCCESS; ++i) {
    status = set_preference(lt, preference, alignment_attributes[i], alignments[i]);
  }
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = set_preference(lt, preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                            alignments[2]);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = lt.cublasLtMatmulAlgoGetHeuristic(handle, matmul->desc_, matmul->a_layout_,
                                               matmul->b_layout_, matmul->c_layout_,
                                               matmul->c_layout_, preference, 1, &result, &found);
  }
  lt.cublasLtMatmulPreferenceDestroy(preference);
  const std::string what =
      fmt::format("choosing cuBLASLt's algorithm for {} {} x {} x {} {} gemm{}", gemm.batch,
                  gemm.m, gemm.n, gemm.k, gemm_type_name(gemm.type), gemm.batch > 1 ? "s" : "");
  KILN_RETURN_IF_ERROR(lt.check(status, what));
  if (found == 0) return Status::errorf("{}: cuBLASLt has none", what);
  matmul->algo_ = result.algo;
  return matmul;
}

LtMatmul::~LtMatmul() {
  if (c_layout_ != nullptr) lt_.cublasLtMatrixLayoutDestroy(c_layout_);
  if (b_layout_ != nullptr) lt_.cublasLtMatrixLayoutDestroy(b_layout_);
  if (a_layout_ != nullptr) lt_.cublasLtMatrixLayoutDestroy(a_layout_);
  if (desc_ != nullptr) lt_.cublasLtMatmulDescDestroy(desc_);
}

void LtMatmul::rebind(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c) {
  a_ = b;  // as plan: cuBLASLt's A and B are the gemm's B and A
  b_ = a;
  c_ = c;
}

Status LtMatmul::run(CUdeviceptr workspace, CUstream stream) const {
  const void* alpha = f64_ ? static_cast<const void*>(&alpha_) : &alpha_f32_;
  const void* beta = f64_ ? static_cast<const void*>(&beta_) : &beta_f32_;
  const auto pointer = [](CUdeviceptr address) {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  };
  return lt_.check(lt_.cublasLtMatmul(handle_, desc_, alpha, pointer(a_), a_layout_, pointer(b_),
                                      b_layout_, beta, pointer(c_), c_layout_, pointer(c_),
                                      c_layout_, &algo_, pointer(workspace), workspace_bytes_,
                                      stream),
                   "running a gemm through cuBLASLt");
}

Expected<const CublasLt*> load_cublaslt() {
  // Loaded once; a failure is remembered, so every caller gets the same message.
  static const Expected<CublasLt> lt = open_cublaslt();
  if (!lt) return lt.status();
  return &*lt;
}

#else

Expected<const CublasLt*> load_cublaslt() {
  return Status::error("Kiln was built without cuBLASLt's header (cublasLt.h)");
}

#endif

}  // namespace kiln::runtime
