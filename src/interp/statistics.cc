#include "interp/statistics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kiln {

ArrayStatistics compute_statistics(const Array& array) {
  ArrayStatistics stats;
  stats.count = array.size();
  int64_t finite = 0;
  for (double v : array.data) {
    if (std::isnan(v)) {
      ++stats.nan_count;
    } else if (std::isinf(v)) {
      ++stats.inf_count;
    } else {
      stats.min = finite == 0 ? v : std::min(stats.min, v);
      stats.max = finite == 0 ? v : std::max(stats.max, v);
      ++finite;
    }
  }
  const double largest = std::max(std::abs(stats.min), std::abs(stats.max));
  if (largest == 0) return stats;
  // The sums run over the elements scaled by a power of two into (-1, 1), so that finite
  // elements near the top of the double range cannot overflow them (for any element not
  // negligible beside the largest, the scaling is exact).
  const int exponent = std::ilogb(largest) + 1;
  double sum = 0;
  for (double v : array.data) {
    if (std::isfinite(v)) sum += std::scalbn(v, -exponent);
  }
  const double scaled_mean = sum / static_cast<double>(finite);
  double squares = 0;
  for (double v : array.data) {
    if (!std::isfinite(v)) continue;
    const double deviation = std::scalbn(v, -exponent) - scaled_mean;
    squares += deviation * deviation;
  }
  stats.mean = std::scalbn(scaled_mean, exponent);
  stats.stddev = std::scalbn(std::sqrt(squares / static_cast<double>(finite)), exponent);
  return stats;
}

std::string format_statistics(const ArrayStatistics& stats) {
  std::string text = fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}  std {:.6g}", stats.min,
                                 stats.max, stats.mean, stats.stddev);
  if (stats.nan_count > 0) text += fmt::format("  nan {}", stats.nan_count);
  if (stats.inf_count > 0) text += fmt::format("  inf {}", stats.inf_count);
  return text;
}

}  // namespace kiln
