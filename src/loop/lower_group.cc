#include "loop/lower_group.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "loop/compute.h"
#include "loop/simplify.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

// Constants whose value the kernel receives as an input instead of computing it.
bool is_parameter_constant(const Node& node) {
  return node.op() == Op::constant && node.output(0)->shape().num_elements() != 1;
}

bool is_inlinable(const Node& node) {
  const FusionKind kind = node.def().fusion_kind;
  return kind == FusionKind::elementwise || kind == FusionKind::broadcast ||
         kind == FusionKind::injective;
}

// Row-major flat offset of `index` in `shape`.
Expr row_major_offset(const std::vector<Expr>& index, const Shape& shape) {
  const std::vector<int64_t> strides = shape.strides();
  Expr offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset = offset + index[d] * strides[d];
  return offset;
}

class GroupLowerer {
 public:
  GroupLowerer(const Graph& graph, std::span<Node* const> nodes) : graph_(graph) {
    members_.insert(nodes.begin(), nodes.end());
  }

  Expected<LoweredGroup> run(size_t requested) {
    if (members_.size() != requested) return Status::error("the group lists a node twice");
    if (members_.empty()) return Status::error("the group has no nodes");
    for (Node* node : graph_.nodes()) {
      if (members_.count(node) == 0) continue;
      order_.push_back(node);
    }
    if (order_.size() != members_.size()) {
      return Status::error("the group holds a node that is not in the graph");
    }
    for (const Node* node : order_) KILN_RETURN_IF_ERROR(check_lowered(*node));
    collect_inputs();
    collect_outputs_and_locals();
    std::vector<Stmt> nests;
    for (const Value* value : stored_) {
      Expected<Stmt> nest = store_nest(*value);
      if (!nest) return nest.status();
      nests.push_back(std::move(nest).value());
    }
    Stmt body = block(std::move(nests));
    for (auto it = locals_.rbegin(); it != locals_.rend(); ++it) body = allocate(*it, body);
    std::vector<Buffer> params;
    for (const Value* value : inputs_) params.push_back(buffers_.at(value));
    for (const Value* value : outputs_) params.push_back(buffers_.at(value));
    Kernel kernel = simplify(Kernel{"kernel", std::move(params), std::move(body)});
    KILN_RETURN_IF_ERROR(verify(kernel));
    return LoweredGroup{std::move(kernel), inputs_, outputs_};
  }

 private:
  bool computed(const Node* node) const {
    return node != nullptr && members_.count(node) != 0 && !is_parameter_constant(*node);
  }

  static Status check_lowered(const Node& node) {
    if (is_parameter_constant(node) || lowering_of(node.op()).compute) return Status::ok();
    return Status::errorf("op '{}' (node {}) is not lowered to loops: {}", node.op_name(),
                          node.id(), lowering_of(node.op()).not_lowered);
  }

  void add_param(const Value* value, std::vector<const Value*>& list, std::string_view prefix) {
    if (buffers_.count(value) != 0) return;
    const std::string name = fmt::format("{}{}", prefix, list.size());
    buffers_.emplace(value, Buffer::param(name, value->dtype(), value->shape().dims()));
    list.push_back(value);
  }

  void collect_inputs() {
    for (const Node* node : order_) {
      if (!computed(node)) continue;
      for (const Value* value : node->inputs()) {
        if (!computed(value->producer())) add_param(value, inputs_, "in");
      }
    }
  }

  bool used_outside(const Value* value) const {
    const std::vector<Value*>& graph_outputs = graph_.outputs();
    if (std::find(graph_outputs.begin(), graph_outputs.end(), value) != graph_outputs.end()) {
      return true;
    }
    return std::any_of(value->users().begin(), value->users().end(),
                       [&](const Node* user) { return members_.count(user) == 0; });
  }

  bool used_inside(const Value* value) const {
    return std::any_of(value->users().begin(), value->users().end(),
                       [&](const Node* user) { return computed(user); });
  }

  // Decides, in node order, which computed values are stored (group outputs and materialised
  // values) and which are inlined.
  void collect_outputs_and_locals() {
    for (const Node* node : order_) {
      if (!computed(node)) continue;
      for (const Value* value : node->outputs()) {
        if (used_outside(value)) {
          add_param(value, outputs_, "out");
          stored_.push_back(value);
        } else if (used_inside(value) && !is_inlinable(*node)) {
          const std::string name = fmt::format("t{}", locals_.size());
          const int64_t size = std::max<int64_t>(value->shape().num_elements(), 1);
          locals_.push_back(Buffer::local(name, value->dtype(), size));
          buffers_.emplace(value, locals_.back());
          stored_.push_back(value);
        }
      }
    }
  }

  Expr load_from(const Value* value, const std::vector<Expr>& index) const {
    const Buffer& buffer = buffers_.at(value);
    if (buffer.scope() == MemoryScope::global) return load(buffer, index);
    return load(buffer, row_major_offset(index, value->shape()));
  }

  // The accessor of `node`'s inputs: a load where the input is in a buffer, else the inlined
  // definition of its producer. Errors are kept in error_ (accessors return plain Exprs).
  InputAccessor accessor(const Node& node) {
    return [this, &node](int input, const std::vector<Expr>& index) -> Expr {
      const Value* value = node.input(input);
      if (buffers_.count(value) != 0) return load_from(value, index);
      const Node& producer = *value->producer();
      Expected<Expr> element = compute_element(producer, value->output_index(), index,
                                               accessor(producer), names_);
      if (element) return std::move(element).value();
      if (error_.is_ok()) error_ = element.status();
      return make_zero(value->dtype());
    };
  }

  Expected<Stmt> store_nest(const Value& value) {
    const Node& node = *value.producer();
    std::vector<std::string> vars;
    std::vector<Expr> index;
    for (int d = 0; d < value.rank(); ++d) {
      vars.push_back(names_.fresh("i"));
      index.push_back(var(vars.back()));
    }
    KILN_ASSIGN_OR_RETURN(Expr element, compute_element(node, value.output_index(), index,
                                                        accessor(node), names_));
    KILN_RETURN_IF_ERROR(error_);
    const Buffer& buffer = buffers_.at(&value);
    const Expr offset = buffer.scope() == MemoryScope::global
                            ? element_offset(buffer, index)
                            : row_major_offset(index, value.shape());
    Stmt nest = store(buffer, offset, element);
    for (int d = value.rank() - 1; d >= 0; --d) {
      const auto axis = static_cast<size_t>(d);
      nest = for_loop(vars[axis], 0, value.shape().dim(d), nest);
    }
    return nest;
  }

  const Graph& graph_;
  std::set<const Node*> members_;
  std::vector<const Node*> order_;
  std::vector<const Value*> inputs_;
  std::vector<const Value*> outputs_;
  std::vector<const Value*> stored_;  // in the order their nests run
  std::vector<Buffer> locals_;
  std::map<const Value*, Buffer> buffers_;
  NameGenerator names_;
  Status error_ = Status::ok();
};

}  // namespace

Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes) {
  return GroupLowerer(graph, nodes).run(nodes.size());
}

}  // namespace kiln::loop
