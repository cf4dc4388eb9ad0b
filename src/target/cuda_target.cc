// The two targets that map kernels onto a GPU: CUDA itself, and the CUDA mapping compiled for
// this CPU, which checks the mapping where no GPU is (target/target.h).
#include "codegen/cuda/emitter.h"
#include "loop/gpu_mapping.h"
#include "runtime/cuda_executor.h"
#include "target/cpu_target.h"

namespace kiln {
namespace {

// What both GPU targets decide alike: the graph stages and the GPU mapping.
class GpuMappingTarget : public Target {
 public:
  // Composites stay whole: the estimate prices kernels on this machine's CPU, which says
  // nothing of a GPU's (a ResNet-50 step's batch norms, decomposed on a 16-core host for an
  // estimated 0.3%, ran their scaling in 49 kernels taking 37 ms of the step's 75 on an H100),
  // and the GPU mapping computes a composite's row statistics in one pass.
  bool decomposes_by_cost() const override { return false; }
  // Convolutions run as im2col and a gemm on a GPU.
  bool computes_convolutions_channels_last() const override { return false; }
  // cuBLASLt's bf16 and f16 gemms; convolutions (im2col and an f32 gemm until cuDNN runs
  // them) stay f32.
  bool computes_in_low_precision(Op op) const override { return op == Op::matmul; }
  // The published figures of the GPU NVRTC compiles for, where Kiln has them (sm_90: H100 and
  // H200 share the SMs, and the H100's bandwidth is the lower bound).
  std::optional<cost::GpuProfile> gpu_profile(const CompileOptions& options) const override {
    if (options.cuda.architecture == "sm_90") return cost::h100_sxm_profile();
    return std::nullopt;
  }

  // cuBLASLt's f32 and f64 gemms (or the template kernel where it is missing); convolutions
  // run as im2col and a gemm, so a conv call (the CPU's layout stage makes them) has none.
  Expected<std::string_view> library_for(const loop::LibraryCall& call) const override {
    if (call.op == loop::LibraryOp::gemm &&
        (all_dtypes(call, DType::f32) || all_dtypes(call, DType::f64) ||
         is_mixed_precision_gemm(call))) {
      return std::string_view("cuBLASLt");
    }
    return Status::errorf(ErrorCode::unsupported, "no library of the GPU computes a {}",
                          library_call_signature(call));
  }

  // The mapping onto blocks and threads, which also places the kernel's scratch.
  Status schedule(KernelRecord& record, const CompileOptions& options,
                  ScheduleSession&) const override {
    KILN_ASSIGN_OR_RETURN(loop::GpuMapping mapped,
                          loop::map_to_gpu(record.kernel, {.atomics = !options.deterministic}));
    record.kernel = std::move(mapped.kernel);
    record.scratch_bytes = std::move(mapped.scratch_bytes);
    return Status::ok();
  }
  void place_scratch(KernelRecord&) const override {}
  // cuBLASLt takes its operands as they lie.
  void pack_weights(KernelRecord&) const override {}
};

class CudaTarget final : public GpuMappingTarget {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }

  Expected<GeneratedCode> generate_code(std::span<const loop::Kernel> kernels,
                                        const CompileOptions& options) const override {
    GeneratedCode code;
    KILN_ASSIGN_OR_RETURN(
        codegen::cuda::CudaUnit unit,
        codegen::cuda::emit_cuda_unit(kernels, {.tf32 = options.precision == Precision::tf32}));
    KILN_ASSIGN_OR_RETURN(codegen::cuda::Cubin cubin,
                          codegen::cuda::compile_cuda(unit.source, options.cuda));
    code.cuda = CudaCompiled{std::move(unit.source), std::move(cubin.image),
                             options.cuda.architecture, std::move(unit.launches)};
    code.units = 1;
    code.units_compiled = cubin.compiled ? 1 : 0;
    return code;
  }

  Expected<std::unique_ptr<runtime::ProgramExecutor>> make_executor(
      const CompiledGraph& compiled, const Device& device) const override {
    if (!compiled.cuda) {
      return Status::error(ErrorCode::internal,
                           "internal compiler error: a CUDA compilation without its cubin");
    }
    const CudaCompiled& cuda = *compiled.cuda;
    KILN_ASSIGN_OR_RETURN(
        std::unique_ptr<runtime::CudaExecutor> executor,
        runtime::CudaExecutor::create(compiled.program, cuda.cubin, cuda.launches, device.ordinal));
    return std::unique_ptr<runtime::ProgramExecutor>(std::move(executor));
  }

  bool caches_compilations() const override { return true; }
};

// The mapping's loop IR, GPU loops and all, compiled for this CPU and run there (slow; for
// tests, so never cached).
class CudaMappingOnCpuTarget final : public GpuMappingTarget {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda_mapping_on_cpu; }

  Expected<GeneratedCode> generate_code(std::span<const loop::Kernel> kernels,
                                        const CompileOptions& options) const override {
    return compile_for_this_cpu(kernels, options);
  }

  Expected<std::unique_ptr<runtime::ProgramExecutor>> make_executor(const CompiledGraph& compiled,
                                                                    const Device&) const override {
    return cpu_executor(compiled);
  }

  bool caches_compilations() const override { return false; }
};

}  // namespace

const Target& cuda_target() {
  static const CudaTarget target;
  return target;
}

const Target& cuda_mapping_on_cpu_target() {
  static const CudaMappingOnCpuTarget target;
  return target;
}

}  // namespace kiln
