#include "passes/fold_constants.h"

#include <algorithm>
#include <vector>

#include "ir/builder.h"
#include "passes/rewriting.h"

namespace kiln {
namespace {

bool foldable(const Node& node) {
  // A collective's reference evaluation is a world of one's; on several ranks its value is
  // known only when it runs.
  if (node.op() == Op::constant || node.def().collective) return false;
  int64_t input_elements = 0;
  for (const Value* input : node.inputs()) {
    if (input->producer() == nullptr || input->producer()->op() != Op::constant) return false;
    input_elements += input->shape().num_elements();
  }
  int64_t elements = 0;
  for (const Value* output : node.outputs()) elements += output->shape().num_elements();
  return elements <= std::max(kMaxFoldedElements, input_elements);
}

// Whether `value` is a constant whose every element is `neutral`.
bool is_constant_of(const Value* value, double neutral) {
  const Node* producer = value->producer();
  if (producer == nullptr || producer->op() != Op::constant) return false;
  const Array& array = producer->attrs().get_tensor("value");
  return std::ranges::all_of(array.data, [&](double v) { return v == neutral; });
}

// x * 1, 1 * x, x / 1, x + 0, 0 + x and x - 0, where the result is x itself (the constant
// does not widen it by broadcasting): the operand that stays, or nullptr.
Value* neutral_operand(const Node& node) {
  const bool multiplicative = node.op() == Op::mul || node.op() == Op::div;
  const bool additive = node.op() == Op::add || node.op() == Op::sub;
  if (!multiplicative && !additive) return nullptr;
  const bool commutes = node.op() == Op::mul || node.op() == Op::add;
  const double neutral = multiplicative ? 1 : 0;
  for (int kept = 0; kept < 2; ++kept) {
    const int other = 1 - kept;
    if (other == 0 && !commutes) continue;
    if (node.input(kept)->type() == node.output()->type() &&
        is_constant_of(node.input(other), neutral)) {
      return node.input(kept);
    }
  }
  return nullptr;
}

// Replaces a foldable node's outputs by constants: its reference evaluation (rounded to the
// output dtypes, as every evaluation is) on its inputs' values.
bool fold_node(Graph& graph, Node* node) {
  if (Value* kept = neutral_operand(*node)) {
    replace_with(graph, GraphBuilder(graph), node->output(), kept, "fold-constants");
    return true;
  }
  if (!foldable(*node)) return false;
  std::vector<Array> arguments;
  for (const Value* input : node->inputs()) {
    arguments.push_back(input->producer()->attrs().get_tensor("value"));
  }
  Expected<std::vector<Array>> results =
      node->def().eval(arguments, node->attrs(), node->output_types());
  if (!results) return false;  // left for the compiled code to report at run time
  GraphBuilder b(graph);
  for (int i = 0; i < node->num_outputs(); ++i) {
    Value* folded = b.constant(std::move((*results)[static_cast<size_t>(i)]));
    replace_with(graph, b, node->output(i), folded, "fold-constants");
  }
  return true;
}

}  // namespace

bool fold_constants(Graph& graph) {
  // Nodes come in topological order, so a chain of constant arithmetic folds in one walk: each
  // folded node is a constant by the time its readers are visited.
  return rewrite_each_node(graph, fold_node);
}

}  // namespace kiln
