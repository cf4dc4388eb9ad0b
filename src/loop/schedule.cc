#include "loop/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/scalar.h"
#include "loop/schedule_analysis.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/tuning.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

// The limits (loop/tuning.h): unrolling copies the body, and past kMaxUnroll copies it only
// bloats the code; a staged region of more than kMaxCacheElements is no longer a cache-sized
// tile.

using NameSet = std::set<std::string, std::less<>>;

// --- Text form -------------------------------------------------------------------------------

bool is_identifier(std::string_view text) {
  if (text.empty()) return false;
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(text[0])) return false;
  return std::all_of(text.begin(), text.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9') || c == '.'; });
}

struct Token {
  std::string_view text;
  size_t column = 0;  // from 1
};

std::vector<Token> tokenize(std::string_view line) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
      ++i;
      continue;
    }
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    tokens.push_back({line.substr(start, i - start), start + 1});
  }
  return tokens;
}

class LineParser {
 public:
  LineParser(size_t line, std::vector<Token> tokens) : line_(line), tokens_(std::move(tokens)) {}

  Expected<Directive> parse() {
    const std::string_view kind = tokens_[0].text;
    static constexpr std::string_view kKinds[] = {"split",    "reorder",    "fuse",     "vectorize",
                                                  "parallel", "unroll",     "hoist",    "cache",
                                                  "merge",    "accumulate", "partition"};
    if (std::find(std::begin(kKinds), std::end(kKinds), kind) == std::end(kKinds)) {
      return error(0, fmt::format("unknown directive '{}' (expected split, reorder, fuse, "
                                  "vectorize, parallel, unroll, hoist, cache, merge, "
                                  "accumulate or partition)",
                                  kind));
    }
    if (kind == "partition") {
      if (tokens_.size() < 3)
        return error(0, "partition takes a loop and points: partition VAR N...");
      Partition partition{std::string(tokens_[1].text), {}};
      if (!is_identifier(tokens_[1].text)) {
        return error(1, fmt::format("'{}' is not a valid loop name", tokens_[1].text));
      }
      for (size_t i = 2; i < tokens_.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(const int64_t point, integer(i));
        partition.points.push_back(point);
      }
      return Directive(std::move(partition));
    }
    KILN_RETURN_IF_ERROR(check_names());
    if (kind == "split") {
      KILN_RETURN_IF_ERROR(expect_count(4, "split VAR FACTOR OUTER INNER"));
      KILN_ASSIGN_OR_RETURN(const int64_t factor, positive(2));
      return Directive(Split{name(1), factor, name(3), name(4)});
    }
    if (kind == "reorder") {
      if (tokens_.size() < 3)
        return error(0, "reorder takes at least two loops: reorder VAR VAR...");
      Reorder reorder;
      for (size_t i = 1; i < tokens_.size(); ++i) reorder.vars.push_back(name(i));
      return Directive(std::move(reorder));
    }
    if (kind == "fuse") {
      KILN_RETURN_IF_ERROR(expect_count(3, "fuse OUTER INNER FUSED"));
      return Directive(Fuse{name(1), name(2), name(3)});
    }
    if (kind == "cache") {
      KILN_RETURN_IF_ERROR(expect_count(3, "cache BUFFER VAR LOCAL"));
      return Directive(Cache{name(1), name(2), name(3)});
    }
    if (kind == "merge") {
      KILN_RETURN_IF_ERROR(expect_count(2, "merge FIRST SECOND"));
      return Directive(Merge{name(1), name(2)});
    }
    if (kind == "accumulate") {
      KILN_RETURN_IF_ERROR(expect_count(2, "accumulate VAR TERMS"));
      return Directive(Accumulate{name(1), name(2)});
    }
    // The rest take one loop.
    KILN_RETURN_IF_ERROR(expect_count(1, fmt::format("{} VAR", kind)));
    if (kind == "vectorize") return Directive(Vectorize{name(1)});
    if (kind == "parallel") return Directive(Parallel{name(1)});
    if (kind == "unroll") return Directive(Unroll{name(1)});
    return Directive(Hoist{name(1)});
  }

 private:
  // Every argument but split's factor is a name.
  Status check_names() const {
    const std::string_view kind = tokens_[0].text;
    for (size_t i = 1; i < tokens_.size(); ++i) {
      if (kind == "split" && i == 2) continue;
      if (!is_identifier(tokens_[i].text)) {
        return error(i, fmt::format("'{}' is not a name (letters, digits, '_' and '.', not "
                                    "starting with a digit or '.')",
                                    tokens_[i].text));
      }
    }
    return Status::ok();
  }

  Status error(size_t token, std::string_view message) const {
    return Status::errorf("{}:{}: {}", line_, tokens_[token].column, message);
  }
  Status expect_count(size_t arguments, std::string_view usage) const {
    if (tokens_.size() == arguments + 1) return Status::ok();
    const size_t at = tokens_.size() > arguments + 1 ? arguments + 1 : 0;
    return error(at, fmt::format("{} takes {} argument{}: {}", tokens_[0].text, arguments,
                                 arguments == 1 ? "" : "s", usage));
  }
  std::string name(size_t i) const { return std::string(tokens_[i].text); }
  // Token i as a whole integer, or nothing.
  std::optional<int64_t> whole_integer(size_t i) const {
    const std::string_view text = tokens_[i].text;
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
  }
  Expected<int64_t> positive(size_t i) const {
    const std::optional<int64_t> value = whole_integer(i);
    if (!value || *value < 1) {
      return error(i, fmt::format("expected a positive integer factor, got '{}'", tokens_[i].text));
    }
    return *value;
  }

  Expected<int64_t> integer(size_t i) const {
    const std::optional<int64_t> value = whole_integer(i);
    if (!value) return error(i, fmt::format("expected an integer, got '{}'", tokens_[i].text));
    return *value;
  }

  size_t line_;
  std::vector<Token> tokens_;
};

// --- Names in a kernel -----------------------------------------------------------------------

class NameCollector : public IRVisitor {
 public:
  NameSet vars, buffers;

 protected:
  void visit_variable(const Variable& node) override { vars.insert(node.name); }
  void visit_let(const Let& node) override {
    vars.insert(node.name);
    IRVisitor::visit_let(node);
  }
  void visit_reduce(const Reduce& node) override {
    vars.insert(node.var);
    IRVisitor::visit_reduce(node);
  }
  void visit_for(const For& node) override {
    vars.insert(node.var);
    IRVisitor::visit_for(node);
  }
  void visit_let_stmt(const LetStmt& node) override {
    vars.insert(node.name);
    IRVisitor::visit_let_stmt(node);
  }
  void visit_allocate(const Allocate& node) override {
    buffers.insert(node.buffer.name());
    IRVisitor::visit_allocate(node);
  }
};

NameCollector names_of(const Kernel& kernel) {
  NameCollector names;
  for (const Buffer& param : kernel.params) names.buffers.insert(param.name());
  names.visit(kernel.body);
  return names;
}

// A name not in `used` (which it joins): prefix0, prefix1, ...
std::string fresh_name(NameSet& used, std::string_view prefix) {
  for (int n = 0;; ++n) {
    std::string candidate = fmt::format("{}{}", prefix, n);
    if (used.insert(candidate).second) return candidate;
  }
}

// --- Finding loops ---------------------------------------------------------------------------

// `self` is the loop's handle (to return unchanged); `scope` the intervals of the variables
// around it.
using LoopFn =
    std::function<Expected<Stmt>(const For& loop, const Stmt& self, const BoundsScope& scope)>;

// Replaces every loop that `matches` selects by fn(loop, self, scope),
// without looking inside a replaced loop (loops of one name never nest). Other statement kinds
// pass through IRMutator's defaults.
class LoopRewriter : public IRMutator {
 public:
  LoopRewriter(std::function<bool(const For&)> matches, LoopFn fn)
      : matches_(std::move(matches)), fn_(std::move(fn)) {}

  Expected<Stmt> run(const Stmt& body, std::string_view what) {
    Stmt result = mutate(body);
    if (!status_.is_ok()) return status_;
    if (found_ == 0) return Status::errorf("no loop named {}", what);
    return result;
  }

 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    if (!status_.is_ok()) return self;
    if (matches_(node)) {
      ++found_;
      Expected<Stmt> replaced = fn_(node, self, scope_);
      if (!replaced) {
        status_ = replaced.status();
        return self;
      }
      return std::move(replaced).value();
    }
    scope_[node.var] = loop_interval(node, scope_);
    Stmt result = IRMutator::visit_for(node, self);
    scope_.erase(node.var);
    return result;
  }
  Stmt visit_let_stmt(const LetStmt& node, const Stmt& self) override {
    if (!is_floating(node.value.type())) scope_[node.name] = bounds_of(node.value, scope_);
    Stmt result = IRMutator::visit_let_stmt(node, self);
    scope_.erase(node.name);
    return result;
  }

 private:
  std::function<bool(const For&)> matches_;
  LoopFn fn_;
  BoundsScope scope_;
  Status status_;
  int found_ = 0;
};

Expected<Stmt> rewrite_loops(const Stmt& body, const std::string& var, const LoopFn& fn) {
  return LoopRewriter([&](const For& loop) { return loop.var == var; }, fn).run(body, var);
}

}  // namespace

int64_t reduction_lanes(const Reduce& reduction) {
  class Narrowest : public IRVisitor {
   public:
    int64_t bytes = 4;

   protected:
    void visit_load(const Load& node) override {
      // f16 and bf16 are computed in float; in memory they are 2 bytes.
      bytes = std::min<int64_t>(bytes, dtype_size_bytes(node.buffer.dtype()));
      IRVisitor::visit_load(node);
    }
  } narrowest;
  narrowest.visit(reduction.body);
  return std::max<int64_t>(16, 64 / narrowest.bytes);
}

namespace {

// `vectorize` of a reduction variable: every reduction over `var` becomes vectorized. Only an
// innermost reduction (its body holds no other) is: code generators evaluate the body once
// per vector lane.
class ReductionVectorizer : public IRMutator {
 public:
  explicit ReductionVectorizer(std::string_view var) : var_(var) {}

  Expected<Stmt> run(const Stmt& body) {
    Stmt result = mutate(body);
    if (!status_.is_ok()) return status_;
    if (found_ == 0) return Status::errorf("no loop or reduction named {}", var_);
    return result;
  }

 protected:
  Expr visit_reduce(const Reduce& node, const Expr& self) override {
    if (node.var != var_) return IRMutator::visit_reduce(node, self);
    ++found_;
    if (contains_reduce(node.body)) {
      status_ = Status::errorf(
          "reduction {} holds another reduction; only an innermost one is "
          "vectorized",
          var_);
      return self;
    }
    return reduce(node.op, node.var, node.min, node.extent, node.body, /*vectorized=*/true);
  }

 private:
  std::string_view var_;
  Status status_;
  int found_ = 0;
};

struct ConstantBounds {
  int64_t min = 0, extent = 0;
};

Expected<ConstantBounds> constant_bounds(const For& loop, std::string_view directive) {
  const std::optional<int64_t> min = as_const_int(loop.min), extent = as_const_int(loop.extent);
  if (!min || !extent) {
    return Status::errorf("{} needs constant loop bounds; loop {} runs from {} for {}", directive,
                          loop.var, print(loop.min), print(loop.extent));
  }
  return ConstantBounds{*min, std::max<int64_t>(*extent, 0)};
}

Expected<int64_t> positive_constant_extent(const For& loop, std::string_view directive) {
  const std::optional<int64_t> extent = as_const_int(loop.extent);
  if (!extent || *extent < 1) {
    return Status::errorf("{} needs a positive constant extent; loop {} has extent {}", directive,
                          loop.var, print(loop.extent));
  }
  return *extent;
}

Stmt with_kind(const For& loop, ForKind kind) {
  return for_loop(loop.var, loop.min, loop.extent, kind, loop.body);
}

// --- split, reorder, fuse ----------------------------------------------------------------

Expected<Stmt> split_loop(const For& loop, const Split& d) {
  KILN_ASSIGN_OR_RETURN(const ConstantBounds bounds, constant_bounds(loop, "split"));
  const int64_t main = bounds.extent / d.factor, tail = bounds.extent % d.factor;
  // The kind goes where it still holds: parallel to the outer loop (whose iterations are
  // blocks of the original ones), vectorized and unrolled to the inner loop and the tail
  // (constant extents).
  const ForKind outer_kind =
      loop.for_kind == ForKind::parallel ? ForKind::parallel : ForKind::serial;
  const ForKind inner_kind = loop.for_kind == ForKind::parallel ? ForKind::serial : loop.for_kind;
  const Expr index = Expr(bounds.min) + var(d.outer) * d.factor + var(d.inner);
  Stmt nest =
      for_loop(d.outer, 0, main, outer_kind,
               for_loop(d.inner, 0, d.factor, inner_kind, substitute(loop.body, loop.var, index)));
  if (tail == 0) return nest;
  return block({std::move(nest),
                for_loop(loop.var, bounds.min + main * d.factor, tail, loop.for_kind, loop.body)});
}

Expected<Stmt> partition_loop(const For& loop, const Partition& d) {
  KILN_ASSIGN_OR_RETURN(const ConstantBounds bounds, constant_bounds(loop, "partition"));
  std::vector<Stmt> pieces;
  int64_t begin = bounds.min;
  for (const int64_t point : d.points) {
    if (point <= begin || point >= bounds.min + bounds.extent) {
      return Status::errorf(
          "the points must increase strictly inside loop {}'s range [{}, {}), got {}", loop.var,
          bounds.min, bounds.min + bounds.extent, fmt::join(d.points, " "));
    }
    pieces.push_back(for_loop(loop.var, begin, point - begin, loop.for_kind, loop.body));
    begin = point;
  }
  pieces.push_back(
      for_loop(loop.var, begin, bounds.min + bounds.extent - begin, loop.for_kind, loop.body));
  return block(std::move(pieces));
}

Expected<Stmt> reorder_band(const For& outermost, const Stmt& self, const BoundsScope& scope,
                            const Reorder& d) {
  const NameSet wanted(d.vars.begin(), d.vars.end());
  std::vector<const For*> band = {&outermost};
  while (band.size() < d.vars.size()) {
    const For* next = band.back()->body.as<For>();
    if (next == nullptr) {
      return Status::errorf("the loops are not perfectly nested: the body of {} is not a loop",
                            band.back()->var);
    }
    if (wanted.count(next->var) == 0) {
      return Status::errorf("loop {} sits between the loops to reorder", next->var);
    }
    band.push_back(next);
  }
  std::map<std::string, const For*, std::less<>> by_name;
  std::vector<std::string> current;
  for (const For* loop : band) {
    by_name[loop->var] = loop;
    current.push_back(loop->var);
  }
  if (by_name.size() != wanted.size()) {
    return Status::errorf("the loops {} do not form one nest",
                          fmt::join(d.vars.begin(), d.vars.end(), ", "));
  }
  if (current == d.vars) return self;  // nothing moves
  for (const For* loop : band) {
    for (const For* other : band) {
      if (uses_var(loop->min, other->var) || uses_var(loop->extent, other->var)) {
        return Status::errorf("the bounds of loop {} depend on loop {}", loop->var, other->var);
      }
    }
  }
  // Iterations of every band loop are independent, so any two points of the band touch
  // different elements and every order is equivalent.
  BoundsScope around = scope;
  for (const For* loop : band) {
    KILN_RETURN_IF_ERROR(check_independent(*loop, around));
    around[loop->var] = loop_interval(*loop, around);
  }
  Stmt body = band.back()->body;
  for (auto it = d.vars.rbegin(); it != d.vars.rend(); ++it) {
    const For* loop = by_name.at(*it);
    body = for_loop(loop->var, loop->min, loop->extent, loop->for_kind, body);
  }
  return body;
}

Expected<Stmt> fuse_loops(const For& outer, const Fuse& d) {
  const For* inner = outer.body.as<For>();
  if (inner == nullptr || inner->var != d.inner) {
    return Status::errorf("the body of loop {} is not exactly loop {}", d.outer, d.inner);
  }
  KILN_ASSIGN_OR_RETURN(const ConstantBounds o, constant_bounds(outer, "fuse"));
  KILN_ASSIGN_OR_RETURN(const ConstantBounds i, constant_bounds(*inner, "fuse"));
  int64_t extent = 0;
  if (__builtin_mul_overflow(o.extent, i.extent, &extent)) {
    return Status::errorf("the fused extent {} * {} overflows", o.extent, i.extent);
  }
  const Expr fused = var(d.fused);
  const Expr inner_extent(i.extent);
  Stmt body = substitute(inner->body, Substitution{{d.outer, Expr(o.min) + fused / inner_extent},
                                                   {d.inner, Expr(i.min) + fused % inner_extent}});
  return for_loop(d.fused, 0, extent, ForKind::serial, std::move(body));
}

// --- hoist -------------------------------------------------------------------------------

class BinderCounter : public IRVisitor {
 public:
  std::map<std::string, int, std::less<>> counts;

 protected:
  void visit_let(const Let& node) override {
    ++counts[node.name];
    IRVisitor::visit_let(node);
  }
  void visit_reduce(const Reduce& node) override {
    ++counts[node.var];
    IRVisitor::visit_reduce(node);
  }
  void visit_for(const For& node) override {
    ++counts[node.var];
    IRVisitor::visit_for(node);
  }
  void visit_let_stmt(const LetStmt& node) override {
    ++counts[node.name];
    IRVisitor::visit_let_stmt(node);
  }
};

// Lifts the lets and reductions of the store values in `scope` (a loop's body, or one
// statement of it) that are invariant in it: they use no name bound inside it and read no
// buffer it writes or allocates.
class Hoister : public IRMutator {
 public:
  Hoister(const Stmt& scope, NameSet& used) : used_(used) {
    const Accesses accesses = collect_accesses(scope, {});
    inner_names_ = accesses.bound_names;
    forbidden_buffers_ = accesses.allocated;
    for (const Access& access : accesses.list) {
      if (access.is_store) forbidden_buffers_.insert(access.buffer.name());
    }
    BinderCounter binders;
    binders.visit(scope);
    binder_counts_ = std::move(binders.counts);
  }

  // The scope with the hoisted values bound around it, in the order they were found.
  Stmt run(const Stmt& body) {
    Stmt result = mutate(body);
    for (auto it = hoisted_.rbegin(); it != hoisted_.rend(); ++it) {
      result = let_stmt(it->first, it->second, result);
    }
    return result;
  }

 protected:
  // Only statements that run whenever the loop's body runs are entered: a loop of positive
  // constant extent runs its body at least once, so a hoisted value is evaluated only when
  // the original would have been (an if, or a loop that may not run, could guard a load that
  // is out of bounds otherwise). Unknown statement kinds are not entered either.
  Stmt visit_for(const For& node, const Stmt& self) override {
    const std::optional<int64_t> extent = as_const_int(node.extent);
    if (!extent || *extent < 1) return self;
    Stmt body = mutate(node.body);
    return body.same_as(node.body)
               ? self
               : for_loop(node.var, node.min, node.extent, node.for_kind, std::move(body));
  }
  Stmt visit_if_then_else(const IfThenElse&, const Stmt& self) override { return self; }
  Stmt visit_store(const Store& node, const Stmt& self) override {
    Expr value = mutate(node.value);
    return value.same_as(node.value) ? self : store(node.buffer, node.index, std::move(value));
  }

  Expr visit_let(const Let& node, const Expr& self) override {
    if (!invariant(node.value)) return IRMutator::visit_let(node, self);
    const bool unique = binder_counts_[node.name] == 1 && !is_hoisted_name(node.name);
    const std::string name = bind(node.value, unique ? node.name : std::string());
    const Expr body = name == node.name
                          ? node.body
                          : substitute(node.body, node.name, var(name, node.value.type()));
    return mutate(body);
  }
  Expr visit_reduce(const Reduce& node, const Expr& self) override {
    if (invariant(self)) return var(bind(self, std::string()), node.type);
    // A reduction of positive constant extent evaluates its body at least once, so invariant
    // values inside it are lifted as a loop's are (a max-pool window over batch-norm inlined:
    // the channel's scale is computed once, not per window element); one that may run zero
    // times is left whole.
    const std::optional<int64_t> extent = as_const_int(node.extent);
    if (!extent || *extent < 1) return self;
    return IRMutator::visit_reduce(node, self);
  }

 private:
  bool invariant(const Expr& value) const {
    if (is_const(value) || value.as<Variable>() != nullptr) return false;  // nothing to save
    for (const std::string& name : free_vars(value)) {
      if (inner_names_.count(name) != 0 && !is_hoisted_name(name)) return false;
    }
    const std::set<std::string, std::less<>> loaded = buffers_used(value);
    return std::none_of(loaded.begin(), loaded.end(),
                        [&](const std::string& b) { return forbidden_buffers_.count(b) != 0; });
  }
  bool is_hoisted_name(std::string_view name) const {
    return std::any_of(hoisted_.begin(), hoisted_.end(),
                       [&](const auto& h) { return h.first == name; });
  }
  // The name `value` is bound to at the top of the loop: an equal value's, `preferred`, or a
  // fresh one.
  std::string bind(const Expr& value, std::string preferred) {
    for (const auto& [name, hoisted] : hoisted_) {
      if (equal(hoisted, value)) return name;
    }
    std::string name = preferred.empty() ? fresh_name(used_, "h") : std::move(preferred);
    hoisted_.emplace_back(name, value);
    return name;
  }

  NameSet& used_;
  NameSet inner_names_, forbidden_buffers_;
  std::map<std::string, int, std::less<>> binder_counts_;
  std::vector<std::pair<std::string, Expr>> hoisted_;
};

// The loops of a body's block with the values invariant in each bound just before it: those
// that read what an earlier statement of the iteration writes, which cannot move to the top of
// the body (a layer norm over a row that the same iteration computes first).
Stmt hoist_before_loops(const Stmt& body, NameSet& used) {
  if (const LetStmt* let = body.as<LetStmt>()) {
    Stmt inner = hoist_before_loops(let->body, used);
    return inner.same_as(let->body) ? body : let_stmt(let->name, let->value, std::move(inner));
  }
  const Block* statements = body.as<Block>();
  if (statements == nullptr) return body;
  std::vector<Stmt> children;
  bool changed = false;
  for (const Stmt& child : statements->stmts) {
    children.push_back(child.as<For>() ? Hoister(child, used).run(child) : child);
    changed = changed || !children.back().same_as(child);
  }
  return changed ? block(std::move(children)) : body;
}

Expected<Stmt> hoist_in_loop(const For& loop, const Stmt& self, NameSet& used) {
  if (!all_statements_known(loop.body)) {
    return Status::errorf("loop {} holds a statement the scheduler cannot analyse", loop.var);
  }
  Stmt body = hoist_before_loops(Hoister(loop.body, used).run(loop.body), used);
  if (body.same_as(loop.body)) return self;
  return for_loop(loop.var, loop.min, loop.extent, loop.for_kind, std::move(body));
}

// --- cache -------------------------------------------------------------------------------

class LoadRedirect : public IRMutator {
 public:
  LoadRedirect(Buffer local, std::map<const Load*, Expr> indices)
      : local_(std::move(local)), indices_(std::move(indices)) {}

 protected:
  Expr visit_load(const Load& node, const Expr& self) override {
    const auto it = indices_.find(&node);
    return it == indices_.end() ? IRMutator::visit_load(node, self) : load(local_, it->second);
  }

 private:
  Buffer local_;
  std::map<const Load*, Expr> indices_;
};

Expected<Stmt> cache_in_loop(const For& loop, const BoundsScope& scope, const Buffer& source,
                             const Cache& d) {
  if (!all_statements_known(loop.body)) {
    return Status::errorf("loop {} holds a statement the scheduler cannot analyse", loop.var);
  }
  BoundsScope around = scope;
  around[loop.var] = loop_interval(loop, scope);
  const Accesses accesses = collect_accesses(loop.body, around);
  // Each load's index is (terms fixed for the iteration: the same for every load) + (terms
  // in variables bound inside, within an interval); the local buffer holds the union of
  // those intervals.
  std::optional<std::map<std::string, LinearForm::Term, std::less<>>> fixed;
  std::map<const Load*, LinearForm> offsets;
  Interval region;
  for (const Access& access : accesses.list) {
    if (access.buffer.name() != d.buffer) continue;
    if (access.is_store) return Status::errorf("loop {} writes {}", loop.var, d.buffer);
    const std::optional<LinearForm> form = linearize(simplify(access.index, access.scope));
    if (!form) return Status::errorf("the index {} overflows", print(access.index));
    std::map<std::string, LinearForm::Term, std::less<>> outer;
    LinearForm offset;
    offset.constant = form->constant;
    Interval interval = Interval::point(form->constant);
    for (const auto& [key, term] : form->terms) {
      bool inner = false;
      for (const std::string& name : free_vars(term.expr)) {
        inner = inner || accesses.bound_names.count(name) != 0;
      }
      if (inner || !buffers_used(term.expr).empty()) {
        offset.terms.emplace(key, term);
        interval = interval + bounds_of(term.expr, access.scope) * term.coefficient;
      } else {
        outer.emplace(key, term);
      }
    }
    auto same_terms = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
               return x.first == y.first && x.second.coefficient == y.second.coefficient;
             });
    };
    if (fixed && !same_terms(*fixed, outer)) {
      return Status::errorf("the loads of {} in loop {} start at different offsets", d.buffer,
                            loop.var);
    }
    region = offsets.empty() ? interval : Interval::make_union(region, interval);
    fixed = std::move(outer);
    offsets[access.load] = std::move(offset);
  }
  if (offsets.empty()) return Status::errorf("loop {} does not read {}", loop.var, d.buffer);
  if (!region.is_bounded()) {
    return Status::errorf("cannot bound the elements of {} that loop {} reads", d.buffer, loop.var);
  }
  int64_t size = 0;
  if (__builtin_sub_overflow(*region.max, *region.min, &size) || size >= kMaxCacheElements) {
    return Status::errorf("the region of {} that loop {} reads is larger than {} elements",
                          d.buffer, loop.var, kMaxCacheElements);
  }
  size += 1;
  const Expr start = to_expr(LinearForm{*fixed, *region.min});
  const Interval starts = bounds_of(start, around);
  if (!starts.is_bounded() || *starts.min < 0 || *starts.max + size > source.flat_size()) {
    return Status::errorf("cannot prove that the region of {} loop {} reads lies inside it",
                          d.buffer, loop.var);
  }
  const Buffer local = Buffer::local(d.local, source.dtype(), size);
  std::map<const Load*, Expr> indices;
  for (auto& [node, offset] : offsets) {
    offset.constant -= *region.min;
    indices[node] = to_expr(offset);
  }
  const std::string copy_var = d.local + ".i";
  const Expr c = var(copy_var);
  const Stmt copy = for_loop(copy_var, 0, size, store(local, c, load(source, start + c)));
  const Stmt body = LoadRedirect(local, std::move(indices)).mutate(loop.body);
  return for_loop(loop.var, loop.min, loop.extent, loop.for_kind,
                  allocate(local, block({copy, body})));
}

// --- Merge -----------------------------------------------------------------------------------

// Finds the block that holds both loops of a merge as direct statements (at the top of the
// kernel or in the body of a serial loop) and merges them there. The merged loop's iterations
// must be independent for any value of the loops around it.
class LoopMerger : public IRMutator {
 public:
  explicit LoopMerger(const Merge& d) : d_(d) {}

  Expected<Stmt> run(const Stmt& body) {
    Stmt result = mutate(body);
    if (!status_.is_ok()) return status_;
    if (!merged_) {
      return Status::errorf("no block outside every loop holds loops {} and {} side by side",
                            d_.first, d_.second);
    }
    return result;
  }

 protected:
  Stmt visit_for(const For& node, const Stmt& self) override {
    if (node.for_kind != ForKind::serial) return self;  // merge before marking loops
    return IRMutator::visit_for(node, self);
  }
  Stmt visit_block(const Block& node, const Stmt& self) override {
    const auto position = [&](const std::string& var) -> std::optional<size_t> {
      for (size_t i = 0; i < node.stmts.size(); ++i) {
        const For* loop = node.stmts[i].as<For>();
        if (loop != nullptr && loop->var == var) return i;
      }
      return std::nullopt;
    };
    const std::optional<size_t> a = position(d_.first), b = position(d_.second);
    if (!a || !b || !status_.is_ok()) return IRMutator::visit_block(node, self);
    Expected<Stmt> merged = merge(node, *a, *b);
    if (!merged) {
      status_ = merged.status();
      return self;
    }
    merged_ = true;
    return std::move(merged).value();
  }

 private:
  Expected<Stmt> merge(const Block& node, size_t a, size_t b) const {
    if (b <= a) return Status::errorf("loop {} does not come after loop {}", d_.second, d_.first);
    const For& first = *node.stmts[a].as<For>();
    const For& second = *node.stmts[b].as<For>();
    if (print(first.min) != print(second.min) || print(first.extent) != print(second.extent)) {
      return Status::errorf("loops {} and {} have different bounds", d_.first, d_.second);
    }
    if (first.for_kind != ForKind::serial || second.for_kind != ForKind::serial) {
      return Status::error("merge serial loops, before marking them");
    }
    const std::vector<Stmt> between(node.stmts.begin() + static_cast<std::ptrdiff_t>(a) + 1,
                                    node.stmts.begin() + static_cast<std::ptrdiff_t>(b));
    const auto commutes_with_between = [&](const Stmt& moving) {
      return std::all_of(between.begin(), between.end(),
                         [&](const Stmt& s) { return statements_commute(moving, s); });
    };
    size_t at = 0;
    if (commutes_with_between(node.stmts[b])) {
      at = a;
    } else if (commutes_with_between(node.stmts[a])) {
      at = b;
    } else {
      return Status::errorf(
          "neither loop {} nor loop {} can move past the statements between "
          "them",
          d_.first, d_.second);
    }
    const Stmt body = block({first.body, substitute(second.body, second.var, var(first.var))});
    const Stmt merged = for_loop(first.var, first.min, first.extent, ForKind::serial, body);
    KILN_RETURN_IF_ERROR(check_independent(*merged.as<For>(), {}));
    std::vector<Stmt> stmts;
    for (size_t i = 0; i < node.stmts.size(); ++i) {
      if (i == at) stmts.push_back(merged);
      if (i != a && i != b) stmts.push_back(node.stmts[i]);
    }
    return block(std::move(stmts));
  }

  const Merge& d_;
  Status status_;
  bool merged_ = false;
};

// --- accumulate ------------------------------------------------------------------------------

// for (v) { b[i] = reduce(op, k, m, n, e(k)); ...; rest } -> the accumulators' initial
// values, then for (terms, m, n) for (v) b[i] = b[i] op e(terms), then for (v) rest (see the
// header for what makes it legal).
Expected<Stmt> accumulate_loop(const For& loop, const BoundsScope& scope, const Accumulate& d) {
  const std::vector<Stmt> stmts = flatten_blocks(loop.body);
  std::vector<const Store*> reductions;
  for (const Stmt& stmt : stmts) {
    const auto* store_stmt = stmt.as<Store>();
    const auto* reduction = store_stmt != nullptr ? store_stmt->value.as<Reduce>() : nullptr;
    if (reduction == nullptr || reduction->vectorized) break;
    reductions.push_back(store_stmt);
  }
  if (reductions.empty()) {
    return Status::errorf("loop {} does not begin with a store of a serial reduction", loop.var);
  }
  const auto* first = reductions[0]->value.as<Reduce>();
  for (const Store* store_stmt : reductions) {
    const auto* reduction = store_stmt->value.as<Reduce>();
    if (print(reduction->min) != print(first->min) ||
        print(reduction->extent) != print(first->extent)) {
      return Status::errorf("the reductions at the top of loop {} run over different ranges",
                            loop.var);
    }
  }
  for (const Expr* bound : {&first->min, &first->extent}) {
    if (free_vars(*bound).count(loop.var) != 0) {
      return Status::errorf("the reductions' range depends on loop {}", loop.var);
    }
  }
  KILN_RETURN_IF_ERROR(check_independent(loop, scope));
  std::set<std::string, std::less<>> written;
  for (const Access& access : collect_accesses(loop.body, {}).list) {
    if (access.is_store) written.insert(access.buffer.name());
  }
  std::set<std::string, std::less<>> targets;
  for (const Store* store_stmt : reductions) {
    if (!targets.insert(store_stmt->buffer.name()).second) {
      return Status::errorf("two reductions in loop {} store into {}", loop.var,
                            store_stmt->buffer.name());
    }
    for (const std::string& name : buffers_used(store_stmt->value)) {
      if (written.count(name) != 0) {
        return Status::errorf("a reduction in loop {} reads {}, which the loop writes", loop.var,
                              name);
      }
    }
  }
  // Each reduction's accumulator: its store's element, or where that is not contiguous along
  // the loop, an element of a local buffer over the loop's iterations.
  const std::optional<int64_t> extent = as_const_int(loop.extent);
  std::vector<Stmt> initial, advance, results;
  std::vector<Buffer> locals;
  for (const Store* store_stmt : reductions) {
    const auto* reduction = store_stmt->value.as<Reduce>();
    const DType type = reduction->type;
    Buffer accumulator = store_stmt->buffer;
    Expr index = store_stmt->index;
    if (stride_of(store_stmt->index, loop.var) != 1 && extent && *extent > 0) {
      accumulator = Buffer::local(fmt::format("{}.acc{}", d.terms, locals.size()), type, *extent);
      index = var(loop.var) - loop.min;
      locals.push_back(accumulator);
      results.push_back(store(store_stmt->buffer, store_stmt->index, load(accumulator, index)));
    }
    initial.push_back(
        store(accumulator, index, make_scalar(type, reduce_identity(reduction->op, type))));
    const Expr term = substitute(reduction->body, reduction->var, var(d.terms));
    advance.push_back(
        store(accumulator, index,
              binary(reduce_combiner(reduction->op), load(accumulator, index), term)));
  }
  const auto over_v = [&](std::vector<Stmt> body) {
    return for_loop(loop.var, loop.min, loop.extent, loop.for_kind, block(std::move(body)));
  };
  std::vector<Stmt> result = {over_v(std::move(initial)),
                              for_loop(d.terms, first->min, first->extent, over_v(advance))};
  results.insert(results.end(), stmts.begin() + static_cast<ptrdiff_t>(reductions.size()),
                 stmts.end());
  if (!results.empty()) result.push_back(over_v(std::move(results)));
  Stmt accumulated = block(std::move(result));
  for (auto local = locals.rbegin(); local != locals.rend(); ++local) {
    accumulated = allocate(*local, std::move(accumulated));
  }
  return accumulated;
}

// --- Dispatch --------------------------------------------------------------------------------

Status check_fresh(const NameSet& used, std::initializer_list<const std::string*> names) {
  NameSet seen;
  for (const std::string* name : names) {
    if (!is_identifier(*name)) return Status::errorf("'{}' is not a valid loop name", *name);
    if (used.count(*name) != 0) return Status::errorf("the name {} is already used", *name);
    if (!seen.insert(*name).second) return Status::errorf("the name {} is given twice", *name);
  }
  return Status::ok();
}

class Applier {
 public:
  explicit Applier(const Kernel& kernel) : kernel_(kernel), names_(names_of(kernel)) {}

  Expected<Stmt> operator()(const Split& d) {
    if (d.factor < 1) return Status::errorf("the factor must be at least 1, got {}", d.factor);
    KILN_RETURN_IF_ERROR(check_fresh(names_.vars, {&d.outer, &d.inner}));
    return rewrite_loops(
        kernel_.body, d.var,
        [&](const For& loop, const Stmt&, const BoundsScope&) { return split_loop(loop, d); });
  }
  Expected<Stmt> operator()(const Partition& d) {
    if (d.points.empty()) return Status::error("partition needs at least one point");
    return rewrite_loops(
        kernel_.body, d.var,
        [&](const For& loop, const Stmt&, const BoundsScope&) { return partition_loop(loop, d); });
  }
  Expected<Stmt> operator()(const Reorder& d) {
    if (d.vars.size() < 2) return Status::error("reorder needs at least two loops");
    const NameSet wanted(d.vars.begin(), d.vars.end());
    if (wanted.size() != d.vars.size()) return Status::error("reorder names a loop twice");
    return LoopRewriter([&](const For& loop) { return wanted.count(loop.var) != 0; },
                        [&](const For& loop, const Stmt& self, const BoundsScope& scope) {
                          return reorder_band(loop, self, scope, d);
                        })
        .run(kernel_.body, fmt::format("{}", fmt::join(d.vars, " or ")));
  }
  Expected<Stmt> operator()(const Fuse& d) {
    KILN_RETURN_IF_ERROR(check_fresh(names_.vars, {&d.fused}));
    return rewrite_loops(
        kernel_.body, d.outer,
        [&](const For& loop, const Stmt&, const BoundsScope&) { return fuse_loops(loop, d); });
  }
  Expected<Stmt> operator()(const Vectorize& d) {
    if (find_loop(kernel_.body, d.var) == nullptr)
      return ReductionVectorizer(d.var).run(kernel_.body);
    return rewrite_loops(
        kernel_.body, d.var,
        [&](const For& loop, const Stmt&, const BoundsScope& scope) -> Expected<Stmt> {
          KILN_RETURN_IF_ERROR(positive_constant_extent(loop, "vectorize").status());
          KILN_RETURN_IF_ERROR(check_independent(loop, scope));
          return with_kind(loop, ForKind::vectorized);
        });
  }
  Expected<Stmt> operator()(const Parallel& d) {
    return rewrite_loops(
        kernel_.body, d.var,
        [&](const For& loop, const Stmt&, const BoundsScope& scope) -> Expected<Stmt> {
          KILN_RETURN_IF_ERROR(check_independent(loop, scope));
          return with_kind(loop, ForKind::parallel);
        });
  }
  Expected<Stmt> operator()(const Unroll& d) {
    return rewrite_loops(kernel_.body, d.var,
                         [&](const For& loop, const Stmt&, const BoundsScope&) -> Expected<Stmt> {
                           KILN_ASSIGN_OR_RETURN(const int64_t extent,
                                                 positive_constant_extent(loop, "unroll"));
                           if (extent > kMaxUnroll) {
                             return Status::errorf(
                                 "unrolling loop {} would copy its body {} "
                                 "times (at most {})",
                                 loop.var, extent, kMaxUnroll);
                           }
                           return with_kind(loop, ForKind::unrolled);
                         });
  }
  Expected<Stmt> operator()(const Hoist& d) {
    return rewrite_loops(kernel_.body, d.var,
                         [&](const For& loop, const Stmt& self, const BoundsScope&) {
                           return hoist_in_loop(loop, self, names_.vars);
                         });
  }
  Expected<Stmt> operator()(const Merge& d) { return LoopMerger(d).run(kernel_.body); }
  Expected<Stmt> operator()(const Accumulate& d) {
    KILN_RETURN_IF_ERROR(check_fresh(names_.vars, {&d.terms}));
    return rewrite_loops(kernel_.body, d.var,
                         [&](const For& loop, const Stmt&, const BoundsScope& scope) {
                           return accumulate_loop(loop, scope, d);
                         });
  }
  Expected<Stmt> operator()(const Cache& d) {
    const auto source = std::find_if(kernel_.params.begin(), kernel_.params.end(),
                                     [&](const Buffer& b) { return b.name() == d.buffer; });
    if (source == kernel_.params.end()) {
      return Status::errorf("{} is not a parameter of the kernel", d.buffer);
    }
    const std::string copy_var = d.local + ".i";
    KILN_RETURN_IF_ERROR(check_fresh(names_.buffers, {&d.local}));
    KILN_RETURN_IF_ERROR(check_fresh(names_.vars, {&copy_var}));
    return rewrite_loops(kernel_.body, d.var,
                         [&](const For& loop, const Stmt&, const BoundsScope& scope) {
                           return cache_in_loop(loop, scope, *source, d);
                         });
  }

 private:
  const Kernel& kernel_;
  NameCollector names_;
};

}  // namespace

std::string print(const Directive& directive) {
  struct Printer {
    std::string operator()(const Split& d) const {
      return fmt::format("split {} {} {} {}", d.var, d.factor, d.outer, d.inner);
    }
    std::string operator()(const Reorder& d) const {
      return fmt::format("reorder {}", fmt::join(d.vars, " "));
    }
    std::string operator()(const Partition& d) const {
      return fmt::format("partition {} {}", d.var, fmt::join(d.points, " "));
    }
    std::string operator()(const Fuse& d) const {
      return fmt::format("fuse {} {} {}", d.outer, d.inner, d.fused);
    }
    std::string operator()(const Vectorize& d) const { return "vectorize " + d.var; }
    std::string operator()(const Parallel& d) const { return "parallel " + d.var; }
    std::string operator()(const Unroll& d) const { return "unroll " + d.var; }
    std::string operator()(const Hoist& d) const { return "hoist " + d.var; }
    std::string operator()(const Cache& d) const {
      return fmt::format("cache {} {} {}", d.buffer, d.var, d.local);
    }
    std::string operator()(const Merge& d) const {
      return fmt::format("merge {} {}", d.first, d.second);
    }
    std::string operator()(const Accumulate& d) const {
      return fmt::format("accumulate {} {}", d.var, d.terms);
    }
  };
  return std::visit(Printer{}, directive);
}

std::string print(const Schedule& schedule) {
  std::string text;
  for (const Directive& directive : schedule.directives) text += print(directive) + "\n";
  return text;
}

Expected<Schedule> parse_schedule(std::string_view text) {
  Schedule schedule;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    std::vector<Token> tokens = tokenize(line);
    if (tokens.empty() || tokens[0].text[0] == '#') continue;
    KILN_ASSIGN_OR_RETURN(Directive directive, LineParser(line_number, std::move(tokens)).parse());
    schedule.directives.push_back(std::move(directive));
  }
  return schedule;
}

Expected<Kernel> apply_directive(const Kernel& kernel, const Directive& directive) {
  Expected<Stmt> body = std::visit(Applier(kernel), directive);
  if (!body) return body.status().with_context(print(directive));
  Kernel result{kernel.name, kernel.params, std::move(body).value()};
  const Status verified = verify(result);
  if (!verified.is_ok()) return verified.with_context(print(directive));
  return result;
}

bool apply_all_or_none(Kernel& kernel, Schedule& schedule,
                       const std::vector<Directive>& directives) {
  Kernel next = kernel;
  for (const Directive& directive : directives) {
    Expected<Kernel> applied = apply_directive(next, directive);
    if (!applied) return false;
    next = std::move(applied).value();
  }
  kernel = std::move(next);
  schedule.directives.insert(schedule.directives.end(), directives.begin(), directives.end());
  return true;
}

Expected<Kernel> apply_schedule(const Kernel& kernel, const Schedule& schedule) {
  Kernel current = kernel;
  for (size_t i = 0; i < schedule.directives.size(); ++i) {
    Expected<Kernel> next = apply_directive(current, schedule.directives[i]);
    if (!next) return next.status().with_context(fmt::format("directive {}", i + 1));
    current = std::move(next).value();
  }
  Kernel simplified = simplify(current);
  KILN_RETURN_IF_ERROR(verify(simplified));
  return simplified;
}

}  // namespace kiln::loop
