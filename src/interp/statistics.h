// Summary statistics of an array, as `kiln check` prints them.
#pragma once

#include <cstdint>
#include <string>

#include "ir/array.h"

namespace kiln {

struct ArrayStatistics {
  int64_t count = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  // Over the finite elements (0 when there are none).
  double min = 0;
  double max = 0;
  double mean = 0;
  double stddev = 0;  // population standard deviation
};

ArrayStatistics compute_statistics(const Array& array);
std::string format_statistics(const ArrayStatistics& stats);

}  // namespace kiln
