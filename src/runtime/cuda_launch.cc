#include "runtime/cuda_launch.h"

#include <limits>

#include "runtime/byte_format.h"

namespace kiln::runtime {
namespace {

constexpr std::string_view kLaunchesTag = "kiln-cuda-launches";
constexpr int64_t kLaunchesFormat = 2;
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMinInt64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

Expected<CudaGemm> read_gemm(ByteReader& r) {
  CudaGemm g;
  KILN_ASSIGN_OR_RETURN(int64_t type, r.integer(0, int64_t(CudaGemm::Type::bf16), "a gemm's type"));
  g.type = static_cast<CudaGemm::Type>(type);
  for (int64_t* size : {&g.m, &g.n, &g.k, &g.lda, &g.ldb, &g.ldc, &g.batch, &g.stride_a,
                        &g.stride_b, &g.stride_c}) {
    KILN_ASSIGN_OR_RETURN(*size, r.integer(0, kMaxSerializedBytes, "a gemm's size"));
  }
  KILN_ASSIGN_OR_RETURN(g.transpose_a, r.flag("a gemm's transpose_a"));
  KILN_ASSIGN_OR_RETURN(g.transpose_b, r.flag("a gemm's transpose_b"));
  KILN_ASSIGN_OR_RETURN(g.accumulate, r.flag("a gemm's accumulate"));
  KILN_ASSIGN_OR_RETURN(g.tf32, r.flag("a gemm's tf32"));
  return g;
}

Expected<CudaLaunch> read_launch(ByteReader& r) {
  CudaLaunch launch;
  KILN_ASSIGN_OR_RETURN(std::string_view function, r.text("a launch's function"));
  launch.function = std::string(function);
  for (int64_t* dim : {&launch.grid[0], &launch.grid[1], &launch.grid[2], &launch.block[0],
                       &launch.block[1], &launch.block[2]}) {
    KILN_ASSIGN_OR_RETURN(*dim, r.integer(0, kMaxInt, "a launch's grid or block"));
  }
  KILN_ASSIGN_OR_RETURN(size_t args, r.count(32, "a launch's argument count"));
  for (size_t i = 0; i < args; ++i) {
    CudaLaunchArg& arg = launch.args.emplace_back();
    KILN_ASSIGN_OR_RETURN(int64_t kind,
                          r.integer(0, int64_t(CudaLaunchArg::Kind::i64), "an argument's kind"));
    arg.kind = static_cast<CudaLaunchArg::Kind>(kind);
    KILN_ASSIGN_OR_RETURN(int64_t param, r.integer(0, kMaxInt, "an argument's parameter"));
    arg.param = static_cast<int>(param);
    KILN_ASSIGN_OR_RETURN(arg.byte_offset,
                          r.integer(0, kMaxSerializedBytes, "an argument's offset"));
    KILN_ASSIGN_OR_RETURN(arg.value, r.integer(kMinInt64, kMaxInt64, "an argument's value"));
  }
  KILN_ASSIGN_OR_RETURN(bool gemm, r.flag("whether a launch is a gemm"));
  if (gemm) {
    KILN_ASSIGN_OR_RETURN(launch.gemm, read_gemm(r));
  }
  return launch;
}

}  // namespace

std::string_view gemm_type_name(CudaGemm::Type type) {
  switch (type) {
    case CudaGemm::Type::f32: return "f32";
    case CudaGemm::Type::f64: return "f64";
    case CudaGemm::Type::f16: return "f16";
    case CudaGemm::Type::bf16: return "bf16";
  }
  return "f32";
}

int64_t gemm_element_bytes(CudaGemm::Type type) {
  switch (type) {
    case CudaGemm::Type::f64: return 8;
    case CudaGemm::Type::f32: return 4;
    case CudaGemm::Type::f16:
    case CudaGemm::Type::bf16: return 2;
  }
  return 4;
}

std::string serialize_launches(const CudaKernelLaunches& launches) {
  ByteWriter w;
  w.header(kLaunchesTag, kLaunchesFormat);
  w.integer(launches.size());
  for (const std::vector<CudaLaunch>& kernel : launches) {
    w.integer(kernel.size());
    for (const CudaLaunch& launch : kernel) {
      w.text(launch.function);
      for (int64_t dim : launch.grid) w.integer(dim);
      for (int64_t dim : launch.block) w.integer(dim);
      w.integer(launch.args.size());
      for (const CudaLaunchArg& arg : launch.args) {
        w.integer(arg.kind);
        w.integer(arg.param);
        w.integer(arg.byte_offset);
        w.integer(arg.value);
      }
      w.integer(launch.gemm.has_value());
      if (const std::optional<CudaGemm>& g = launch.gemm) {
        w.integer(g->type);
        for (int64_t size : {g->m, g->n, g->k, g->lda, g->ldb, g->ldc, g->batch, g->stride_a,
                             g->stride_b, g->stride_c}) {
          w.integer(size);
        }
        w.integer(g->transpose_a);
        w.integer(g->transpose_b);
        w.integer(g->accumulate);
        w.integer(g->tf32);
      }
    }
  }
  return w.take();
}

Expected<CudaKernelLaunches> deserialize_launches(std::string_view bytes) {
  ByteReader r(bytes, "launch bytes");
  KILN_RETURN_IF_ERROR(r.header(kLaunchesTag, kLaunchesFormat, "serialized Kiln CUDA launches"));
  CudaKernelLaunches launches;
  KILN_ASSIGN_OR_RETURN(size_t kernels, r.count(8, "the kernel count"));
  for (size_t k = 0; k < kernels; ++k) {
    std::vector<CudaLaunch>& kernel = launches.emplace_back();
    KILN_ASSIGN_OR_RETURN(size_t count, r.count(64, "a kernel's launch count"));
    for (size_t i = 0; i < count; ++i) {
      KILN_ASSIGN_OR_RETURN(CudaLaunch launch, read_launch(r));
      kernel.push_back(std::move(launch));
    }
  }
  if (!r.at_end()) return Status::error("launch bytes: more bytes after the launches");
  return launches;
}

}  // namespace kiln::runtime
