// Tests the reference interpreter (interp/interpreter.h): input checking, the live-element
// limit and release after last use, errors that name the failing node; the random input
// generator (interp/random_inputs.h); and array statistics (interp/statistics.h).
#include "interp/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "interp/random_inputs.h"
#include "interp/statistics.h"
#include "ir/builder.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::contains_all;
using ::kiln::testing::is_error_with;

Graph finish(GraphBuilder& b) {
  Expected<Graph> g = b.finish();
  EXPECT_TRUE(g.has_value()) << g.status().message();
  return g ? std::move(*g) : Graph();
}

// out = (x + y) * x, with y broadcast along x's rows.
Graph add_then_mul() {
  GraphBuilder b("add_then_mul");
  Value* x = b.input("x", DType::f64, {2, 2});
  Value* y = b.input("y", DType::f64, {2});
  b.output(b.mul(b.add(x, y), x));
  return finish(b);
}

// A chain of `length` relu nodes over f64[n].
Graph relu_chain(int64_t n, int length) {
  GraphBuilder b("chain");
  Value* v = b.input("x", DType::f64, {n});
  for (int i = 0; i < length; ++i) v = b.relu(v);
  b.output(v);
  return finish(b);
}

TEST(Interpreter, ComputesAGraphOnGivenInputs) {
  const Graph g = add_then_mul();
  const std::vector<Array> inputs = {Array(DType::f64, Shape{2, 2}, {1, 2, 3, 4}),
                                     Array(DType::f64, Shape{2}, {10, 20})};
  Expected<std::vector<Array>> out = interpret(g, inputs);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  ASSERT_EQ(out->size(), 1u);
  // (1+10)*1, (2+20)*2, (3+10)*3, (4+20)*4
  EXPECT_EQ((*out)[0], Array(DType::f64, Shape{2, 2}, {11, 44, 39, 96}));
}

TEST(Interpreter, RejectsTheWrongNumberOfInputs) {
  const Graph g = add_then_mul();
  const std::vector<Array> one = {Array(DType::f64, Shape{2, 2})};
  EXPECT_TRUE(
      is_error_with(interpret(g, one).status(), {"graph 'add_then_mul' takes 2 inputs, got 1"}));
  const std::vector<Array> three(3, Array(DType::f64, Shape{2}));
  EXPECT_TRUE(is_error_with(interpret(g, three).status(), {"takes 2 inputs, got 3"}));
}

TEST(Interpreter, RejectsAnInputOfTheWrongDtypeOrShape) {
  const Graph g = add_then_mul();
  const std::vector<Array> wrong_dtype = {Array(DType::f32, Shape{2, 2}),
                                          Array(DType::f64, Shape{2})};
  EXPECT_TRUE(
      is_error_with(interpret(g, wrong_dtype).status(), {"input %x", "f64[2,2]", "f32[2,2]"}));
  const std::vector<Array> wrong_shape = {Array(DType::f64, Shape{2, 2}),
                                          Array(DType::f64, Shape{3})};
  EXPECT_TRUE(is_error_with(interpret(g, wrong_shape).status(), {"input %y", "f64[2]", "f64[3]"}));
}

TEST(Interpreter, PassesGraphInputsThroughAsOutputs) {
  GraphBuilder b;
  Value* x = b.input("x", DType::i32, {3});
  b.output(x);
  b.output(b.neg(x));
  b.output(x);
  const Graph g = finish(b);
  const Array value(DType::i32, Shape{3}, {1, -2, 3});
  Expected<std::vector<Array>> out = interpret(g, std::vector<Array>{value});
  ASSERT_TRUE(out.has_value()) << out.status().message();
  ASSERT_EQ(out->size(), 3u);
  EXPECT_EQ((*out)[0], value);
  EXPECT_EQ((*out)[1], Array(DType::i32, Shape{3}, {-1, 2, -3}));
  EXPECT_EQ((*out)[2], value);
}

TEST(Interpreter, FailsOnAHugeIntermediateInsteadOfAllocatingIt) {
  // [65536, 1] + [1, 65536] broadcasts to 2^32 elements (32 GiB in f64), above the default
  // limit of 2^30; the inputs themselves are small.
  GraphBuilder b;
  Value* column = b.input("column", DType::f32, {65536, 1});
  Value* row = b.input("row", DType::f32, {1, 65536});
  Value* outer = b.apply1(Op::add, {column, row});
  ASSERT_NE(outer, nullptr) << b.status().message();
  b.output(outer);
  const Graph g = finish(b);
  const std::vector<Array> inputs = {Array(DType::f32, Shape{65536, 1}),
                                     Array(DType::f32, Shape{1, 65536})};
  Expected<std::vector<Array>> out = interpret(g, inputs);
  ASSERT_FALSE(out.has_value());
  EXPECT_TRUE(contains_all(out.status().message(),
                           {"node %" + outer->name() + " (add)", "limit of 1073741824"}));
}

TEST(Interpreter, ReleasesValuesAfterTheirLastUse) {
  // Along a chain only a value and its successor are ever live: 2 * 100 elements.
  const Graph g = relu_chain(100, 10);
  const std::vector<Array> inputs = {Array(DType::f64, Shape{100})};
  EXPECT_TRUE(interpret(g, inputs, {.max_live_elements = 200}).has_value());
  Expected<std::vector<Array>> over = interpret(g, inputs, {.max_live_elements = 199});
  ASSERT_FALSE(over.has_value());
  EXPECT_TRUE(contains_all(over.status().message(), {"(relu)", "200 elements", "limit of 199"}));
}

TEST(Interpreter, UnusedInputsAreNotHeld) {
  GraphBuilder b;
  Value* x = b.input("x", DType::f64, {10});
  b.input("unused", DType::f64, {1000});
  b.output(b.relu(x));
  const Graph g = finish(b);
  const std::vector<Array> inputs = {Array(DType::f64, Shape{10}), Array(DType::f64, Shape{1000})};
  Expected<std::vector<Array>> out = interpret(g, inputs, {.max_live_elements = 20});
  EXPECT_TRUE(out.has_value()) << out.status().message();
}

TEST(Interpreter, AnEvaluationErrorNamesTheFailingNode) {
  GraphBuilder b;
  Value* data = b.input("data", DType::f32, {3});
  Value* indices = b.input("indices", DType::i64, {2});
  Value* picked = b.gather(data, indices);
  Value* doubled = b.add(picked, picked);
  ASSERT_NE(doubled, nullptr) << b.status().message();
  b.output(doubled);
  const Graph g = finish(b);
  const std::vector<Array> inputs = {Array(DType::f32, Shape{3}, {1, 2, 3}),
                                     Array(DType::i64, Shape{2}, {0, 5})};
  Expected<std::vector<Array>> out = interpret(g, inputs);
  ASSERT_FALSE(out.has_value());
  EXPECT_TRUE(contains_all(out.status().message(),
                           {"%" + picked->name() + " = gather(%data, %indices)", "index 5"}));
}

TEST(RandomInputs, AreDeterministicPerSeed) {
  const Graph g = add_then_mul();
  EXPECT_EQ(random_inputs(g, {.seed = 42}), random_inputs(g, {.seed = 42}));
  const TensorType type{DType::f32, Shape{4, 5}};
  EXPECT_EQ(random_array(type, 9), random_array(type, 9));
}

TEST(RandomInputs, DifferAcrossSeedsAndAcrossInputs) {
  GraphBuilder b;
  b.output(b.add(b.input("a", DType::f32, {64}), b.input("b", DType::f32, {64})));
  const Graph g = finish(b);
  const std::vector<Array> first = random_inputs(g, {.seed = 1});
  const std::vector<Array> second = random_inputs(g, {.seed = 2});
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_NE(first[0], second[0]);
  EXPECT_NE(first[1], second[1]);
  EXPECT_NE(first[0], first[1]);  // same type, different values
  EXPECT_EQ(first[0].type(), g.inputs()[0]->type());
}

TEST(RandomInputs, IntegersCoverExactlyTheRange) {
  for (DType dtype : {DType::i32, DType::i64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Array a = random_array({dtype, Shape{1000}}, 3, 7);
    std::set<double> seen(a.data.begin(), a.data.end());
    EXPECT_EQ(seen, (std::set<double>{0, 1, 2, 3, 4, 5, 6}));
  }
  GraphBuilder b;
  b.output(b.input("labels", DType::i64, {500}));
  const Graph g = finish(b);
  const std::vector<Array> labels = random_inputs(g, {.seed = 4, .int_range = 2});
  ASSERT_EQ(labels.size(), 1u);
  for (double v : labels[0].data) {
    EXPECT_TRUE(v == 0 || v == 1) << v;
  }
}

TEST(RandomInputs, BoolsAreFairCoins) {
  const Array a = random_array({DType::boolean, Shape{1000}}, 8);
  int64_t ones = 0;
  for (double v : a.data) {
    ASSERT_TRUE(v == 0 || v == 1) << v;
    ones += v == 1;
  }
  // 1000 fair flips: the standard deviation of the count is about 16.
  EXPECT_GT(ones, 400);
  EXPECT_LT(ones, 600);
}

TEST(RandomInputs, FloatsAreRoundedToTheirDtype) {
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Array a = random_array({dtype, Shape{256}}, 12);
    std::set<double> distinct;
    for (double v : a.data) {
      EXPECT_EQ(round_to_dtype(v, dtype), v);
      distinct.insert(v);
    }
    EXPECT_GT(distinct.size(), 50u);
  }
  // f64 values are not rounded to a narrower type.
  const Array wide = random_array({DType::f64, Shape{64}}, 12);
  int64_t beyond_f32 = 0;
  for (double v : wide.data) beyond_f32 += round_to_dtype(v, DType::f32) != v;
  EXPECT_GT(beyond_f32, 60);
}

TEST(RandomInputs, FloatsAreStandardNormal) {
  const Array a = random_array({DType::f64, Shape{20000}}, 21);
  double sum = 0;
  double squares = 0;
  int64_t within_one = 0;
  for (double v : a.data) {
    sum += v;
    squares += v * v;
    within_one += std::abs(v) < 1;
  }
  const double n = static_cast<double>(a.size());
  // Standard errors: 0.007 for the mean, 0.01 for the variance, 0.0033 for the 68.27% share.
  EXPECT_NEAR(sum / n, 0.0, 0.04);
  EXPECT_NEAR(squares / n, 1.0, 0.05);
  EXPECT_NEAR(static_cast<double>(within_one) / n, 0.6827, 0.02);
}

TEST(RandomInputsDeathTest, ANonPositiveIntRangeIsAnInternalError) {
  EXPECT_DEATH(random_array({DType::i64, Shape{4}}, 0, 0), "internal compiler error.*int_range");
}

TEST(Statistics, SummarizeTheFiniteElementsAndCountTheOthers) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Array a(DType::f64, Shape{7}, {4, nan, 1, -inf, 3, inf, 2});
  const ArrayStatistics stats = compute_statistics(a);
  EXPECT_EQ(stats.count, 7);
  EXPECT_EQ(stats.nan_count, 1);
  EXPECT_EQ(stats.inf_count, 2);
  EXPECT_EQ(stats.min, 1);
  EXPECT_EQ(stats.max, 4);
  EXPECT_DOUBLE_EQ(stats.mean, 2.5);
  // Squared deviations 2.25 + 0.25 + 0.25 + 2.25 over 4 elements.
  EXPECT_DOUBLE_EQ(stats.stddev, std::sqrt(1.25));
  EXPECT_TRUE(contains_all(format_statistics(stats), {"min 1 ", "max 4 ", "nan 1", "inf 2"}));
}

TEST(Statistics, NegativeValuesAndASingleElement) {
  const ArrayStatistics negative =
      compute_statistics(Array(DType::f64, Shape{2, 2}, {-3, -1, -1, -3}));
  EXPECT_EQ(negative.min, -3);
  EXPECT_EQ(negative.max, -1);
  EXPECT_DOUBLE_EQ(negative.mean, -2);
  EXPECT_DOUBLE_EQ(negative.stddev, 1);

  const ArrayStatistics single = compute_statistics(Array::scalar(DType::f32, 0.5));
  EXPECT_EQ(single.count, 1);
  EXPECT_EQ(single.min, 0.5);
  EXPECT_EQ(single.max, 0.5);
  EXPECT_EQ(single.mean, 0.5);
  EXPECT_EQ(single.stddev, 0);
}

TEST(Statistics, WithoutFiniteElementsTheSummaryIsZero) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const ArrayStatistics stats = compute_statistics(
      Array(DType::f64, Shape{3}, {nan, nan, -std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(stats.count, 3);
  EXPECT_EQ(stats.nan_count, 2);
  EXPECT_EQ(stats.inf_count, 1);
  EXPECT_EQ(stats.min, 0);
  EXPECT_EQ(stats.max, 0);
  EXPECT_EQ(stats.mean, 0);
  EXPECT_EQ(stats.stddev, 0);
  EXPECT_TRUE(contains_all(format_statistics(compute_statistics(Array(DType::f64, Shape{0}))),
                           {"min 0 ", "std 0"}));
}

TEST(Statistics, HugeFiniteValuesDoNotOverflow) {
  const double big = std::numeric_limits<double>::max();
  const ArrayStatistics same = compute_statistics(Array(DType::f64, Shape{2}, {big, big}));
  EXPECT_EQ(same.inf_count, 0);
  EXPECT_EQ(same.mean, big);
  EXPECT_EQ(same.stddev, 0);

  // Mean 0; every element deviates by 1e308.
  const ArrayStatistics spread = compute_statistics(Array(DType::f64, Shape{2}, {-1e308, 1e308}));
  EXPECT_EQ(spread.mean, 0);
  EXPECT_DOUBLE_EQ(spread.stddev, 1e308);
}

}  // namespace
}  // namespace kiln
