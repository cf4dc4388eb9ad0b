#include "target/target.h"

#include <fmt/format.h>

#include "loop/ir_visitor.h"
#include "target/cpu_target.h"
#include "target/cuda_target.h"

namespace kiln {

Expected<cost::DeviceProfile> Target::cost_profile(const CompileOptions& options) const {
  return cost::given_or_host_profile(options.fusion.profile);
}

Expected<std::string> Target::cost_profile_identity(const CompileOptions& options) const {
  return cost::profile_identity(options.fusion.profile);
}

Status Target::runs_library_calls(const loop::Kernel& kernel) const {
  struct Checker : loop::IRVisitor {
    explicit Checker(const Target& checked) : target(checked) {}
    void visit_library_call(const loop::LibraryCall& call) override {
      if (!status.is_ok()) return;
      Expected<std::string_view> library = target.library_for(call);
      if (!library) status = library.status();
    }
    const Target& target;
    Status status;
  } checker(*this);
  checker.visit(kernel.body);
  return checker.status;
}

fusion::FusionOptions Target::fusion_options(const CompileOptions& options) const {
  fusion::FusionOptions fusion = options.fusion;
  fusion.library_calls = [this](const loop::Kernel& kernel) { return runs_library_calls(kernel); };
  fusion.library_table = std::string(device_kind_name(kind()));
  return fusion;
}

// "gemm of (bf16, bf16, f32, f32)": a call's operation and dtypes, for refusals.
std::string library_call_signature(const loop::LibraryCall& call) {
  const loop::LibraryDTypes& d = call.dtypes;
  return fmt::format("{} of ({}, {}, {}, {})", loop::library_op_name(call.op), dtype_name(d.a),
                     dtype_name(d.b), dtype_name(d.accumulate), dtype_name(d.out));
}

bool all_dtypes(const loop::LibraryCall& call, DType dtype) {
  const loop::LibraryDTypes& d = call.dtypes;
  return d.a == dtype && d.b == dtype && d.accumulate == dtype && d.out == dtype;
}

bool is_mixed_precision_call(const loop::LibraryCall& call) {
  const loop::LibraryDTypes& d = call.dtypes;
  return is_low_precision(d.a) && d.b == d.a && d.out == d.a && d.accumulate == DType::f32;
}

bool is_widening_gemm(const loop::LibraryCall& call) {
  const loop::LibraryDTypes& d = call.dtypes;
  return call.op == loop::LibraryOp::gemm && is_low_precision(d.a) && d.b == d.a &&
         d.accumulate == DType::f32 && d.out == DType::f32;
}

bool is_mixed_precision_gemm(const loop::LibraryCall& call) {
  return call.op == loop::LibraryOp::gemm && is_mixed_precision_call(call);
}

const Target& target_for(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu:
      return cpu_target();
    case DeviceKind::cuda:
      return cuda_target();
    case DeviceKind::cuda_mapping_on_cpu:
      return cuda_mapping_on_cpu_target();
  }
  KILN_UNREACHABLE("device kind {}", static_cast<int>(kind));
}

}  // namespace kiln
