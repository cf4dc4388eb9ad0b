// The back-end stages that work on kernels: lower, schedule, scratch, share-kernels, codegen
// (compiler/stages.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <type_traits>

#include "codegen/cpu/emitter.h"
#include "codegen/cpu/prelude.h"
#include "codegen/cuda/emitter.h"
#include "compiler/stages.h"
#include "loop/default_schedule.h"
#include "loop/gpu_mapping.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/scratch.h"
#include "loop/tuning.h"
#include "runtime/kernel_abi.h"

namespace kiln {
namespace {

static_assert(std::is_same_v<runtime::KernelFunction, codegen::cpu::KernelFunction>,
              "the runtime and the code generator must agree on the kernel ABI");

}  // namespace

std::string kernel_label(std::span<const Node* const> nodes) {
  if (nodes.size() == 1) return fmt::format("{} #{}", nodes[0]->op_name(), nodes[0]->id());
  std::vector<std::string_view> names;
  for (const Node* node : nodes) names.push_back(node->op_name());
  return fmt::format("fused {} #{}", fmt::join(names, "+"), nodes[0]->id());
}

Expected<LoweredKernels> lower_stage(const Graph& graph, const fusion::Partition& partition) {
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes().size(); ++i) position[graph.nodes()[i]] = i;
  LoweredKernels result;
  for (const fusion::Group& group : partition.groups) {
    Expected<loop::LoweredGroup> lowered = loop::lower_group(graph, group.nodes);
    if (!lowered) {
      const std::vector<const Node*> nodes(group.nodes.begin(), group.nodes.end());
      return lowered.status().with_context(kernel_label(nodes));
    }
    result.views.insert(result.views.end(), lowered->views.begin(), lowered->views.end());
    if (lowered->outputs.empty()) continue;
    KernelRecord record;
    record.nodes.assign(group.nodes.begin(), group.nodes.end());
    // lower_group accepts nodes in any order; keep the graph's, for labels and the check mode.
    std::sort(record.nodes.begin(), record.nodes.end(),
              [&](const Node* a, const Node* b) { return position.at(a) < position.at(b); });
    record.kernel = std::move(lowered->kernel);
    record.inputs = std::move(lowered->inputs);
    record.outputs = std::move(lowered->outputs);
    result.records.push_back(std::move(record));
  }
  return result;
}

Status schedule_stage(std::vector<KernelRecord>& records, const CompileOptions& options) {
  const loop::ScheduleTarget target = loop::host_target();
  for (KernelRecord& record : records) {
    if (options.device != Device::cpu) {
      Expected<loop::GpuMapping> mapped =
          loop::map_to_gpu(record.kernel, {.atomics = !options.deterministic});
      if (!mapped) return mapped.status().with_context(kernel_label(record.nodes));
      record.kernel = std::move(mapped->kernel);
      record.scratch_bytes = std::move(mapped->scratch_bytes);
      continue;
    }
    if (!options.schedule) continue;
    record.schedule = loop::default_schedule(record.kernel, target);
    Expected<loop::Kernel> scheduled = loop::apply_schedule(record.kernel, record.schedule);
    if (!scheduled) {
      // The default schedule keeps only directives it applied legally, so replaying it cannot
      // fail: if it does, that is a bug, reported with the kernel.
      return Status::errorf(
          "internal compiler error: the default schedule of {} does not "
          "replay: {}\n{}",
          kernel_label(record.nodes), scheduled.status().message(), loop::print(record.kernel));
    }
    record.kernel = std::move(*scheduled);
  }
  return Status::ok();
}

void scratch_stage(std::vector<KernelRecord>& records, const CompileOptions& options) {
  if (options.device != Device::cpu) return;
  for (KernelRecord& record : records) {
    record.kernel = loop::promote_scratch(record.kernel, record.scratch_bytes);
  }
}

namespace {

// Whether `value` is a weight compiled into the program's constants (plan_memory_stage).
bool is_compiled_in_constant(const Value& value) {
  const Node* producer = value.producer();
  return producer != nullptr && producer->op() == Op::constant;
}

// Gives each qualifying gemm of a kernel, outside its loops (a gemm inside a loop runs on
// other regions each time), a state parameter to keep its B packed in.
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

  loop::Stmt visit_gemm(const loop::Gemm& g, const loop::Stmt& self) override {
    const auto m = loop::as_const_int(g.m), n = loop::as_const_int(g.n);
    const auto k = loop::as_const_int(g.k);
    if (g.accumulate || g.c.buffer.dtype() != DType::f32 || !m || !n || !k ||
        !loop::as_const_int(g.b.offset) || *m > loop::kPackedGemmMaxRows ||
        *m * *n * *k < loop::kPackedGemmMinWork || !reads_constant(g.b.buffer)) {
      return self;
    }
    const int64_t bytes = codegen::cpu::packed_b_state_bytes(*k, *n);
    const loop::Buffer packed = loop::Buffer::param(fmt::format("packed_b{}", added_.size()),
                                                    DType::i64, {bytes / 8});
    added_.push_back(packed);
    record_.state_bytes.push_back(bytes);
    loop::GemmArgs args = loop::gemm_args(g);
    args.packed_b = packed;
    return loop::gemm(std::move(args));
  }

  // A conv's constant weights stay reordered into oneDNN's layout (loop/stmt.h: packed_w).
  loop::Stmt visit_conv(const loop::Conv& c, const loop::Stmt& self) override {
    if (!reads_constant(c.w)) return self;
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

}  // namespace

void pack_weights_stage(std::vector<KernelRecord>& records, const CompileOptions& options) {
  if (options.device != Device::cpu || !options.pack_weights) return;
  for (KernelRecord& record : records) PackConstantWeights(record).run();
}

std::vector<loop::Kernel> share_kernels_stage(std::vector<KernelRecord>& records) {
  std::map<std::string, int> number_of;
  std::vector<loop::Kernel> kernels;
  for (KernelRecord& record : records) {
    const auto [it, inserted] =
        number_of.emplace(loop::print(record.kernel), static_cast<int>(kernels.size()));
    if (inserted) kernels.push_back(record.kernel);
    record.program_kernel = it->second;
  }
  return kernels;
}

Expected<GeneratedCode> codegen_stage(std::span<const loop::Kernel> kernels,
                                      const CompileOptions& options) {
  GeneratedCode code;
  if (options.device == Device::cuda) {
    KILN_ASSIGN_OR_RETURN(codegen::cuda::CudaUnit unit, codegen::cuda::emit_cuda_unit(kernels));
    KILN_ASSIGN_OR_RETURN(codegen::cuda::Cubin cubin,
                          codegen::cuda::compile_cuda(unit.source, options.cuda));
    code.cuda = CudaCompiled{std::move(unit.source), std::move(cubin.image),
                             options.cuda.architecture, std::move(unit.launches)};
    code.units = 1;
    code.units_compiled = cubin.compiled ? 1 : 0;
    return code;
  }
  KILN_ASSIGN_OR_RETURN(code.cpu, codegen::cpu::compile_kernels(kernels, options.cpu));
  code.units = code.cpu.units();
  code.units_compiled = code.cpu.units_compiled();
  return code;
}

Expected<std::string> kernel_source(const CompiledGraph& compiled) {
  if (compiled.cuda) return compiled.cuda->source;
  if (!compiled.program) return Status::error("the compilation stopped before plan-memory");
  std::vector<loop::Kernel> kernels(static_cast<size_t>(compiled.program->num_kernels));
  for (const KernelRecord& record : compiled.records) {
    kernels[static_cast<size_t>(record.program_kernel)] = record.kernel;
  }
  return codegen::cpu::emit_translation_unit(kernels);
}

}  // namespace kiln
