// The plan-memory stage (compiler/stages.h): a program step per kernel call, per collective
// and per output copy, a buffer per value, and the arena planned over the buffers' lifetimes
// (runtime/memory_plan.h); and the placing of the collectives among the kernels before it.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/stages.h"
#include "compiler/tensor_bytes.h"
#include "ir/printer.h"
#include "runtime/memory_plan.h"
#include "target/target.h"

namespace kiln {
namespace {

int64_t bytes_of(const Value& value) {
  return value.shape().num_elements() * dtype_size_bytes(value.dtype());
}

// What the program's step does for collective `node`.
Expected<runtime::Collective> collective_of(const Node& node) {
  runtime::Collective collective;
  if (node.op() == Op::broadcast) {
    collective.kind = runtime::Collective::Kind::broadcast;
    // A root beyond any world is refused by the communicator when the step runs.
    collective.root = static_cast<int>(std::min<int64_t>(node.attrs().get_int("root"), 1 << 30));
    collective.count = bytes_of(*node.output());
    return collective;
  }
  switch (node.output()->dtype()) {
    case DType::f32: collective.type = comm::DataType::f32; break;
    case DType::f64: collective.type = comm::DataType::f64; break;
    default:
      return Status::errorf(ErrorCode::unsupported,
                            "{}: all_reduce of {} is not supported yet (f32 and f64 are)",
                            print_node(node), dtype_name(node.output()->dtype()));
  }
  KILN_ASSIGN_OR_RETURN(collective.reduction,
                        comm::parse_reduction(node.attrs().get_string("reduction")));
  collective.count = node.output()->shape().num_elements();
  return collective;
}

// Builds the program's buffers and steps for `records`, run in order.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(const Graph& graph) : graph_(graph) {
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      const Value* input = graph.inputs()[i];
      program_.input_bytes.push_back(bytes_of(*input));
      buffer_of_[input] =
          add_buffer({runtime::Storage::input, static_cast<int64_t>(i), 0, bytes_of(*input)});
    }
    for (const Value* output : graph.outputs()) program_.output_bytes.push_back(bytes_of(*output));
  }

  Status add_kernel_step(const KernelRecord& record, int record_index,
                         std::vector<int>& step_records) {
    runtime::Step step{.kind = runtime::Step::Kind::kernel,
                       .kernel = record.program_kernel,
                       .buffers = {},
                       .label = kernel_label(record.nodes)};
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
    for (const int64_t bytes : record.state_bytes) {
      // Each step's own: a state holds what one call site packed.
      const int64_t offset = program_.state_bytes;
      step.buffers.push_back(add_buffer({runtime::Storage::state, 0, offset, bytes}));
      program_.state_bytes += round_up(bytes);
    }
    program_.steps.push_back(std::move(step));
    step_records.push_back(record_index);
    return Status::ok();
  }

  // The step of a collective: its input's buffer copied to its output's and reduced, or
  // broadcast, there (runtime/program.h).
  Status add_collective_step(const Node& node, std::vector<int>& step_records) {
    const std::string label = kernel_label(std::vector<const Node*>{&node});
    KILN_ASSIGN_OR_RETURN(runtime::Collective collective, collective_of(node));
    const int index = static_cast<int>(program_.steps.size());
    KILN_ASSIGN_OR_RETURN(int source, buffer_for_read(*node.input(0), label));
    if (auto it = arena_lifetime_.find(source); it != arena_lifetime_.end()) {
      it->second.last_step = index;
    }
    const int destination = buffer_for_write(*node.output(), index);
    program_.steps.push_back({.kind = runtime::Step::Kind::collective,
                              .kernel = 0,
                              .buffers = {source, destination},
                              .label = label,
                              .collective = collective});
    step_records.push_back(-1);
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
      const int destination =
          add_buffer({runtime::Storage::output, static_cast<int64_t>(o), 0, bytes_of(*value)});
      const int index = static_cast<int>(program_.steps.size());
      if (auto it = arena_lifetime_.find(source); it != arena_lifetime_.end()) {
        it->second.last_step = index;
      }
      program_.steps.push_back({.kind = runtime::Step::Kind::copy,
                                .kernel = 0,
                                .buffers = {source, destination},
                                .label = fmt::format("copy to output {}", o)});
      step_records.push_back(-1);
    }
    return Status::ok();
  }

  // Places the arena buffers and returns the finished program.
  PlannedProgram finish(int num_kernels, std::vector<int> step_records) {
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
    return {std::move(program_), std::move(step_records), plan.total_bytes, plan.live_bound_bytes};
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
      return Status::errorf(
          "{} reads {}, which no earlier kernel computes: the groups are not "
          "in dependency order",
          reader, print_value_ref(value));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Array> folded,
                          producer->def().eval({}, producer->attrs(), producer->output_types()));
    // Constants start aligned like arena buffers, so kernels may load them with vector loads.
    program_.constants.resize(
        static_cast<size_t>(round_up(static_cast<int64_t>(program_.constants.size()))));
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
        const int buffer =
            add_buffer({runtime::Storage::output, static_cast<int64_t>(o), 0, bytes_of(value)});
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

fusion::Partition kernel_groups(const fusion::Partition& partition) {
  fusion::Partition kernels = partition;
  std::erase_if(kernels.groups, [](const fusion::Group& group) {
    return std::ranges::any_of(group.nodes,
                               [](const Node* node) { return node->def().collective; });
  });
  return kernels;
}

Expected<std::vector<CollectiveCall>> place_collectives(const fusion::Partition& partition,
                                                        std::span<const KernelRecord> records,
                                                        const CompileOptions& options) {
  // Each record's group, by its first node; the groups that made no record (views only) are
  // simply passed over.
  std::map<const Node*, size_t> group_of;
  for (size_t g = 0; g < partition.groups.size(); ++g) {
    for (const Node* node : partition.groups[g].nodes) group_of[node] = g;
  }
  std::vector<CollectiveCall> calls;
  size_t records_before = 0;
  for (size_t g = 0; g < partition.groups.size(); ++g) {
    const std::vector<Node*>& nodes = partition.groups[g].nodes;
    const auto collective = std::ranges::find_if(nodes, [](const Node* node) {
      return node->def().collective;
    });
    if (collective == nodes.end()) continue;
    if (nodes.size() != 1) {
      return Status::errorf("{} shares a group with {} other nodes: a collective runs as a "
                            "program step of its own",
                            print_node(**collective), nodes.size() - 1);
    }
    if (target_of(options).kind() == DeviceKind::cuda) {
      return Status::errorf(ErrorCode::unsupported,
                            "{}: collectives on the GPU need NCCL (not yet)",
                            print_node(**collective));
    }
    while (records_before < records.size() &&
           group_of.at(records[records_before].nodes.front()) < g) {
      ++records_before;
    }
    calls.push_back({*collective, records_before});
  }
  return calls;
}

Expected<PlannedProgram> plan_memory_stage(const Graph& graph,
                                           std::span<const KernelRecord> records,
                                           std::span<const CollectiveCall> collectives,
                                           std::span<const loop::ViewOutput> views,
                                           int num_kernels) {
  ProgramBuilder builder(graph);
  for (const loop::ViewOutput& view : views) builder.add_view(view);
  std::vector<int> step_records;
  size_t next_collective = 0;
  const auto add_collectives_before = [&](size_t record) -> Status {
    while (next_collective < collectives.size() &&
           collectives[next_collective].records_before == record) {
      KILN_RETURN_IF_ERROR(
          builder.add_collective_step(*collectives[next_collective].node, step_records));
      ++next_collective;
    }
    return Status::ok();
  };
  for (size_t r = 0; r < records.size(); ++r) {
    KILN_RETURN_IF_ERROR(add_collectives_before(r));
    KILN_RETURN_IF_ERROR(builder.add_kernel_step(records[r], static_cast<int>(r), step_records));
  }
  KILN_RETURN_IF_ERROR(add_collectives_before(records.size()));
  KILN_RETURN_IF_ERROR(builder.add_output_copies(step_records));
  return builder.finish(num_kernels, std::move(step_records));
}

}  // namespace kiln
