#include "passes/dead_code.h"

#include <algorithm>
#include <vector>

namespace kiln {

bool eliminate_dead_code(Graph& graph) {
  // One backward sweep suffices: a node's users all come after it, so by the time the sweep
  // reaches a node, every dead user has already been erased and its use lists are final.
  std::vector<Node*> order(graph.nodes().begin(), graph.nodes().end());
  bool changed = false;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    const bool live = std::ranges::any_of(node->outputs(), [&](const Value* value) {
      return !value->users().empty() || graph.is_output(value);
    });
    if (live) continue;
    graph.erase_node(node);
    changed = true;
  }
  return changed;
}

}  // namespace kiln
