// Helpers for per-op numeric tests: evaluate one op through its registry record (canonical
// attributes, type inference, reference evaluation) and compare with expected values that the
// test states independently (by hand, by identity, or from NumPy).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ir/array.h"
#include "ir/op.h"

namespace kiln::testing {

inline Expected<std::vector<Array>> eval_op(Op op, const std::vector<Array>& inputs,
                                            const Attrs& attrs = {}) {
  const OpDef& def = op_def(op);
  KILN_ASSIGN_OR_RETURN(Attrs canonical, canonicalize_attrs(def, attrs));
  std::vector<TensorType> types;
  for (const Array& a : inputs) types.push_back(a.type());
  KILN_ASSIGN_OR_RETURN(std::vector<TensorType> out_types, infer_types(def, types, canonical));
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, def.eval(inputs, canonical, out_types));
  if (outputs.size() != out_types.size()) {
    return Status::errorf("eval returned {} outputs, inference {}", outputs.size(),
                          out_types.size());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].type() != out_types[i]) {
      return Status::errorf("output {} has type {} but inference said {}", i,
                            outputs[i].type().to_string(), out_types[i].to_string());
    }
  }
  return outputs;
}

// Evaluates and returns output `index`; fails the test (and returns an empty array) on error.
inline Array eval_output(Op op, const std::vector<Array>& inputs, const Attrs& attrs = {},
                         size_t index = 0) {
  Expected<std::vector<Array>> result = eval_op(op, inputs, attrs);
  EXPECT_TRUE(result.has_value()) << result.status().message();
  if (!result || index >= result->size()) return Array();
  return (*result)[index];
}

// The error message of evaluating (or inferring) `op`, or "" if it succeeded.
inline std::string eval_error(Op op, const std::vector<Array>& inputs, const Attrs& attrs = {}) {
  Expected<std::vector<Array>> result = eval_op(op, inputs, attrs);
  return result ? std::string() : result.status().message();
}

inline Array f64(Shape shape, std::vector<double> values) {
  return Array(DType::f64, std::move(shape), std::move(values));
}
inline Array f32(Shape shape, std::vector<double> values) {
  return Array(DType::f32, std::move(shape), std::move(values));
}
inline Array i64(Shape shape, std::vector<double> values) {
  return Array(DType::i64, std::move(shape), std::move(values));
}
inline Array i32(Shape shape, std::vector<double> values) {
  return Array(DType::i32, std::move(shape), std::move(values));
}
inline Array boolean(Shape shape, std::vector<double> values) {
  return Array(DType::boolean, std::move(shape), std::move(values));
}

// Same dtype and shape, and every element within abs_tol + rel_tol * |expected| (NaN matches
// NaN, infinities must match exactly).
inline ::testing::AssertionResult arrays_near(const Array& actual, const Array& expected,
                                              double abs_tol = 1e-12, double rel_tol = 1e-12) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    return ::testing::AssertionFailure() << "type " << actual.type().to_string() << " != expected "
                                         << expected.type().to_string();
  }
  for (int64_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double e = expected[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) || std::isinf(a)) {
      if (a == e) continue;
    } else if (std::fabs(a - e) <= abs_tol + rel_tol * std::fabs(e)) {
      continue;
    }
    return ::testing::AssertionFailure()
           << "element " << i << ": got " << a << ", expected " << e;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
