#include "loop/lower_group.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "loop/compute.h"
#include "loop/contiguous_loops.h"
#include "loop/ir_visitor.h"
#include "loop/lowering/gemm.h"
#include "loop/lowering/group_context.h"
#include "loop/lowering/lowering_family.h"
#include "loop/simplify.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

using lowering::AccessErrors;
using lowering::GemmPlan;
using lowering::ProductStorage;
using lowering::row_major_offset;

// Constants whose value the kernel receives as an input instead of computing it.
bool is_parameter_constant(const Node& node) {
  return node.op() == Op::constant && node.output(0)->shape().num_elements() != 1;
}

// Finds a math-library call in an expression.
class MathCallFinder : public IRVisitor {
 public:
  bool found = false;

 protected:
  void visit_call(const Call& node) override {
    found = found || is_math_call(node.intrinsic);
    IRVisitor::visit_call(node);
  }
};

// Counts the loads of the buffer named `name` in an expression.
class LoadCounter : public IRVisitor {
 public:
  explicit LoadCounter(std::string name) : name_(std::move(name)) {}
  int count = 0;

 protected:
  void visit_load(const Load& node) override {
    if (node.buffer.name() == name_) ++count;
    IRVisitor::visit_load(node);
  }

 private:
  std::string name_;
};

class GroupLowerer final : public lowering::GroupContext {
 public:
  GroupLowerer(const Graph& graph, std::span<Node* const> nodes, const LowerGroupOptions& options)
      : graph_(graph), options_(options) {
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
    collect_inputs();
    collect_outputs_and_locals();
    std::vector<Stmt> nests;
    for (const Value* value : stored_) {
      if (epilogue_values_.contains(value)) continue;  // stored inside its gemm's block loop
      const StoreNest* own = store_nest_of(*value->producer());
      Expected<Stmt> nest = own != nullptr ? own->build(*value, *this) : store_nest(*value);
      if (!nest) return nest.status();
      nests.push_back(std::move(nest).value());
    }
    Stmt body = join_contiguous_loops(block(std::move(nests)));
    for (auto it = locals_.rbegin(); it != locals_.rend(); ++it) body = allocate(*it, body);
    std::vector<Buffer> params;
    for (const Value* value : inputs_) params.push_back(buffers_.at(value));
    for (const Value* value : outputs_) params.push_back(buffers_.at(value));
    Kernel kernel = simplify(Kernel{"kernel", std::move(params), std::move(body)});
    KILN_RETURN_IF_ERROR(verify(kernel));
    return LoweredGroup{std::move(kernel), inputs_, outputs_, views_};
  }

  // --- GroupContext ------------------------------------------------------------------------

  const LowerGroupOptions& options() const override { return options_; }
  std::span<const Value* const> stored_values() const override { return stored_; }
  std::optional<size_t> stored_position(const Value& value) const override {
    auto found = position_.find(&value);
    if (found == position_.end()) return std::nullopt;
    return found->second;
  }
  bool computes(const Value& value) const override { return computed(value.producer()); }
  bool used_outside(const Value& value) const override {
    if (graph_.is_output(&value)) return true;
    return std::any_of(value.users().begin(), value.users().end(),
                       [&](const Node* user) { return members_.count(user) == 0; });
  }
  bool claimed_as_epilogue(const Value& value) const override {
    return epilogue_values_.contains(&value);
  }

  // Whether the group stores `node`'s value by its definition (store_nest), not by a nest of
  // its own (the record's StoreNest) or batch norm's statistics first.
  bool stored_by_definition(const Node& node) const override {
    return store_nest_of(node) == nullptr && !stores_batch_statistics_first(node);
  }

  // Whether `node`'s definition, with its inlined producers, reads `value`.
  bool reads_through_inlining(const Node& node, const Value& value) const override {
    return std::any_of(node.inputs().begin(), node.inputs().end(), [&](const Value* input) {
      if (input == &value) return true;
      return computed(input->producer()) && !stored(input) &&
             reads_through_inlining(*input->producer(), value);
    });
  }

  NameGenerator& names() override { return names_; }
  const Buffer& buffer_of(const Value& value) const override { return buffers_.at(&value); }
  const GemmPlan* gemm_plan(const Value& product) const override {
    auto plan = gemms_.find(&product);
    return plan == gemms_.end() ? nullptr : &plan->second;
  }

  // A load where the input is in a buffer (or the current block of a product), else the
  // inlined definition of its producer.
  InputAccessor inputs(const Node& node, AccessErrors& errors) override {
    return [this, &node, &errors](int input, const std::vector<Expr>& index) -> Expr {
      const Value* value = node.input(input);
      if (buffers_.count(value) != 0 || block_.value == value) return load_from(*value, index);
      Expected<Expr> element = element_of(*value, index);
      if (element) return std::move(element).value();
      errors.record(element.status());
      return make_zero(value->dtype());
    };
  }

  Expr load_from(const Value& value, const std::vector<Expr>& index) const override {
    if (block_.value == &value) return block_.element_at(index);
    const Buffer& buffer = buffers_.at(&value);
    if (buffer.scope() == MemoryScope::global) return load(buffer, index);
    return load(buffer, row_major_offset(index, value.shape()));
  }

  // A parameter by its shape, a local (one flat array) row-major.
  Stmt store_element(const Value& value, const std::vector<Expr>& index,
                     Expr element) const override {
    const Buffer& buffer = buffers_.at(&value);
    const Expr offset = buffer.scope() == MemoryScope::global
                            ? element_offset(buffer, index)
                            : row_major_offset(index, value.shape());
    return store(buffer, offset, std::move(element));
  }

  Expected<Stmt> store_definitions(const std::vector<const Value*>& values,
                                   const std::vector<Expr>& index) override {
    std::vector<Stmt> stores;
    for (const Value* value : values) {
      KILN_ASSIGN_OR_RETURN(Expr element, definition_of(*value, index));
      stores.push_back(store_element(*value, index, element));
    }
    return block(std::move(stores));
  }

  Expected<Stmt> with_reads_of(const Value& value, const lowering::ElementAt& element_at,
                               const std::function<Expected<Stmt>()>& build) override {
    block_ = {&value, element_at};
    Expected<Stmt> built = build();
    block_ = {};
    return built;
  }

 private:
  bool computed(const Node* node) const {
    return node != nullptr && members_.count(node) != 0 && !is_parameter_constant(*node);
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

  bool used_inside(const Value* value) const {
    return std::any_of(value->users().begin(), value->users().end(),
                       [&](const Node* user) { return computed(user); });
  }

  // Decides, in node order, which computed values are stored (group outputs and materialised
  // values) and which are inlined, plans the gemms, and gives stored values their buffers.
  void collect_outputs_and_locals() {
    for (const Node* node : order_) {
      if (!computed(node)) continue;
      if (stores_batch_statistics_first(*node)) {
        mark_stored(node->output(1));
        mark_stored(node->output(2));
        const Value* y = node->output(0);
        if (used_outside(*y) || feeds_input_buffers(y)) mark_stored(y);  // else inlined
        continue;
      }
      for (const Value* value : node->outputs()) {
        if (is_view_output(*value)) {
          views_.push_back({value, node->input(0)});
          continue;
        }
        if (used_outside(*value) ||
            (used_inside(value) && !is_inlinable(node->def().fusion_kind)) ||
            feeds_input_buffers(value) || costly_to_recompute(*value)) {
          mark_stored(value);
        }
      }
    }
    plan_gemms();
    for (const Value* value : stored_) {
      if (used_outside(*value)) {
        add_param(value, outputs_, "out");
        continue;
      }
      const GemmPlan* plan = gemm_plan(*value);
      if (plan != nullptr && plan->storage != ProductStorage::own_buffer) continue;
      const std::string name = fmt::format("t{}", locals_.size());
      const int64_t size = std::max<int64_t>(value->shape().num_elements(), 1);
      locals_.push_back(Buffer::local(name, value->dtype(), size));
      buffers_.emplace(value, locals_.back());
    }
    for (const auto& [product, plan] : gemms_) {
      if (plan.storage == ProductStorage::last_epilogue) {
        buffers_.emplace(product, buffers_.at(plan.epilogues.back()));
      }
    }
  }

  // Each stored value whose record plans epilogues (a gemm's product) gets its plan, in node
  // order: a value claimed as an earlier product's epilogue is not offered to a later one.
  void plan_gemms() {
    for (const Value* value : stored_) {
      const StoreNest* nest = store_nest_of(*value->producer());
      if (nest == nullptr || !nest->plan_epilogues) continue;
      GemmPlan plan = nest->plan_epilogues(*value, *this);
      epilogue_values_.insert(plan.epilogues.begin(), plan.epilogues.end());
      gemms_.emplace(value, std::move(plan));
    }
  }

  // An inlined value is evaluated wherever a definition reads it. One whose own definition
  // calls the math library (gelu's erf, exp, tanh), read at several places per element by a
  // consumer in the group (layer norm reads its input for the mean, the variance and the
  // output; softmax for the max, the sum and the output), is stored once instead: inlined,
  // bert-base's MLM head (matmul + bias + gelu + layer norm) called erf three times per
  // element and ran slower fused than as separate kernels (docs/benchmarks.md). So is every
  // such value of one element (Adam's bias corrections, pow(beta, step)): inlined into the
  // nest over a parameter's elements, it would call the library at each element (the C++
  // compiler cannot hoist a call that may set errno), and stored it costs one store:
  // gcn-cora's fused Adam step ran its two pow calls for each of the 22,928 weight elements.
  bool costly_to_recompute(const Value& value) {
    if (!used_inside(&value) || !calls_math_library(value)) return false;
    if (value.shape().num_elements() == 1) return true;
    return std::any_of(value.users().begin(), value.users().end(), [&](const Node* user) {
      return computed(user) && reads_per_element(*user, value) > 1;
    });
  }

  // Whether the definition of `value` itself (its inputs taken as given) calls the math
  // library.
  bool calls_math_library(const Value& value) {
    const Node& node = *value.producer();
    Expected<Expr> element = compute_element(
        node, value.output_index(), lowering::symbolic_index(value.rank(), probe_names_),
        [&](int input, const std::vector<Expr>&) { return make_zero(node.input(input)->dtype()); },
        probe_names_);
    if (!element) return false;  // reported when the group is lowered
    MathCallFinder finder;
    finder.visit(*element);
    return finder.found;
  }

  // How many places in the definition of `user`'s first output read `value`.
  int reads_per_element(const Node& user, const Value& value) {
    const Buffer probe = Buffer::param("probe", value.dtype(), {1});
    Expected<Expr> element = compute_element(
        user, 0, lowering::symbolic_index(user.output(0)->rank(), probe_names_),
        [&](int input, const std::vector<Expr>&) {
          return user.input(input) == &value ? load(probe, 0)
                                             : make_zero(user.input(input)->dtype());
        },
        probe_names_);
    if (!element) return 0;
    LoadCounter counter(probe.name());
    counter.visit(*element);
    return counter.count;
  }

  // A reshape needed outside (not as a graph output, which the caller's memory must hold)
  // whose input is in memory anyway: an input of the group, an output of it (decided
  // earlier, in node order), or another view. Its readers in the group inline it as usual;
  // a gemm of the group reads its operands from the group's own buffers, so one it feeds is
  // stored.
  // cost/estimate.cc mirrors this rule.
  bool is_view_output(const Value& value) const {
    if (value.producer()->op() != Op::reshape || !used_outside(value) ||
        feeds_input_buffers(&value)) {
      return false;
    }
    if (graph_.is_output(&value)) return false;
    const Value* source = value.producer()->input(0);
    if (!computed(source->producer())) return true;
    return std::any_of(views_.begin(), views_.end(),
                       [&](const ViewOutput& view) { return view.value == source; }) ||
           (position_.contains(source) && used_outside(*source));
  }

  void mark_stored(const Value* value) {
    position_.emplace(value, stored_.size());
    stored_.push_back(value);
  }

  bool stored(const Value* value) const { return position_.contains(value); }

  // batch_norm_train's y reads its channel's mean and variance at every element. Inlined, the
  // two reductions over the batch and the plane are recomputed wherever the schedule cannot
  // hoist them (under the loop over images: once per image and channel instead of once per
  // channel); so when y is needed, its mean and variance outputs are stored first (in a
  // local buffer when nothing else reads them) and y becomes an elementwise expression of x
  // and those statistics (element_of): stored only when used outside the group (or by a
  // gemm), else inlined into its readers like any elementwise producer, with no
  // intermediate the size of x.
  bool stores_batch_statistics_first(const Node& node) const {
    if (node.op() != Op::batch_norm_train) return false;
    const Value* y = node.output(0);
    return used_outside(*y) || used_inside(y);
  }

  // Whether a node of the group whose store nest reads its inputs from their buffers (a
  // gemm's: StoreNest::reads_input_buffers) reads `value`: an operand that would be inlined
  // is then stored in a local buffer.
  bool feeds_input_buffers(const Value* value) const {
    return std::any_of(value->users().begin(), value->users().end(), [&](const Node* user) {
      const StoreNest* nest = computed(user) ? store_nest_of(*user) : nullptr;
      return nest != nullptr && nest->reads_input_buffers;
    });
  }

  // The element of `value` at `index` by its producer's compute definition, reading the
  // producer's inputs through inputs().
  Expected<Expr> definition_of(const Value& value, const std::vector<Expr>& index) {
    const Node& node = *value.producer();
    AccessErrors errors;
    KILN_ASSIGN_OR_RETURN(Expr element, compute_element(node, value.output_index(), index,
                                                        inputs(node, errors), names_));
    return errors.result(std::move(element));
  }

  // The element of `value` at `index`: its definition, or for batch_norm_train's y the
  // normalisation by the statistics stored before it, and for its variance the deviations
  // from the mean stored before it (one pass over x less).
  Expected<Expr> element_of(const Value& value, const std::vector<Expr>& index) {
    const Node& node = *value.producer();
    if (!stores_batch_statistics_first(node) || value.output_index() == 1) {
      return definition_of(value, index);
    }
    const std::vector<TensorType> input_types = node.input_types();
    const std::vector<TensorType> output_types = node.output_types();
    AccessErrors errors;
    const InputAccessor input = inputs(node, errors);
    const ComputeArgs args{node.attrs(), input_types, output_types, value.output_index(),
                           index,        input,       names_};
    const Expr channel = value.output_index() == 2 ? index[0] : index[1];  // the variance is [C]
    const Expr mean = load_from(*node.output(1), {channel});
    if (value.output_index() == 2) return errors.result(lowering::batch_norm_variance(args, mean));
    return errors.result(
        lowering::batch_norm_normalize(args, mean, load_from(*node.output(2), {channel})));
  }

  // A loop nest over `value`'s shape storing its element_of.
  Expected<Stmt> store_nest(const Value& value) {
    std::vector<std::string> vars;
    const std::vector<Expr> index = fresh_index(value.shape().dims(), vars);
    KILN_ASSIGN_OR_RETURN(Expr element, element_of(value, index));
    return lowering::loop_nest(vars, value.shape().dims(), store_element(value, index, element));
  }

  // While a product that lives one block at a time has its epilogues built (with_reads_of),
  // its reads (`value` null otherwise).
  struct BlockView {
    const Value* value = nullptr;
    lowering::ElementAt element_at;
  };

  const Graph& graph_;
  const LowerGroupOptions& options_;
  std::set<const Node*> members_;
  std::vector<const Node*> order_;
  std::vector<const Value*> inputs_;
  std::vector<const Value*> outputs_;
  std::vector<ViewOutput> views_;
  std::vector<const Value*> stored_;  // in node order: the order their nests run
  std::map<const Value*, size_t> position_;  // in stored_
  std::map<const Value*, GemmPlan> gemms_;
  std::set<const Value*> epilogue_values_;
  BlockView block_;
  std::vector<Buffer> locals_;
  std::map<const Value*, Buffer> buffers_;
  NameGenerator names_;
  NameGenerator probe_names_;  // for definitions built only to be inspected
};

}  // namespace

Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes,
                                   const LowerGroupOptions& options) {
  return GroupLowerer(graph, nodes, options).run(nodes.size());
}

}  // namespace kiln::loop
