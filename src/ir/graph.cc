#include "ir/graph.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "support/check.h"

namespace kiln {

std::vector<TensorType> Node::input_types() const {
  std::vector<TensorType> types;
  types.reserve(inputs_.size());
  for (const Value* v : inputs_) types.push_back(v->type());
  return types;
}

std::vector<TensorType> Node::output_types() const {
  std::vector<TensorType> types;
  types.reserve(outputs_.size());
  for (const Value* v : outputs_) types.push_back(v->type());
  return types;
}

Graph::Graph(std::string name) : name_(std::move(name)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

std::string Graph::fresh_name(std::string_view requested) {
  if (!requested.empty() && !values_by_name_.contains(std::string(requested))) {
    return std::string(requested);
  }
  if (!requested.empty()) {
    for (int suffix = 1;; ++suffix) {
      std::string candidate = fmt::format("{}.{}", requested, suffix);
      if (!values_by_name_.contains(candidate)) return candidate;
    }
  }
  while (true) {
    std::string candidate = std::to_string(next_auto_name_++);
    if (!values_by_name_.contains(candidate)) return candidate;
  }
}

Value* Graph::add_input(TensorType type, std::string_view name) {
  auto value = std::unique_ptr<Value>(
      new Value(next_value_id_++, fresh_name(name), std::move(type), nullptr, -1));
  Value* raw = value.get();
  values_by_name_.emplace(raw->name(), raw);
  values_.push_back(std::move(value));
  inputs_.push_back(raw);
  return raw;
}

Expected<Node*> Graph::add_node(Op op, std::vector<Value*> inputs, const Attrs& attrs,
                                std::span<const std::string> output_names) {
  const OpDef& def = op_def(op);
  std::vector<TensorType> input_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr || !owns(inputs[i])) {
      return Status::errorf("op '{}': input {} is not a value of graph '{}'", def.name, i, name_);
    }
    input_types.push_back(inputs[i]->type());
  }
  KILN_ASSIGN_OR_RETURN(Attrs canonical, canonicalize_attrs(def, attrs));
  KILN_ASSIGN_OR_RETURN(std::vector<TensorType> output_types,
                        infer_types(def, input_types, canonical));

  auto node = std::unique_ptr<Node>(new Node(next_node_id_++, op, std::move(inputs),
                                             std::move(canonical)));
  Node* raw = node.get();
  for (Value* input : raw->inputs_) input->users_.push_back(raw);
  for (size_t i = 0; i < output_types.size(); ++i) {
    const std::string_view requested =
        i < output_names.size() ? std::string_view(output_names[i]) : std::string_view();
    auto value = std::unique_ptr<Value>(new Value(next_value_id_++, fresh_name(requested),
                                                  std::move(output_types[i]), raw,
                                                  static_cast<int>(i)));
    values_by_name_.emplace(value->name(), value.get());
    raw->outputs_.push_back(value.get());
    values_.push_back(std::move(value));
  }
  nodes_storage_.push_back(std::move(node));
  node_order_.push_back(raw);
  return raw;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  for (const Value* v : outputs) KILN_CHECK(v != nullptr && owns(v), "foreign graph output");
  outputs_ = std::move(outputs);
  output_set_ = {outputs_.begin(), outputs_.end()};
}

namespace {

// A user of `from` that `to` is computed from (directly or through other nodes), or nullptr.
const Node* user_reached_from(const Value* from, const Value* to) {
  if (to->is_graph_input() || from->users().empty()) return nullptr;
  const std::unordered_set<const Node*> users(from->users().begin(), from->users().end());
  std::unordered_set<const Node*> seen = {to->producer()};
  std::vector<const Node*> stack = {to->producer()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (users.contains(node)) return node;
    for (const Value* input : node->inputs()) {
      if (!input->is_graph_input() && seen.insert(input->producer()).second) {
        stack.push_back(input->producer());
      }
    }
  }
  return nullptr;
}

// Whether `to` is defined before every user of `from` in `order`. Then moving the uses onto `to`
// keeps the order topological and cannot close a cycle: the common case (CSE replaces a value
// with an earlier equal one), decided by one scan without the general search and sort.
bool defined_before_users(const Value* from, const Value* to, std::span<Node* const> order) {
  if (to->is_graph_input() || from->users().empty()) return true;
  const std::unordered_set<const Node*> users(from->users().begin(), from->users().end());
  for (const Node* node : order) {
    if (users.contains(node)) return false;  // first, as `to` may be a user's own output
    if (node == to->producer()) return true;
  }
  return false;
}

}  // namespace

Status Graph::replace_all_uses(Value* from, Value* to) {
  KILN_CHECK(owns(from) && owns(to), "replace_all_uses across graphs");
  if (from->type() != to->type()) {
    return Status::errorf("cannot replace %{} ({}) with %{} ({}): types differ", from->name(),
                          from->type().to_string(), to->name(), to->type().to_string());
  }
  if (from == to) return Status::ok();
  const bool in_order = defined_before_users(from, to, node_order_);
  // Moving the uses of `from` onto `to` closes a cycle exactly when `to` is computed from one of
  // those users; refuse before changing anything. Otherwise any order problem (typically `to`
  // built after the users) is repaired by the sort below.
  if (const Node* user = in_order ? nullptr : user_reached_from(from, to)) {
    return Status::errorf(
        "cannot replace %{} with %{}: %{} is computed from node %{} ({}), a user of %{}",
        from->name(), to->name(), to->name(), user->output()->name(), user->op_name(),
        from->name());
  }
  // A node using `from` twice appears twice in its users; its second visit finds nothing left.
  const std::vector<Node*> users = from->users_;
  for (Node* user : users) {
    for (Value*& input : user->inputs_) {
      if (input != from) continue;
      input = to;
      to->users_.push_back(user);
    }
  }
  from->users_.clear();
  if (output_set_.erase(from) != 0) {
    output_set_.insert(to);
    for (Value*& output : outputs_) {
      if (output == from) output = to;
    }
  }
  if (in_order) return Status::ok();
  const Status sorted = sort_topologically();
  KILN_CHECK(sorted.is_ok(), "replace_all_uses made a cycle: {}", sorted.message());
  return Status::ok();
}

void Graph::move_computation_after(const Value* value, const Node* anchor) {
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < node_order_.size(); ++i) position[node_order_[i]] = i;
  const size_t first = anchor == nullptr ? 0 : position.at(anchor) + 1;
  // The nodes `value` is computed from that come after the anchor: all their own producers
  // after the anchor are among them, so moving them together in their order keeps it valid.
  std::unordered_set<const Node*> moved;
  std::vector<const Node*> stack;
  if (value->producer() != nullptr) stack.push_back(value->producer());
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    if (position.at(node) < first || !moved.insert(node).second) continue;
    for (const Value* input : node->inputs()) {
      if (input->producer() != nullptr) stack.push_back(input->producer());
    }
  }
  // Copied into the existing buffer so that a caller iterating `nodes()` keeps valid memory.
  std::vector<Node*> order(node_order_.begin(), node_order_.begin() + static_cast<ptrdiff_t>(first));
  for (size_t i = first; i < node_order_.size(); ++i) {
    if (moved.contains(node_order_[i])) order.push_back(node_order_[i]);
  }
  for (size_t i = first; i < node_order_.size(); ++i) {
    if (!moved.contains(node_order_[i])) order.push_back(node_order_[i]);
  }
  std::ranges::copy(order, node_order_.begin());
}

void Graph::erase_node(Node* node) {
  KILN_CHECK(std::ranges::find(node_order_, node) != node_order_.end(),
             "erasing a node that is not in graph '{}'", name_);
  for (Value* output : node->outputs_) {
    KILN_CHECK(output->users_.empty(), "erasing node whose output %{} is still used",
               output->name());
    KILN_CHECK(!is_output(output),
               "erasing node whose output %{} is a graph output", output->name());
  }
  for (Value* input : node->inputs_) {
    auto& users = input->users_;
    users.erase(std::find(users.begin(), users.end(), node));
  }
  for (Value* output : node->outputs_) values_by_name_.erase(output->name());
  std::erase_if(values_, [node](const std::unique_ptr<Value>& v) { return v->producer_ == node; });
  std::erase(node_order_, node);
  std::erase_if(nodes_storage_, [node](const std::unique_ptr<Node>& n) { return n.get() == node; });
}

void Graph::erase_input(Value* input) {
  KILN_CHECK(std::ranges::find(inputs_, input) != inputs_.end(),
             "erasing %{}, which is not an input of graph '{}'", input->name(), name_);
  KILN_CHECK(input->users_.empty(), "erasing input %{}, which is still used", input->name());
  KILN_CHECK(!is_output(input), "erasing input %{}, which is a graph output", input->name());
  values_by_name_.erase(input->name());
  std::erase(inputs_, input);
  std::erase_if(values_, [input](const std::unique_ptr<Value>& v) { return v.get() == input; });
}

Status Graph::sort_topologically() {
  // Kahn's algorithm, always taking the earliest ready node in the current order, so an order
  // that is already topological is left unchanged.
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < node_order_.size(); ++i) position[node_order_[i]] = i;
  for (const Node* node : node_order_) {
    int count = 0;
    for (const Value* input : node->inputs_) count += input->producer_ != nullptr;
    pending[node] = count;
  }
  std::vector<Node*> ready;
  for (Node* node : node_order_) {
    if (pending[node] == 0) ready.push_back(node);
  }
  auto later = [&](const Node* a, const Node* b) { return position[a] > position[b]; };
  std::make_heap(ready.begin(), ready.end(), later);
  std::vector<Node*> sorted;
  sorted.reserve(node_order_.size());
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), later);
    Node* node = ready.back();
    ready.pop_back();
    sorted.push_back(node);
    for (const Value* output : node->outputs_) {
      for (Node* user : output->users_) {
        if (--pending[user] == 0) {
          ready.push_back(user);
          std::push_heap(ready.begin(), ready.end(), later);
        }
      }
    }
  }
  if (sorted.size() != node_order_.size()) {
    return Status::errorf("graph '{}' has a cycle", name_);
  }
  // Copied into the existing buffer so that a caller iterating `nodes()` keeps valid memory.
  std::ranges::copy(sorted, node_order_.begin());
  return Status::ok();
}

Value* Graph::find_value(std::string_view name) const {
  auto it = values_by_name_.find(std::string(name));
  return it == values_by_name_.end() ? nullptr : it->second;
}

bool Graph::is_output(const Value* value) const {
  return output_set_.contains(value);
}

bool Graph::owns(const Value* value) const {
  if (value == nullptr) return false;
  Value* found = find_value(value->name());
  return found == value;
}

Graph Graph::clone() const {
  Graph copy(name_);
  std::unordered_map<const Value*, Value*> mapping;
  for (const Value* input : inputs_) mapping[input] = copy.add_input(input->type(), input->name());
  for (const Node* node : node_order_) {
    std::vector<Value*> inputs;
    for (const Value* v : node->inputs_) inputs.push_back(mapping.at(v));
    std::vector<std::string> names;
    for (const Value* v : node->outputs_) names.push_back(v->name());
    Expected<Node*> cloned = copy.add_node(node->op_, std::move(inputs), node->attrs_, names);
    KILN_CHECK(cloned.has_value(), "cloning a valid node failed: {}", cloned.status().message());
    for (size_t i = 0; i < node->outputs_.size(); ++i) {
      mapping[node->outputs_[i]] = (*cloned)->outputs_[i];
    }
  }
  std::vector<Value*> outputs;
  for (const Value* v : outputs_) outputs.push_back(mapping.at(v));
  copy.set_outputs(std::move(outputs));
  copy.next_auto_name_ = next_auto_name_;
  return copy;
}

const std::string& Graph::rename_value(Value* value, std::string_view name) {
  KILN_CHECK(owns(value), "renaming a value of another graph");
  if (value->name_ == name) return value->name_;
  values_by_name_.erase(value->name_);
  value->name_ = fresh_name(name);
  values_by_name_.emplace(value->name_, value);
  return value->name_;
}

}  // namespace kiln
