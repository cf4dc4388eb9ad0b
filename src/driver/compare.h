// Comparing computed tensors with expected ones: the check behind `kiln run --expected` and the
// ONNX conformance runner.
#pragma once

#include <string>

#include "ir/array.h"

namespace kiln {

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct Comparison {
  bool matches = false;
  // Over the elements compared (0 when there are none, or on a dtype or shape mismatch).
  double max_abs_error = 0;
  double max_rel_error = 0;
  // Why it does not match (dtype, shape, or the worst element); empty when it matches.
  std::string mismatch;
};

// Floating expected values match within atol + rtol * |expected|; integers and bool exactly.
// NaN matches NaN; an infinity matches only the same infinity.
Comparison compare_arrays(const Array& actual, const Array& expected, const Tolerance& tolerance);

}  // namespace kiln
