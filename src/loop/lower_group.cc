#include "loop/lower_group.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "loop/compute.h"
#include "loop/contiguous_loops.h"
#include "loop/lower_conv.h"
#include "loop/lowering/lowering_family.h"
#include "loop/simplify.h"
#include "loop/ir_visitor.h"
#include "loop/tuning.h"
#include "loop/verifier.h"

namespace kiln::loop {

bool lowers_matmul_to_gemm(const Node& node) {
  const DType dtype = node.output(0)->dtype();
  return node.op() == Op::matmul && (dtype == DType::f32 || dtype == DType::f64);
}

bool conv_takes_epilogue(const Node& node) {
  return lowers_conv_to_gemm(node) && node.op() != Op::conv_grad_weight;
}

namespace {

// Constants whose value the kernel receives as an input instead of computing it.
bool is_parameter_constant(const Node& node) {
  return node.op() == Op::constant && node.output(0)->shape().num_elements() != 1;
}

// Rows of C per gemm call when epilogues read the block back (loop/tuning.h). A product of
// at most kWholeProductBytes is one call: the epilogue then reads it from the last-level
// cache, and OpenBLAS packs B once (each call packs all of B again, and calls of few rows run
// below the library's rate). Larger products are cut into blocks near kGemmBlockBytes, at
// least kMinGemmBlockRows rows, so that a block is still in cache when its epilogue reads
// it; but only when a block has at least K rows: each call packs B's K x N elements again,
// which costs more than reading the block's R x N back from memory when R < K (bert-base's
// vocabulary projection, K = 768 and N = 30522). Without an epilogue nothing reads the block
// while it is hot, so one call covers every row.

// scatter_add of these dtypes is stored in one pass, an accumulating store per update
// (scatter_nest); bool, f16 and bf16 keep the gather-form definition (a bool sum is an
// integer sum converted back; 16-bit floats would round after every partial sum).
bool is_scatter(const Node& node) {
  const DType dtype = node.output(0)->dtype();
  return node.op() == Op::scatter_add && (dtype == DType::f32 || dtype == DType::f64 ||
                                          dtype == DType::i32 || dtype == DType::i64);
}

// spmm with the sparse matrix transposed: its definition sums, for every output element,
// over every non-zero (nnz x N x K work); lower_group scatters each non-zero once instead
// (spmm_scatter_nest).
bool is_transposed_spmm(const Node& node) {
  return node.op() == Op::spmm && node.attrs().get_bool("transpose");
}

// Row-major flat offset of `index` in `shape`.
Expr row_major_offset(const std::vector<Expr>& index, const Shape& shape) {
  const std::vector<int64_t> strides = shape.strides();
  Expr offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset = offset + index[d] * strides[d];
  return offset;
}

// How a matmul or convolution lowered to gemm statements is stored and which values ride on
// its blocks (a matmul's row blocks, a convolution's images).
struct GemmPlan {
  std::vector<const Value*> epilogues;  // stored in the block loop right after each gemm
  // The epilogues that read other columns of their row (a row reduction: softmax's maximum
  // and sum, a layer norm's statistics) or a value of the row's shape (is_row_epilogue). With
  // any, the epilogues run row by row, not element by element.
  std::set<const Value*> row_epilogues;
  // The product needs no full buffer of its own: a matmul's lives in a per-block buffer, a
  // convolution's in its last epilogue's buffer (place_products_in_epilogues).
  bool block_local = false;
  // Matmuls only: rows of C per gemm call, and whether the batch dims are rows of one gemm
  // (A's matrices are consecutive rows and B is shared), so B is packed once, not once per
  // matrix.
  int64_t block_rows = 0;
  bool fold_batch = false;
};

// Rows of C one gemm nest covers: a matrix's, or every matrix's when the batch is folded.
int64_t gemm_rows(const Shape& product, const GemmPlan& plan) {
  const int rank = product.rank();
  if (!plan.fold_batch) return product.dim(rank - 2);
  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= product.dim(d);
  return rows;
}

// The index of row `row` of C's folded rows: its batch indices and its row in the matrix.
std::vector<Expr> unfold_row(const Expr& row, const Shape& product) {
  const int leading = product.rank() - 1;
  std::vector<Expr> index(static_cast<size_t>(leading));
  int64_t stride = 1;
  for (int d = leading - 1; d >= 0; --d) {
    const Expr quotient = stride == 1 ? row : row / Expr(stride);
    index[static_cast<size_t>(d)] = d == 0 ? quotient : quotient % Expr(product.dim(d));
    stride *= product.dim(d);
  }
  return index;
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

// K: the length of the dot product behind each element of a matmul.
int64_t gemm_depth(const Node& matmul) {
  const Shape& a = matmul.input(0)->shape();
  return matmul.attrs().get_bool("transpose_a") ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
}

// Whether a matmul's batch dims can become rows of one gemm: A untransposed and not
// broadcast (its matrices follow each other row after row, as C's do) and every matrix
// multiplied by the same B.
bool can_fold_batch(const Node& matmul) {
  const Shape& a = matmul.input(0)->shape();
  const Shape& b = matmul.input(1)->shape();
  const Shape& c = matmul.output(0)->shape();
  if (c.rank() <= 2 || matmul.attrs().get_bool("transpose_a") || a.rank() != c.rank()) {
    return false;
  }
  for (int d = 0; d < c.rank() - 2; ++d) {
    if (a.dim(d) != c.dim(d)) return false;
  }
  for (int d = 0; d < b.rank() - 2; ++d) {
    if (b.dim(d) != 1) return false;
  }
  return true;
}

class GroupLowerer {
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
      auto plan = gemms_.find(value);
      const Node& producer = *value->producer();
      Expected<Stmt> nest = lowers_conv_to_gemm(producer)      ? conv_nest(*value)
                            : plan != gemms_.end()             ? gemm_nest(*value, plan->second)
                            : is_scatter(producer)             ? scatter_nest(*value)
                            : producer.op() == Op::max_pool_grad ? max_pool_grad_nest(*value)
                            : producer.op() == Op::max_pool &&
                                    lowering::max_pool_is_separable(producer.attrs())
                                ? max_pool_nest(*value)
                            : is_transposed_spmm(producer)     ? spmm_scatter_nest(*value)
                                                               : store_nest(*value);
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

  bool used_outside(const Value* value) const {
    if (graph_.is_output(value)) return true;
    return std::any_of(value->users().begin(), value->users().end(),
                       [&](const Node* user) { return members_.count(user) == 0; });
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
        if (used_outside(y) || feeds_gemm(y)) mark_stored(y);  // else inlined where read
        continue;
      }
      for (const Value* value : node->outputs()) {
        if (is_view_output(*value)) {
          views_.push_back({value, node->input(0)});
          continue;
        }
        if (used_outside(value) || (used_inside(value) && !is_inlinable(node->def().fusion_kind)) ||
            feeds_gemm(value) || costly_to_recompute(*value)) {
          mark_stored(value);
        }
      }
    }
    plan_gemms();
    for (const Value* value : stored_) {
      if (used_outside(value)) {
        add_param(value, outputs_, "out");
        continue;
      }
      auto plan = gemms_.find(value);
      if (plan != gemms_.end() && plan->second.block_local) continue;  // one block at a time
      const std::string name = fmt::format("t{}", locals_.size());
      const int64_t size = std::max<int64_t>(value->shape().num_elements(), 1);
      locals_.push_back(Buffer::local(name, value->dtype(), size));
      buffers_.emplace(value, locals_.back());
    }
    place_products_in_epilogues();
  }

  // A product that only its epilogues read is written by its gemm (or a convolution's copy
  // out of its batch matrix or col2im) into the buffer of its last epilogue, when the types
  // agree, instead of a scratch block: the epilogues run element by
  // element in order and read the product only at their own element, so every one of them
  // has read an element before the last overwrites it. The kernel then needs no scratch (a
  // ViT-base matmul + bias + gelu needed 14 MiB, which the memory bound refused, so the gelu
  // ran as a kernel of its own) and moves the product through memory once less.
  void place_products_in_epilogues() {
    for (auto& [product, plan] : gemms_) {
      // A row epilogue reads the product at other columns of its row, which the last
      // epilogue's stores would already have overwritten.
      if (!plan.block_local || plan.epilogues.empty() || !plan.row_epilogues.empty()) continue;
      const Value* last = plan.epilogues.back();
      if (last->dtype() != product->dtype()) continue;
      buffers_.emplace(product, buffers_.at(last));
      plan.block_local = false;
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
        node, value.output_index(), symbolic_index(value.rank()),
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
        user, 0, symbolic_index(user.output(0)->rank()),
        [&](int input, const std::vector<Expr>&) {
          return user.input(input) == &value ? load(probe, 0) : make_zero(user.input(input)->dtype());
        },
        probe_names_);
    if (!element) return 0;
    LoadCounter counter(probe.name());
    counter.visit(*element);
    return counter.count;
  }

  std::vector<Expr> symbolic_index(int rank) {
    std::vector<Expr> index;
    for (int d = 0; d < rank; ++d) index.push_back(var(probe_names_.fresh("i")));
    return index;
  }

  // A reshape needed outside (not as a graph output, which the caller's memory must hold)
  // whose input is in memory anyway: an input of the group, an output of it (decided
  // earlier, in node order), or another view. Its readers in the group inline it as usual;
  // a gemm of the group reads its operands from the group's own buffers, so one it feeds is
  // stored.
  // cost/estimate.cc mirrors this rule.
  bool is_view_output(const Value& value) const {
    if (value.producer()->op() != Op::reshape || !used_outside(&value) || feeds_gemm(&value)) {
      return false;
    }
    if (graph_.is_output(&value)) return false;
    const Value* source = value.producer()->input(0);
    if (!computed(source->producer())) return true;
    return std::any_of(views_.begin(), views_.end(),
                       [&](const ViewOutput& view) { return view.value == source; }) ||
           (position_.contains(source) && used_outside(source));
  }

  void mark_stored(const Value* value) {
    position_.emplace(value, stored_.size());
    stored_.push_back(value);
  }

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
    return used_outside(y) || used_inside(y);
  }

  // --- Gemm plans -------------------------------------------------------------------------
  //
  // A stored matmul of f32 or f64 becomes a loop over its batch and row blocks with one gemm
  // per block. Its epilogues are the stored values (group outputs) that can be computed block
  // by block right after the gemm, while the block is in cache: values of the matmul's shape
  // produced by elementwise or broadcast ops that read the matmul (or an earlier epilogue)
  // only at their own index, through a chain of such ops, and read nothing else that is
  // computed after the matmul. When every stored value that reads an internal matmul is an
  // epilogue, the matmul needs no full buffer: each block lives in a block-sized local.

  bool stored(const Value* value) const { return position_.contains(value); }

  // Whether a matmul or convolution of the group that lowers to gemm reads `value`: a gemm
  // reads its operands from memory, so an operand that would be inlined is stored in a local
  // buffer.
  bool feeds_gemm(const Value* value) const {
    return std::any_of(value->users().begin(), value->users().end(), [&](const Node* user) {
      return computed(user) && (lowers_matmul_to_gemm(*user) || lowers_conv_to_gemm(*user));
    });
  }

  void plan_gemms() {
    for (const Value* value : stored_) {
      const Node& producer = *value->producer();
      const bool conv = conv_takes_epilogue(producer);
      if (!lowers_matmul_to_gemm(producer) && !conv) continue;
      GemmPlan plan;
      for (size_t s = position_.at(value) + 1; s < stored_.size(); ++s) {
        const Value* candidate = stored_[s];
        if (epilogue_values_.contains(candidate)) continue;
        const bool elementwise = is_epilogue(*candidate, *value, plan);
        if (!elementwise && (conv || !is_row_epilogue(*candidate, *value, plan))) continue;
        plan.epilogues.push_back(candidate);
        if (!elementwise) plan.row_epilogues.insert(candidate);
        epilogue_values_.insert(candidate);
      }
      plan.block_local = !used_outside(value) && std::none_of(
          stored_.begin(), stored_.end(), [&](const Value* other) {
            return other != value && !std::count(plan.epilogues.begin(), plan.epilogues.end(),
                                                 other) &&
                   reads_through_inlining(*other->producer(), *value);
          });
      if (conv) {
        // A convolution has no block buffer: without an epilogue of its type to hold it, it is
        // stored in full.
        plan.block_local = plan.block_local && !plan.epilogues.empty() &&
                           plan.epilogues.back()->dtype() == value->dtype();
        gemms_.emplace(value, std::move(plan));
        continue;
      }
      plan.fold_batch = can_fold_batch(*value->producer());
      const int rank = value->rank();
      const int64_t m = gemm_rows(value->shape(), plan), n = value->shape().dim(rank - 1);
      const int64_t row_bytes = std::max<int64_t>(n, 1) * dtype_size_bytes(value->dtype());
      int64_t rows = m;
      if (options_.gemm_block_rows > 0 && !plan.epilogues.empty()) {
        rows = options_.gemm_block_rows;
      } else if (!plan.epilogues.empty() && m * row_bytes > kWholeProductBytes) {
        rows = std::max(kGemmBlockBytes / row_bytes, kMinGemmBlockRows);
        if (rows < gemm_depth(*value->producer())) rows = m;
      }
      plan.block_rows = std::clamp<int64_t>(rows, 1, std::max<int64_t>(m, 1));
      gemms_.emplace(value, std::move(plan));
    }
  }

  bool is_epilogue(const Value& candidate, const Value& product, const GemmPlan& plan) const {
    const Node& node = *candidate.producer();
    if (!reads_at_own_index(node.def().fusion_kind) || candidate.shape() != product.shape()) return false;
    const std::optional<bool> reaches = block_reads(node, product, plan);
    return reaches.value_or(false);
  }

  // A row epilogue of a matmul's product: a value its own definition stores (no special
  // nest), of the product's shape or of its rows' (the last dim dropped or 1), whose
  // definition, with its inlined producers, reads the product or an earlier epilogue, and
  // reads them only in its own row (at any column: a row's maximum, sum or mean), and reads
  // nothing else computed after the product. A block holds whole rows, so the value can be
  // stored row by row right after the gemm, while the block is in cache: attention's softmax
  // and its gradient, a layer norm after a projection.
  bool is_row_epilogue(const Value& candidate, const Value& product, const GemmPlan& plan) {
    const Node& node = *candidate.producer();
    if (!stored_by_definition(node)) return false;
    const std::vector<int64_t>& dims = product.shape().dims();
    std::vector<int64_t> rows(dims.begin(), dims.end() - 1);
    std::vector<int64_t> kept = rows;
    kept.push_back(1);
    const std::vector<int64_t>& shape = candidate.shape().dims();
    if (shape != dims && shape != rows && shape != kept) return false;
    RowProbe probe;
    probe.product = &product;
    probe.plan = &plan;
    const std::vector<Expr> index = symbolic_index(candidate.rank());
    for (size_t d = 0; d < index.size(); ++d) {
      probe.scope[index[d].as<Variable>()->name] = Interval{0, shape[d] - 1};
    }
    probe.row.assign(index.begin(), index.begin() + static_cast<ptrdiff_t>(rows.size()));
    Expected<Expr> element = compute_element(node, candidate.output_index(), index,
                                             row_probe(node, probe), probe_names_);
    return element.has_value() && probe.row_local && probe.reaches;
  }

  // What row_probe finds in a candidate row epilogue's definition.
  struct RowProbe {
    const Value* product = nullptr;
    const GemmPlan* plan = nullptr;
    std::vector<Expr> row;  // the candidate's row: its index without the column
    BoundsScope scope;      // of the candidate's index variables
    bool row_local = true;  // every read of the product or an epilogue is in `row`
    bool reaches = false;   // some read is
  };

  // The accessor of `node`'s inputs while a candidate row epilogue is probed: reads of the
  // product and of its epilogues are checked against the row, computed values not stored are
  // inlined (their reads checked in turn), and stored values must be computed before the
  // product. Reads stand in for a probe buffer's element.
  InputAccessor row_probe(const Node& node, RowProbe& probe) {
    return [this, &node, &probe](int input, const std::vector<Expr>& index) -> Expr {
      const Value* value = node.input(input);
      const Expr stand_in = load(Buffer::param("probe", value->dtype(), {1}), 0);
      const std::vector<const Value*>& epilogues = probe.plan->epilogues;
      if (value == probe.product || std::ranges::count(epilogues, value) != 0) {
        probe.reaches = true;
        probe.row_local = probe.row_local && in_row(index, probe);
        return stand_in;
      }
      if (!computed(value->producer())) return stand_in;  // a kernel input
      if (stored(value)) {
        probe.row_local = probe.row_local && position_.at(value) < position_.at(probe.product);
        return stand_in;
      }
      const Node& producer = *value->producer();
      Expected<Expr> element = compute_element(producer, value->output_index(), index,
                                               row_probe(producer, probe), probe_names_);
      if (!element) {
        probe.row_local = false;
        return stand_in;
      }
      return std::move(element).value();
    };
  }

  // Whether a read at `index` is in the probed row: its leading components are the row's.
  static bool in_row(const std::vector<Expr>& index, const RowProbe& probe) {
    if (index.size() < probe.row.size()) return false;
    for (size_t d = 0; d < probe.row.size(); ++d) {
      if (!equal(simplify(index[d], probe.scope), probe.row[d])) return false;
    }
    return true;
  }

  // Whether the group stores `node`'s value by its definition (store_nest), not by a nest of
  // its own (run's dispatch: gemm, convolution, scatter, pool and spmm nests) or batch
  // norm's statistics first.
  bool stored_by_definition(const Node& node) const {
    return !lowers_matmul_to_gemm(node) && !lowers_conv_to_gemm(node) && !is_scatter(node) &&
           node.op() != Op::max_pool_grad &&
           !(node.op() == Op::max_pool && lowering::max_pool_is_separable(node.attrs())) &&
           !is_transposed_spmm(node) && !stores_batch_statistics_first(node);
  }

  // For `node` (elementwise or broadcast, output of the product's shape, evaluated at an
  // element of the current block): whether its definition reads the product's block, or
  // nullopt when it reads something the block loop cannot provide (another element of the
  // product, or a value computed after it).
  std::optional<bool> block_reads(const Node& node, const Value& product,
                                  const GemmPlan& plan) const {
    bool reaches = false;
    for (const Value* input : node.inputs()) {
      const bool same_index = input->shape() == product.shape();
      if (input == &product) {
        reaches = true;
      } else if (!computed(input->producer())) {
        continue;  // a kernel input
      } else if (stored(input)) {
        if (position_.at(input) < position_.at(&product)) continue;  // computed before
        const bool earlier_epilogue =
            std::count(plan.epilogues.begin(), plan.epilogues.end(), input) != 0;
        if (!earlier_epilogue || !same_index) return std::nullopt;
        reaches = true;
      } else if (same_index && reads_at_own_index(input->producer()->def().fusion_kind)) {
        const std::optional<bool> inner = block_reads(*input->producer(), product, plan);
        if (!inner) return std::nullopt;
        reaches = reaches || *inner;
      } else if (!independent_of(*input->producer(), product)) {
        return std::nullopt;
      }
    }
    return reaches;
  }

  // Whether the inlined definition of `node` reads nothing computed at or after `product`.
  bool independent_of(const Node& node, const Value& product) const {
    return std::all_of(node.inputs().begin(), node.inputs().end(), [&](const Value* input) {
      if (input == &product) return false;
      if (!computed(input->producer())) return true;
      if (stored(input)) return position_.at(input) < position_.at(&product);
      return independent_of(*input->producer(), product);
    });
  }

  // Whether `node`'s definition, with its inlined producers, reads `value`.
  bool reads_through_inlining(const Node& node, const Value& value) const {
    return std::any_of(node.inputs().begin(), node.inputs().end(), [&](const Value* input) {
      if (input == &value) return true;
      return computed(input->producer()) && !stored(input) &&
             reads_through_inlining(*input->producer(), value);
    });
  }

  Expr load_from(const Value* value, const std::vector<Expr>& index) const {
    if (block_.value == value) {  // the current block of a block-local product
      const std::vector<Expr> leading(index.begin(), index.end() - 1);
      const Expr row = gemms_.at(value).fold_batch
                           ? row_major_offset(leading, Shape(std::vector<int64_t>(
                                                  value->shape().dims().begin(),
                                                  value->shape().dims().end() - 1)))
                           : leading.back();
      return load(block_.buffer,
                  (row - block_.row0) * value->shape().dims().back() + index.back());
    }
    const Buffer& buffer = buffers_.at(value);
    if (buffer.scope() == MemoryScope::global) return load(buffer, index);
    return load(buffer, row_major_offset(index, value->shape()));
  }

  // The accessor of `node`'s inputs: a load where the input is in a buffer, else the inlined
  // definition of its producer. Errors are kept in error_ (accessors return plain Exprs).
  InputAccessor accessor(const Node& node) {
    return [this, &node](int input, const std::vector<Expr>& index) -> Expr {
      const Value* value = node.input(input);
      if (buffers_.count(value) != 0 || block_.value == value) return load_from(value, index);
      Expected<Expr> element = element_of(*value, index);
      if (element) return std::move(element).value();
      if (error_.is_ok()) error_ = element.status();
      return make_zero(value->dtype());
    };
  }

  // The element of `value` at `index`, reading its producer's inputs through accessor():
  // the producer's compute definition, or for batch_norm_train's y the normalisation by the
  // statistics stored before it, and for its variance the deviations from the mean stored
  // before it (one pass over x less).
  Expected<Expr> element_of(const Value& value, const std::vector<Expr>& index) {
    const Node& node = *value.producer();
    if (stores_batch_statistics_first(node) && value.output_index() != 1) {
      const std::vector<TensorType> input_types = node.input_types();
      const std::vector<TensorType> output_types = node.output_types();
      const InputAccessor input = accessor(node);
      const ComputeArgs args{node.attrs(), input_types, output_types, value.output_index(),
                             index,        input,       names_};
      if (value.output_index() == 2) {
        return lowering::batch_norm_variance(args, load_from(node.output(1), {index[0]}));
      }
      return lowering::batch_norm_normalize(args, load_from(node.output(1), {index[1]}),
                                            load_from(node.output(2), {index[1]}));
    }
    return compute_element(node, value.output_index(), index, accessor(node), names_);
  }

  Expected<Stmt> store_nest(const Value& value) {
    std::vector<std::string> vars;
    const std::vector<Expr> index = fresh_index(value.shape().dims(), vars);
    KILN_ASSIGN_OR_RETURN(Expr element, element_of(value, index));
    KILN_RETURN_IF_ERROR(error_);
    return loop_nest(vars, value.shape().dims(), store_element(value, index, element));
  }

  // scatter_add in one pass: the output starts as a copy of data, then each update is added
  // where its index points, in the order of the indices (duplicates accumulate, so the loop
  // over the indices is serial; the trailing dims, contiguous, can be vectorized):
  //
  //   for (i...) out[i...] = data[i...]
  //   for (lead...) for (k...) let j = clamp(wrap(indices[k...])) in
  //     for (trail...) out[lead, j, trail] = out[lead, j, trail] + updates[lead, k, trail]
  //
  // An index out of range (an error in the interpreter) is clamped, as gather's.
  Expected<Stmt> scatter_nest(const Value& value) {
    const Node& node = *value.producer();
    const Shape& data = node.input(0)->shape();
    const Shape& indices = node.input(1)->shape();
    const int axis = lowering::axis_of(node.attrs().get_int("axis"), data.rank());
    const InputAccessor input = accessor(node);
    // The copy of data.
    std::vector<std::string> copy_vars;
    const std::vector<Expr> copy_index = fresh_index(data.dims(), copy_vars);
    const Stmt copy = loop_nest(copy_vars, data.dims(),
                                store_element(value, copy_index, input(0, copy_index)));
    // The updates.
    const std::vector<int64_t> lead(data.dims().begin(), data.dims().begin() + axis);
    const std::vector<int64_t> trail(data.dims().begin() + axis + 1, data.dims().end());
    std::vector<std::string> lead_vars, k_vars, trail_vars;
    const std::vector<Expr> a = fresh_index(lead, lead_vars);
    const std::vector<Expr> k = fresh_index(indices.dims(), k_vars);
    const std::vector<Expr> t = fresh_index(trail, trail_vars);
    const std::string j = names_.fresh("j");
    std::vector<Expr> target = a, source = a;
    target.push_back(var(j));
    source.insert(source.end(), k.begin(), k.end());
    target.insert(target.end(), t.begin(), t.end());
    source.insert(source.end(), t.begin(), t.end());
    const Stmt add = store_element(value, target, load_from(&value, target) + input(2, source));
    KILN_RETURN_IF_ERROR(error_);
    const int64_t extent = data.dim(axis);
    const Expr raw = cast(DType::i64, input(1, k));
    const Expr wrapped = lowering::clamp_index(select(raw < 0, raw + extent, raw), extent);
    const Stmt updates = loop_nest(
        lead_vars, lead,
        loop_nest(k_vars, indices.dims(), let_stmt(j, wrapped, loop_nest(trail_vars, trail, add))));
    return block({copy, updates});
  }

  // Fresh loop variables over `dims`, and the index they make.
  std::vector<Expr> fresh_index(const std::vector<int64_t>& dims, std::vector<std::string>& vars) {
    std::vector<Expr> index;
    for (size_t d = 0; d < dims.size(); ++d) {
      vars.push_back(names_.fresh("i"));
      index.push_back(var(vars.back()));
    }
    return index;
  }

  static Stmt loop_nest(const std::vector<std::string>& vars, const std::vector<int64_t>& dims,
                        Stmt body) {
    for (size_t d = vars.size(); d-- > 0;) body = for_loop(vars[d], 0, dims[d], body);
    return body;
  }

  // max_pool in two steps per output row (loop/lowering/pooling.cc), the first into a local
  // row the length of x's last dim, private to each iteration of the loops around it:
  //
  //   for (n, c, q0 ... q[s-2]) allocate row[W] {
  //     for (w) row[w] = max over the leading dims' taps of x[n, c, ..., w]
  //     for (q[s-1]) y[n, c, q...] = max over the last dim's taps of row[...] }
  Expected<Stmt> max_pool_nest(const Value& value) {
    const std::vector<int64_t>& out_dims = value.shape().dims();
    std::vector<std::string> vars;
    const std::vector<Expr> index = fresh_index(out_dims, vars);
    const PoolRow row = pool_row(*value.producer(), index);
    KILN_RETURN_IF_ERROR(error_);
    const Stmt reduce =
        for_loop(vars.back(), 0, out_dims.back(), store_element(value, index, row.window_max));
    const std::vector<std::string> outer_vars(vars.begin(), vars.end() - 1);
    const std::vector<int64_t> outer_dims(out_dims.begin(), out_dims.end() - 1);
    return loop_nest(outer_vars, outer_dims, allocate(row.buffer, block({row.fill, reduce})));
  }

  // The first step of a separable max pool (max_pool_is_separable) for the row of windows of
  // `window` ([n, c, *pooled]) without its last index: a local row of x's width, the fill that
  // stores the maximum over the leading dims' taps at each position of it (contiguous in x,
  // so it vectorizes), and the maximum of window `window` read from that row. `node` is a
  // max_pool or a max_pool_grad: both read x as input 0.
  struct PoolRow {
    Buffer buffer;
    Stmt fill;
    Expr window_max;
  };
  PoolRow pool_row(const Node& node, const std::vector<Expr>& window) {
    PoolRow row;
    row.buffer = Buffer::local(names_.fresh("row"), node.input(0)->dtype(),
                               node.input(0)->shape().dims().back());
    row.fill = fill_row(node, window, row.buffer,
                        [](const ComputeArgs& args, const std::vector<Expr>& partial, const Expr&) {
                          return lowering::max_pool_leading_max(args, partial);
                        });
    const std::vector<TensorType> input_types = node.input_types();
    const std::vector<TensorType> output_types = node.output_types();
    const InputAccessor input = accessor(node);
    const ComputeArgs args{node.attrs(), input_types, output_types, 0, window, input, names_};
    row.window_max = lowering::max_pool_last_max(
        args, [&](const std::vector<Expr>& at) { return load(row.buffer, at.back()); });
    return row;
  }

  // A loop over the positions w of x's last dim storing into `buffer`[w] the value `element`
  // gives at the partial index [n, c, leading pooled indices of `window`, w], with `node`'s
  // args at that index.
  using RowElement = std::function<Expr(const ComputeArgs& args, const std::vector<Expr>& partial,
                                        const Expr& w)>;
  Stmt fill_row(const Node& node, const std::vector<Expr>& window, const Buffer& buffer,
                const RowElement& element) {
    const std::vector<TensorType> input_types = node.input_types();
    const std::vector<TensorType> output_types = node.output_types();
    const InputAccessor input = accessor(node);
    const std::string w = names_.fresh("i");
    std::vector<Expr> partial(window.begin(), window.end() - 1);
    partial.push_back(var(w));
    const ComputeArgs args{node.attrs(), input_types, output_types, 0, partial, input, names_};
    return for_loop(w, 0, node.input(0)->shape().dims().back(),
                    store(buffer, var(w), element(args, partial, var(w))));
  }

  // max_pool_grad as the interpreter computes it, a scatter: per image and channel, dx is
  // zeroed, then each window of x, in order, adds its dy element at its first maximum
  // (loop/lowering/pooling.cc):
  //
  //   for (n, c) { for (p...) dx[n, c, p] = 0
  //                for (q...) let a = argmax(window q of x[n, c]) in
  //                  dx[n, c, position of tap a] = dx[n, c, position of tap a] + dy[n, c, q] }
  //
  // Windows overlap (3x3 at stride 2), so the loop over them stays serial; images and channels
  // are independent. The gather definition found, for every dx element, each window that might
  // route to it (4 per element for ResNet's pool, each a guarded argmax lookup). When the pool
  // is separable (max_pool_is_separable), each window's maximum is found in two steps as
  // max_pool's is, per row of windows, the first into a row of x's width that loads x
  // contiguously and vectorizes; so is the argmax, the first leading tap equal to that row's
  // maximum, into a second row; each window's argmax then reads the K columns of both rows
  // (lowering::max_pool_last_argmax) instead of the whole window of x:
  //
  //   for (n, c, q0 ... q[s-2]) allocate row[W], first[W] {
  //     for (w) row[w] = max over the leading dims' taps of x[n, c, ..., w]
  //     for (w) first[w] = first leading tap of x[n, c, ..., w] equal to row[w] (or NaN)
  //     for (q[s-1]) let m = max over the last dim's taps of row[...] in
  //                  let a = least first[col] * K + k over the columns col (tap k) of
  //                          window q where row[col] equals m (or is NaN) in
  //                  dx[...] += dy[n, c, q] }
  Expected<Stmt> max_pool_grad_nest(const Value& value) {
    const Node& node = *value.producer();
    const std::vector<TensorType> input_types = node.input_types();
    const std::vector<TensorType> output_types = node.output_types();
    const Shape& windows = node.input(1)->shape();
    const InputAccessor input = accessor(node);
    const bool separable = lowering::max_pool_is_separable(node.attrs());

    std::vector<std::string> plane_vars;
    const std::vector<int64_t> planes(value.shape().dims().begin(), value.shape().dims().begin() + 2);
    const std::vector<Expr> plane = fresh_index(planes, plane_vars);
    const auto spatial = [](const Shape& shape) {
      return std::vector<int64_t>(shape.dims().begin() + 2, shape.dims().end());
    };

    std::vector<std::string> zero_vars;
    std::vector<Expr> zero_index = plane;
    for (const Expr& e : fresh_index(spatial(value.shape()), zero_vars)) zero_index.push_back(e);
    const Stmt zero = loop_nest(zero_vars, spatial(value.shape()),
                                store_element(value, zero_index, make_zero(value.dtype())));

    std::vector<std::string> window_vars;
    std::vector<Expr> window = plane;
    for (const Expr& e : fresh_index(spatial(windows), window_vars)) window.push_back(e);
    const ComputeArgs args{node.attrs(), input_types, output_types, 0, window, input, names_};
    const std::string tap = names_.fresh("a");
    const std::vector<Expr> target = lowering::max_pool_tap_position(args, window, var(tap));
    const Stmt add = store_element(value, target, load_from(&value, target) + input(1, window));
    Stmt scatter;
    if (!separable) {
      scatter = loop_nest(window_vars, spatial(windows),
                          let_stmt(tap, lowering::max_pool_window_argmax(args, window), add));
    } else {
      const PoolRow row = pool_row(node, window);
      const Buffer first =
          Buffer::local(names_.fresh("first"), DType::i64, node.input(0)->shape().dims().back());
      const Stmt first_fill = fill_row(
          node, window, first,
          [&](const ComputeArgs& row_args, const std::vector<Expr>& partial, const Expr& w) {
            return lowering::max_pool_leading_argmax(row_args, partial, load(row.buffer, w));
          });
      const std::string max = names_.fresh("m");
      const Expr argmax = lowering::max_pool_last_argmax(
          args, var(max, value.dtype()),
          [&](const std::vector<Expr>& at) { return load(row.buffer, at.back()); },
          [&](const std::vector<Expr>& at) { return load(first, at.back()); });
      const Stmt per_window = for_loop(window_vars.back(), 0, windows.dims().back(),
                                       let_stmt(max, row.window_max, let_stmt(tap, argmax, add)));
      const std::vector<std::string> row_vars(window_vars.begin(), window_vars.end() - 1);
      const std::vector<int64_t> rows(windows.dims().begin() + 2, windows.dims().end() - 1);
      scatter = loop_nest(row_vars, rows,
                          allocate(row.buffer, allocate(first, block({row.fill, first_fill,
                                                                      per_window}))));
    }
    KILN_RETURN_IF_ERROR(error_);
    return loop_nest(plane_vars, planes, block({zero, scatter}));
  }

  // spmm with the sparse matrix A [M, K] transposed, out [K, N] = A^T dense, as one pass over
  // the non-zeros in CSR order (the interpreter's order, so every output element sums its
  // terms in the same order):
  //
  //   for (c, j) out[c, j] = 0
  //   for (r, 0, M) for (i, row_ptr[r], row_ptr[r + 1] - row_ptr[r])
  //     let col = clamp(col_indices[i]) in for (j, 0, N) out[col, j] += values[i] * dense[r, j]
  //
  // The loop over non-zeros stays serial (two may name the same column); the loop over N, a
  // row of dense and of out, vectorizes. Indices are clamped as the gather definition clamps
  // them, so a malformed CSR structure reads and writes inside the buffers.
  Expected<Stmt> spmm_scatter_nest(const Value& value) {
    const Node& node = *value.producer();
    const InputAccessor input = accessor(node);
    const int64_t rows = node.input(0)->shape().dim(0) - 1;
    const int64_t nnz = node.input(2)->shape().dim(0);
    const int64_t cols = value.shape().dim(0), n = value.shape().dim(1);

    std::vector<std::string> zero_vars;
    const std::vector<Expr> zero_index = fresh_index(value.shape().dims(), zero_vars);
    const Stmt zero = loop_nest(zero_vars, value.shape().dims(),
                                store_element(value, zero_index, make_zero(value.dtype())));

    const std::string r = names_.fresh("i"), i = names_.fresh("i"), j = names_.fresh("i");
    const std::string safe = names_.fresh("s"), col = names_.fresh("c");
    const auto row_start = [&](const Expr& row) { return cast(DType::i64, input(0, {row})); };
    const std::vector<Expr> target = {var(col), var(j)};
    const Stmt add = store_element(
        value, target,
        load_from(&value, target) + input(2, {var(safe)}) * input(3, {var(r), var(j)}));
    const Expr column = lowering::clamp_index(cast(DType::i64, input(1, {var(safe)})), cols);
    const Stmt per_nonzero =
        let_stmt(safe, lowering::clamp_index(var(i), nnz),
                 let_stmt(col, column, for_loop(j, 0, n, add)));
    KILN_RETURN_IF_ERROR(error_);
    const Stmt scatter = for_loop(
        r, 0, rows,
        for_loop(i, row_start(var(r)), row_start(var(r) + 1) - row_start(var(r)), per_nonzero));
    return block({zero, scatter});
  }

  // A convolution as im2col and gemm statements (loop/lower_conv.h), with its epilogues on
  // each image's block of the output:
  //
  //   for (n, g) { im2col; gemm; for (o, 0, C/groups) for (p...) epilogue stores at
  //                                                                  [n, g*C/groups + o, p...] }
  Expected<Stmt> conv_nest(const Value& value) {
    const Node& node = *value.producer();
    ConvEpilogue epilogue;
    auto plan = gemms_.find(&value);
    if (plan != gemms_.end() && !plan->second.epilogues.empty()) {
      const int64_t groups =
          lowering::conv_params(node.attrs(), value.rank() - 2).groups;
      const int64_t channels = value.shape().dim(1) / groups;
      std::vector<int64_t> extents = {channels};
      extents.insert(extents.end(), value.shape().dims().begin() + 2, value.shape().dims().end());
      epilogue = [&, channels, extents](const Expr& n, const Expr& g) {
        std::vector<std::string> vars;
        std::vector<Expr> index = fresh_index(extents, vars);
        index.front() = g * channels + index.front();
        index.insert(index.begin(), n);
        Expected<Stmt> stores = epilogue_stores(plan->second.epilogues, index);
        if (!stores) {
          if (error_.is_ok()) error_ = stores.status();
          return no_op();
        }
        return loop_nest(vars, extents, std::move(stores).value());
      };
    }
    Stmt nest = conv_as_gemm(node, buffers_.at(node.input(0)), buffers_.at(node.input(1)),
                             buffers_.at(&value), names_, epilogue);
    KILN_RETURN_IF_ERROR(error_);
    return nest;
  }

  // Stores `element` of `value` at `index` in its buffer: a parameter by its shape, a local
  // (one flat array) row-major.
  Stmt store_element(const Value& value, const std::vector<Expr>& index, Expr element) const {
    const Buffer& buffer = buffers_.at(&value);
    const Expr offset = buffer.scope() == MemoryScope::global
                            ? element_offset(buffer, index)
                            : row_major_offset(index, value.shape());
    return store(buffer, offset, std::move(element));
  }

  // The matmul `product` as gemm statements:
  //
  //   for (batch...) for (rb, 0, ceil(M / R)) [allocate blk[R*N] in local] {
  //     gemm(min(R, M - rb*R), N, K) c[...] = a[...] * b[...]
  //     for (r, 0, min(R, M - rb*R)) for (c, 0, N) { epilogue stores at [batch, rb*R + r, c] }
  //   }
  //
  // Broadcast batch dims of A and B read batch index 0 (NumPy broadcasting, as the reduce
  // definition reads them); a transposed A's row block starts at column rb*R of the stored A.
  Expected<Stmt> gemm_nest(const Value& product, const GemmPlan& plan) {
    const Node& node = *product.producer();
    const Shape& a = node.input(0)->shape();
    const Shape& b = node.input(1)->shape();
    const bool ta = node.attrs().get_bool("transpose_a");
    const bool tb = node.attrs().get_bool("transpose_b");
    const int rank = product.rank();
    const int64_t m = gemm_rows(product.shape(), plan), n = product.shape().dim(rank - 1);
    const int64_t k = gemm_depth(node);
    const int64_t rows = plan.block_rows;

    std::vector<std::string> batch_vars;
    std::vector<Expr> batch;  // empty when folded: matrix 0 holds every row
    for (int d = 0; d < (plan.fold_batch ? 0 : rank - 2); ++d) {
      batch_vars.push_back(names_.fresh("i"));
      batch.push_back(var(batch_vars.back()));
    }
    const std::string block_var = names_.fresh("i");
    const Expr row0 = var(block_var) * rows;
    const Expr block_m = min(Expr(rows), Expr(m) - row0);
    // Offset of matrix (batch index) in a row-major operand of `shape` (matrix 0 when folded).
    const auto matrix_base = [&](const Shape& shape) {
      if (plan.fold_batch) return Expr(0);
      std::vector<Expr> index = lowering::broadcast_index(
          batch, Shape(std::vector<int64_t>(shape.dims().begin(), shape.dims().end() - 2)));
      index.push_back(0);
      index.push_back(0);
      return row_major_offset(index, shape);
    };
    // BLAS wants leading dimensions of at least 1, even for an operand with no columns (k or
    // n = 0), whose elements are never read.
    const int64_t lda = std::max<int64_t>(a.dims().back(), 1);
    const MatrixRegion a_region{buffers_.at(node.input(0)),
                                matrix_base(a) + (ta ? row0 : row0 * lda), lda};
    const MatrixRegion b_region{buffers_.at(node.input(1)), matrix_base(b),
                                std::max<int64_t>(b.dims().back(), 1)};
    Buffer block_buffer;
    MatrixRegion c_region;
    if (plan.block_local) {
      block_buffer = Buffer::local(names_.fresh("blk"), product.dtype(),
                                   std::max<int64_t>(rows * n, 1));
      c_region = {block_buffer, 0, std::max<int64_t>(n, 1)};
    } else {
      c_region = {buffers_.at(&product), matrix_base(product.shape()) + row0 * n,
                  std::max<int64_t>(n, 1)};
    }
    Stmt body = gemm({.a = a_region,
                      .b = b_region,
                      .c = c_region,
                      .transpose_a = ta,
                      .transpose_b = tb,
                      .m = block_m,
                      .n = n,
                      .k = k,
                      .accumulate = false});
    if (!plan.epilogues.empty()) {
      if (plan.block_local) block_ = {&product, block_buffer, row0};
      Expected<Stmt> epilogue = epilogue_nest(product, plan, batch, row0, block_m, n);
      block_ = {};
      if (!epilogue) return epilogue.status();
      body = block({body, std::move(epilogue).value()});
    }
    if (plan.block_local) body = allocate(block_buffer, body);
    body = for_loop(block_var, 0, (m + rows - 1) / rows, body);
    for (int d = static_cast<int>(batch_vars.size()) - 1; d >= 0; --d) {
      body = for_loop(batch_vars[static_cast<size_t>(d)], 0, product.shape().dim(d), body);
    }
    return body;
  }

  // One loop nest over the block's rows and columns storing every epilogue value, in order
  // (a later epilogue may load an earlier one's element, stored just before). With row
  // epilogues (GemmPlan::row_epilogues), each row of the block stores its epilogues in
  // order: a value of the row's shape at the row, and values of the product's shape in loops
  // over the row's columns, a row epilogue starting a loop of its own (it may read an earlier
  // value at columns a shared loop would not have stored yet), an elementwise one joining
  // the loop before it:
  //
  //   for (r, 0, block rows) { s[r] = sum over c of ...; for (c, 0, N) { y[r, c] = ... } }
  Expected<Stmt> epilogue_nest(const Value& product, const GemmPlan& plan,
                               const std::vector<Expr>& batch, const Expr& row0,
                               const Expr& block_m, int64_t n) {
    const std::string row_var = names_.fresh("i"), col_var = names_.fresh("i");
    std::vector<Expr> row = batch;
    if (plan.fold_batch) {
      row = unfold_row(row0 + var(row_var), product.shape());
    } else {
      row.push_back(row0 + var(row_var));
    }
    std::vector<Expr> index = row;
    index.push_back(var(col_var));
    if (plan.row_epilogues.empty()) {
      KILN_ASSIGN_OR_RETURN(Stmt stores, epilogue_stores(plan.epilogues, index));
      return for_loop(row_var, 0, block_m, for_loop(col_var, 0, n, std::move(stores)));
    }
    std::vector<Stmt> per_row;
    std::vector<const Value*> columns;  // consecutive values of the product's shape
    const auto flush_columns = [&]() -> Status {
      if (columns.empty()) return Status::ok();
      KILN_ASSIGN_OR_RETURN(Stmt stores, epilogue_stores(columns, index));
      per_row.push_back(for_loop(col_var, 0, n, std::move(stores)));
      columns.clear();
      return Status::ok();
    };
    for (const Value* value : plan.epilogues) {
      if (value->shape() == product.shape()) {
        if (plan.row_epilogues.contains(value)) KILN_RETURN_IF_ERROR(flush_columns());
        columns.push_back(value);
        continue;
      }
      KILN_RETURN_IF_ERROR(flush_columns());
      std::vector<Expr> at = row;
      if (value->rank() == product.rank()) at.push_back(0);  // the row's shape with a last dim of 1
      KILN_ASSIGN_OR_RETURN(Stmt store, epilogue_stores({value}, at));
      per_row.push_back(std::move(store));
    }
    KILN_RETURN_IF_ERROR(flush_columns());
    return for_loop(row_var, 0, block_m, block(std::move(per_row)));
  }

  // The stores of `values` at `index`, in order (a later epilogue may load an earlier one's
  // element, stored just before).
  Expected<Stmt> epilogue_stores(const std::vector<const Value*>& values,
                                 const std::vector<Expr>& index) {
    std::vector<Stmt> stores;
    for (const Value* value : values) {
      const Node& node = *value->producer();
      KILN_ASSIGN_OR_RETURN(Expr element, compute_element(node, value->output_index(), index,
                                                          accessor(node), names_));
      KILN_RETURN_IF_ERROR(error_);
      stores.push_back(store_element(*value, index, element));
    }
    return block(std::move(stores));
  }

  // The block of a block-local product while its epilogue is built (`value` null otherwise):
  // loads of the product read `buffer` at (row - row0) * N + column, where a folded batch
  // (its GemmPlan's fold_batch) counts rows across matrices.
  struct BlockView {
    const Value* value = nullptr;
    Buffer buffer = {};
    Expr row0 = {};
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
  Status error_ = Status::ok();
};

}  // namespace

Expected<LoweredGroup> lower_group(const Graph& graph, std::span<Node* const> nodes,
                                   const LowerGroupOptions& options) {
  return GroupLowerer(graph, nodes, options).run(nodes.size());
}

}  // namespace kiln::loop
