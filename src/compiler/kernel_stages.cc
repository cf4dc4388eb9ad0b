// The back-end stages that work on kernels, from lower to codegen (compiler/stages.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "codegen/cpu/emitter.h"
#include "compiler/stages.h"
#include "loop/printer.h"
#include "target/target.h"

namespace kiln {

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
  const Target& target = target_of(options);
  ScheduleSession session;
  for (KernelRecord& record : records) {
    const std::string label = kernel_label(record.nodes);
    KILN_RETURN_IF_ERROR(target.runs_library_calls(record.kernel).with_context(label));
    KILN_RETURN_IF_ERROR(target.schedule(record, options, session).with_context(label));
  }
  return Status::ok();
}

void scratch_stage(std::vector<KernelRecord>& records, const CompileOptions& options) {
  const Target& target = target_of(options);
  for (KernelRecord& record : records) target.place_scratch(record);
}

void pack_weights_stage(std::vector<KernelRecord>& records, const CompileOptions& options) {
  if (!options.pack_weights) return;
  const Target& target = target_of(options);
  for (KernelRecord& record : records) target.pack_weights(record);
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
  return target_of(options).generate_code(kernels, options);
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
