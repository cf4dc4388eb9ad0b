#include "loop/distribute_host_loops.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loop/bounds.h"
#include "loop/ir_visitor.h"
#include "loop/schedule_analysis.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/tuning.h"

namespace kiln::loop {
namespace {

// The loop nest a gemm stands for (loop/stmt.h states its semantics), which the independence
// proof can read: each element of C stored once from a row of op(A) and a column of op(B).
class GemmsAsLoops : public IRMutator {
 protected:
  Stmt visit_library_call(const LibraryCall& g, const Stmt& self) override {
    if (g.op != LibraryOp::gemm) return IRMutator::visit_library_call(g, self);
    const int serial = count_++;
    const std::string row = fmt::format("gemm_row{}", serial);
    const std::string column = fmt::format("gemm_column{}", serial);
    const std::string depth = fmt::format("gemm_depth{}", serial);
    const auto element = [](const MatrixRegion& region, const Expr& r, const Expr& c) {
      return region.offset + r * region.leading_dim + c;
    };
    const Expr a = g.gemm().transpose_a ? load(g.a().buffer, element(g.a(), var(depth), var(row)))
                                        : load(g.a().buffer, element(g.a(), var(row), var(depth)));
    const Expr b = g.gemm().transpose_b
                       ? load(g.b().buffer, element(g.b(), var(column), var(depth)))
                       : load(g.b().buffer, element(g.b(), var(depth), var(column)));
    const Expr c_index = element(g.c(), var(row), var(column));
    Expr value = reduce(ReduceOp::sum, depth, 0, g.gemm().k, a * b);
    if (g.gemm().accumulate) value = load(g.c().buffer, c_index) + value;
    return for_loop(row, 0, g.gemm().m,
                    for_loop(column, 0, g.gemm().n, store(g.c().buffer, c_index, value)));
  }

 private:
  int count_ = 0;
};

// A local buffer expanded to one slice per iteration, and where the current one starts.
struct Slice {
  Buffer expanded;
  Expr offset;
};

// Every load, store and gemm region of the sliced buffers moved to the iteration's slice.
class SliceBuffers : public IRMutator {
 public:
  explicit SliceBuffers(const std::map<std::string, Slice, std::less<>>& slices)
      : slices_(slices) {}

 protected:
  Expr visit_load(const Load& node, const Expr& self) override {
    const Expr index = mutate(node.index);
    const Slice* slice = slice_of(node.buffer);
    if (slice == nullptr) return index.same_as(node.index) ? self : load(node.buffer, index);
    return load(slice->expanded, simplify(slice->offset + index));
  }

  Stmt visit_store(const Store& node, const Stmt& self) override {
    const Expr index = mutate(node.index), value = mutate(node.value);
    const Slice* slice = slice_of(node.buffer);
    if (slice == nullptr) {
      if (index.same_as(node.index) && value.same_as(node.value)) return self;
      return store(node.buffer, index, value);
    }
    return store(slice->expanded, simplify(slice->offset + index), value);
  }

  Stmt visit_library_call(const LibraryCall& g, const Stmt& self) override {
    if (g.op != LibraryOp::gemm) return IRMutator::visit_library_call(g, self);
    const auto region = [&](const MatrixRegion& r) {
      const Slice* slice = slice_of(r.buffer);
      if (slice == nullptr) return MatrixRegion{r.buffer, mutate(r.offset), r.leading_dim};
      return MatrixRegion{slice->expanded, simplify(slice->offset + mutate(r.offset)),
                          r.leading_dim};
    };
    GemmArgs args = gemm_args(g);
    args.a = region(g.a());
    args.b = region(g.b());
    args.c = region(g.c());
    args.m = mutate(args.m);
    args.n = mutate(args.n);
    args.k = mutate(args.k);
    return gemm(std::move(args));
  }

 private:
  const Slice* slice_of(const Buffer& buffer) const {
    if (buffer.scope() == MemoryScope::global) return nullptr;
    const auto it = slices_.find(buffer.name());
    return it == slices_.end() ? nullptr : &it->second;
  }

  const std::map<std::string, Slice, std::less<>>& slices_;
};

class HostLoopDistributor : public IRMutator {
 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    scope_[node.var] = loop_interval(node, scope_);
    const Stmt mutated = IRMutator::visit_for(node, self);
    scope_.erase(node.var);
    return distribute(*mutated.as<For>()).value_or(mutated);
  }

  Stmt visit_let_stmt(const LetStmt& node, const Stmt& self) override {
    if (node.value.type() != DType::i64) return IRMutator::visit_let_stmt(node, self);
    scope_[node.name] = bounds_of(node.value, scope_);
    const Stmt mutated = IRMutator::visit_let_stmt(node, self);
    scope_.erase(node.name);
    return mutated;
  }

 private:
  // One loop per statement of `loop`'s body, or nullopt where that is not proven equal or
  // would not pay (see the header).
  std::optional<Stmt> distribute(const For& loop) const {
    if (!contains_gemm(loop.body)) return std::nullopt;
    const std::optional<int64_t> min = as_const_int(simplify(loop.min));
    const std::optional<int64_t> extent = as_const_int(simplify(loop.extent));
    if (!min || !extent || *extent < 1) return std::nullopt;

    // The allocations and index lets around the body's statements: the lets are substituted
    // into every statement (they read no memory, so that computes the same).
    std::vector<Buffer> locals;
    Substitution lets;
    Stmt inner = loop.body;
    while (true) {
      if (const Allocate* a = inner.as<Allocate>()) {
        locals.push_back(a->buffer);
        inner = a->body;
      } else if (const LetStmt* let = inner.as<LetStmt>()) {
        if (!buffers_used(let->value).empty()) return std::nullopt;
        lets[let->name] = substitute(let->value, lets);
        inner = let->body;
      } else {
        break;
      }
    }
    std::vector<Stmt> statements = flatten_blocks(inner);
    if (statements.size() < 2) return std::nullopt;

    std::map<std::string, Slice, std::less<>> slices;
    int64_t bytes = 0;
    for (const Buffer& local : locals) {
      const int64_t size = local.flat_size();
      bytes += size * *extent * dtype_size_bytes(local.dtype());
      if (bytes > kMaxGpuDistributedBytes) return std::nullopt;
      slices[local.name()] = {Buffer::local(local.name(), local.dtype(), size * *extent),
                              simplify((var(loop.var) - *min) * size)};
    }
    for (Stmt& statement : statements) {
      statement = SliceBuffers(slices).mutate(substitute(statement, lets));
    }

    // Any order of the statements' instances computes the same when no two iterations touch
    // one element that either writes.
    const Stmt model =
        for_loop(loop.var, loop.min, loop.extent, GemmsAsLoops().mutate(block(statements)));
    if (!check_independent(*model.as<For>(), scope_).is_ok()) return std::nullopt;

    std::vector<Stmt> loops;
    for (const Stmt& statement : statements) {
      loops.push_back(for_loop(loop.var, loop.min, loop.extent, loop.for_kind, statement));
    }
    Stmt result = block(std::move(loops));
    for (auto it = locals.rbegin(); it != locals.rend(); ++it) {
      result = allocate(slices.at(it->name()).expanded, result);
    }
    return result;
  }

  BoundsScope scope_;  // intervals of the loops and index lets around the node visited
};

}  // namespace

Kernel distribute_host_loops(const Kernel& kernel) {
  return {kernel.name, kernel.params, HostLoopDistributor().mutate(kernel.body)};
}

}  // namespace kiln::loop
