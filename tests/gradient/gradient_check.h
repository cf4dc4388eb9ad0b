// Finite-difference checks of gradient rules, for the gradient tests.
//
// A forward graph in f64 is turned into a scalar loss, sum over its floating outputs y_k of
// sum(y_k * r_k) with fixed random weights r_k, so that every output element matters. The
// gradients autodiff builds for every floating graph input (run by the reference interpreter)
// are then compared with central differences of that loss, element by element: with the step
// h = 1e-6 * max(1, |x|), |analytic - numeric| <= 1e-6 * max(1, |numeric|).
//
// The inputs are the caller's, chosen away from the points where the op is not differentiable
// (kinks of relu and abs, ties of max, jumps of floor); the helpers below make such inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ir/array.h"
#include "ir/attribute.h"
#include "ir/graph.h"
#include "ir/op.h"
#include "support/status.h"

namespace kiln::testing {

// The gradient of the weighted-sum loss of `forward` with respect to each floating input, from
// the graph build_gradients appends, run by the interpreter. The weights come from `seed`.
Expected<std::vector<Array>> analytic_gradients(const Graph& forward,
                                                const std::vector<Array>& inputs,
                                                uint64_t seed = 7);

// The same gradients by central differences.
Expected<std::vector<Array>> numeric_gradients(const Graph& forward,
                                               const std::vector<Array>& inputs, uint64_t seed = 7);

// Whether the two agree within the tolerance above; the failure names the input and element.
::testing::AssertionResult gradients_match(const Expected<Graph>& forward,
                                           const std::vector<Array>& inputs);

// gradients_match for a graph of one `op` node applied to inputs of the arrays' types (all of
// its outputs are graph outputs).
::testing::AssertionResult op_gradients_match(Op op, const std::vector<Array>& inputs,
                                              const Attrs& attrs = {});

// Whether two gradient lists agree to `tolerance` relative (for rules checked against each
// other, as a composite against its decomposed form).
::testing::AssertionResult arrays_agree(const std::vector<Array>& actual,
                                        const std::vector<Array>& expected,
                                        double tolerance = 1e-9);

// ---- inputs ------------------------------------------------------------------------------------

// Standard normal f64 values.
Array normal(Shape shape, uint64_t seed);
// Uniform f64 values in [lo, hi].
Array uniform(Shape shape, double lo, double hi, uint64_t seed);
// Normal values pushed away from zero: |x| >= 0.2.
Array away_from_zero(Shape shape, uint64_t seed);
// Values in random order, pairwise at least 0.25 apart, all of the form 0.25 k + offset (so
// arrays with offsets 0 and 0.125 never share a value).
Array distinct(Shape shape, uint64_t seed, double offset = 0);
// Integers uniform in [0, range).
Array integers(Shape shape, int64_t range, uint64_t seed, DType dtype = DType::i64);

}  // namespace kiln::testing
