#include "passes/common_subexpressions.h"

#include <map>
#include <utility>
#include <vector>

#include "support/check.h"

namespace kiln {

bool eliminate_common_subexpressions(Graph& graph) {
  // Nodes are bucketed by op and input ids; attributes (which have no hash) are compared within
  // a bucket, which is almost always a single node.
  using Key = std::pair<Op, std::vector<int>>;
  std::multimap<Key, Node*> seen;
  std::vector<Node*> duplicates;
  // Erasing waits until the walk is over; replacing uses leaves the node order alone.
  for (Node* node : graph.nodes()) {
    Key key{node->op(), {}};
    for (const Value* input : node->inputs()) key.second.push_back(input->id());
    Node* original = nullptr;
    for (auto [it, end] = seen.equal_range(key); it != end; ++it) {
      if (it->second->attrs() == node->attrs()) {
        original = it->second;
        break;
      }
    }
    if (original == nullptr) {
      seen.emplace(std::move(key), node);
      continue;
    }
    for (int i = 0; i < node->num_outputs(); ++i) {
      // The original comes earlier and has identical types, so this cannot fail.
      const Status replaced = graph.replace_all_uses(node->output(i), original->output(i));
      KILN_CHECK(replaced.is_ok(), "CSE: {}", replaced.message());
    }
    duplicates.push_back(node);
  }
  for (Node* node : duplicates) graph.erase_node(node);
  return !duplicates.empty();
}

}  // namespace kiln
