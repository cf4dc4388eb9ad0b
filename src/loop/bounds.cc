#include "loop/bounds.h"

#include <algorithm>
#include <limits>

#include "loop/scalar.h"

namespace kiln::loop {
namespace {

using Bound = std::optional<int64_t>;

Bound checked_add(Bound a, Bound b) {
  int64_t r;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Bound checked_sub(Bound a, Bound b) {
  int64_t r;
  if (!a || !b || __builtin_sub_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Bound checked_mul(Bound a, Bound b) {
  int64_t r;
  if (!a || !b || __builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

Bound min_of(Bound a, Bound b) {
  if (!a || !b) return std::nullopt;
  return std::min(*a, *b);
}

Bound max_of(Bound a, Bound b) {
  if (!a || !b) return std::nullopt;
  return std::max(*a, *b);
}

// The smaller of two upper bounds, either possibly unbounded (min(x, y) <= each of them).
Bound tighter_max(Bound a, Bound b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// The larger of two lower bounds (max(x, y) >= each of them).
Bound tighter_min(Bound a, Bound b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

Interval type_range(DType type) {
  switch (type) {
    case DType::boolean: return {0, 1};
    case DType::i32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default: return Interval::everything();
  }
}

// `a` with each side moved into `range` (saturation is monotone, so this bounds a
// saturating cast; for other expressions the out-of-range values would be overflow).
Interval clamp(const Interval& a, const Interval& range) {
  if (!range.is_bounded()) return a;
  auto into = [&](Bound x, int64_t unbounded_side) {
    return std::clamp(x.value_or(unbounded_side), *range.min, *range.max);
  };
  return {into(a.min, *range.min), into(a.max, *range.max)};
}

Interval add(const Interval& a, const Interval& b) {
  return {checked_add(a.min, b.min), checked_add(a.max, b.max)};
}

Interval sub(const Interval& a, const Interval& b) {
  return {checked_sub(a.min, b.max), checked_sub(a.max, b.min)};
}

Interval mul(const Interval& a, const Interval& b) {
  if (b.is_point() && !a.is_bounded()) {
    const int64_t c = *b.min;
    if (c == 0) return Interval::point(0);
    const Bound lo = checked_mul(a.min, c), hi = checked_mul(a.max, c);
    return c > 0 ? Interval{lo, hi} : Interval{hi, lo};
  }
  if (a.is_point() && !b.is_bounded()) return mul(b, a);
  if (!a.is_bounded() || !b.is_bounded()) return Interval::everything();
  const Bound p[] = {checked_mul(a.min, b.min), checked_mul(a.min, b.max),
                     checked_mul(a.max, b.min), checked_mul(a.max, b.max)};
  Interval r = {p[0], p[0]};
  for (const Bound& x : p) {
    if (!x) return Interval::everything();
    r.min = std::min(*r.min, *x);
    r.max = std::max(*r.max, *x);
  }
  return r;
}

// Floor division by a constant (else everything: x / 0 is 0, other divisors are rare).
Interval div(const Interval& a, const Interval& b) {
  if (!b.is_point() || *b.min == 0) return Interval::everything();
  const int64_t d = *b.min;
  if (d == -1) return sub(Interval::point(0), a);
  const Bound lo = a.min ? Bound(floor_div(*a.min, d)) : std::nullopt;
  const Bound hi = a.max ? Bound(floor_div(*a.max, d)) : std::nullopt;
  return d > 0 ? Interval{lo, hi} : Interval{hi, lo};
}

// Floor remainder: in [0, d-1] for a positive divisor d, tighter when `a` spans no multiple.
Interval mod(const Interval& a, const Interval& b) {
  if (!b.min || *b.min <= 0) return Interval::everything();
  if (b.is_point() && a.is_bounded()) {
    const int64_t d = *b.min;
    if (floor_div(*a.min, d) == floor_div(*a.max, d)) {
      return {floor_mod(*a.min, d), floor_mod(*a.max, d)};
    }
  }
  return {0, checked_sub(b.max, 1)};
}

class BoundsComputer {
 public:
  explicit BoundsComputer(const BoundsScope& scope) : scope_(scope) {}

  Interval bounds(const Expr& e) {
    if (is_floating(e.type())) return Interval::everything();
    return clamp(unclamped(e), type_range(e.type()));
  }

 private:
  Interval unclamped(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::int_imm: return Interval::point(e.as<IntImm>()->value);
      case ExprKind::variable: {
        auto it = scope_.find(e.as<Variable>()->name);
        return it == scope_.end() ? Interval::everything() : it->second;
      }
      case ExprKind::binary: return binary_bounds(*e.as<Binary>());
      case ExprKind::select: {
        const Select& s = *e.as<Select>();
        return Interval::make_union(bounds(s.true_value), bounds(s.false_value));
      }
      case ExprKind::cast: {
        // Casts between integers saturate, which is monotone: clamp the operand's bounds.
        const Cast& c = *e.as<Cast>();
        if (is_floating(c.value.type()) || e.type() == DType::boolean) {
          return Interval::everything();
        }
        return bounds(c.value);  // bounds() clamps to the target type's range
      }
      case ExprKind::let: {
        const Let& l = *e.as<Let>();
        BoundsScope inner = scope_;
        inner[l.name] = bounds(l.value);
        return BoundsComputer(inner).bounds(l.body);
      }
      default: return Interval::everything();
    }
  }

  Interval binary_bounds(const Binary& b) {
    if (is_comparison(b.op) || is_logical(b.op)) return {0, 1};
    const Interval x = bounds(b.a), y = bounds(b.b);
    switch (b.op) {
      case BinaryOp::add: return add(x, y);
      case BinaryOp::sub: return sub(x, y);
      case BinaryOp::mul: return mul(x, y);
      case BinaryOp::div: return div(x, y);
      case BinaryOp::mod: return mod(x, y);
      case BinaryOp::min: return {min_of(x.min, y.min), tighter_max(x.max, y.max)};
      case BinaryOp::max: return {tighter_min(x.min, y.min), max_of(x.max, y.max)};
      default: return Interval::everything();
    }
  }

  const BoundsScope& scope_;
};

}  // namespace

Interval Interval::make_union(const Interval& a, const Interval& b) {
  return {min_of(a.min, b.min), max_of(a.max, b.max)};
}

Interval operator+(const Interval& a, const Interval& b) { return add(a, b); }
Interval operator*(const Interval& a, int64_t scale) { return mul(a, Interval::point(scale)); }

Interval bounds_of(const Expr& expr, const BoundsScope& scope) {
  return BoundsComputer(scope).bounds(expr);
}

Interval loop_var_bounds(const Interval& min, const Interval& extent) {
  return {min.min, checked_sub(checked_add(min.max, extent.max), 1)};
}

}  // namespace kiln::loop
