#include "passes/decompose.h"

#include <algorithm>

#include "ir/builder.h"
#include "passes/rewriting.h"

namespace kiln {

std::span<const DecompositionUnit> decomposition_units() {
  static const std::vector<DecompositionUnit> units = {
      {"layer_norm", {Op::layer_norm}},
      {"batch_norm_train", {Op::batch_norm_train}},
      {"softmax", {Op::softmax, Op::log_softmax, Op::cross_entropy, Op::nll_loss}},
      {"binary_cross_entropy", {Op::binary_cross_entropy}},
  };
  return units;
}

bool decompose_composites(Graph& graph, std::span<const Op> ops) {
  return rewrite_each_node(graph, [&](Graph& g, Node* node) {
    if (std::ranges::find(ops, node->op()) == ops.end()) return false;
    const DecomposeFn& decompose = node->def().decompose;
    if (!decompose) return false;
    GraphBuilder b(g);
    const std::vector<Value*> pieces = decompose(b, *node);
    for (int o = 0; o < node->num_outputs(); ++o) {
      replace_with(g, b, node->output(o), pieces.at(static_cast<size_t>(o)), "decompose");
    }
    return true;
  });
}

bool decompose_all_composites(Graph& graph) {
  std::vector<Op> ops;
  for (const DecompositionUnit& unit : decomposition_units()) {
    ops.insert(ops.end(), unit.ops.begin(), unit.ops.end());
  }
  return decompose_composites(graph, ops);
}

}  // namespace kiln
