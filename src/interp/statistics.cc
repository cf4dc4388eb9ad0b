#include "interp/statistics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kiln {

ArrayStatistics compute_statistics(const Array& array) {
  ArrayStatistics stats;
  stats.count = array.size();
  int64_t finite = 0;
  double sum = 0;
  for (double v : array.data) {
    if (std::isnan(v)) {
      ++stats.nan_count;
    } else if (std::isinf(v)) {
      ++stats.inf_count;
    } else {
      stats.min = finite == 0 ? v : std::min(stats.min, v);
      stats.max = finite == 0 ? v : std::max(stats.max, v);
      sum += v;
      ++finite;
    }
  }
  if (finite == 0) return stats;
  stats.mean = sum / static_cast<double>(finite);
  double squares = 0;
  for (double v : array.data) {
    if (std::isfinite(v)) squares += (v - stats.mean) * (v - stats.mean);
  }
  stats.stddev = std::sqrt(squares / static_cast<double>(finite));
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
