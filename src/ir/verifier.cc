#include "ir/verifier.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kiln {
namespace {

std::string describe(const Node& node) {
  return node.num_outputs() > 0
             ? fmt::format("node %{} ({})", node.output()->name(), node.op_name())
             : fmt::format("node #{} ({})", node.id(), node.op_name());
}

Status verify_attrs(const Node& node) {
  const OpDef& def = node.def();
  if (node.attrs().entries().size() != def.attrs.size()) {
    return Status::errorf("{}: attributes are not canonical ({} given, schema has {})",
                          describe(node), node.attrs().entries().size(), def.attrs.size());
  }
  for (const AttrSpec& spec : def.attrs) {
    const AttrValue* value = node.attrs().find(spec.name);
    if (value == nullptr) {
      return Status::errorf("{}: attribute '{}' is missing", describe(node), spec.name);
    }
    if (value->kind() != spec.kind) {
      return Status::errorf("{}: attribute '{}' is {}, schema says {}", describe(node), spec.name,
                            attr_kind_name(value->kind()), attr_kind_name(spec.kind));
    }
  }
  return Status::ok();
}

Status verify_types(const Node& node) {
  Expected<std::vector<TensorType>> inferred =
      infer_types(node.def(), node.input_types(), node.attrs());
  if (!inferred) return inferred.status().with_context(describe(node));
  if (inferred->size() != static_cast<size_t>(node.num_outputs())) {
    return Status::errorf("{}: has {} outputs, inference gives {}", describe(node),
                          node.num_outputs(), inferred->size());
  }
  for (int i = 0; i < node.num_outputs(); ++i) {
    const TensorType& stored = node.output(i)->type();
    const TensorType& expected = (*inferred)[static_cast<size_t>(i)];
    if (stored != expected) {
      return Status::errorf("{}: output %{} has type {}, inference gives {}", describe(node),
                            node.output(i)->name(), stored.to_string(), expected.to_string());
    }
  }
  return Status::ok();
}

}  // namespace

Status verify(const Graph& graph) {
  std::unordered_set<const Value*> defined;
  std::vector<const Value*> definition_order;  // so that the first violation is deterministic
  std::unordered_set<std::string_view> names;
  auto define = [&](const Value* value) -> Status {
    if (!defined.insert(value).second) {
      return Status::errorf("value %{} is defined twice", value->name());
    }
    definition_order.push_back(value);
    if (!names.insert(value->name()).second) {
      return Status::errorf("value name %{} is used twice", value->name());
    }
    if (graph.find_value(value->name()) != value) {
      return Status::errorf("value %{} is not registered under its name", value->name());
    }
    return Status::ok();
  };

  for (const Value* input : graph.inputs()) {
    if (!input->is_graph_input()) {
      return Status::errorf("graph input %{} has a producer", input->name());
    }
    KILN_RETURN_IF_ERROR(define(input));
  }

  std::unordered_map<const Value*, std::vector<const Node*>> uses;
  for (const Node* node : graph.nodes()) {
    for (const Value* input : node->inputs()) {
      if (!defined.contains(input)) {
        return Status::errorf("{}: input %{} is not defined before its use", describe(*node),
                              graph.owns(input) ? input->name() : "<foreign>");
      }
      uses[input].push_back(node);
    }
    KILN_RETURN_IF_ERROR(verify_attrs(*node));
    KILN_RETURN_IF_ERROR(verify_types(*node));
    for (int i = 0; i < node->num_outputs(); ++i) {
      const Value* output = node->output(i);
      if (output->producer() != node || output->output_index() != i) {
        return Status::errorf("{}: output %{} does not point back to its node", describe(*node),
                              output->name());
      }
      KILN_RETURN_IF_ERROR(define(output));
    }
  }

  for (const Value* value : definition_order) {
    std::vector<const Node*> recorded(value->users().begin(), value->users().end());
    std::vector<const Node*> actual = uses[value];
    auto by_id = [](const Node* a, const Node* b) { return a->id() < b->id(); };
    std::ranges::sort(recorded, by_id);
    std::ranges::sort(actual, by_id);
    if (recorded != actual) {
      return Status::errorf("value %{}: use list does not match its uses", value->name());
    }
  }

  if (graph.outputs().empty()) return Status::errorf("graph '{}' has no outputs", graph.name());
  for (const Value* output : graph.outputs()) {
    if (!defined.contains(output)) {
      return Status::errorf("graph output %{} is not defined in the graph", output->name());
    }
  }
  return Status::ok();
}

}  // namespace kiln
