#include "compiler/compile_graph.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <type_traits>

#include <fmt/format.h>

#include "codegen/cpu/emitter.h"
#include "codegen/cuda/emitter.h"
#include "compiler/tensor_bytes.h"
#include "ir/printer.h"
#include "loop/default_schedule.h"
#include "loop/gpu_mapping.h"
#include "loop/printer.h"
#include "loop/scratch.h"
#include "runtime/kernel_abi.h"
#include "runtime/memory_plan.h"

namespace kiln {
namespace {

static_assert(std::is_same_v<runtime::KernelFunction, codegen::cpu::KernelFunction>,
              "the runtime and the code generator must agree on the kernel ABI");

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t bytes_of(const Value& value) {
  return value.shape().num_elements() * dtype_size_bytes(value.dtype());
}

std::string label_of(std::span<const Node* const> nodes) {
  if (nodes.size() == 1) return fmt::format("{} #{}", nodes[0]->op_name(), nodes[0]->id());
  std::vector<std::string_view> names;
  for (const Node* node : nodes) names.push_back(node->op_name());
  return fmt::format("fused {} #{}", fmt::join(names, "+"), nodes[0]->id());
}

// The groups made kernels, and the views they give (loop/lower_group.h).
struct LoweredGroups {
  std::vector<KernelRecord> records;
  std::vector<loop::ViewOutput> views;
};

// Lowers every group and applies the default schedule for this machine; groups that store
// nothing (whose values nobody needs, or that give only views) are no kernel.
Expected<LoweredGroups> lower_groups(const Graph& graph,
                                     std::span<const std::vector<Node*>> groups,
                                     const CompileOptions& options) {
  const loop::ScheduleTarget target = loop::host_target();
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes().size(); ++i) position[graph.nodes()[i]] = i;
  LoweredGroups result;
  std::vector<KernelRecord>& records = result.records;
  for (const std::vector<Node*>& group : groups) {
    Expected<loop::LoweredGroup> lowered = loop::lower_group(graph, group);
    if (!lowered) return lowered.status().with_context(label_of({group.data(), group.size()}));
    result.views.insert(result.views.end(), lowered->views.begin(), lowered->views.end());
    if (lowered->outputs.empty()) continue;
    KernelRecord record;
    record.nodes.assign(group.begin(), group.end());
    // lower_group accepts nodes in any order; keep the graph's, for labels and the check mode.
    std::sort(record.nodes.begin(), record.nodes.end(),
              [&](const Node* a, const Node* b) { return position.at(a) < position.at(b); });
    record.kernel = std::move(lowered->kernel);
    if (options.device != Device::cpu) {
      Expected<loop::GpuMapping> mapped = loop::map_to_gpu(record.kernel);
      if (!mapped) return mapped.status().with_context(label_of(record.nodes));
      record.kernel = std::move(mapped->kernel);
      record.scratch_bytes = std::move(mapped->scratch_bytes);
    } else if (options.schedule) {
      record.schedule = loop::default_schedule(record.kernel, target);
      Expected<loop::Kernel> scheduled = loop::apply_schedule(record.kernel, record.schedule);
      if (!scheduled) {
        // The default schedule keeps only directives it applied legally, so replaying it
        // cannot fail: if it does, that is a bug, reported with the kernel.
        return Status::errorf("internal compiler error: the default schedule of {} does not "
                              "replay: {}\n{}",
                              label_of(record.nodes), scheduled.status().message(),
                              loop::print(record.kernel));
      }
      record.kernel = std::move(*scheduled);
    }
    if (options.device == Device::cpu) {
      record.kernel = loop::promote_scratch(record.kernel, record.scratch_bytes);
    }
    record.inputs = std::move(lowered->inputs);
    record.outputs = std::move(lowered->outputs);
    records.push_back(std::move(record));
  }
  return result;
}

// Numbers the distinct kernels of `records` (by their printed loop IR) in order of first use,
// sets each record's program_kernel, and returns the distinct kernels.
std::vector<loop::Kernel> share_identical_kernels(std::vector<KernelRecord>& records) {
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

// Builds the program's buffers and steps for `records`, run in order.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(const Graph& graph) : graph_(graph) {
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      const Value* input = graph.inputs()[i];
      program_.input_bytes.push_back(bytes_of(*input));
      buffer_of_[input] = add_buffer({runtime::Storage::input, static_cast<int64_t>(i), 0,
                                      bytes_of(*input)});
    }
    for (const Value* output : graph.outputs()) program_.output_bytes.push_back(bytes_of(*output));
  }

  Status add_kernel_step(const KernelRecord& record, int record_index,
                         std::vector<int>& step_records) {
    runtime::Step step{.kind = runtime::Step::Kind::kernel, .kernel = record.program_kernel,
                       .buffers = {}, .label = label_of(record.nodes)};
    const int index = static_cast<int>(program_.steps.size());
    for (const Value* input : record.inputs) {
      KILN_ASSIGN_OR_RETURN(int buffer, buffer_for_read(*input, step.label));
      step.buffers.push_back(buffer);
      if (auto it = arena_lifetime_.find(buffer); it != arena_lifetime_.end()) {
        it->second.last_step = index;
      }
    }
    for (const Value* output : record.outputs) {
      const int buffer = buffer_for_write(*output, index);
      step.buffers.push_back(buffer);
    }
    for (const int64_t bytes : record.scratch_bytes) {
      const int buffer = add_buffer({runtime::Storage::arena, 0, 0, bytes});
      arena_lifetime_[buffer] = {bytes, index, index};
      step.buffers.push_back(buffer);
    }
    program_.steps.push_back(std::move(step));
    step_records.push_back(record_index);
    return Status::ok();
  }

  // A view is read from its source's buffer: the same bytes, read with another shape
  // (buffer_for_read follows it), so reads of either extend the buffer's lifetime.
  void add_view(const loop::ViewOutput& view) { view_source_.emplace(view.value, view.source); }

  // Copies for the graph outputs no kernel wrote into the caller's memory.
  Status add_output_copies(std::vector<int>& step_records) {
    for (size_t o = 0; o < graph_.outputs().size(); ++o) {
      if (output_written_.count(o) != 0) continue;
      const Value* value = graph_.outputs()[o];
      KILN_ASSIGN_OR_RETURN(int source, buffer_for_read(*value, "graph output"));
      const int destination = add_buffer(
          {runtime::Storage::output, static_cast<int64_t>(o), 0, bytes_of(*value)});
      const int index = static_cast<int>(program_.steps.size());
      if (auto it = arena_lifetime_.find(source); it != arena_lifetime_.end()) {
        it->second.last_step = index;
      }
      program_.steps.push_back({.kind = runtime::Step::Kind::copy, .kernel = 0,
                                .buffers = {source, destination},
                                .label = fmt::format("copy to output {}", o)});
      step_records.push_back(-1);
    }
    return Status::ok();
  }

  // Places the arena buffers and returns the finished program.
  runtime::Program finish(int num_kernels, CompileStats& stats) {
    std::vector<int> arena_buffers;
    std::vector<BufferLifetime> lifetimes;
    for (const auto& [buffer, lifetime] : arena_lifetime_) {
      arena_buffers.push_back(buffer);
      lifetimes.push_back(lifetime);
    }
    const MemoryPlan plan = plan_memory(lifetimes);
    for (size_t i = 0; i < arena_buffers.size(); ++i) {
      program_.buffers[static_cast<size_t>(arena_buffers[i])].offset = plan.offsets[i];
    }
    program_.arena_bytes = plan.peak_bytes;
    program_.num_kernels = num_kernels;
    stats.arena_total_bytes = plan.total_bytes;
    stats.arena_live_bound_bytes = plan.live_bound_bytes;
    return std::move(program_);
  }

 private:
  int add_buffer(runtime::BufferSlot slot) {
    program_.buffers.push_back(slot);
    return static_cast<int>(program_.buffers.size()) - 1;
  }

  // The buffer holding `value` for a reader: an earlier kernel's output, a graph input, or a
  // constant (encoded into the segment on first use).
  Expected<int> buffer_for_read(const Value& value, std::string_view reader) {
    if (auto it = buffer_of_.find(&value); it != buffer_of_.end()) return it->second;
    if (auto it = view_source_.find(&value); it != view_source_.end()) {
      return buffer_for_read(*it->second, reader);
    }
    const Node* producer = value.producer();
    if (producer == nullptr || producer->op() != Op::constant) {
      return Status::errorf("{} reads {}, which no earlier kernel computes: the groups are not "
                            "in dependency order",
                            reader, print_value_ref(value));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Array> folded,
                          producer->def().eval({}, producer->attrs(), producer->output_types()));
    // Constants start aligned like arena buffers, so kernels may load them with vector loads.
    program_.constants.resize(static_cast<size_t>(
        (static_cast<int64_t>(program_.constants.size()) + kArenaAlignment - 1) /
        kArenaAlignment * kArenaAlignment));
    const auto offset = static_cast<int64_t>(program_.constants.size());
    append_encoded(folded.at(0), program_.constants);
    const int buffer = add_buffer({runtime::Storage::constant, 0, offset, bytes_of(value)});
    buffer_of_[&value] = buffer;
    return buffer;
  }

  int buffer_for_write(const Value& value, int step) {
    const auto& outputs = graph_.outputs();
    for (size_t o = 0; o < outputs.size(); ++o) {
      if (outputs[o] == &value && output_written_.count(o) == 0) {
        output_written_.insert(o);
        const int buffer = add_buffer(
            {runtime::Storage::output, static_cast<int64_t>(o), 0, bytes_of(value)});
        buffer_of_[&value] = buffer;
        return buffer;
      }
    }
    const int buffer = add_buffer({runtime::Storage::arena, 0, 0, bytes_of(value)});
    buffer_of_[&value] = buffer;
    arena_lifetime_[buffer] = {bytes_of(value), step, step};
    return buffer;
  }

  const Graph& graph_;
  runtime::Program program_;
  std::map<const Value*, int> buffer_of_;
  std::map<const Value*, const Value*> view_source_;
  std::map<int, BufferLifetime> arena_lifetime_;  // by buffer number
  std::set<size_t> output_written_;
};

}  // namespace

Expected<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  if (name == "cuda-mapping-on-cpu") return Device::cuda_mapping_on_cpu;
  return Status::errorf("unknown device '{}' (cpu, cuda, cuda-mapping-on-cpu)", name);
}

Expected<CompiledGraph> compile_groups(const Graph& graph,
                                       std::span<const std::vector<Node*>> groups,
                                       const CompileOptions& options) {
  CompiledGraph compiled;
  const Clock::time_point lower_start = Clock::now();
  KILN_ASSIGN_OR_RETURN(LoweredGroups lowered, lower_groups(graph, groups, options));
  compiled.records = std::move(lowered.records);
  compiled.stats.lower_seconds = seconds_since(lower_start);

  const std::vector<loop::Kernel> kernels = share_identical_kernels(compiled.records);

  ProgramBuilder builder(graph);
  for (const loop::ViewOutput& view : lowered.views) builder.add_view(view);
  for (size_t r = 0; r < compiled.records.size(); ++r) {
    KILN_RETURN_IF_ERROR(builder.add_kernel_step(compiled.records[r], static_cast<int>(r),
                                                 compiled.step_kernel_record));
  }
  KILN_RETURN_IF_ERROR(builder.add_output_copies(compiled.step_kernel_record));
  compiled.program = std::make_shared<const runtime::Program>(
      builder.finish(static_cast<int>(kernels.size()), compiled.stats));

  const Clock::time_point codegen_start = Clock::now();
  if (options.device == Device::cuda) {
    KILN_ASSIGN_OR_RETURN(codegen::cuda::CudaUnit unit, codegen::cuda::emit_cuda_unit(kernels));
    KILN_ASSIGN_OR_RETURN(codegen::cuda::Cubin cubin,
                          codegen::cuda::compile_cuda(unit.source, options.cuda));
    compiled.cuda = CudaCompiled{std::move(unit.source), std::move(cubin.image),
                                 options.cuda.architecture, std::move(unit.launches)};
    compiled.stats.codegen_seconds = seconds_since(codegen_start);
    compiled.stats.units = 1;
    compiled.stats.units_compiled = cubin.compiled ? 1 : 0;
    return compiled;
  }
  KILN_ASSIGN_OR_RETURN(compiled.kernels, codegen::cpu::compile_kernels(kernels, options.cpu));
  compiled.stats.codegen_seconds = seconds_since(codegen_start);
  compiled.stats.units = compiled.kernels.units();
  compiled.stats.units_compiled = compiled.kernels.units_compiled();
  return compiled;
}

Expected<CompiledGraph> compile_graph(const Graph& graph, const CompileOptions& options) {
  KILN_ASSIGN_OR_RETURN(fusion::Partition partition, fusion::partition_graph(graph, options.fusion));
  KILN_ASSIGN_OR_RETURN(CompiledGraph compiled,
                        compile_groups(graph, partition.node_groups(), options));
  compiled.partition = std::move(partition);
  return compiled;
}

Expected<std::string> kernel_source(const CompiledGraph& compiled) {
  if (compiled.cuda) return compiled.cuda->source;
  std::vector<loop::Kernel> kernels(static_cast<size_t>(compiled.program->num_kernels));
  for (const KernelRecord& record : compiled.records) {
    kernels[static_cast<size_t>(record.program_kernel)] = record.kernel;
  }
  return codegen::cpu::emit_translation_unit(kernels);
}

}  // namespace kiln
