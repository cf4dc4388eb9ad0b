#include "loop/gpu_mapping.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "loop/bounds.h"
#include "loop/default_schedule.h"
#include "loop/distribute_host_loops.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/schedule.h"
#include "loop/schedule_analysis.h"
#include "loop/scratch.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/verifier.h"
#include "support/check.h"

namespace kiln::loop {
namespace {

constexpr const char* kBlockVar = "gpu_block";
constexpr const char* kThreadVar = "gpu_thread";
constexpr const char* kPointVar = "gpu_point";

// Applies what the CPU default schedule begins with (its rules 0 and 1): a row reduction and
// the nests that read it become one loop, which the mapping then runs as one launch, and the
// row's statistics are hoisted above its element loop, so that they are computed once per row
// (by the whole block, when the row is a block) instead of once per element stored.
Expected<Kernel> make_row_passes(const Kernel& kernel) {
  Expected<Kernel> passes = apply_schedule(kernel, row_passes(kernel));
  if (!passes) {
    // The directives were applied legally once, so they replay: failing is a bug.
    return Status::errorf(ErrorCode::internal,
                          "internal compiler error: the row passes do not replay: {}\n{}",
                          passes.status().message(), print(kernel));
  }
  return passes;
}

// Work counts saturate here (a count only needs to say "far more than a block's threads").
constexpr int64_t kWorkCap = int64_t{1} << 40;

// a * b of two counts in [0, kWorkCap], saturating.
int64_t work_product(int64_t a, int64_t b) {
  return b != 0 && a > kWorkCap / b ? kWorkCap : std::min(kWorkCap, a * b);
}

// The most iterations an extent can have, at most kWorkCap; an unbounded one (a data-dependent
// row, as spmm's) counts as a row's worth.
int64_t extent_bound(const Expr& extent, const BoundsScope& scope) {
  const Interval bounds = bounds_of(extent, scope);
  return bounds.max ? std::clamp<int64_t>(*bounds.max, 0, kWorkCap) : kGpuThreadsPerBlock;
}

// The most terms one of `value`'s reductions adds up, a nested reduction's terms multiplying
// its enclosing one's (batch norm's statistics: 8 images of 12,544 positions each);
// saturating.
int64_t reduction_work(const Expr& value, const BoundsScope& scope) {
  struct Finder : IRVisitor {
    const BoundsScope* scope = nullptr;
    int64_t terms = 0;
    void visit_reduce(const Reduce& node) override {
      const int64_t inner = std::max<int64_t>(reduction_work(node.body, *scope), 1);
      terms = std::max(terms, work_product(extent_bound(node.extent, *scope), inner));
    }
  } finder;
  finder.scope = &scope;
  finder.visit(value);
  return finder.terms;
}

// Loop iterations and reduction terms one band point runs (bounded extents, saturating).
int64_t work_of(const Stmt& stmt, const BoundsScope& scope) {
  switch (stmt.kind()) {
    case StmtKind::for_loop: {
      const For& f = *stmt.as<For>();
      BoundsScope inner = scope;
      inner[f.var] = loop_interval(f, scope);
      return work_product(extent_bound(f.extent, scope),
                          std::max<int64_t>(work_of(f.body, inner), 1));
    }
    case StmtKind::store: return reduction_work(stmt.as<Store>()->value, scope);
    case StmtKind::let_stmt: {
      const LetStmt& let = *stmt.as<LetStmt>();
      return std::min(kWorkCap, reduction_work(let.value, scope) + work_of(let.body, scope));
    }
    case StmtKind::allocate: return work_of(stmt.as<Allocate>()->body, scope);
    case StmtKind::if_then_else: {
      const IfThenElse& branch = *stmt.as<IfThenElse>();
      const int64_t else_work =
          branch.else_case.defined() ? work_of(branch.else_case, scope) : 0;
      return std::max(work_of(branch.then_case, scope), else_work);
    }
    case StmtKind::block: {
      int64_t total = 0;
      for (const Stmt& child : stmt.as<Block>()->stmts) {
        total = std::min(kWorkCap, total + work_of(child, scope));
      }
      return total;
    }
    case StmtKind::library_call:
      return kWorkCap;
  }
  return 0;
}

int64_t allocated_bytes(const Stmt& stmt) {
  struct Finder : IRVisitor {
    int64_t bytes = 0;
    void visit_allocate(const Allocate& node) override {
      bytes += node.buffer.flat_size() * dtype_size_bytes(node.buffer.dtype());
      IRVisitor::visit_allocate(node);
    }
  } finder;
  finder.visit(stmt);
  return finder.bytes;
}

// Marks the innermost reductions of a block-level value that have at least
// kMinGpuBlockReductionTerms terms (or a variable count) as vectorized: the block's threads
// compute them together. One with such a reduction in its body stays serial, every thread
// running it in step, and the reductions inside it are marked (batch norm's statistics: a
// block sums each image's positions, image after image). Smaller ones are computed by each
// thread: a pooling window costs less so than an exchange, and a loss summed over 2,708 rows
// of 7 classes is the block's sum over rows, each thread computing its rows' 7-term maximum
// and sum. Not those inside a logical operator (C++ may skip its second operand, and every
// thread must take part in a block's reduction).
class MarkBlockReductions : public IRMutator {
 protected:
  Expr visit_binary(const Binary& node, const Expr& self) override {
    if (is_logical(node.op)) return self;
    return IRMutator::visit_binary(node, self);
  }
  Expr visit_reduce(const Reduce& node, const Expr& self) override {
    if (node.vectorized) return self;
    if (contains_block_sized_reduce(node.body)) return IRMutator::visit_reduce(node, self);
    if (!block_sized(node)) return self;
    return reduce(node.op, node.var, node.min, node.extent, node.body, /*vectorized=*/true);
  }

 private:
  static bool block_sized(const Reduce& node) {
    const std::optional<int64_t> terms = as_const_int(simplify(node.extent));
    return !terms || *terms >= kMinGpuBlockReductionTerms;
  }

  static bool contains_block_sized_reduce(const Expr& expr) {
    struct Finder : IRVisitor {
      bool found = false;
      void visit_reduce(const Reduce& node) override {
        found = found || block_sized(node);
        IRVisitor::visit_reduce(node);
      }
    } finder;
    finder.visit(expr);
    return finder.found;
  }
};

// `b[i] = b[i] + v` with v not reading b: the addend v, else null.
const Expr* addend_of(const Store& store) {
  const Expr* addend = addend_to_own_element(store);
  if (addend == nullptr || buffers_used(*addend).count(store.buffer.name()) != 0) return nullptr;
  return addend;
}

// The buffers a statement only adds into: of f32 or f64, every store to one an add
// (addend_of), and no load of it but those adds' own.
class AddedBuffers : public IRVisitor {
 public:
  static std::set<std::string, std::less<>> of(const Stmt& stmt) {
    AddedBuffers finder;
    finder.visit(stmt);
    std::set<std::string, std::less<>> added;
    for (const auto& [name, counts] : finder.counts_) {
      if (counts.adds > 0 && counts.adds == counts.stores && counts.loads == counts.adds) {
        added.insert(name);
      }
    }
    return added;
  }

 protected:
  void visit_store(const Store& node) override {
    Counts& counts = counts_[node.buffer.name()];
    ++counts.stores;
    const bool atomic_type = node.buffer.dtype() == DType::f32 || node.buffer.dtype() == DType::f64;
    if (atomic_type && addend_of(node) != nullptr) ++counts.adds;
    IRVisitor::visit_store(node);
  }
  void visit_load(const Load& node) override {
    ++counts_[node.buffer.name()].loads;
    IRVisitor::visit_load(node);
  }

 private:
  struct Counts {
    int64_t stores = 0, adds = 0, loads = 0;
  };
  std::map<std::string, Counts, std::less<>> counts_;
};

// For the independence proof: each add into an added buffer stored into a one-element sink
// instead (allocated in the iteration, so private to it).
class SinkAdds : public IRMutator {
 public:
  SinkAdds(const std::set<std::string, std::less<>>& added, Buffer sink32, Buffer sink64)
      : added_(added), sink32_(std::move(sink32)), sink64_(std::move(sink64)) {}

 protected:
  Stmt visit_store(const Store& node, const Stmt& self) override {
    if (added_.count(node.buffer.name()) == 0) return IRMutator::visit_store(node, self);
    const Buffer& sink = node.buffer.dtype() == DType::f32 ? sink32_ : sink64_;
    return store(sink, 0, *addend_of(node));
  }

 private:
  const std::set<std::string, std::less<>>& added_;
  Buffer sink32_, sink64_;
};

// The adds into the added buffers as atomic stores.
class AtomicAdds : public IRMutator {
 public:
  explicit AtomicAdds(const std::set<std::string, std::less<>>& added) : added_(added) {}

 protected:
  Stmt visit_store(const Store& node, const Stmt& self) override {
    if (added_.count(node.buffer.name()) == 0 || node.atomic) {
      return IRMutator::visit_store(node, self);
    }
    const Expr* addend = addend_of(node);
    KILN_CHECK(addend != nullptr, "a store to {}, which was found only added into, is not an add",
               node.buffer.name());
    return atomic_add(node.buffer, node.index, *addend);
  }

 private:
  const std::set<std::string, std::less<>>& added_;
};

class GpuMapper {
 public:
  GpuMapper(const Kernel& lowered, const GpuMappingOptions& options)
      : lowered_(lowered), options_(options) {}

  Expected<GpuMapping> run() {
    GpuMapping mapping;
    KILN_ASSIGN_OR_RETURN(Kernel passes, make_row_passes(lowered_));
    const Kernel promoted =
        promote_gpu_scratch(distribute_host_loops(passes), mapping.scratch_bytes);
    KILN_RETURN_IF_ERROR(map_host(promoted.body));
    mapping.kernel = Kernel{lowered_.name, promoted.params, block(std::move(launches_))};
    const Status verified = verify(mapping.kernel);
    if (!verified) {
      return Status::errorf(ErrorCode::internal,
                            "internal compiler error: the GPU mapping of a kernel is invalid: "
                            "{}\n{}",
                            verified.message(), print(mapping.kernel));
    }
    return mapping;
  }

 private:
  // --- Host statements: loops, lets and conditions around gemms --------------------------

  Status map_host(const Stmt& stmt) {
    if (const Block* children = stmt.as<Block>()) {
      for (const Stmt& child : children->stmts) KILN_RETURN_IF_ERROR(map_host(child));
      return Status::ok();
    }
    if (!contains_gemm(stmt)) return add_launch(stmt);
    switch (stmt.kind()) {
      case StmtKind::let_stmt: {
        const LetStmt& let = *stmt.as<LetStmt>();
        KILN_ASSIGN_OR_RETURN(int64_t value, host_value(let.value));
        return with_host_value(let.name, value, [&] { return map_host(let.body); });
      }
      case StmtKind::for_loop: {
        const For& f = *stmt.as<For>();
        KILN_ASSIGN_OR_RETURN(int64_t min, host_value(f.min));
        KILN_ASSIGN_OR_RETURN(int64_t extent, host_value(f.extent));
        for (int64_t i = min; i < min + extent; ++i) {
          KILN_RETURN_IF_ERROR(with_host_value(f.var, i, [&] { return map_host(f.body); }));
        }
        return Status::ok();
      }
      case StmtKind::if_then_else: {
        const IfThenElse& branch = *stmt.as<IfThenElse>();
        KILN_ASSIGN_OR_RETURN(int64_t condition, host_value(branch.condition));
        if (condition != 0) return map_host(branch.then_case);
        return branch.else_case.defined() ? map_host(branch.else_case) : Status::ok();
      }
      case StmtKind::library_call:
        if (stmt.as<LibraryCall>()->op == LibraryOp::gemm) return add_gemm(*stmt.as<LibraryCall>());
        [[fallthrough]];
      default:
        return Status::errorf(ErrorCode::internal,
                              "internal compiler error: a {} statement around a gemm on a GPU",
                              first_line_of(stmt));
    }
  }

  static std::string first_line_of(const Stmt& stmt) {
    const std::string text = print(stmt);
    return text.substr(0, text.find('\n'));
  }

  template <typename F>
  Status with_host_value(const std::string& name, int64_t value, F body) {
    host_values_.emplace_back(name, value);
    Status status = body();
    host_values_.pop_back();
    return status;
  }

  Substitution host_substitution() const {
    Substitution values;
    for (const auto& [name, value] : host_values_) values[name] = make_int(value);
    return values;
  }

  Expected<int64_t> host_value(const Expr& expr) const {
    const Expr folded = simplify(substitute(expr, host_substitution()));
    const std::optional<int64_t> value = as_const_int(folded);
    if (!value) {
      return Status::errorf(ErrorCode::unsupported,
                            "a GPU runs the loops around a gemm on the host, and {} is not "
                            "known there",
                            print(expr));
    }
    return *value;
  }

  Status count_launch() {
    if (static_cast<int64_t>(launches_.size()) >= kMaxGpuLaunchesPerKernel) {
      return Status::errorf(ErrorCode::unsupported,
                            "a kernel needs more than {} GPU launches (a gemm inside loops of "
                            "that many iterations)",
                            kMaxGpuLaunchesPerKernel);
    }
    return Status::ok();
  }

  Status add_gemm(const LibraryCall& g) {
    KILN_RETURN_IF_ERROR(count_launch());
    const auto region = [&](const MatrixRegion& r) -> Expected<MatrixRegion> {
      KILN_ASSIGN_OR_RETURN(int64_t offset, host_value(r.offset));
      return MatrixRegion{r.buffer, make_int(offset), r.leading_dim};
    };
    KILN_ASSIGN_OR_RETURN(MatrixRegion a, region(g.a()));
    KILN_ASSIGN_OR_RETURN(MatrixRegion b, region(g.b()));
    KILN_ASSIGN_OR_RETURN(MatrixRegion c, region(g.c()));
    KILN_ASSIGN_OR_RETURN(int64_t m, host_value(g.gemm().m));
    KILN_ASSIGN_OR_RETURN(int64_t n, host_value(g.gemm().n));
    KILN_ASSIGN_OR_RETURN(int64_t k, host_value(g.gemm().k));
    launches_.push_back(gemm({.a = a,
                              .b = b,
                              .c = c,
                              .transpose_a = g.gemm().transpose_a,
                              .transpose_b = g.gemm().transpose_b,
                              .m = make_int(m),
                              .n = make_int(n),
                              .k = make_int(k),
                              .accumulate = g.gemm().accumulate}));
    return Status::ok();
  }

  // --- Launches ---------------------------------------------------------------------------

  // One launch for `stmt`, inside lets binding the host values it reads.
  Status add_launch(const Stmt& stmt) {
    KILN_RETURN_IF_ERROR(count_launch());
    BoundsScope scope;
    for (const auto& [name, value] : host_values_) scope[name] = Interval::point(value);
    KILN_ASSIGN_OR_RETURN(Stmt launch, map_launch(stmt, scope));
    for (auto it = host_values_.rbegin(); it != host_values_.rend(); ++it) {
      if (uses_var(launch, it->first)) launch = let_stmt(it->first, make_int(it->second), launch);
    }
    launches_.push_back(std::move(launch));
    return Status::ok();
  }

  // A loop of a launch's band and its constant extent.
  struct BandLoop {
    const For* loop;
    int64_t extent;
  };

  Expected<Stmt> map_launch(const Stmt& stmt, BoundsScope scope) {
    std::vector<BandLoop> band;
    std::set<std::string, std::less<>> added;  // what the band's first loop adds atomically
    std::vector<const LetStmt*> band_lets;  // cheap lets between band loops, outermost first
    int64_t points = 1;
    Stmt inner = stmt;
    while (true) {
      if (const LetStmt* let = inner.as<LetStmt>();
          let != nullptr && !band.empty() && is_cheap_let(*let, stmt)) {
        const For* next = let->body.as<For>();
        if (next == nullptr || !band_loop(*next, scope)) break;
        if (let->value.type() == DType::i64) scope[let->name] = bounds_of(let->value, scope);
        band_lets.push_back(let);
        inner = let->body;
        continue;
      }
      const For* f = inner.as<For>();
      if (f == nullptr) break;
      if (!band_loop(*f, scope)) {
        // A statement that would run in one block may add atomically instead.
        if (!band.empty() || !options_.atomics) break;
        added = buffers_added_across(*f, scope);
        if (added.empty()) break;
      }
      const int64_t extent = *bounds_of(f->extent, scope).min;
      band.push_back({f, extent});
      points = std::min<int64_t>(points * extent, int64_t{1} << 50);
      scope[f->var] = loop_interval(*f, scope);
      inner = f->body;
    }
    // The lets the band passed through are computed at each band point, before its body.
    for (auto it = band_lets.rbegin(); it != band_lets.rend(); ++it) {
      inner = let_stmt((*it)->name, (*it)->value, inner);
    }
    if (band.empty()) {
      // Iterations in order: one block runs them, its threads sharing each iteration's
      // independent inner loops (a scatter_add of rows: the row's columns), a barrier after
      // each, so that iterations touching one element still run one after the other.
      if (allocated_bytes(stmt) > kMaxGpuSharedBytes) return one_thread(stmt);
      KILN_ASSIGN_OR_RETURN(Stmt body, map_block_body(stmt, scope));
      return for_loop(kBlockVar, 0, 1, ForKind::gpu_block, body);
    }
    const bool row_per_block = work_of(inner, scope) >= kGpuThreadsPerBlock &&
                               allocated_bytes(inner) <= kMaxGpuSharedBytes;
    Stmt launch;
    if (row_per_block) {
      KILN_ASSIGN_OR_RETURN(Stmt body, map_block_body(inner, scope));
      launch = for_loop(kBlockVar, 0, points, ForKind::gpu_block,
                        bind_band(band, var(kBlockVar), body));
    } else {
      KILN_RETURN_IF_ERROR(check_thread_local(inner));
      const int64_t blocks = (points + kGpuThreadsPerBlock - 1) / kGpuThreadsPerBlock;
      const Expr point = var(kPointVar);
      Stmt body = if_then_else(point < points, bind_band(band, point, inner));
      body = let_stmt(kPointVar, var(kBlockVar) * kGpuThreadsPerBlock + var(kThreadVar), body);
      launch = for_loop(kBlockVar, 0, blocks, ForKind::gpu_block,
                        for_loop(kThreadVar, 0, kGpuThreadsPerBlock, ForKind::gpu_thread, body));
    }
    return added.empty() ? launch : AtomicAdds(added).mutate(launch);
  }

  // The buffers `f` only adds into (every store `b[i] = b[i] + v` with v not reading b, b
  // read nowhere else, of f32 or f64) when, those adds aside, its iterations are independent
  // and its extent a positive constant: with them added atomically, f can join a band. Empty
  // otherwise.
  static std::set<std::string, std::less<>> buffers_added_across(const For& f,
                                                               const BoundsScope& scope) {
    const Interval extent = bounds_of(f.extent, scope);
    if (!extent.is_point() || *extent.min <= 0) return {};
    std::set<std::string, std::less<>> added = AddedBuffers::of(f.body);
    if (added.empty()) return {};
    // The proof, with each add stored into a buffer private to the iteration instead.
    const Buffer sink32 = Buffer::local("kiln_atomic_sink_f32", DType::f32, 1);
    const Buffer sink64 = Buffer::local("kiln_atomic_sink_f64", DType::f64, 1);
    const Stmt body = SinkAdds(added, sink32, sink64).mutate(f.body);
    const Stmt model = for_loop(f.var, f.min, f.extent, allocate(sink32, allocate(sink64, body)));
    if (!check_independent(*model.as<For>(), scope).is_ok()) return {};
    return added;
  }

  // Whether `f` can join a launch's band: a constant, positive extent and independent
  // iterations.
  static bool band_loop(const For& f, const BoundsScope& scope) {
    const Interval extent = bounds_of(f.extent, scope);
    return extent.is_point() && *extent.min > 0 && check_independent(f, scope).is_ok();
  }

  // Whether a let between band loops may be computed at every band point instead of once per
  // iteration of the loops around it: a value with no reduction (a channel's batch-norm scale,
  // rsqrt(var[c] + eps) * gamma[c]), reading nothing `launch` writes. The band then goes on
  // through it (all of a batch norm's elements, not one block per channel).
  static bool is_cheap_let(const LetStmt& let, const Stmt& launch) {
    if (contains_reduce(let.value)) return false;
    const std::set<std::string, std::less<>> written = buffers_written(launch);
    for (const std::string& buffer : buffers_used(let.value)) {
      if (written.count(buffer) != 0) return false;
    }
    return true;
  }

  static std::set<std::string, std::less<>> buffers_written(const Stmt& stmt) {
    struct Finder : IRVisitor {
      std::set<std::string, std::less<>> names;
      void visit_store(const Store& node) override {
        names.insert(node.buffer.name());
        IRVisitor::visit_store(node);
      }
    } finder;
    finder.visit(stmt);
    return std::move(finder.names);
  }

  static Stmt one_thread(const Stmt& stmt) {
    return for_loop(kBlockVar, 0, 1, ForKind::gpu_block,
                    for_loop(kThreadVar, 0, 1, ForKind::gpu_thread, stmt));
  }

  // `body` with each band variable bound to its digit of `point` (the band flattened in
  // row-major order, the innermost loop fastest).
  static Stmt bind_band(const std::vector<BandLoop>& band, const Expr& point, Stmt body) {
    int64_t stride = 1;
    for (auto it = band.rbegin(); it != band.rend(); ++it) {
      Expr digit = stride == 1 ? point : point / stride;
      if (it + 1 != band.rend()) digit = digit % it->extent;
      body = let_stmt(it->loop->var, simplify(it->loop->min + digit), body);
      stride *= it->extent;
    }
    return body;
  }

  static Status check_thread_local(const Stmt& inner) {
    const int64_t bytes = allocated_bytes(inner);
    if (bytes > kMaxGpuThreadLocalBytes) {
      return Status::errorf(ErrorCode::unsupported,
                            "a GPU thread would need {} bytes of local buffers (at most {})", bytes,
                            kMaxGpuThreadLocalBytes);
    }
    return Status::ok();
  }

  // An independent loop of a block's body spread over its threads, together with the
  // independent loops of constant extent nested in it (a block's rows and their columns, or
  // images and their positions, as one loop): consecutive threads then take consecutive
  // elements, and the threads have all of the nest's iterations to share, not its outer
  // loop's alone. `scope` binds f's variable.
  Expected<Stmt> thread_loop(const For& f, BoundsScope scope) {
    std::vector<BandLoop> nest = {{&f, 0}};  // the outermost extent is not a digit's radix
    Expr extent = f.extent;
    Stmt body = f.body;
    while (const For* g = body.as<For>()) {
      if (!band_loop(*g, scope)) break;
      const int64_t g_extent = *bounds_of(g->extent, scope).min;
      nest.push_back({g, g_extent});
      extent = extent * g_extent;
      scope[g->var] = loop_interval(*g, scope);
      body = g->body;
    }
    KILN_RETURN_IF_ERROR(check_thread_local(body));
    if (nest.size() == 1) return for_loop(f.var, f.min, f.extent, ForKind::gpu_thread, f.body);
    return for_loop(kThreadVar, 0, simplify(extent), ForKind::gpu_thread,
                    bind_band(nest, var(kThreadVar), body));
  }

  // A block's body: independent loops spread over its threads; reductions stored directly
  // computed by all of them.
  Expected<Stmt> map_block_body(const Stmt& stmt, const BoundsScope& scope) {
    switch (stmt.kind()) {
      case StmtKind::for_loop: {
        const For& f = *stmt.as<For>();
        BoundsScope inner = scope;
        inner[f.var] = loop_interval(f, scope);
        if (check_independent(f, scope).is_ok()) return thread_loop(f, inner);
        // A loop that only adds across its iterations spreads over the threads with atomic
        // adds (max_pool_grad's windows of a row, each adding into its maximum's element).
        if (options_.atomics) {
          const std::set<std::string, std::less<>> added = buffers_added_across(f, scope);
          if (!added.empty()) {
            KILN_RETURN_IF_ERROR(check_thread_local(f.body));
            return AtomicAdds(added).mutate(
                for_loop(f.var, f.min, f.extent, ForKind::gpu_thread, f.body));
          }
        }
        KILN_ASSIGN_OR_RETURN(Stmt body, map_block_body(f.body, inner));
        return for_loop(f.var, f.min, f.extent, ForKind::serial, body);
      }
      case StmtKind::store: {
        const Store& st = *stmt.as<Store>();
        return store(st.buffer, st.index, MarkBlockReductions().mutate(st.value));
      }
      case StmtKind::let_stmt: {
        const LetStmt& let = *stmt.as<LetStmt>();
        BoundsScope inner = scope;
        if (let.value.type() == DType::i64) inner[let.name] = bounds_of(let.value, scope);
        KILN_ASSIGN_OR_RETURN(Stmt body, map_block_body(let.body, inner));
        return let_stmt(let.name, MarkBlockReductions().mutate(let.value), body);
      }
      case StmtKind::allocate: {
        const Allocate& a = *stmt.as<Allocate>();
        KILN_ASSIGN_OR_RETURN(Stmt body, map_block_body(a.body, scope));
        return allocate(a.buffer, body);
      }
      case StmtKind::if_then_else: {
        const IfThenElse& branch = *stmt.as<IfThenElse>();
        KILN_ASSIGN_OR_RETURN(Stmt then_case, map_block_body(branch.then_case, scope));
        Stmt else_case;
        if (branch.else_case.defined()) {
          KILN_ASSIGN_OR_RETURN(else_case, map_block_body(branch.else_case, scope));
        }
        return if_then_else(branch.condition, then_case, else_case);
      }
      case StmtKind::block: {
        std::vector<Stmt> children;
        for (const Stmt& child : stmt.as<Block>()->stmts) {
          KILN_ASSIGN_OR_RETURN(Stmt mapped, map_block_body(child, scope));
          children.push_back(std::move(mapped));
        }
        return block(std::move(children));
      }
      case StmtKind::library_call:
        break;
    }
    return Status::errorf(ErrorCode::internal,
                          "internal compiler error: a gemm inside a GPU launch");
  }

  const Kernel& lowered_;
  GpuMappingOptions options_;
  std::vector<std::pair<std::string, int64_t>> host_values_;  // innermost last
  std::vector<Stmt> launches_;
};

// What each variable in scope stands for, as a set of names: a loop variable, or an index let
// (an integer computed from other indices alone, such as a band digit), stands for itself and
// what it is computed from; a let that aliases one variable, or whose value loads or reduces,
// stands for what its value reads; a local buffer's contents for everything in scope where it
// is allocated. A value depends on an index when what it reads stands for that index.
class RecomputedReductionFinder : public IRVisitor {
 public:
  std::vector<std::string> found;

 protected:
  using Names = std::set<std::string, std::less<>>;

  void visit_for(const For& node) override {
    IRVisitor::visit(node.min);
    IRVisitor::visit(node.extent);
    with_meaning(node.var, Names{node.var}, [&] { IRVisitor::visit(node.body); });
  }

  void visit_let_stmt(const LetStmt& node) override {
    with_meaning(node.name, meaning_of_let(node.name, node.value),
                 [&] { IRVisitor::visit(node.body); });
  }

  // A local buffer's contents stand for everything in scope where it is allocated.
  void visit_allocate(const Allocate& node) override {
    Names in_scope;
    for (const auto& [name, meaning] : meaning_) in_scope.insert(meaning.begin(), meaning.end());
    local_buffers_[node.buffer.name()] = std::move(in_scope);
    IRVisitor::visit_allocate(node);
  }

  void visit_store(const Store& node) override {
    store_ = &node;
    store_index_ = names_of(node.index);
    IRVisitor::visit(node.value);
    store_ = nullptr;
  }

  // Inside a stored value.
  void visit_let(const Let& node) override {
    IRVisitor::visit(node.value);
    with_meaning(node.name, meaning_of_let(node.name, node.value),
                 [&] { IRVisitor::visit(node.body); });
  }
  void visit_reduce(const Reduce& node) override {
    if (store_ != nullptr) report(*store_, node);
  }

 private:
  // body() with `name` standing for `meaning`.
  template <typename F>
  void with_meaning(const std::string& name, Names meaning, F body) {
    std::optional<Names> outer;
    if (auto it = meaning_.find(name); it != meaning_.end()) outer = std::move(it->second);
    meaning_[name] = std::move(meaning);
    body();
    if (outer) {
      meaning_[name] = std::move(*outer);
    } else {
      meaning_.erase(name);
    }
  }

  Names names_of(const Expr& expr) const {
    Names names;
    for (const std::string& name : free_vars(expr)) {
      const auto it = meaning_.find(name);
      if (it == meaning_.end()) {
        names.insert(name);
      } else {
        names.insert(it->second.begin(), it->second.end());
      }
    }
    return names;
  }

  Names meaning_of_let(const std::string& name, const Expr& value) const {
    Names names = names_of(value);
    const bool index = value.type() == DType::i64 && value.as<Variable>() == nullptr &&
                       !contains_reduce(value) && buffers_used(value).empty();
    if (index) names.insert(name);
    return names;
  }

  void report(const Store& store, const Reduce& reduction) {
    const Expr whole = reduce(reduction.op, reduction.var, reduction.min, reduction.extent,
                              reduction.body, reduction.vectorized);
    Names reduced = names_of(whole);
    for (const std::string& buffer : buffers_used(whole)) {
      if (auto it = local_buffers_.find(buffer); it != local_buffers_.end()) {
        reduced.insert(it->second.begin(), it->second.end());
      }
    }
    std::string missing;
    for (const std::string& name : store_index_) {
      if (reduced.count(name) == 0) missing += (missing.empty() ? "" : ", ") + name;
    }
    if (missing.empty()) return;
    found.push_back(fmt::format("the store to {} recomputes a {} over {} for each {}",
                                store.buffer.name(), reduce_op_name(reduction.op), reduction.var,
                                missing));
  }

  std::map<std::string, Names, std::less<>> meaning_;
  std::map<std::string, Names, std::less<>> local_buffers_;
  const Store* store_ = nullptr;  // the store whose value is being visited
  Names store_index_;              // what its index stands for
};

}  // namespace

Expected<GpuMapping> map_to_gpu(const Kernel& lowered, const GpuMappingOptions& options) {
  struct ConvFinder : IRVisitor {
    bool found = false;
    void visit_library_call(const LibraryCall& call) override {
      found = found || call.op == LibraryOp::conv;
    }
  } convs;
  convs.visit(lowered.body);
  if (convs.found) {
    return Status::error(
        ErrorCode::unsupported,
        "a channels-last convolution runs through oneDNN, on a CPU only; a GPU takes conv");
  }
  return GpuMapper(lowered, options).run();
}

std::vector<std::string> recomputed_reductions(const Kernel& mapped) {
  RecomputedReductionFinder finder;
  finder.visit(mapped.body);
  return std::move(finder.found);
}

}  // namespace kiln::loop
