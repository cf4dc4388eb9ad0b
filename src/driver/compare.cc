#include "driver/compare.h"

#include <cmath>

#include <fmt/format.h>

namespace kiln {

Comparison compare_arrays(const Array& actual, const Array& expected, const Tolerance& tolerance) {
  Comparison result;
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    result.mismatch = fmt::format("got {}, expected {}", actual.type().to_string(),
                                  expected.type().to_string());
    return result;
  }
  const bool exact = !is_floating(expected.dtype);
  const double atol = exact ? 0 : tolerance.atol;
  const double rtol = exact ? 0 : tolerance.rtol;
  int64_t worst = -1;
  double worst_excess = 0;
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (std::isnan(a) && std::isnan(e)) continue;
    if (std::isinf(a) || std::isinf(e) || std::isnan(a) || std::isnan(e)) {
      if (a == e) continue;
      worst = i;
      worst_excess = INFINITY;
      continue;
    }
    const double abs_error = std::fabs(a - e);
    result.max_abs_error = std::max(result.max_abs_error, abs_error);
    if (e != 0) result.max_rel_error = std::max(result.max_rel_error, abs_error / std::fabs(e));
    const double excess = abs_error - (atol + rtol * std::fabs(e));
    if (excess > 0 && excess > worst_excess) {
      worst = i;
      worst_excess = excess;
    }
  }
  if (worst >= 0) {
    result.mismatch = fmt::format("element {} is {}, expected {} (max abs error {:.3g})", worst,
                                  actual[worst], expected[worst], result.max_abs_error);
    return result;
  }
  result.matches = true;
  return result;
}

}  // namespace kiln
