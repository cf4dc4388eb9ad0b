// Gemm plans (loop/lowering/gemm.h): which stored values ride on a product's blocks, and
// where the product lives.
//
// An epilogue of a product is a stored value that can be computed block by block right after
// the gemm, while the block is in cache: a value of the product's shape produced by
// elementwise or broadcast ops that read the product (or an earlier epilogue) only at their
// own index, through a chain of such ops, and read nothing else that is computed after the
// product. A matmul also takes row epilogues (is_row_epilogue). When every stored value that
// reads an internal product is an epilogue, the product needs no full buffer.
#include <algorithm>
#include <map>
#include <optional>

#include "loop/lowering/gemm.h"
#include "loop/simplify.h"
#include "loop/tuning.h"

namespace kiln::loop::lowering {
namespace {

class EpiloguePlanner {
 public:
  EpiloguePlanner(const Value& product, const GroupContext& group)
      : product_(product), group_(group) {}

  // The epilogues among the stored values after the product; row epilogues too when
  // `rows` (a matmul's blocks hold whole rows; a convolution's hold channels of an image).
  GemmPlan plan(bool rows) {
    GemmPlan plan;
    const std::span<const Value* const> stored = group_.stored_values();
    for (size_t s = position(product_) + 1; s < stored.size(); ++s) {
      const Value* candidate = stored[s];
      if (group_.claimed_as_epilogue(*candidate)) continue;
      const bool elementwise = is_epilogue(*candidate, plan);
      if (!elementwise && (!rows || !is_row_epilogue(*candidate, plan))) continue;
      plan.epilogues.push_back(candidate);
      if (!elementwise) plan.row_epilogues.insert(candidate);
    }
    return plan;
  }

  // Whether only the plan's epilogues read the product, so it needs no full buffer.
  bool read_only_by_epilogues(const GemmPlan& plan) const {
    const std::span<const Value* const> stored = group_.stored_values();
    return !group_.used_outside(product_) &&
           std::none_of(stored.begin(), stored.end(), [&](const Value* other) {
             return other != &product_ && std::ranges::count(plan.epilogues, other) == 0 &&
                    group_.reads_through_inlining(*other->producer(), product_);
           });
  }

 private:
  size_t position(const Value& value) const { return *group_.stored_position(value); }
  bool stored(const Value& value) const { return group_.stored_position(value).has_value(); }
  bool computed(const Value& value) const { return group_.computes(value); }

  bool is_epilogue(const Value& candidate, const GemmPlan& plan) const {
    const Node& node = *candidate.producer();
    if (!reads_at_own_index(node.def().fusion_kind) || candidate.shape() != product_.shape()) {
      return false;
    }
    return block_reads(node, plan).value_or(false);
  }

  // A row epilogue of a matmul's product: a value its own definition stores (no store nest),
  // of the product's shape or of its rows' (the last dim dropped or 1), whose definition,
  // with its inlined producers, reads the product or an earlier epilogue, and reads them only
  // in its own row (at any column: a row's maximum, sum or mean), and reads nothing else
  // computed after the product. A block holds whole rows, so the value can be stored row by
  // row right after the gemm, while the block is in cache: attention's softmax and its
  // gradient, a layer norm after a projection.
  bool is_row_epilogue(const Value& candidate, const GemmPlan& plan) {
    const Node& node = *candidate.producer();
    if (!group_.stored_by_definition(node)) return false;
    const std::vector<int64_t>& dims = product_.shape().dims();
    std::vector<int64_t> rows(dims.begin(), dims.end() - 1);
    std::vector<int64_t> kept = rows;
    kept.push_back(1);
    const std::vector<int64_t>& shape = candidate.shape().dims();
    if (shape != dims && shape != rows && shape != kept) return false;
    RowProbe probe;
    probe.plan = &plan;
    const std::vector<Expr> index = symbolic_index(candidate.rank(), probe_names_);
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
      if (value == &product_ || std::ranges::count(probe.plan->epilogues, value) != 0) {
        probe.reaches = true;
        probe.row_local = probe.row_local && in_row(index, probe);
        return stand_in;
      }
      if (!computed(*value)) return stand_in;  // a kernel input
      if (stored(*value)) {
        probe.row_local = probe.row_local && position(*value) < position(product_);
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

  // For `node` (elementwise or broadcast, output of the product's shape, evaluated at an
  // element of the current block): whether its definition reads the product's block, or
  // nullopt when it reads something the block loop cannot provide (another element of the
  // product, or a value computed after it).
  std::optional<bool> block_reads(const Node& node, const GemmPlan& plan) const {
    bool reaches = false;
    for (const Value* input : node.inputs()) {
      const bool same_index = input->shape() == product_.shape();
      if (input == &product_) {
        reaches = true;
      } else if (!computed(*input)) {
        continue;  // a kernel input
      } else if (stored(*input)) {
        if (position(*input) < position(product_)) continue;  // computed before
        const bool earlier_epilogue = std::ranges::count(plan.epilogues, input) != 0;
        if (!earlier_epilogue || !same_index) return std::nullopt;
        reaches = true;
      } else if (same_index && reads_at_own_index(input->producer()->def().fusion_kind)) {
        const std::optional<bool> inner = block_reads(*input->producer(), plan);
        if (!inner) return std::nullopt;
        reaches = reaches || *inner;
      } else if (!independent_of(*input->producer())) {
        return std::nullopt;
      }
    }
    return reaches;
  }

  // Whether the inlined definition of `node` reads nothing computed at or after the product.
  bool independent_of(const Node& node) const {
    return std::all_of(node.inputs().begin(), node.inputs().end(), [&](const Value* input) {
      if (input == &product_) return false;
      if (!computed(*input)) return true;
      if (stored(*input)) return position(*input) < position(product_);
      return independent_of(*input->producer());
    });
  }

  const Value& product_;
  const GroupContext& group_;
  NameGenerator probe_names_;  // for definitions built only to be inspected
};

// Rows of C per gemm call when epilogues read the block back (loop/tuning.h). A product of
// at most kWholeProductBytes is one call: the epilogue then reads it from the last-level
// cache, and OpenBLAS packs B once (each call packs all of B again, and calls of few rows run
// below the library's rate). Larger products are cut into blocks near kGemmBlockBytes, at
// least kMinGemmBlockRows rows, so that a block is still in cache when its epilogue reads
// it; but only when a block has at least K rows: each call packs B's K x N elements again,
// which costs more than reading the block's R x N back from memory when R < K (bert-base's
// vocabulary projection, K = 768 and N = 30522). Without an epilogue nothing reads the block
// while it is hot, so one call covers every row.
int64_t block_rows(const Value& product, const GemmPlan& plan, const LowerGroupOptions& options) {
  const int rank = product.rank();
  const int64_t m = gemm_rows(product.shape(), plan), n = product.shape().dim(rank - 1);
  const int64_t row_bytes = std::max<int64_t>(n, 1) * dtype_size_bytes(product.dtype());
  int64_t rows = m;
  if (options.gemm_block_rows > 0 && !plan.epilogues.empty()) {
    rows = options.gemm_block_rows;
  } else if (!plan.epilogues.empty() && m * row_bytes > kWholeProductBytes) {
    rows = std::max(kGemmBlockBytes / row_bytes, kMinGemmBlockRows);
    if (rows < gemm_depth(*product.producer())) rows = m;
  }
  return std::clamp<int64_t>(rows, 1, std::max<int64_t>(m, 1));
}

// Whether a product read only by its epilogues can be written into its last epilogue's
// buffer instead of a block of its own: when the types agree and no epilogue reads a row
// (a row epilogue reads the product at other columns of its row, which the last epilogue's
// stores would already have overwritten). The elementwise epilogues run element by element
// in order and read the product only at their own element, so every one of them has read an
// element before the last overwrites it. The kernel then needs no scratch (a ViT-base matmul
// + bias + gelu needed 14 MiB, which the memory bound refused, so the gelu ran as a kernel of
// its own) and moves the product through memory once less.
bool fits_last_epilogue(const Value& product, const GemmPlan& plan) {
  return !plan.epilogues.empty() && plan.row_epilogues.empty() &&
         plan.epilogues.back()->dtype() == product.dtype();
}

}  // namespace

GemmPlan plan_matmul_epilogues(const Value& product, const GroupContext& group) {
  EpiloguePlanner planner(product, group);
  GemmPlan plan = planner.plan(/*rows=*/true);
  if (planner.read_only_by_epilogues(plan)) {
    plan.storage = fits_last_epilogue(product, plan) ? ProductStorage::last_epilogue
                                                     : ProductStorage::block_buffer;
  }
  plan.fold_batch = can_fold_batch(*product.producer());
  plan.block_rows = block_rows(product, plan, group.options());
  return plan;
}

// A convolution has no block buffer: without an epilogue of its type to hold it, it is
// stored in full.
GemmPlan plan_conv_epilogues(const Value& product, const GroupContext& group) {
  EpiloguePlanner planner(product, group);
  GemmPlan plan = planner.plan(/*rows=*/false);
  if (planner.read_only_by_epilogues(plan) && fits_last_epilogue(product, plan)) {
    plan.storage = ProductStorage::last_epilogue;
  }
  return plan;
}

int64_t gemm_depth(const Node& matmul) {
  const Shape& a = matmul.input(0)->shape();
  return matmul.attrs().get_bool("transpose_a") ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
}

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

int64_t gemm_rows(const Shape& product, const GemmPlan& plan) {
  const int rank = product.rank();
  if (!plan.fold_batch) return product.dim(rank - 2);
  int64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= product.dim(d);
  return rows;
}

}  // namespace kiln::loop::lowering
