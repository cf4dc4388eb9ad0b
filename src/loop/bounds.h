// Interval analysis of integer expressions: the facts the simplifier proves things with.
//
// `bounds_of(e, scope)` returns an Interval [min, max] (inclusive, either side possibly
// unbounded) that contains every value the i32/i64/bool expression `e` can take when each
// variable in `scope` lies in its interval (variables not in the scope are unbounded). Since
// integer overflow is undefined (loop/expr.h), results are computed exactly and an interval
// whose arithmetic would overflow int64 loses that side. Floating expressions are unbounded.
//
//   bounds_of(i*4 + j, {i: [0, 7], j: [0, 3]})  = [0, 31]
//   bounds_of((i*4 + j) % 4, {j: [0, 3]})        = [0, 3]
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "loop/expr.h"

namespace kiln::loop {

struct Interval {
  std::optional<int64_t> min, max;  // inclusive; nullopt is unbounded

  static Interval everything() { return {}; }
  static Interval point(int64_t value) { return {value, value}; }
  bool is_bounded() const { return min.has_value() && max.has_value(); }
  bool is_point() const { return is_bounded() && *min == *max; }
  // [a.min, b.max]-style hull of both.
  static Interval make_union(const Interval& a, const Interval& b);
  bool operator==(const Interval&) const = default;
};

// Exact interval arithmetic; a side whose value would overflow int64 becomes unbounded.
Interval operator+(const Interval& a, const Interval& b);
Interval operator*(const Interval& a, int64_t scale);

using BoundsScope = std::map<std::string, Interval, std::less<>>;

Interval bounds_of(const Expr& expr, const BoundsScope& scope);

// The values of loop variable v in `for (v, min, extent)`, given the bounds of min and extent:
// [min.min, min.max + extent.max - 1].
Interval loop_var_bounds(const Interval& min, const Interval& extent);

}  // namespace kiln::loop
