#include "subst/match.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace kiln::subst {
namespace {

class Matcher {
 public:
  Matcher(const Graph& graph, const Rule& rule, size_t limit)
      : graph_(graph), rule_(rule), limit_(limit) {
    for (const Node* node : rule.source.nodes()) {
      source_index_.emplace(node, source_nodes_.size());
      source_nodes_.push_back(node);
    }
    for (size_t i = 0; i < rule.source.inputs().size(); ++i) {
      variable_index_.emplace(rule.source.inputs()[i], i);
    }
  }

  std::vector<Match> run() {
    Match empty{std::vector<Value*>(variable_index_.size(), nullptr),
                std::vector<Node*>(source_nodes_.size(), nullptr), {}};
    search(source_nodes_.size(), empty);
    return std::move(matches_);
  }

 private:
  // Binds source nodes [0, remaining), last first.
  void search(size_t remaining, const Match& state) {
    if (matches_.size() >= limit_) return;
    if (remaining == 0) {
      if (replaceable(state)) matches_.push_back(state);
      return;
    }
    const size_t s = remaining - 1;
    const Node& pattern = *source_nodes_[s];
    if (Node* bound = state.nodes[s]) {
      for (bool swapped : operand_orders(pattern, *bound)) {
        Match next = state;
        if (bind_inputs(pattern, *bound, next, swapped)) search(s, next);
      }
      return;
    }
    for (Node* candidate : graph_.nodes()) {
      if (candidate->op() != pattern.op() || is_bound(state, candidate)) continue;
      for (bool swapped : operand_orders(pattern, *candidate)) {
        Match next = state;
        next.nodes[s] = candidate;
        if (bind_inputs(pattern, *candidate, next, swapped)) search(s, next);
        if (matches_.size() >= limit_) return;
      }
    }
  }

  // The orders in which `node`'s operands are tried against `pattern`'s: also swapped for an
  // op that commutes, unless either's two operands are one value (the same binding again).
  static std::vector<bool> operand_orders(const Node& pattern, const Node& node) {
    if (!commutes(pattern.op()) || pattern.num_inputs() != 2 || node.num_inputs() != 2 ||
        pattern.input(0) == pattern.input(1) || node.input(0) == node.input(1)) {
      return {false};
    }
    return {false, true};
  }

  static bool is_bound(const Match& state, const Node* node) {
    return std::find(state.nodes.begin(), state.nodes.end(), node) != state.nodes.end();
  }

  // Whether `node` agrees with `pattern` (op, attributes, arity), binding the variables and
  // source nodes its inputs reach; `swapped`: its two operands in the other order.
  bool bind_inputs(const Node& pattern, const Node& node, Match& state, bool swapped) const {
    if (node.op() != pattern.op() || !bind_attributes(pattern, node, state) ||
        node.num_inputs() != pattern.num_inputs() || node.num_outputs() != pattern.num_outputs()) {
      return false;
    }
    for (int j = 0; j < pattern.num_inputs(); ++j) {
      const Value& wanted = *pattern.input(j);
      Value* actual = node.input(swapped ? 1 - j : j);
      if (wanted.producer() == nullptr) {
        Value*& variable = state.variables[variable_index_.at(&wanted)];
        if (variable == nullptr) {
          if (actual->dtype() != wanted.dtype() ||
              actual->shape().rank() != wanted.shape().rank() ||
              !bind_constant(variable_index_.at(&wanted), *actual, state)) {
            return false;
          }
          variable = actual;
        } else if (variable != actual) {
          return false;
        }
        continue;
      }
      Node* producer = actual->producer();
      if (producer == nullptr || actual->output_index() != wanted.output_index()) return false;
      Node*& bound = state.nodes[source_index_.at(wanted.producer())];
      if (bound == nullptr) {
        if (is_bound(state, producer)) return false;
        bound = producer;
      } else if (bound != producer) {
        return false;
      }
    }
    return true;
  }

  // Whether `actual` may be the variable of that index: any value, unless the rule declares
  // the variable a constant (rule.h); then a constant of equal elements, whose value a target
  // attribute may take (bound in `state`).
  bool bind_constant(size_t variable, const Value& actual, Match& state) const {
    const auto constant = std::ranges::find(rule_.constants, variable, &ConstantVariable::variable);
    if (constant == rule_.constants.end()) return true;
    const std::optional<double> value = splat_constant(actual);
    if (!value) return false;
    if (!constant->attribute.empty()) {
      state.attributes.insert_or_assign(constant->attribute, AttrValue(*value));
    }
    return true;
  }

  // Whether `node`'s attributes are `pattern`'s, those with a choice (rule.h) being one of its
  // values and the value bound in `state` (binding it if not yet). Window attributes compare
  // by meaning (see `spelled_out`).
  bool bind_attributes(const Node& pattern, const Node& node, Match& state) const {
    for (const auto& [name, wanted] : pattern.attrs().entries()) {
      const AttrValue* found = node.attrs().find(name);
      if (found == nullptr) return false;
      const AttrValue actual = spelled_out(node, name, *found);
      const auto choice = std::ranges::find(rule_.attribute_choices, name, &AttributeChoice::name);
      if (choice == rule_.attribute_choices.end()) {
        if (actual != spelled_out(pattern, name, wanted)) return false;
        continue;
      }
      if (std::ranges::none_of(choice->values, [&](const AttrValue& value) {
            return spelled_out(pattern, name, value) == actual;
          })) {
        return false;
      }
      const auto [bound, inserted] = state.attributes.emplace(name, actual);
      if (!inserted && bound->second != actual) return false;
    }
    return true;
  }

  // A window attribute of a convolution or pooling node (strides, dilations, pads), whose
  // empty list means the default at every spatial axis, as its full list: 1 per axis, or 0 per
  // side for pads. So a rule's conv(x, w) {dilations = []} matches an imported
  // conv(x, w) {dilations = [1, 1]}: the two are one convolution.
  static AttrValue spelled_out(const Node& node, const std::string& name, const AttrValue& value) {
    const bool window = name == "strides" || name == "dilations" || name == "pads";
    if (!window || value.kind() != AttrKind::ints || !value.as_ints().empty() ||
        node.num_inputs() == 0 || node.input(0)->rank() < 3) {
      return value;
    }
    const auto spatial = static_cast<size_t>(node.input(0)->rank() - 2);
    return name == "pads" ? AttrValue(std::vector<int64_t>(2 * spatial, 0))
                          : AttrValue(std::vector<int64_t>(spatial, 1));
  }

  // The conditions of match.h: values that are not results stay inside the match, and no
  // variable is computed by it.
  bool replaceable(const Match& state) const {
    const std::vector<Value*>& results = rule_.source.outputs();
    for (size_t s = 0; s < source_nodes_.size(); ++s) {
      for (int k = 0; k < source_nodes_[s]->num_outputs(); ++k) {
        if (std::find(results.begin(), results.end(), source_nodes_[s]->output(k)) != results.end()) {
          continue;
        }
        const Value* value = state.nodes[s]->output(k);
        if (graph_.is_output(value)) return false;
        for (const Node* user : value->users()) {
          if (!is_bound(state, user)) return false;
        }
      }
    }
    return !variables_depend_on_match(state);
  }

  // Whether some variable is computed, directly or through other nodes, from a matched node.
  static bool variables_depend_on_match(const Match& state) {
    std::set<const Node*> visited;
    std::vector<const Node*> stack;
    for (const Value* variable : state.variables) {
      if (variable->producer() != nullptr) stack.push_back(variable->producer());
    }
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      if (!visited.insert(node).second) continue;
      if (is_bound(state, node)) return true;
      for (const Value* input : node->inputs()) {
        if (input->producer() != nullptr) stack.push_back(input->producer());
      }
    }
    return false;
  }

  const Graph& graph_;
  const Rule& rule_;
  size_t limit_;
  std::vector<const Node*> source_nodes_;
  std::map<const Node*, size_t> source_index_;
  std::map<const Value*, size_t> variable_index_;
  std::vector<Match> matches_;
};

}  // namespace

bool commutes(Op op) { return op == Op::add || op == Op::mul; }

std::vector<Match> find_matches(const Graph& graph, const Rule& rule, size_t limit) {
  return Matcher(graph, rule, limit).run();
}

Match match_in_copy(const Graph& graph, const Match& match, const Graph& copy) {
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < graph.nodes().size(); ++i) position.emplace(graph.nodes()[i], i);
  const auto node_in_copy = [&](const Node* node) { return copy.nodes()[position.at(node)]; };
  Match copied;
  for (const Value* variable : match.variables) {
    if (variable->producer() != nullptr) {
      copied.variables.push_back(node_in_copy(variable->producer())->output(variable->output_index()));
    } else {
      const auto input = std::ranges::find(graph.inputs(), variable) - graph.inputs().begin();
      copied.variables.push_back(copy.inputs()[static_cast<size_t>(input)]);
    }
  }
  for (const Node* node : match.nodes) copied.nodes.push_back(node_in_copy(node));
  copied.attributes = match.attributes;
  return copied;
}

}  // namespace kiln::subst
