// Graph IR: a static-shape SSA dataflow graph of ops.
//
// A Graph owns its Nodes and Values. A Value is defined exactly once, either as a graph input
// or as an output of one Node; its TensorType never changes. A Node applies one op (ir/op.h) to
// input Values with canonical attributes. Nodes are kept in a topological order that is also
// the order of creation unless a pass reorders them: iterating `nodes()` is deterministic and
// visits every producer before its users. Every Value has a name unique within its graph
// (generated as a number when none is given); names are what the text form prints.
//
// Mutation is through the Graph only (add_node, replace_all_uses, erase_node, set_outputs) so
// that use lists stay exact. Graphs are move-only; `clone()` makes a deep copy.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/attribute.h"
#include "ir/op.h"
#include "ir/shape.h"
#include "support/status.h"

namespace kiln {

class Node;

class Value {
 public:
  int id() const { return id_; }
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int rank() const { return type_.shape.rank(); }

  bool is_graph_input() const { return producer_ == nullptr; }
  Node* producer() const { return producer_; }  // nullptr for graph inputs
  int output_index() const { return output_index_; }
  // Nodes using this value, once per use, in the order the uses were made.
  const std::vector<Node*>& users() const { return users_; }

 private:
  friend class Graph;
  Value(int id, std::string name, TensorType type, Node* producer, int output_index)
      : id_(id), name_(std::move(name)), type_(std::move(type)), producer_(producer),
        output_index_(output_index) {}

  int id_;
  std::string name_;
  TensorType type_;
  Node* producer_;
  int output_index_;
  std::vector<Node*> users_;
};

class Node {
 public:
  int id() const { return id_; }
  Op op() const { return op_; }
  const OpDef& def() const { return op_def(op_); }
  std::string_view op_name() const { return def().name; }
  const Attrs& attrs() const { return attrs_; }

  const std::vector<Value*>& inputs() const { return inputs_; }
  Value* input(int i) const { return inputs_.at(static_cast<size_t>(i)); }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output(int i = 0) const { return outputs_.at(static_cast<size_t>(i)); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }

  std::vector<TensorType> input_types() const;
  std::vector<TensorType> output_types() const;

 private:
  friend class Graph;
  Node(int id, Op op, std::vector<Value*> inputs, Attrs attrs)
      : id_(id), op_(op), attrs_(std::move(attrs)), inputs_(std::move(inputs)) {}

  int id_;
  Op op_;
  Attrs attrs_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
};

class Graph {
 public:
  explicit Graph(std::string name = "main");
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  const std::string& name() const { return name_; }

  // Adds a graph input. An empty or taken name is replaced by a fresh one.
  Value* add_input(TensorType type, std::string_view name = {});

  // Appends a node: canonicalizes attributes against the op's schema, infers output types and
  // creates the outputs (named from `output_names` where given). Inputs must belong to this
  // graph. Errors name the op.
  Expected<Node*> add_node(Op op, std::vector<Value*> inputs, const Attrs& attrs = {},
                           std::span<const std::string> output_names = {});

  void set_outputs(std::vector<Value*> outputs);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  bool is_output(const Value* value) const;  // whether `value` is one of outputs()
  // Nodes in their (topological) order.
  std::span<Node* const> nodes() const { return node_order_; }
  int num_nodes() const { return static_cast<int>(node_order_.size()); }

  // Every use of `from` (node inputs and graph outputs) becomes a use of `to`; types must
  // match. Returns an error if `to` is defined after a user of `from` would need it.
  Status replace_all_uses(Value* from, Value* to);
  // Moves the nodes `value` is computed from that come after `anchor` (every node, when
  // anchor is null) to right after it, keeping their order; the rest of the order stays. A
  // rewrite calls it before replacing the anchor's value with `value`, built from the
  // anchor's own inputs and appended: the replacement then runs where the value it replaces
  // ran (the stable sort replace_all_uses falls back on would run it as late as possible, and
  // a weight gradient's matmul moved to its optimizer update keeps its operands live).
  void move_computation_after(const Value* value, const Node* anchor);
  // Removes a node whose outputs have no users and are not graph outputs.
  void erase_node(Node* node);
  // Removes a graph input that has no users and is not a graph output.
  void erase_input(Value* input);
  // Reorders nodes topologically (stable: keeps the current order where it is already valid).
  // Error if the graph has a cycle.
  Status sort_topologically();

  // Renames `value` to `name`, or to a fresh variant of it ("name.1") when another value has
  // that name. Returns the name given.
  const std::string& rename_value(Value* value, std::string_view name);

  Value* find_value(std::string_view name) const;  // nullptr if none
  bool owns(const Value* value) const;

  Graph clone() const;

 private:
  std::string fresh_name(std::string_view requested);

  std::string name_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_storage_;
  std::vector<Node*> node_order_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::unordered_set<const Value*> output_set_;  // outputs_, for is_output
  std::unordered_map<std::string, Value*> values_by_name_;
  int next_value_id_ = 0;
  int next_node_id_ = 0;
  int next_auto_name_ = 0;
};

}  // namespace kiln
