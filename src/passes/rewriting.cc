#include "passes/rewriting.h"

#include <algorithm>
#include <vector>

#include "support/check.h"

namespace kiln {

bool rewrite_each_node(Graph& graph, const std::function<bool(Graph&, Node*)>& rewrite) {
  // The walk is over a copy: replacing uses may reorder the graph's nodes.
  const std::vector<Node*> nodes(graph.nodes().begin(), graph.nodes().end());
  bool changed = false;
  for (Node* node : nodes) {
    const bool live = std::ranges::any_of(node->outputs(), [&](const Value* value) {
      return !value->users().empty() || graph.is_output(value);
    });
    if (live) changed = rewrite(graph, node) || changed;
  }
  return changed;
}

void replace_with(Graph& graph, const GraphBuilder& builder, Value* from, Value* to,
                  std::string_view pass) {
  KILN_CHECK(builder.ok() && to != nullptr, "{} built an invalid node: {}", pass,
             builder.status().message());
  graph.move_computation_after(to, from->producer());
  const Status replaced = graph.replace_all_uses(from, to);
  KILN_CHECK(replaced.is_ok(), "{}: {}", pass, replaced.message());
}

}  // namespace kiln
