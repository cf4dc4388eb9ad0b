#include "loop/compute.h"

#include <fmt/format.h>

#include "loop/lowering/lowering_family.h"
#include "support/check.h"

namespace kiln::loop {
namespace {

std::vector<Lowering> build_table() {
  std::vector<Lowering> entries(static_cast<size_t>(kNumOps));
  lowering::LoweringTable table(entries);
  lowering::register_unary_lowerings(table);
  lowering::register_binary_lowerings(table);
  lowering::register_reduction_lowerings(table);
  lowering::register_layout_lowerings(table);
  lowering::register_contraction_lowerings(table);
  lowering::register_pooling_lowerings(table);
  lowering::register_composite_lowerings(table);
  for (size_t op = 0; op < entries.size(); ++op) {
    KILN_CHECK(entries[op].compute, "op '{}' has no lowering", op_def(static_cast<Op>(op)).name);
  }
  return entries;
}

}  // namespace

std::string NameGenerator::fresh(std::string_view prefix) {
  return fmt::format("{}{}", prefix, next_++);
}

const Lowering& lowering_of(Op op) {
  static const std::vector<Lowering> table = build_table();
  return table[static_cast<size_t>(op)];
}

const StoreNest* store_nest_of(const Node& node) {
  const std::optional<StoreNest>& nest = lowering_of(node.op()).store_nest;
  if (!nest || (nest->applies && !nest->applies(node))) return nullptr;
  return &*nest;
}

Expected<Expr> compute_element(const Node& node, int output, const std::vector<Expr>& index,
                               const InputAccessor& input, NameGenerator& names) {
  const Lowering& entry = lowering_of(node.op());
  const std::vector<TensorType> inputs = node.input_types();
  const std::vector<TensorType> outputs = node.output_types();
  KILN_CHECK(output >= 0 && output < node.num_outputs(), "op '{}' has no output {}",
             node.op_name(), output);
  KILN_CHECK(static_cast<int>(index.size()) == node.output(output)->rank(),
             "index of rank {} for an output of rank {}", index.size(), node.output(output)->rank());
  const ComputeArgs args{node.attrs(), inputs, outputs, output, index, input, names};
  Expected<Expr> element = entry.compute(args);
  if (!element) return element.status().with_context(fmt::format("lowering op '{}'", node.op_name()));
  return element;
}

}  // namespace kiln::loop
