#include "subst/apply.h"

#include <algorithm>
#include <map>

#include "support/check.h"

namespace kiln::subst {
namespace {

// The graph value a source value stands for in `match`.
Value* matched_value(const Rule& rule, const Match& match, const Value* source_value) {
  if (source_value->producer() == nullptr) {
    const auto& params = rule.source.inputs();
    const auto at = std::find(params.begin(), params.end(), source_value) - params.begin();
    return match.variables[static_cast<size_t>(at)];
  }
  const auto nodes = rule.source.nodes();
  const auto at = std::find(nodes.begin(), nodes.end(), source_value->producer()) - nodes.begin();
  return match.nodes[static_cast<size_t>(at)]->output(source_value->output_index());
}

// `attrs` with each declared extent's example value, in integer attributes, replaced by the
// matched extent.
Attrs bind_extents(const Attrs& attrs, const std::map<int64_t, int64_t>& extents) {
  if (extents.empty()) return attrs;
  const auto bind = [&](int64_t v) {
    auto it = extents.find(v);
    return it == extents.end() ? v : it->second;
  };
  Attrs bound = attrs;
  for (const auto& [name, value] : attrs.entries()) {
    if (value.kind() == AttrKind::integer) {
      bound.set(name, bind(value.as_int()));
    } else if (value.kind() == AttrKind::ints) {
      std::vector<int64_t> values = value.as_ints();
      for (int64_t& v : values) v = bind(v);
      bound.set(name, std::move(values));
    }
  }
  return bound;
}

void erase_nodes(Graph& graph, std::vector<Node*>& added) {
  for (auto it = added.rbegin(); it != added.rend(); ++it) graph.erase_node(*it);
  added.clear();
}

}  // namespace

bool apply_match(Graph& graph, const Rule& rule, const Match& match) {
  std::map<const Value*, Value*> built;  // target value -> graph value
  for (size_t i = 0; i < rule.target.inputs().size(); ++i) {
    built.emplace(rule.target.inputs()[i], match.variables[i]);
  }
  std::map<int64_t, int64_t> extents;  // example -> matched
  for (const SymbolicExtent& extent : rule.extents) {
    extents.emplace(extent.example,
                    match.variables[extent.variable]->shape().dims()[static_cast<size_t>(extent.axis)]);
  }
  std::vector<Node*> added;
  for (const Node* node : rule.target.nodes()) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs()) inputs.push_back(built.at(input));
    Attrs attrs = node->attrs();
    for (const auto& [name, value] : match.attributes) {
      if (attrs.contains(name)) attrs.set(name, value);
    }
    Expected<Node*> made =
        graph.add_node(node->op(), std::move(inputs), bind_extents(attrs, extents));
    if (!made) {
      erase_nodes(graph, added);
      return false;
    }
    added.push_back(*made);
    for (int k = 0; k < node->num_outputs(); ++k) built.emplace(node->output(k), (*made)->output(k));
  }
  std::vector<std::pair<Value*, Value*>> replacements;  // (source's value, target's value)
  for (size_t k = 0; k < rule.source.outputs().size(); ++k) {
    Value* from = matched_value(rule, match, rule.source.outputs()[k]);
    Value* to = built.at(rule.target.outputs()[k]);
    if (from->type() != to->type()) {
      erase_nodes(graph, added);
      return false;
    }
    replacements.emplace_back(from, to);
  }
  // The new nodes run where the last matched node ran.
  const Node* last = nullptr;
  for (const Node* node : graph.nodes()) {
    if (std::find(match.nodes.begin(), match.nodes.end(), node) != match.nodes.end()) last = node;
  }
  for (const auto& [from, to] : replacements) {
    if (to->producer() != nullptr) graph.move_computation_after(to, last);
  }
  for (const auto& [from, to] : replacements) {
    const Status replaced = graph.replace_all_uses(from, to);
    KILN_CHECK(replaced.is_ok(), "rule '{}' made an invalid graph: {}", rule.name,
               replaced.message());
    // A value the target computed takes the name of the one it replaces, so a graph output
    // keeps its name (runs find outputs by name).
    if (std::find(added.begin(), added.end(), to->producer()) != added.end()) {
      const std::string name = from->name();
      graph.rename_value(from, name + ".replaced");
      graph.rename_value(to, name);
    }
  }
  return true;
}

}  // namespace kiln::subst
