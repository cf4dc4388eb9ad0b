// Gradient rules of the reductions against central finite differences.
#include <gtest/gtest.h>

#include <vector>

#include "gradient/gradient_check.h"

namespace kiln::testing {
namespace {

struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepdims;
};

const ReduceAttrs kReductions[] = {{{}, false}, {{1}, false}, {{0, 2}, true}, {{-1}, true}};

Attrs attrs_of(const ReduceAttrs& r) { return {{"axes", r.axes}, {"keepdims", r.keepdims}}; }

TEST(ReductionGradient, SumAndMeanOverAxes) {
  for (const ReduceAttrs& r : kReductions) {
    for (Op op : {Op::reduce_sum, Op::reduce_mean}) {
      EXPECT_TRUE(op_gradients_match(op, {normal(Shape{2, 3, 4}, 1)}, attrs_of(r)))
          << op_def(op).name << " axes " << r.axes.size();
    }
  }
}

TEST(ReductionGradient, MaxAndMinWithoutTies) {
  for (const ReduceAttrs& r : kReductions) {
    for (Op op : {Op::reduce_max, Op::reduce_min}) {
      EXPECT_TRUE(op_gradients_match(op, {distinct(Shape{2, 3, 4}, 2)}, attrs_of(r)))
          << op_def(op).name << " axes " << r.axes.size();
    }
  }
}

TEST(ReductionGradient, ProdWithoutZeros) {
  for (const ReduceAttrs& r : kReductions) {
    EXPECT_TRUE(
        op_gradients_match(Op::reduce_prod, {uniform(Shape{2, 3, 4}, 0.5, 1.5, 3)}, attrs_of(r)));
  }
}

// prod is linear in each element, so central differences are exact even at zeros: rows with
// one zero (whose gradient is the product of the rest) and with two (all zero).
TEST(ReductionGradient, ProdWithZeros) {
  const Array x(DType::f64, Shape{3, 3}, {0, 1.5, -2, 0.5, 0, 0, 1.25, 2, -0.5});
  EXPECT_TRUE(op_gradients_match(Op::reduce_prod, {x}, {{"axes", {1}}}));
  EXPECT_TRUE(op_gradients_match(Op::reduce_prod, {x}, {{"axes", {0}}, {"keepdims", true}}));
}

}  // namespace
}  // namespace kiln::testing
