#include "loop/simplify.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "loop/ir_visitor.h"
#include "loop/scalar.h"
#include "loop/substitute.h"
#include "support/check.h"

namespace kiln::loop {
namespace {

// --- Linear forms of integer expressions ---------------------------------------------------

struct LinearTerm {
  Expr atom;
  int64_t coefficient;
};

// sum(coefficient * atom) + constant, in the wrapping arithmetic of `type`.
struct LinearForm {
  DType type;
  std::vector<LinearTerm> terms;
  int64_t constant = 0;

  int64_t wrap_add(int64_t a, int64_t b) const {
    return wrap_to_type(static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)),
                        type);
  }
  int64_t wrap_mul(int64_t a, int64_t b) const {
    return wrap_to_type(static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)),
                        type);
  }

  void add_atom(const Expr& atom, int64_t coefficient) {
    for (LinearTerm& term : terms) {
      if (equal(term.atom, atom)) {
        term.coefficient = wrap_add(term.coefficient, coefficient);
        return;
      }
    }
    terms.push_back({atom, coefficient});
  }

  // Adds scale * e, looking through +, - and multiplication by a constant.
  void add(const Expr& e, int64_t scale) {
    if (std::optional<int64_t> c = as_const_int(e)) {
      constant = wrap_add(constant, wrap_mul(scale, *c));
      return;
    }
    const Binary* b = e.as<Binary>();
    if (b != nullptr && b->op == BinaryOp::add) {
      add(b->a, scale);
      add(b->b, scale);
    } else if (b != nullptr && b->op == BinaryOp::sub) {
      add(b->a, scale);
      add(b->b, wrap_mul(scale, -1));
    } else if (b != nullptr && b->op == BinaryOp::mul && as_const_int(b->b)) {
      add(b->a, wrap_mul(scale, *as_const_int(b->b)));
    } else if (b != nullptr && b->op == BinaryOp::mul && as_const_int(b->a)) {
      add(b->b, wrap_mul(scale, *as_const_int(b->a)));
    } else {
      add_atom(e, scale);
    }
  }
};

// The constant divisor of `e` when it is `a op d` for a constant d != 0.
std::optional<int64_t> constant_divisor(const Expr& e, BinaryOp op) {
  const Binary* b = e.as<Binary>();
  if (b == nullptr || b->op != op) return std::nullopt;
  const std::optional<int64_t> d = as_const_int(b->b);
  if (!d || *d == 0) return std::nullopt;
  return d;
}

// Puts back together what fusing loops takes apart: with floor division and remainder,
// x / d * d + x % d is x for every d != 0, so k*d*(x / d) + k*(x % d) becomes k*x (and x is
// added as a linear form of its own, so the next level can combine: fusing three loops of
// extents A, 56, 56 indexes f / 3136 * 3136 + (f / 56) % 56 * 56 + f % 56, which is f). A
// remainder of a quotient, (y / e) % d, pairs with y / (e*d), the form (y / e) / d takes.
void recombine_divisions(LinearForm& form) {
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t m = 0; m < form.terms.size() && !changed; ++m) {
      const std::optional<int64_t> d = constant_divisor(form.terms[m].atom, BinaryOp::mod);
      if (!d) continue;
      const Expr x = form.terms[m].atom.as<Binary>()->a;
      const int64_t k = form.terms[m].coefficient;
      std::vector<Expr> partners = {binary(BinaryOp::div, x, make_int(*d, x.type()))};
      const std::optional<int64_t> e = constant_divisor(x, BinaryOp::div);
      if (e && *e > 0 && *d > 0) {
        const Expr y = x.as<Binary>()->a;
        partners.push_back(binary(BinaryOp::div, y, make_int(*e * *d, y.type())));
      }
      for (size_t q = 0; q < form.terms.size() && !changed; ++q) {
        const bool pairs = std::any_of(partners.begin(), partners.end(), [&](const Expr& p) {
          return equal(form.terms[q].atom, p);
        });
        if (q == m || !pairs || form.terms[q].coefficient != form.wrap_mul(k, *d)) continue;
        form.terms.erase(form.terms.begin() + static_cast<std::ptrdiff_t>(std::max(m, q)));
        form.terms.erase(form.terms.begin() + static_cast<std::ptrdiff_t>(std::min(m, q)));
        form.add(x, k);
        changed = true;
      }
    }
  }
}

LinearForm linear_form(const Expr& e) {
  LinearForm form{e.type(), {}, 0};
  form.add(e, 1);
  recombine_divisions(form);
  return form;
}

Expr scaled(const Expr& atom, int64_t coefficient) {
  return coefficient == 1 ? atom : atom * make_int(coefficient, atom.type());
}

// The canonical expression of a linear form: positive terms in order, then negative terms
// subtracted, then the constant (or, when every term is negative, the constant first).
Expr rebuild(const LinearForm& form) {
  Expr result;
  for (const LinearTerm& term : form.terms) {
    if (term.coefficient <= 0) continue;
    Expr t = scaled(term.atom, term.coefficient);
    result = result.defined() ? result + t : t;
  }
  bool constant_placed = false;
  for (const LinearTerm& term : form.terms) {
    if (term.coefficient >= 0) continue;
    if (!result.defined()) {
      result = make_int(form.constant, form.type);
      constant_placed = true;
    }
    const int64_t magnitude = form.wrap_mul(term.coefficient, -1);
    result = magnitude > 0 ? result - scaled(term.atom, magnitude)
                           : result + scaled(term.atom, term.coefficient);  // the type's min
  }
  if (!result.defined()) return make_int(form.constant, form.type);
  if (constant_placed || form.constant == 0) return result;
  const int64_t magnitude = form.wrap_mul(form.constant, -1);
  return form.constant < 0 && magnitude > 0 ? result - make_int(magnitude, form.type)
                                            : result + make_int(form.constant, form.type);
}

Expr canonical_linear(const Expr& e) { return rebuild(linear_form(e)); }

BinaryOp flipped(BinaryOp op) {
  switch (op) {
    case BinaryOp::lt: return BinaryOp::gt;
    case BinaryOp::le: return BinaryOp::ge;
    case BinaryOp::gt: return BinaryOp::lt;
    case BinaryOp::ge: return BinaryOp::le;
    default: return op;  // eq, ne
  }
}

BinaryOp negated(BinaryOp op) {
  switch (op) {
    case BinaryOp::eq: return BinaryOp::ne;
    case BinaryOp::ne: return BinaryOp::eq;
    case BinaryOp::lt: return BinaryOp::ge;
    case BinaryOp::le: return BinaryOp::gt;
    case BinaryOp::gt: return BinaryOp::le;
    case BinaryOp::ge: return BinaryOp::lt;
    default: KILN_UNREACHABLE("'{}' is not a comparison", binary_op_symbol(op));
  }
}

// Whether `a op b` holds (true), fails (false) or depends (nullopt) for every a, b whose
// difference a - b lies in `d`.
std::optional<bool> decide_comparison(BinaryOp op, const Interval& d) {
  const bool lt0 = d.max && *d.max < 0, le0 = d.max && *d.max <= 0;
  const bool gt0 = d.min && *d.min > 0, ge0 = d.min && *d.min >= 0;
  auto decided = [](bool holds, bool fails) -> std::optional<bool> {
    if (holds) return true;
    if (fails) return false;
    return std::nullopt;
  };
  switch (op) {
    case BinaryOp::lt: return decided(lt0, ge0);
    case BinaryOp::le: return decided(le0, gt0);
    case BinaryOp::gt: return decided(gt0, le0);
    case BinaryOp::ge: return decided(ge0, lt0);
    case BinaryOp::eq: return decided(le0 && ge0, lt0 || gt0);
    case BinaryOp::ne: return decided(lt0 || gt0, le0 && ge0);
    default: KILN_UNREACHABLE("'{}' is not a comparison", binary_op_symbol(op));
  }
}

// --- The simplifier ------------------------------------------------------------------------

class Simplifier : public IRMutator {
 public:
  explicit Simplifier(BoundsScope scope) : scope_(std::move(scope)) {}

 protected:
  Expr visit_binary(const Binary& node, const Expr&) override {
    Expr a = mutate(node.a), b = mutate(node.b);
    if (is_const(a) && is_const(b)) {
      return make_scalar(node.type,
                         apply_binary(node.op, a.type(), const_value(a), const_value(b)));
    }
    if (is_logical(node.op)) return simplify_logical(node.op, a, b);
    if (is_comparison(node.op)) return simplify_comparison(node.op, a, b);
    if (is_floating(a.type())) return simplify_float_arithmetic(node.op, a, b);
    return simplify_integer_arithmetic(node.op, a, b);
  }

  Expr visit_not(const Not& node, const Expr&) override {
    Expr a = mutate(node.a);
    if (is_const(a)) return make_scalar(DType::boolean, apply_not(const_value(a)));
    if (const Not* inner = a.as<Not>()) return inner->a;
    if (const Binary* cmp = a.as<Binary>();
        cmp != nullptr && is_comparison(cmp->op) && !is_floating(cmp->a.type())) {
      return binary(negated(cmp->op), cmp->a, cmp->b);  // not valid for NaN
    }
    return !a;
  }

  Expr visit_select(const Select& node, const Expr&) override {
    Expr c = mutate(node.condition), t = mutate(node.true_value), f = mutate(node.false_value);
    if (is_const(c)) return is_true(const_value(c)) ? t : f;
    if (equal(t, f)) return t;
    if (const Not* inverse = c.as<Not>()) return select(inverse->a, f, t);
    return select(c, t, f);
  }

  Expr visit_cast(const Cast& node, const Expr&) override {
    Expr value = mutate(node.value);
    if (value.type() == node.type) return value;
    if (is_const(value)) {
      return make_scalar(node.type, apply_cast(node.type, value.type(), const_value(value)));
    }
    return cast(node.type, value);
  }

  Expr visit_call(const Call& node, const Expr&) override {
    std::vector<Expr> args;
    std::vector<Scalar> values;
    for (const Expr& arg : node.args) {
      args.push_back(mutate(arg));
      if (is_const(args.back())) values.push_back(const_value(args.back()));
    }
    if (values.size() == args.size()) {
      return make_scalar(node.type, apply_intrinsic(node.intrinsic, node.type, values));
    }
    return call(node.intrinsic, std::move(args));
  }

  Expr visit_let(const Let& node, const Expr&) override {
    Expr value = mutate(node.value);
    if (is_trivial(value)) return mutate(substitute(node.body, node.name, value));
    Expr body = with_bounds(node.name, bounds(value), [&] { return mutate(node.body); });
    if (!uses_var(body, node.name)) return body;
    return let(node.name, value, body);
  }

  Expr visit_reduce(const Reduce& node, const Expr&) override {
    Expr min = mutate(node.min), extent = mutate(node.extent);
    const std::optional<int64_t> n = as_const_int(extent);
    if (n && *n <= 0) return make_scalar(node.type, reduce_identity(node.op, node.type));
    if (n && *n == 1) return mutate(substitute(node.body, node.var, min));
    Expr body = with_bounds(node.var, loop_var_bounds(bounds(min), bounds(extent)),
                            [&] { return mutate(node.body); });
    if (std::optional<Expr> joined = join_nested_reductions(node, min, extent, body)) {
      return *joined;
    }
    return reduce(node.op, node.var, min, extent, body, node.vectorized);
  }

  // op(a, 0, A, op(b, 0, B, body)) is op(b, 0, A*B, body with a = b / B and b = b % B): the
  // same terms in the same order, so exact even for floats. Kept only when the body then
  // reads b linearly (every / and % of it simplified away), as when the two reduce adjacent
  // dims of a row-major tensor (a batch norm's sum over rows and columns of a plane): one
  // long contiguous reduction instead of many short ones.
  std::optional<Expr> join_nested_reductions(const Reduce& outer, const Expr& min,
                                             const Expr& extent, const Expr& body) {
    const Reduce* inner = body.as<Reduce>();
    const std::optional<int64_t> a_extent = as_const_int(extent);
    if (inner == nullptr || inner->op != outer.op || outer.vectorized || inner->vectorized ||
        as_const_int(min) != 0 || as_const_int(inner->min) != 0 || !a_extent) {
      return std::nullopt;
    }
    const std::optional<int64_t> b_extent = as_const_int(inner->extent);
    int64_t total = 0;
    if (!b_extent || *b_extent <= 1 || __builtin_mul_overflow(*a_extent, *b_extent, &total)) {
      return std::nullopt;
    }
    const Expr joined_var = var(inner->var);
    const Expr inner_body = substitute(
        substitute(inner->body, inner->var, joined_var % make_int(*b_extent)), outer.var,
        joined_var / make_int(*b_extent));
    const Expr simplified = with_bounds(inner->var, Interval{0, total - 1},
                                        [&] { return mutate(inner_body); });
    if (divides_var(simplified, inner->var)) return std::nullopt;
    return reduce(outer.op, inner->var, make_int(0), make_int(total), simplified);
  }

  Stmt visit_for(const For& node, const Stmt&) override {
    Expr min = mutate(node.min), extent = mutate(node.extent);
    const std::optional<int64_t> n = as_const_int(extent);
    if (n && *n <= 0) return no_op();
    if (n && *n == 1) return mutate(substitute(node.body, node.var, min));
    Stmt body = with_bounds(node.var, loop_var_bounds(bounds(min), bounds(extent)),
                            [&] { return mutate(node.body); });
    if (is_no_op(body)) return body;
    return for_loop(node.var, min, extent, node.for_kind, body);
  }

  Stmt visit_let_stmt(const LetStmt& node, const Stmt&) override {
    Expr value = mutate(node.value);
    if (is_trivial(value)) return mutate(substitute(node.body, node.name, value));
    Stmt body = with_bounds(node.name, bounds(value), [&] { return mutate(node.body); });
    if (!uses_var(body, node.name)) return body;
    return let_stmt(node.name, value, body);
  }

  Stmt visit_allocate(const Allocate& node, const Stmt&) override {
    Stmt body = mutate(node.body);
    if (!uses_buffer(body, node.buffer.name())) return body;
    return allocate(node.buffer, body);
  }

  Stmt visit_if_then_else(const IfThenElse& node, const Stmt&) override {
    Expr condition = mutate(node.condition);
    if (is_const(condition)) {
      if (is_true(const_value(condition))) return mutate(node.then_case);
      return node.else_case.defined() ? mutate(node.else_case) : no_op();
    }
    Stmt then_case = mutate(node.then_case);
    Stmt else_case = node.else_case.defined() ? mutate(node.else_case) : Stmt();
    if (else_case.defined() && is_no_op(else_case)) else_case = Stmt();
    if (!is_no_op(then_case)) return if_then_else(condition, then_case, else_case);
    if (!else_case.defined()) return no_op();
    return if_then_else(mutate(!condition), else_case);
  }

  Stmt visit_library_call(const LibraryCall& node, const Stmt& self) override {
    Stmt simplified = IRMutator::visit_library_call(node, self);
    const LibraryCall& g = *simplified.as<LibraryCall>();
    if (g.op != LibraryOp::gemm) return simplified;
    const auto at_most_zero = [](const Expr& e) {
      const std::optional<int64_t> value = as_const_int(e);
      return value && *value <= 0;
    };
    const GemmShape& shape = g.gemm();
    if (at_most_zero(shape.m) || at_most_zero(shape.n) ||
        (shape.accumulate && at_most_zero(shape.k))) {
      return no_op();
    }
    return simplified;
  }

  Stmt visit_block(const Block& node, const Stmt&) override {
    std::vector<Stmt> stmts;
    for (const Stmt& s : node.stmts) {
      Stmt simplified = mutate(s);
      if (const Block* inner = simplified.as<Block>()) {
        stmts.insert(stmts.end(), inner->stmts.begin(), inner->stmts.end());
      } else {
        stmts.push_back(simplified);
      }
    }
    return stmts.size() == 1 ? stmts[0] : block(std::move(stmts));
  }

 private:
  static bool is_trivial(const Expr& value) {
    return is_const(value) || value.kind() == ExprKind::variable;
  }

  Interval bounds(const Expr& e) const { return bounds_of(e, scope_); }

  // Bounds of the exact integer value of a linear form (no wrapping, no clamping to a type:
  // a form built from parts of an expression can exceed the type where the whole does not).
  Interval linear_bounds(const LinearForm& form) const {
    Interval result = Interval::point(form.constant);
    for (const LinearTerm& term : form.terms)
      result = result + bounds(term.atom) * term.coefficient;
    return result;
  }

  // Bounds of a - b for integer operands, with common terms cancelled.
  Interval difference_bounds(const Expr& a, const Expr& b) const {
    LinearForm form{DType::i64, {}, 0};
    form.add(a, 1);
    form.add(b, -1);
    return linear_bounds(form);
  }

  // Runs `fn` with `name` known to lie in `interval`.
  template <typename Fn>
  std::invoke_result_t<Fn> with_bounds(const std::string& name, const Interval& interval, Fn&& fn) {
    std::optional<Interval> saved;
    if (auto it = scope_.find(name); it != scope_.end()) saved = it->second;
    scope_[name] = interval;
    auto result = fn();
    if (saved) {
      scope_[name] = *saved;
    } else {
      scope_.erase(name);
    }
    return result;
  }

  Expr simplify_logical(BinaryOp op, const Expr& a, const Expr& b) {
    const bool is_and = op == BinaryOp::logical_and;
    // x && true = x, x && false = false; x || false = x, x || true = true.
    for (const auto& [c, other] : {std::pair(a, b), std::pair(b, a)}) {
      if (!is_const(c)) continue;
      return is_true(const_value(c)) == is_and ? other : c;
    }
    if (equal(a, b)) return a;
    return binary(op, a, b);
  }

  Expr simplify_comparison(BinaryOp op, const Expr& a, const Expr& b) {
    if (is_const(a)) return simplify_comparison(flipped(op), b, a);  // b is not constant
    if (is_integer(a.type())) {
      if (std::optional<bool> known = decide_comparison(op, difference_bounds(a, b))) {
        return make_bool(*known);
      }
    }
    return binary(op, a, b);
  }

  Expr simplify_float_arithmetic(BinaryOp op, const Expr& a, const Expr& b) {
    if (is_const(a) && (op == BinaryOp::add || op == BinaryOp::mul)) {
      return simplify_float_arithmetic(op, b, a);  // b is not constant
    }
    const auto* c = b.as<FloatImm>();
    if (c != nullptr) {
      const bool one = c->value == 1.0;
      const bool positive_zero = c->value == 0.0 && !std::signbit(c->value);
      if ((one && (op == BinaryOp::mul || op == BinaryOp::div)) ||
          (positive_zero && op == BinaryOp::sub)) {
        return a;
      }
    }
    return binary(op, a, b);
  }

  Expr simplify_integer_arithmetic(BinaryOp op, const Expr& a, const Expr& b) {
    switch (op) {
      case BinaryOp::add:
      case BinaryOp::sub:
      case BinaryOp::mul: return canonical_linear(binary(op, a, b));
      case BinaryOp::div:
        if (std::optional<int64_t> d = as_const_int(b)) return simplify_div(a, *d);
        return binary(op, a, b);
      case BinaryOp::mod:
        if (std::optional<int64_t> d = as_const_int(b)) return simplify_mod(a, *d);
        return binary(op, a, b);
      case BinaryOp::min:
      case BinaryOp::max: return simplify_min_max(op, a, b);
      default: KILN_UNREACHABLE("'{}' is not arithmetic", binary_op_symbol(op));
    }
  }

  // a / d for a constant d: see the rules in simplify.h.
  Expr simplify_div(const Expr& a, int64_t d) {
    const DType type = a.type();
    if (d == 0) return make_zero(type);
    if (d == 1) return a;
    if (d == -1) return canonical_linear(make_zero(type) - a);
    // a = q*d + r with q collecting the terms (and the part of the constant) d divides.
    const LinearForm form = linear_form(a);
    LinearForm q{type, {}, floor_div(form.constant, d)};
    LinearForm r{type, {}, floor_mod(form.constant, d)};
    for (const LinearTerm& term : form.terms) {
      if (floor_mod(term.coefficient, d) == 0) {
        q.terms.push_back({term.atom, term.coefficient / d});
      } else {
        r.terms.push_back(term);
      }
    }
    const Interval rb = linear_bounds(r);
    if (rb.is_bounded() && floor_div(*rb.min, d) == floor_div(*rb.max, d)) {
      q.constant = q.wrap_add(q.constant, floor_div(*rb.min, d));
      return rebuild(q);
    }
    const std::optional<FactorSplit> split = split_by_common_factor(r, d);
    Expr remainder_quotient = split ? simplify_div(rebuild(split->high), d / split->factor)
                                    : nested_div(rebuild(r), d);
    if (q.terms.empty() && q.constant == 0) return remainder_quotient;
    q.add_atom(remainder_quotient, 1);
    return rebuild(q);
  }

  // r / d, as one division when r is itself a division by a positive constant.
  Expr nested_div(const Expr& r, int64_t d) {
    const Binary* inner = r.as<Binary>();
    if (d > 0 && inner && inner->op == BinaryOp::div) {
      std::optional<int64_t> d2 = as_const_int(inner->b);
      int64_t product;
      if (d2 && *d2 > 0 && !__builtin_mul_overflow(d, *d2, &product) &&
          wrap_to_type(product, r.type()) == product) {
        return simplify_div(inner->a, product);
      }
    }
    return binary(BinaryOp::div, r, make_int(d, r.type()));
  }

  // a % d for a constant d: see the rules in simplify.h.
  Expr simplify_mod(const Expr& a, int64_t d) {
    const DType type = a.type();
    if (d == 0 || d == 1 || d == -1) return make_zero(type);
    const LinearForm form = linear_form(a);
    LinearForm r{type, {}, floor_mod(form.constant, d)};
    for (const LinearTerm& term : form.terms) {
      if (floor_mod(term.coefficient, d) != 0) r.terms.push_back(term);
    }
    const Interval rb = linear_bounds(r);
    if (rb.is_bounded() && floor_div(*rb.min, d) == floor_div(*rb.max, d)) {
      r.constant = r.wrap_add(r.constant, r.wrap_mul(floor_div(*rb.min, d), -d));
      return rebuild(r);
    }
    if (std::optional<FactorSplit> split = split_by_common_factor(r, d)) {
      LinearForm result = std::move(split->low);
      result.add_atom(simplify_mod(rebuild(split->high), d / split->factor), split->factor);
      return canonical_linear(rebuild(result));
    }
    return nested_mod(rebuild(r), d);
  }

  // r = factor*high + low with 0 <= low < factor, for a factor of d > 0 (the largest that
  // is a term's coefficient): then r / d = high / (d/factor) and r % d = factor*(high %
  // (d/factor)) + low, exactly in floor division. An index into a reshaped tensor read back
  // across the reshape, (k*256 + i) / 32768 for i in [0, 256), is k / 128 so.
  struct FactorSplit {
    int64_t factor;
    LinearForm high, low;
  };
  std::optional<FactorSplit> split_by_common_factor(const LinearForm& r, int64_t d) const {
    if (d <= 1) return std::nullopt;
    std::vector<int64_t> factors;
    for (const LinearTerm& term : r.terms) {
      if (term.coefficient > 1 && term.coefficient < d && d % term.coefficient == 0) {
        factors.push_back(term.coefficient);
      }
    }
    std::ranges::sort(factors, std::greater<>());
    for (const int64_t factor : factors) {
      FactorSplit split{factor, {r.type, {}, floor_div(r.constant, factor)},
                        {r.type, {}, floor_mod(r.constant, factor)}};
      for (const LinearTerm& term : r.terms) {
        if (term.coefficient % factor == 0) {
          split.high.terms.push_back({term.atom, term.coefficient / factor});
        } else {
          split.low.terms.push_back(term);
        }
      }
      const Interval low = linear_bounds(split.low);
      if (low.is_bounded() && *low.min >= 0 && *low.max < factor) return split;
    }
    return std::nullopt;
  }

  // r % d, as one remainder when r is a remainder by a positive multiple of d.
  Expr nested_mod(const Expr& r, int64_t d) {
    const Binary* inner = r.as<Binary>();
    if (d > 0 && inner && inner->op == BinaryOp::mod) {
      std::optional<int64_t> d2 = as_const_int(inner->b);
      if (d2 && *d2 > 0 && *d2 % d == 0) return simplify_mod(inner->a, d);
    }
    return binary(BinaryOp::mod, r, make_int(d, r.type()));
  }

  Expr simplify_min_max(BinaryOp op, const Expr& a, const Expr& b) {
    if (equal(a, b)) return a;
    if (is_const(a)) return simplify_min_max(op, b, a);  // constants on the right
    // min(min(x, c1), c2) = min(x, min(c1, c2)).
    if (const Binary* inner = a.as<Binary>();
        inner && inner->op == op && is_const(inner->b) && is_const(b)) {
      Scalar c = apply_binary(op, a.type(), const_value(inner->b), const_value(b));
      return simplify_min_max(op, inner->a, make_scalar(a.type(), c));
    }
    const Interval d = difference_bounds(a, b);
    const bool a_smaller = d.max && *d.max <= 0, b_smaller = d.min && *d.min >= 0;
    if (a_smaller) return op == BinaryOp::min ? a : b;
    if (b_smaller) return op == BinaryOp::min ? b : a;
    return binary(op, a, b);
  }

  BoundsScope scope_;
};

}  // namespace

Expr simplify(const Expr& expr, const BoundsScope& scope) { return Simplifier(scope).mutate(expr); }

Stmt simplify(const Stmt& stmt, const BoundsScope& scope) { return Simplifier(scope).mutate(stmt); }

Kernel simplify(const Kernel& kernel) {
  return {kernel.name, kernel.params, simplify(kernel.body)};
}

}  // namespace kiln::loop
