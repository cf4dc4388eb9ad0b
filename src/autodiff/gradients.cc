#include "autodiff/gradients.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/builder.h"
#include "support/check.h"

namespace kiln {
namespace {

using ValueSet = std::unordered_set<const Value*>;

// The name by which errors refer to a value: "%name".
std::string ref(const Value* value) { return "%" + value->name(); }

Status check_value(const Graph& graph, const Value* value, const std::string& what) {
  if (value == nullptr) return Status::errorf("{} is null", what);
  if (!graph.owns(value)) {
    return Status::errorf("{} {} is not a value of graph '{}'", what, ref(value), graph.name());
  }
  if (!is_floating(value->dtype())) {
    return Status::errorf("{} {} is {}: only floating values have gradients", what, ref(value),
                          value->type().to_string());
  }
  return Status::ok();
}

Status check_request(const Graph& graph, const Value* loss, std::span<Value* const> wrt) {
  KILN_RETURN_IF_ERROR(check_value(graph, loss, "the loss"));
  if (loss->rank() != 0) {
    return Status::errorf("the loss {} must be a scalar, got {}", ref(loss),
                          loss->type().to_string());
  }
  for (size_t i = 0; i < wrt.size(); ++i) {
    KILN_RETURN_IF_ERROR(check_value(graph, wrt[i], fmt::format("wrt[{}]", i)));
  }
  return Status::ok();
}

// The floating values that depend on a `wrt` value through floating values.
ValueSet values_depending_on(std::span<Value* const> wrt, std::span<Node* const> nodes) {
  ValueSet depends(wrt.begin(), wrt.end());
  for (const Node* node : nodes) {
    const bool reached = std::ranges::any_of(
        node->inputs(), [&](const Value* input) { return depends.contains(input); });
    if (!reached) continue;
    for (const Value* output : node->outputs()) {
      if (is_floating(output->dtype())) depends.insert(output);
    }
  }
  return depends;
}

// The values the loss depends on through floating values (the loss included).
ValueSet values_reaching(const Value* loss, std::span<Node* const> nodes) {
  ValueSet reaches = {loss};
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node* node = *it;
    const bool used = std::ranges::any_of(
        node->outputs(), [&](const Value* output) { return reaches.contains(output); });
    if (!used) continue;
    for (const Value* input : node->inputs()) {
      if (is_floating(input->dtype())) reaches.insert(input);
    }
  }
  return reaches;
}

using GradientMap = std::unordered_map<const Value*, Value*>;

// Runs `node`'s gradient rule on the gradients of its outputs and adds the results to the
// gradients of those inputs that depend on a `wrt` value.
Status backpropagate(GraphBuilder& b, const Node& node, const ValueSet& depends,
                     GradientMap& grads) {
  std::vector<Value*> output_grads;
  for (const Value* output : node.outputs()) {
    auto it = grads.find(output);
    output_grads.push_back(it == grads.end() ? nullptr : it->second);
  }
  // Outputs that reach the loss only through ops passing no gradient (floor, sign).
  if (std::ranges::all_of(output_grads, [](const Value* g) { return g == nullptr; })) {
    return Status::ok();
  }
  const OpDef& def = node.def();
  const std::string where = fmt::format("node {} (op '{}')", ref(node.output(0)), def.name);
  if (!def.gradient) {
    return Status::errorf(
        "{} lies between the differentiated values and the loss but has no "
        "gradient: {}",
        where, def.non_differentiable);
  }
  const std::vector<Value*> input_grads = def.gradient(b, node, output_grads);
  if (!b.ok()) return b.status().with_context(fmt::format("gradient of {}", where));
  KILN_CHECK(static_cast<int>(input_grads.size()) == node.num_inputs(),
             "gradient rule of '{}' returned {} gradients for {} inputs", def.name,
             input_grads.size(), node.num_inputs());
  for (int i = 0; i < node.num_inputs(); ++i) {
    const Value* input = node.input(i);
    Value* grad = input_grads[static_cast<size_t>(i)];
    if (grad == nullptr || !depends.contains(input)) continue;
    KILN_CHECK(grad->type() == input->type(),
               "gradient rule of '{}' returned {} for input {} of type {}", def.name,
               grad->type().to_string(), i, input->type().to_string());
    auto [it, inserted] = grads.try_emplace(input, grad);
    if (!inserted) it->second = b.add(it->second, grad);
  }
  if (!b.ok()) return b.status().with_context(fmt::format("gradient of {}", where));
  return Status::ok();
}

// Removes the nodes added after the first `first_added` whose outputs nothing uses (a rule
// builds every input's gradient; inputs that needed none leave theirs unused). Walking
// backwards removes unused chains whole.
void erase_unused_added_nodes(Graph& graph, size_t first_added, std::span<Value* const> keep) {
  const ValueSet kept(keep.begin(), keep.end());
  const std::vector<Node*> added(graph.nodes().begin() + static_cast<std::ptrdiff_t>(first_added),
                                 graph.nodes().end());
  for (auto it = added.rbegin(); it != added.rend(); ++it) {
    Node* node = *it;
    const bool used = std::ranges::any_of(node->outputs(), [&](const Value* output) {
      return !output->users().empty() || kept.contains(output);
    });
    if (!used) graph.erase_node(node);
  }
}

}  // namespace

Expected<std::vector<Value*>> build_gradients(Graph& graph, Value* loss,
                                              std::span<Value* const> wrt) {
  KILN_RETURN_IF_ERROR(check_request(graph, loss, wrt));
  const std::vector<Node*> forward(graph.nodes().begin(), graph.nodes().end());
  const ValueSet depends = values_depending_on(wrt, forward);
  const ValueSet reaches = values_reaching(loss, forward);

  GraphBuilder b(graph);
  GradientMap grads;
  grads.emplace(loss, b.scalar(1.0, loss->dtype()));
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const Node& node = **it;
    const bool on_path = std::ranges::any_of(node.outputs(), [&](const Value* output) {
      return depends.contains(output) && reaches.contains(output);
    });
    if (on_path) {
      KILN_RETURN_IF_ERROR(backpropagate(b, node, depends, grads));
    }
  }

  std::vector<Value*> result;
  for (Value* value : wrt) {
    auto it = grads.find(value);
    result.push_back(it != grads.end() ? it->second : b.fill(value->shape(), 0, value->dtype()));
  }
  KILN_RETURN_IF_ERROR(b.status());
  erase_unused_added_nodes(graph, forward.size(), result);
  return result;
}

}  // namespace kiln
