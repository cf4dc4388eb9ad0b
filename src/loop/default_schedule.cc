#include "loop/default_schedule.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loop/bounds.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/schedule_analysis.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/tuning.h"

namespace kiln::loop {
namespace {

// The thresholds (loop/tuning.h): below kMinParallelWork operations a nest finishes in a few
// microseconds, about what waking an OpenMP thread team costs. kIterationsPerCore parallel
// iterations per core balance cores that finish unevenly. A libm call (exp, erf, tanh, ...)
// costs about as much as kMathCallWork simple operations: gelu over 8K elements is worth two
// cores, an add over 8K elements is not. Rule 2a accumulates at most kMaxAccumulatedColumns
// columns per block: 4 KiB of f32 accumulators each.

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

// The most iterations a loop of this extent runs: the constant, else the upper bound interval
// analysis proves (a gemm block loop's min(R, M - r*R) runs at most R), else 1.
int64_t extent_bound(const Expr& extent) {
  if (const std::optional<int64_t> value = as_const_int(extent))
    return std::max<int64_t>(*value, 0);
  const Interval bounds = bounds_of(extent, {});
  return bounds.max ? std::max<int64_t>(*bounds.max, 1) : 1;
}

// Reduction steps an expression takes (a reduction's steps times its body's, plus one each)
// and its math-library calls, kMathCallWork each.
// The constants that conditions in a statement compare `var` with, as the points where their
// value can change: `var < 256` and `var >= 256` change at 256, `var <= 255` and `var > 255`
// at 256 too.
class ComparisonPoints : public IRVisitor {
 public:
  explicit ComparisonPoints(std::string_view var) : var_(var) {}
  std::set<int64_t> points;

 protected:
  void visit_binary(const Binary& node) override {
    const Variable* variable = node.a.as<Variable>();
    const std::optional<int64_t> constant = as_const_int(node.b);
    if (variable != nullptr && variable->name == var_ && constant) {
      if (node.op == BinaryOp::lt || node.op == BinaryOp::ge) points.insert(*constant);
      if (node.op == BinaryOp::le || node.op == BinaryOp::gt) points.insert(*constant + 1);
    }
    IRVisitor::visit_binary(node);
  }

 private:
  std::string_view var_;
};

class ExprWork : public IRVisitor {
 public:
  int64_t work = 0;

 protected:
  void visit_call(const Call& node) override {
    if (is_math_call(node.intrinsic)) {
      work = saturating_add(work, saturating_mul(scale_, kMathCallWork));
    }
    IRVisitor::visit_call(node);
  }

  void visit_reduce(const Reduce& node) override {
    const int64_t saved = scale_;
    scale_ = saturating_mul(scale_, extent_bound(node.extent));
    work = saturating_add(work, scale_);
    visit(node.body);
    scale_ = saved;
  }

 private:
  int64_t scale_ = 1;
};

int64_t expr_work(const Expr& e) {
  ExprWork counter;
  counter.visit(e);
  return counter.work;
}

// Operations a statement performs: a store or a let counts one plus its reductions' steps,
// a loop its extent times its body (unknown extents count once).
int64_t stmt_work(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::for_loop: {
      const auto* loop = s.as<For>();
      return saturating_mul(extent_bound(loop->extent), stmt_work(loop->body));
    }
    case StmtKind::store:
      return saturating_add(1, expr_work(s.as<Store>()->value));
    case StmtKind::let_stmt: {
      const auto* let = s.as<LetStmt>();
      return saturating_add(saturating_add(1, expr_work(let->value)), stmt_work(let->body));
    }
    case StmtKind::allocate:
      return stmt_work(s.as<Allocate>()->body);
    case StmtKind::if_then_else: {
      const auto* node = s.as<IfThenElse>();
      return saturating_add(stmt_work(node->then_case),
                            node->else_case.defined() ? stmt_work(node->else_case) : 0);
    }
    case StmtKind::block: {
      int64_t total = 0;
      for (const Stmt& child : s.as<Block>()->stmts)
        total = saturating_add(total, stmt_work(child));
      return total;
    }
    default:
      return 1;  // a statement kind this scheduler does not know
  }
}

// The loop nests to schedule: the top-level loops, except that a loop holding a gemm (a
// matmul's block loop, a convolution's image loop) is left as it is and the nests beside the
// gemm inside it (epilogues, im2col) are scheduled instead; the analysis treats a gemm as
// opaque, so the loops around one could take no directive anyway. In order. The nests inside
// a parallel loop (lowering's parallel batch of small gemms, loop/lowering/gemm.h) go to
// `in_parallel` as well: each runs on one thread already.
void top_level_loops(const Stmt& s, std::vector<std::string>& out,
                     std::set<std::string, std::less<>>& in_parallel,
                     bool parallel_around = false) {
  if (const auto* loop = s.as<For>()) {
    if (contains_gemm(loop->body)) {
      top_level_loops(loop->body, out, in_parallel,
                      parallel_around || loop->for_kind == ForKind::parallel);
    } else {
      out.push_back(loop->var);
      if (parallel_around) in_parallel.insert(loop->var);
    }
  } else if (const auto* seq = s.as<Block>()) {
    for (const Stmt& child : seq->stmts) top_level_loops(child, out, in_parallel, parallel_around);
  } else if (const auto* alloc = s.as<Allocate>()) {
    top_level_loops(alloc->body, out, in_parallel, parallel_around);
  } else if (const auto* let = s.as<LetStmt>()) {
    top_level_loops(let->body, out, in_parallel, parallel_around);
  }
}

// Skips the let_stmts and allocations at the top of a loop body.
const Stmt& skip_bindings(const Stmt& s) {
  if (const auto* let = s.as<LetStmt>()) return skip_bindings(let->body);
  if (const auto* alloc = s.as<Allocate>()) return skip_bindings(alloc->body);
  return s;
}

// The variables the reductions in `body`'s stored values read, a let expression's name standing
// for what its value reads; empty when there are none.
std::set<std::string, std::less<>> reduction_vars(const Stmt& body) {
  class Finder : public IRVisitor {
   public:
    std::set<std::string, std::less<>> vars;

   protected:
    void visit_let(const Let& node) override {
      for (const std::string& name : free_vars(node.value)) meaning_[node.name].insert(name);
      IRVisitor::visit_let(node);
    }
    void visit_reduce(const Reduce& node) override {
      const Expr whole =
          reduce(node.op, node.var, node.min, node.extent, node.body, node.vectorized);
      for (const std::string& name : free_vars(whole)) add(name);
    }

   private:
    void add(const std::string& name) {
      if (!vars.insert(name).second) return;
      if (auto it = meaning_.find(name); it != meaning_.end()) {
        for (const std::string& read : it->second) add(read);
      }
    }
    std::map<std::string, std::set<std::string>, std::less<>> meaning_;
  } finder;
  finder.visit(body);
  return finder.vars;
}

// Whether the prelude gives `intrinsic` a vector body when the target has vector math: every
// math call but pow (exp, log, erf, tanh, sin and cos are declared SIMD, sigmoid calls exp).
// A call without one would only keep the loop scalar, not change its result.
bool has_vector_variant(Intrinsic intrinsic) { return intrinsic != Intrinsic::pow; }

// Whether `body`, the body of a reduction over `var`, runs well in vector lanes (see Rule 4
// below): no reduction inside, no math-library call without a vector body, and every load
// contiguous in `var` or invariant, with no index through a let bound inside the body.
bool vectorizable_reduction_body(const Expr& body, const std::string& var, bool vector_math) {
  class Checker : public IRVisitor {
   public:
    Checker(const std::string& v, bool vector_math) : var_(v), vector_math_(vector_math) {}
    bool ok = true;

   protected:
    void visit_reduce(const Reduce&) override { ok = false; }
    void visit_call(const Call& node) override {
      ok = ok &&
           (!is_math_call(node.intrinsic) || (vector_math_ && has_vector_variant(node.intrinsic)));
      IRVisitor::visit_call(node);
    }
    void visit_let(const Let& node) override {
      visit(node.value);
      lets_.push_back(node.name);
      visit(node.body);
      lets_.pop_back();
    }
    void visit_load(const Load& node) override {
      const std::optional<int64_t> stride = stride_of(node.index, var_);
      ok = ok && stride && (*stride == 0 || *stride == 1);
      for (const std::string& name : free_vars(node.index)) {
        ok = ok && std::find(lets_.begin(), lets_.end(), name) == lets_.end();
      }
      IRVisitor::visit_load(node);
    }

   private:
    const std::string& var_;
    bool vector_math_;
    std::vector<std::string> lets_;
  } checker(var, vector_math);
  checker.visit(body);
  return checker.ok;
}

// Whether `leaf`'s body begins with stores of serial reductions that walk down columns: a
// load strided along the reduction's variable (neither 0 nor 1) that is contiguous along
// `columns`, the leaf's variable or a loop's around it (Rule 2a below).
bool reduces_columns(const For& leaf, std::string_view columns) {
  const std::vector<Stmt> stmts = flatten_blocks(leaf.body);
  const auto* store_stmt = stmts.empty() ? nullptr : stmts[0].as<Store>();
  const auto* reduction = store_stmt != nullptr ? store_stmt->value.as<Reduce>() : nullptr;
  if (reduction == nullptr || reduction->vectorized) return false;
  for (const Access& access : collect_accesses(stmts[0], {}).list) {
    if (access.is_store) continue;
    const std::optional<int64_t> along_terms = stride_of(access.index, reduction->var);
    if (along_terms != 0 && along_terms != 1 && stride_of(access.index, columns) == 1) {
      return true;
    }
  }
  return false;
}

// The variables of the reductions Rule 4 vectorizes, in order of first appearance.
std::vector<std::string> reductions_to_vectorize(const Stmt& body, bool vector_math) {
  class Finder : public IRVisitor {
   public:
    explicit Finder(bool vector_math) : vector_math_(vector_math) {}
    std::vector<std::string> vars;

   protected:
    void visit_for(const For& node) override {
      const bool outer = in_vector_loop_;
      in_vector_loop_ = outer || node.for_kind == ForKind::vectorized;
      IRVisitor::visit_for(node);
      in_vector_loop_ = outer;
    }
    void visit_reduce(const Reduce& node) override {
      if (!in_vector_loop_ && !node.vectorized &&
          extent_bound(node.extent) >= reduction_lanes(node) &&
          vectorizable_reduction_body(node.body, node.var, vector_math_) &&
          std::find(vars.begin(), vars.end(), node.var) == vars.end()) {
        vars.push_back(node.var);
      }
      IRVisitor::visit_reduce(node);
    }

   private:
    bool vector_math_;
    bool in_vector_loop_ = false;
  } finder(vector_math);
  finder.visit(body);
  return finder.vars;
}

int64_t lane_bytes(DType dtype) {
  return dtype == DType::f16 || dtype == DType::bf16 ? 4 : dtype_size_bytes(dtype);
}

class Scheduler {
 public:
  Scheduler(const Kernel& kernel, const ScheduleTarget& target)
      : kernel_(kernel), target_(target) {}

  Schedule run() {
    std::vector<std::string> roots;
    top_level_loops(kernel_.body, roots, in_parallel_);
    roots = merge_nests(std::move(roots));
    for (const std::string& root : roots) schedule_nest(root);
    vectorize_reductions();
    return std::move(schedule_);
  }

  // Rule 0, then per nest its reductions' invariant loops moved inward, then rule 1.
  Schedule row_passes() {
    std::vector<std::string> roots;
    top_level_loops(kernel_.body, roots, in_parallel_);
    for (const std::string& root : merge_nests(std::move(roots))) {
      move_invariant_loops_inward(root);
      hoist_invariants(root);
    }
    return std::move(schedule_);
  }

 private:
  // Applies all of `directives` or none; true when they were applied.
  bool try_apply(const std::vector<Directive>& directives) {
    return apply_all_or_none(kernel_, schedule_, directives);
  }

  const For* loop(std::string_view var) const { return find_loop(kernel_.body, var); }

  // Rule 0: nests with the same bounds are merged into the first, in order, when the merged
  // loop's iterations are independent (a row reduction and the nests reading it row by row;
  // elementwise nests over the same elements): one pass over memory instead of several. Then
  // the loops directly inside a merged loop are merged the same way, level by level, when
  // neither writes what the other touches: a batch norm's output and relu's mask of it, each
  // a nest over images, channels and positions, become one pass that reads the input once
  // (ResNet-50's step read each such input twice). A loop that reads what its sibling writes
  // stays apart: merged, the reader's row statistics could no longer be hoisted above its
  // element loop (the sibling writes the row first), and ViT's embeddings + layer norm
  // computed them per element, many times slower (docs/benchmarks.md).
  // Returns the nests left.
  std::vector<std::string> merge_nests(std::vector<std::string> roots, bool nested = false) {
    std::vector<std::string> kept;
    std::vector<bool> merged(roots.size(), false);
    for (size_t a = 0; a < roots.size(); ++a) {
      if (merged[a]) continue;
      kept.push_back(roots[a]);
      bool merged_any = false;
      for (size_t b = a + 1; b < roots.size(); ++b) {
        if (merged[b] || !same_bounds(roots[a], roots[b])) continue;
        if (nested && !touch_apart(roots[a], roots[b])) continue;
        merged[b] = try_apply({Merge{roots[a], roots[b]}});
        merged_any = merged_any || merged[b];
      }
      if (merged_any) merge_nests(child_loops(roots[a]), /*nested=*/true);
    }
    return kept;
  }

  // Whether neither of loops `a` and `b` writes a buffer the other reads or writes.
  bool touch_apart(const std::string& a, const std::string& b) const {
    const For* first = loop(a);
    const For* second = loop(b);
    return first != nullptr && second != nullptr && statements_commute(first->body, second->body);
  }

  // The loops that are statements of the body of loop `var` (or of the block that is its body).
  std::vector<std::string> child_loops(const std::string& var) const {
    std::vector<std::string> children;
    const For* parent = loop(var);
    if (parent == nullptr) return children;
    const auto add = [&](const Stmt& stmt) {
      const For* child = stmt.as<For>();
      if (child != nullptr && contains_loop(child->body)) children.push_back(child->var);
    };
    if (const Block* body = parent->body.as<Block>()) {
      for (const Stmt& stmt : body->stmts) add(stmt);
    } else {
      add(parent->body);
    }
    return children;
  }

  bool same_bounds(const std::string& a, const std::string& b) const {
    const For* first = loop(a);
    const For* second = loop(b);
    return first != nullptr && second != nullptr && print(first->min) == print(second->min) &&
           print(first->extent) == print(second->extent);
  }

  void schedule_nest(const std::string& root) {
    hoist_invariants(root);
    const For* root_loop = loop(root);
    const int64_t work =
        saturating_mul(extent_bound(root_loop->extent), stmt_work(root_loop->body));
    std::string parallel_root = root;
    std::set<std::string> vector_loops;
    for (const std::string& leaf : loops_under(root, /*leaves=*/true)) {
      vectorize_leaf(leaf, root, parallel_root, vector_loops);
    }
    if (target_.cores > 1 && work >= kMinParallelWork && !in_parallel_.contains(root)) {
      parallelize(parallel_root, vector_loops);
    }
  }

  // The loops in `root`'s nest (itself included), outermost first: those with no loop inside
  // (`leaves`), or the others.
  std::vector<std::string> loops_under(const std::string& root, bool leaves) const {
    class Collector : public IRVisitor {
     public:
      explicit Collector(bool want_leaves) : want_leaves_(want_leaves) {}
      std::vector<std::string> vars;
      void collect(const For& nest) { visit_for(nest); }

     protected:
      void visit_for(const For& node) override {
        if (contains_loop(node.body) != want_leaves_) vars.push_back(node.var);
        IRVisitor::visit_for(node);
      }

     private:
      bool want_leaves_;
    } collector(leaves);
    collector.collect(*loop(root));
    return collector.vars;
  }

  // Loops of `root`'s perfect nest that no reduction in it reads go innermost, the others
  // keeping their order, when the iterations allow (`reorder`): a softmax over a middle axis
  // then has its row loop inside the loops its statistics depend on, and rule 1 hoists them
  // above it, once per row instead of once per element.
  void move_invariant_loops_inward(const std::string& root) {
    std::vector<std::string> band;
    for (const For* f = loop(root); f != nullptr; f = f->body.as<For>()) band.push_back(f->var);
    if (band.size() < 2) return;
    const std::set<std::string, std::less<>> read = reduction_vars(loop(band.back())->body);
    if (read.empty()) return;
    std::vector<std::string> order;
    std::copy_if(band.begin(), band.end(), std::back_inserter(order),
                 [&](const std::string& var) { return read.count(var) != 0; });
    std::copy_if(band.begin(), band.end(), std::back_inserter(order),
                 [&](const std::string& var) { return read.count(var) == 0; });
    if (order != band) try_apply({Reorder{order}});
  }

  // Rule 1: `hoist` on each loop of the nest that holds other loops, outermost first, kept
  // when it lifts something.
  void hoist_invariants(const std::string& root) {
    for (const std::string& var : loops_under(root, /*leaves=*/false)) {
      Expected<Kernel> hoisted = apply_directive(kernel_, Hoist{var});
      if (!hoisted || hoisted->body.same_as(kernel_.body)) continue;
      kernel_ = std::move(hoisted).value();
      schedule_.directives.push_back(Hoist{var});
    }
  }

  // The vector lanes of an innermost loop whose every access is contiguous in it (or a load
  // at an invariant index), else nothing. Lanes for the narrowest element loaded: the compiler
  // vectorizes a loop that loads a narrow type with vectors full of it (a bool mask read
  // beside floats needs 64 iterations for 64-byte vectors, and GCC leaves a loop of 16 such
  // iterations scalar); wider types take several vectors. A narrow type that is only stored
  // (a mask computed from floats) vectorizes with the lanes of the widest.
  std::optional<int64_t> contiguous_lanes(const For& leaf) const {
    int64_t load_bytes = 8, widest = 1;
    for (const Access& access : collect_accesses(leaf.body, {}).list) {
      const std::optional<int64_t> stride = stride_of(access.index, leaf.var);
      const bool contiguous = stride == 1 || (stride == 0 && !access.is_store);
      if (!contiguous) return std::nullopt;
      const int64_t element = lane_bytes(access.buffer.dtype());
      widest = std::max(widest, element);
      if (!access.is_store) load_bytes = std::min(load_bytes, element);
    }
    return target_.vector_bytes / std::min(load_bytes, widest);
  }

  // Rule 2, for one innermost loop. Adds the loop it vectorizes to `vector_loops` and, when it
  // splits the root, sets `parallel_root` to the outer loop of the split.
  void vectorize_leaf(const std::string& leaf_var, const std::string& root,
                      std::string& parallel_root, std::set<std::string>& vector_loops) {
    const For* leaf = loop(leaf_var);
    if (leaf == nullptr) return;
    std::optional<int64_t> extent = as_const_int(leaf->extent);
    if (!extent) return;
    const std::string var = leaf->var;  // `leaf` points into the kernel try_apply replaces
    std::optional<int64_t> found_lanes = contiguous_lanes(*leaf);
    if (!found_lanes) {
      found_lanes = contiguous_in_pieces(var);
      if (!found_lanes) {
        if (!columns_inward(var, root, parallel_root, vector_loops)) {
          tile_transpose(var, root, parallel_root, vector_loops);
        }
        return;
      }
      leaf = loop(var);  // the first piece, when it partitioned the loop
      extent = as_const_int(leaf->extent);
      if (!extent) return;
    }
    const int64_t lanes = *found_lanes;
    if (lanes < 2 || *extent < lanes) return;
    if (reduces_columns(*leaf, var)) {
      accumulate_columns(var, *extent, lanes, root, parallel_root, vector_loops);
      return;
    }
    if (*extent == lanes) {
      if (try_apply({Vectorize{var}})) vector_loops.insert(var);
      return;
    }
    const std::string outer = var + ".o", inner = var + ".i";
    if (!try_apply({Split{var, lanes, outer, inner}, Vectorize{inner}})) return;
    vector_loops.insert(inner);
    if (var == root) parallel_root = outer;
  }

  // Rule 2a, where the columns are not the innermost loop: the leaf stores reductions whose
  // loads walk down columns that are contiguous along a loop around it (a max over time
  // read channels last, out[n, c, t] = max over k of x[n, t*125 + k, c], with t innermost).
  // That loop goes innermost in the perfect band, and its reductions accumulate as in rule
  // 2a, their results stored across (out[n, c, t] along c). XML-CNN's pooling over time
  // walked each channel down 125 rows of 128 channels.
  bool columns_inward(const std::string& leaf_var, const std::string& root,
                      std::string& parallel_root, std::set<std::string>& vector_loops) {
    std::vector<std::string> band;
    for (const For* f = loop(root); f != nullptr; f = f->body.as<For>()) band.push_back(f->var);
    if (band.size() < 2 || band.back() != leaf_var) return false;
    const int64_t lanes = lanes_of_widest(loop(leaf_var)->body, target_.vector_bytes);
    for (const std::string& columns : band) {
      if (columns == leaf_var) break;
      const std::optional<int64_t> extent = as_const_int(loop(columns)->extent);
      if (!extent || *extent < lanes || !reduces_columns(*loop(leaf_var), columns)) continue;
      std::vector<std::string> order;
      std::ranges::copy_if(band, std::back_inserter(order),
                           [&](const std::string& var) { return var != columns; });
      order.push_back(columns);
      // The reorder only pays with the accumulation: when that does not apply, both go.
      const Kernel kernel_before = kernel_;
      const std::string parallel_root_before = parallel_root;
      const size_t directives = schedule_.directives.size(), vectorized = vector_loops.size();
      if (!try_apply({Reorder{order}})) return false;
      accumulate_columns(columns, *extent, lanes, root, parallel_root, vector_loops);
      if (vector_loops.size() > vectorized) return true;
      kernel_ = kernel_before;
      schedule_.directives.erase(schedule_.directives.begin() + static_cast<ptrdiff_t>(directives),
                                 schedule_.directives.end());
      parallel_root = parallel_root_before;
      return false;
    }
    return false;
  }

  // Rule 2c: a transpose, an innermost loop that stores contiguously along it but loads
  // across the rows of its input (out[i, j] = x[j, i]), runs in tiles of lanes x lanes
  // elements: the loop and the one around it, in which those loads are contiguous, are split
  // in lanes, the two tile loops go outside, and the innermost is vectorized (its loads
  // gathered, from lanes cache lines that the tile reads whole). Untiled, each load touched
  // another line, and another page, lanes of which the next rows of the tile read again long
  // after: ResNet-50's conv1 output, 64 channels of 112 x 112 taken back to channels first,
  // took a third less time in tiles, and in a C++ probe of that copy 3.7x less
  // (docs/benchmarks.md). Only a perfect nest of the two loops whose extents the lanes
  // divide, and a body with no reduction.
  void tile_transpose(const std::string& leaf_var, const std::string& root,
                      std::string& parallel_root, std::set<std::string>& vector_loops) {
    const std::string* outer_var = nullptr;
    const std::vector<std::string> parents = loops_under(root, /*leaves=*/false);
    for (const std::string& parent : parents) {
      const For* inner = loop(parent)->body.as<For>();
      if (inner != nullptr && inner->var == leaf_var) outer_var = &parent;
    }
    if (outer_var == nullptr) return;
    const For* outer = loop(*outer_var);
    const For* leaf = loop(leaf_var);
    if (contains_reduce(leaf->body)) return;
    bool strided_rows = false;
    for (const Access& access : collect_accesses(leaf->body, {}).list) {
      const std::optional<int64_t> along_leaf = stride_of(access.index, leaf_var);
      const std::optional<int64_t> along_outer = stride_of(access.index, *outer_var);
      if (!along_leaf || !along_outer) return;
      if (*along_leaf == 1 || (*along_leaf == 0 && !access.is_store)) continue;
      if (access.is_store || *along_outer != 1) return;
      strided_rows = true;
    }
    const int64_t lanes = lanes_of_widest(leaf->body, target_.vector_bytes);
    const std::optional<int64_t> outer_extent = as_const_int(outer->extent);
    const std::optional<int64_t> leaf_extent = as_const_int(leaf->extent);
    if (!strided_rows || lanes < 2 || !outer_extent || !leaf_extent || *outer_extent % lanes != 0 ||
        *leaf_extent % lanes != 0) {
      return;
    }
    const std::string rows = *outer_var, columns = leaf_var;
    if (!try_apply({Split{rows, lanes, rows + ".o", rows + ".i"},
                    Split{columns, lanes, columns + ".o", columns + ".i"},
                    Reorder{{rows + ".o", columns + ".o", rows + ".i", columns + ".i"}},
                    Vectorize{columns + ".i"}})) {
      return;
    }
    vector_loops.insert(columns + ".i");
    if (rows == root) parallel_root = rows + ".o";
  }

  // Rule 2b: an innermost loop whose accesses are not contiguous in it may be in pieces: a
  // concatenation's selects (`i7 < 256`) choose another input in each range of it, and an
  // index read across a reshape or transpose (`i7 / 64 * 8192 + i7 % 64`) is contiguous in
  // runs. The loop is partitioned at the points its conditions compare it with (so that the
  // simplifier decides them in each piece) when that makes the first piece contiguous, split
  // in vector lanes or as it is; the lanes, else nothing. Only a loop with an index that is
  // not linear in it is tried. The gradient of a fused Q, K and V
  // projection, three heads-first tensors concatenated into rows, was a scalar loop of
  // selects and divisions.
  std::optional<int64_t> contiguous_in_pieces(const std::string& var) {
    const For* whole = loop(var);
    // Pieces help only an index that is not linear in the loop: a transpose's strided index
    // stays strided in any piece, and is not simplified again for nothing.
    const std::vector<Access> accesses = collect_accesses(whole->body, {}).list;
    if (std::ranges::all_of(accesses, [&](const Access& access) {
          return stride_of(access.index, var).has_value();
        })) {
      return std::nullopt;
    }
    ComparisonPoints conditions(var);
    conditions.visit(whole->body);
    const std::optional<int64_t> min = as_const_int(whole->min);
    const std::optional<int64_t> extent = as_const_int(whole->extent);
    if (!min || !extent) return std::nullopt;
    Partition partition{var, {}};
    for (const int64_t point : conditions.points) {
      if (point > *min && point < *min + *extent) partition.points.push_back(point);
    }
    Kernel candidate = kernel_;
    if (!partition.points.empty()) {
      Expected<Kernel> pieces = apply_directive(kernel_, partition);
      if (!pieces) return std::nullopt;
      candidate = std::move(pieces).value();
    }
    const std::optional<int64_t> lanes = contiguous_when_simplified(candidate, var);
    if (!lanes) return std::nullopt;
    if (!partition.points.empty() && !try_apply({partition})) return std::nullopt;
    return lanes;
  }

  // The lanes of loop `var` of `kernel` (its first, when there are several) once simplified,
  // or of its inner loop once split in lanes: contiguous in runs of at least a vector.
  std::optional<int64_t> contiguous_when_simplified(const Kernel& kernel,
                                                    const std::string& var) const {
    const Kernel simplified = simplify(kernel);
    const For* piece = find_loop(simplified.body, var);
    if (piece == nullptr) return std::nullopt;
    if (std::optional<int64_t> lanes = contiguous_lanes(*piece)) return lanes;
    const int64_t lanes = target_.vector_bytes / 4;  // f32's: the common case, checked below
    Expected<Kernel> split = apply_directive(simplified, Split{var, lanes, var + ".o", var + ".i"});
    if (!split) return std::nullopt;
    const Kernel split_simplified = simplify(*split);
    const For* inner = find_loop(split_simplified.body, var + ".i");
    if (inner == nullptr) return std::nullopt;
    const std::optional<int64_t> inner_lanes = contiguous_lanes(*inner);
    return inner_lanes == lanes ? inner_lanes : std::nullopt;
  }

  // Rule 2a: an innermost loop that stores column reductions (t[i] = sum over rows r of
  // x[r, i]: contiguous along the loop, strided along the reduction) is split into blocks of
  // columns, and each block's reductions `accumulate` row by row in vector lanes: a bias's or
  // a layer norm's weight gradient streams its rows instead of walking each column down with a
  // 3 KB stride, one cache line per row, which the prefetchers do not follow (a large
  // share of bert-base's training step, docs/benchmarks.md). Blocks of at most
  // kMaxAccumulatedColumns columns keep the accumulators in L1, and there are enough of them
  // for every core.
  void accumulate_columns(const std::string& var, int64_t extent, int64_t lanes,
                          const std::string& root, std::string& parallel_root,
                          std::set<std::string>& vector_loops) {
    const int64_t per_core = extent / (kIterationsPerCore * target_.cores) / lanes * lanes;
    const int64_t columns = std::clamp<int64_t>(per_core, lanes, kMaxAccumulatedColumns);
    if (extent <= columns) {
      if (try_apply({Accumulate{var, var + ".k"}, Vectorize{var}})) vector_loops.insert(var);
      return;
    }
    const std::string outer = var + ".o", inner = var + ".i";
    if (!try_apply({Split{var, columns, outer, inner}, Accumulate{inner, inner + ".k"},
                    Vectorize{inner}})) {
      return;
    }
    vector_loops.insert(inner);
    if (var == root) parallel_root = outer;
    // The columns left over, when the blocks do not divide them, keep the loop's name.
    if (loop(var) != nullptr && extent % columns >= lanes &&
        try_apply({Accumulate{var, var + ".k"}, Vectorize{var}})) {
      vector_loops.insert(var);
    }
  }

  // Rule 3: fuse perfectly nested outer loops until there is enough parallel work, then mark
  // the (fused) loop parallel; when that fails, the root alone.
  void parallelize(const std::string& root, const std::set<std::string>& vector_loops) {
    if (vector_loops.contains(root)) return;
    const std::optional<int64_t> root_extent = as_const_int(loop(root)->extent);
    if (!root_extent) {  // a runtime trip count: OpenMP divides it as it comes, no fusing
      try_apply({Parallel{root}});
      return;
    }
    int64_t iterations = *root_extent;
    std::string var = root;
    std::vector<Directive> directives;
    Kernel kernel = kernel_;
    while (iterations < kIterationsPerCore * target_.cores) {
      const For* inner = find_loop(kernel.body, var)->body.as<For>();
      if (inner == nullptr || vector_loops.contains(inner->var)) break;
      const std::optional<int64_t> inner_extent = as_const_int(inner->extent);
      if (!inner_extent) break;
      const Fuse fuse{var, inner->var, var + "_" + inner->var};
      Expected<Kernel> fused = apply_directive(kernel, fuse);
      if (!fused) break;
      kernel = std::move(fused).value();
      directives.push_back(fuse);
      var = fuse.fused;
      iterations = saturating_mul(iterations, *inner_extent);
    }
    directives.push_back(Parallel{var});
    if (!try_apply(directives) && directives.size() > 1) try_apply({Parallel{root}});
  }

  // Rule 4: `vectorize` each innermost reduction that vector lanes run well: outside every
  // vectorized loop, over at least reduction_lanes terms, whose body calls only math
  // functions with vector bodies (a scalar libm call stops the compiler from vectorizing) and
  // loads each element contiguously in the reduction variable or at an invariant index. A
  // serial reduction is a chain of dependent additions, one term per adder latency; lanes run
  // several chains. With vector math, a softmax's sum of exponentials over bert-base's
  // 30,522-word rows takes one vector exp per 16 terms instead of a scalar call per term.
  void vectorize_reductions() {
    for (const std::string& var : reductions_to_vectorize(kernel_.body, target_.vector_math)) {
      try_apply({Vectorize{var}});
    }
  }

  Kernel kernel_;
  ScheduleTarget target_;
  Schedule schedule_;
  std::set<std::string, std::less<>> in_parallel_;  // nests inside a parallel loop: kept serial
};

}  // namespace

int64_t lanes_of_widest(const Stmt& stmt, int64_t vector_bytes) {
  int64_t widest = 1;
  for (const Access& access : collect_accesses(stmt, {}).list) {
    widest = std::max(widest, lane_bytes(access.buffer.dtype()));
  }
  return vector_bytes / widest;
}

std::vector<std::string> schedulable_nests(const Stmt& body,
                                           std::set<std::string, std::less<>>* in_parallel) {
  std::vector<std::string> roots;
  std::set<std::string, std::less<>> inside;
  top_level_loops(body, roots, inside);
  if (in_parallel != nullptr) *in_parallel = std::move(inside);
  return roots;
}

ScheduleTarget host_target() {
  ScheduleTarget target;
  const unsigned threads = std::thread::hardware_concurrency();
  if (threads > 0) target.cores = static_cast<int>(threads);
#if defined(__x86_64__) || defined(__i386__)
  target.vector_bytes = __builtin_cpu_supports("avx512f") ? 64
                        : __builtin_cpu_supports("avx2")  ? 32
                                                          : 16;
#else
  target.vector_bytes = 16;
#endif
#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ * 100 + __GLIBC_MINOR__ >= 235)
  target.vector_math = true;
#endif
  return target;
}

Schedule default_schedule(const Kernel& kernel, const ScheduleTarget& target) {
  return Scheduler(kernel, target).run();
}

Schedule row_passes(const Kernel& kernel) { return Scheduler(kernel, {}).row_passes(); }

}  // namespace kiln::loop
