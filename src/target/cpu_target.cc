#include "target/cpu_target.h"

#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "codegen/cpu/emitter.h"
#include "codegen/cpu/prelude.h"
#include "loop/default_schedule.h"
#include "target/cpu_kernel_timer.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/scratch.h"
#include "loop/tuning.h"
#include "runtime/kernel_abi.h"

namespace kiln {
namespace {

static_assert(std::is_same_v<runtime::KernelFunction, codegen::cpu::KernelFunction>,
              "the runtime and the code generator must agree on the kernel ABI");

// Whether `value` is a weight compiled into the program's constants (plan_memory_stage).
bool is_compiled_in_constant(const Value& value) {
  const Node* producer = value.producer();
  return producer != nullptr && producer->op() == Op::constant;
}

// Gives each qualifying gemm of a kernel, outside its loops (a gemm inside a loop runs on
// other regions each time), a state parameter to keep its B packed in. oneDNN's sgemm packs B
// on every call, which costs a large share of the product when A has few rows (a batch of one
// through BERT or ViT: 128 or 197 rows). Only f32 gemms outside loops that overwrite C, with
// few rows and enough work to repay a primitive's setup, are packed. A conv statement's
// constant weights are likewise kept in oneDNN's layout (loop/stmt.h: packed_w).
class PackConstantWeights final : public loop::IRMutator {
 public:
  explicit PackConstantWeights(KernelRecord& record) : record_(record) {}

  void run() {
    loop::Stmt body = mutate(record_.kernel.body);
    if (added_.empty()) return;
    record_.kernel.body = std::move(body);
    record_.kernel.params.insert(record_.kernel.params.end(), added_.begin(), added_.end());
  }

 protected:
  loop::Stmt visit_for(const loop::For&, const loop::Stmt& self) override { return self; }

  loop::Stmt visit_library_call(const loop::LibraryCall& call, const loop::Stmt& self) override {
    return call.op == loop::LibraryOp::gemm ? packed_gemm(call, self) : packed_conv(call, self);
  }

  loop::Stmt packed_gemm(const loop::LibraryCall& g, const loop::Stmt& self) {
    const auto m = loop::as_const_int(g.gemm().m), n = loop::as_const_int(g.gemm().n);
    const auto k = loop::as_const_int(g.gemm().k);
    if (g.gemm().accumulate || g.c().buffer.dtype() != DType::f32 || !m || !n || !k ||
        !loop::as_const_int(g.b().offset) || *m > loop::kPackedGemmMaxRows ||
        *m * *n * *k < loop::kPackedGemmMinWork || !reads_constant(g.b().buffer)) {
      return self;
    }
    const int64_t bytes = codegen::cpu::packed_b_state_bytes(*k, *n);
    const loop::Buffer packed =
        loop::Buffer::param(fmt::format("packed_b{}", added_.size()), DType::i64, {bytes / 8});
    added_.push_back(packed);
    record_.state_bytes.push_back(bytes);
    loop::GemmArgs args = loop::gemm_args(g);
    args.packed_b = packed;
    return loop::gemm(std::move(args));
  }

  loop::Stmt packed_conv(const loop::LibraryCall& c, const loop::Stmt& self) {
    if (!reads_constant(c.w().buffer)) return self;
    const int64_t bytes = codegen::cpu::conv_state_bytes(c);
    const loop::Buffer kept =
        loop::Buffer::param(fmt::format("packed_w{}", added_.size()), DType::i64, {bytes / 8});
    added_.push_back(kept);
    record_.state_bytes.push_back(bytes);
    loop::ConvArgs args = loop::conv_args(c);
    args.packed_w = kept;
    return loop::conv(std::move(args));
  }

 private:
  // Whether `buffer` is a parameter that receives a compiled-in constant: parameters are the
  // record's inputs first, in order.
  bool reads_constant(const loop::Buffer& buffer) const {
    const std::vector<loop::Buffer>& params = record_.kernel.params;
    for (size_t i = 0; i < params.size() && i < record_.inputs.size(); ++i) {
      if (params[i].name() == buffer.name()) return is_compiled_in_constant(*record_.inputs[i]);
    }
    return false;
  }

  KernelRecord& record_;
  std::vector<loop::Buffer> added_;
};

// This machine's CPU: the default schedule for its cores and vectors, C++ through the system
// compiler, oneDNN and OpenBLAS for the library calls.
class CpuTarget final : public Target {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }

  bool decomposes_by_cost() const override { return true; }
  // oneDNN computes convolutions channels last.
  bool computes_convolutions_channels_last() const override { return true; }
  // oneDNN's bf16 and f16 matmul, and the convolutions: a training step's as im2col and that
  // matmul (loop/lower_conv.h), an inference graph's channels last through oneDNN's
  // convolution of the low dtype (f32 on widened copies where oneDNN has no kernel for it).
  bool computes_in_low_precision(Op op) const override {
    return op == Op::matmul || op == Op::conv || op == Op::conv_grad_data ||
           op == Op::conv_grad_weight || op == Op::conv_channels_last;
  }
  std::optional<cost::GpuProfile> gpu_profile(const CompileOptions&) const override {
    return std::nullopt;
  }

  // oneDNN's sgemm and convolutions in f32, OpenBLAS's dgemm in f64 (codegen/cpu/prelude.h).
  Expected<std::string_view> library_for(const loop::LibraryCall& call) const override {
    if (call.op == loop::LibraryOp::gemm && all_dtypes(call, DType::f64))
      return std::string_view("OpenBLAS");
    // Mixed precision's gemms (with a 16-bit or an f32 C) and convolutions: oneDNN's matmul and
    // convolution primitives of the low dtype, or its f32 ones on widened copies where it has
    // no kernel for the CPU (f16 without AVX512-FP16).
    if (all_dtypes(call, DType::f32) || is_mixed_precision_call(call) || is_widening_gemm(call))
      return std::string_view("oneDNN");
    return Status::errorf(ErrorCode::unsupported, "no library of the CPU computes a {}",
                          library_call_signature(call));
  }

  // The default schedule, or the search's choice (loop/schedule_search.h).
  Status schedule(KernelRecord& record, const CompileOptions& options,
                  ScheduleSession& session) const override {
    if (!options.schedule) return Status::ok();
    if (session.search == nullptr) KILN_RETURN_IF_ERROR(start_search(session, options));
    KILN_ASSIGN_OR_RETURN(loop::SearchChoice choice, session.search->choose(record.kernel));
    record.schedule = std::move(choice.schedule);
    record.kernel = std::move(choice.kernel);
    record.search = std::move(choice.report);
    return Status::ok();
  }

  void place_scratch(KernelRecord& record) const override {
    record.kernel = loop::promote_scratch(record.kernel, record.scratch_bytes);
  }

  void pack_weights(KernelRecord& record) const override { PackConstantWeights(record).run(); }

  Expected<GeneratedCode> generate_code(std::span<const loop::Kernel> kernels,
                                        const CompileOptions& options) const override {
    return compile_for_this_cpu(kernels, options);
  }

  Expected<std::unique_ptr<runtime::ProgramExecutor>> make_executor(const CompiledGraph& compiled,
                                                                    const Device&) const override {
    return cpu_executor(compiled);
  }

  bool caches_compilations() const override { return true; }

 private:
  // The compilation's search: for this machine's cores and vectors, priced with its cost
  // profile, timed here and cached beside the compilations under its profile's identity. With
  // the search off it only replays the default schedule, and needs neither.
  Status start_search(ScheduleSession& session, const CompileOptions& options) const {
    loop::ScheduleSearch::Config config{.mode = options.schedule_search,
                                        .target = loop::host_target(),
                                        .machine = {},
                                        .identity = {}};
    session.timer = std::make_unique<CpuKernelTimer>(options.cpu);
    if (config.mode != loop::SearchMode::off) {
      KILN_ASSIGN_OR_RETURN(const cost::DeviceProfile profile, cost_profile(options));
      KILN_ASSIGN_OR_RETURN(config.identity, cost_profile_identity(options));
      config.machine = cost_machine(profile, config.target);
      session.cache = std::make_unique<loop::ScheduleCache>(loop::default_schedule_cache_dir());
    }
    session.search =
        std::make_unique<loop::ScheduleSearch>(config, *session.timer, session.cache.get());
    return Status::ok();
  }
};

}  // namespace

loop::CostMachine cost_machine(const cost::DeviceProfile& profile,
                               const loop::ScheduleTarget& target) {
  loop::CostMachine machine{.cores = std::max(1, profile.cores),
                            .vector_bytes = target.vector_bytes,
                            .vector_math = target.vector_math};
  // The profile's elementwise rate is f32 flop/s in vector lanes on every core.
  const double lanes = static_cast<double>(target.vector_bytes) / 4;
  if (profile.vector_flops > 0) {
    machine.ops_per_second = profile.vector_flops / (lanes * machine.cores);
  }
  if (profile.memory_bandwidth > 0) machine.memory_bandwidth = profile.memory_bandwidth;
  if (profile.l2_bytes > 0) machine.l2_bytes = profile.l2_bytes;
  if (profile.kernel_overhead > 0) machine.parallel_start = profile.kernel_overhead;
  return machine;
}

const Target& cpu_target() {
  static const CpuTarget target;
  return target;
}

Expected<GeneratedCode> compile_for_this_cpu(std::span<const loop::Kernel> kernels,
                                             const CompileOptions& options) {
  GeneratedCode code;
  KILN_ASSIGN_OR_RETURN(code.cpu, codegen::cpu::compile_kernels(kernels, options.cpu));
  code.units = code.cpu.units();
  code.units_compiled = code.cpu.units_compiled();
  return code;
}

Expected<std::unique_ptr<runtime::ProgramExecutor>> cpu_executor(const CompiledGraph& compiled) {
  std::vector<runtime::KernelFunction> functions;
  for (size_t k = 0; k < compiled.kernels.size(); ++k) {
    functions.push_back(compiled.kernels.function(k));
  }
  KILN_ASSIGN_OR_RETURN(runtime::Executor executor,
                        runtime::Executor::create(compiled.program, std::move(functions)));
  return std::unique_ptr<runtime::ProgramExecutor>(
      std::make_unique<runtime::Executor>(std::move(executor)));
}

}  // namespace kiln
