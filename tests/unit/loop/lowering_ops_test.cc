// Every op with a compute definition, lowered as a one-op group and run by the loop-IR
// evaluator on random inputs, against the reference interpreter: the cases of
// lowering_op_cases.h.
#include <gtest/gtest.h>

#include "unit/loop/lowering_op_cases.h"

namespace kiln::loop {
namespace {

namespace cases = testing::op_cases;

const testing::OpCheck kCheck(testing::op_matches_interpreter);

TEST(Lowering, UnaryFloatOps) { cases::unary_float_ops(kCheck); }
TEST(Lowering, RoundIsHalfToEven) { cases::round_is_half_to_even(kCheck); }
TEST(Lowering, UnaryIntegerAndBoolOps) { cases::unary_integer_and_bool_ops(kCheck); }
TEST(Lowering, Cast) { cases::casts(kCheck); }
TEST(Lowering, BinaryOpsBroadcast) { cases::binary_ops_broadcast(kCheck); }
TEST(Lowering, ComparisonsLogicAndWhere) { cases::comparisons_logic_and_where(kCheck); }
TEST(Lowering, Reductions) { cases::reductions(kCheck); }
TEST(Lowering, ArgReductions) { cases::arg_reductions(kCheck); }
TEST(Lowering, ReshapeTransposeBroadcast) { cases::reshape_transpose_broadcast(kCheck); }
TEST(Lowering, SliceWithStepsIncludingNegative) {
  cases::slice_with_steps_including_negative(kCheck);
}
TEST(Lowering, ConcatAndSplit) { cases::concat_and_split(kCheck); }
TEST(Lowering, PadCropsAndFills) { cases::pad_crops_and_fills(kCheck); }
TEST(Lowering, GatherWrapsNegativeIndices) { cases::gather_wraps_negative_indices(kCheck); }
TEST(Lowering, OneHotIotaFillConstant) { cases::one_hot_iota_fill_constant(kCheck); }
TEST(Lowering, SoftmaxAndLogSoftmax) { cases::softmax_and_log_softmax(kCheck); }
TEST(Lowering, Normalizations) { cases::normalizations(kCheck); }
TEST(Lowering, Losses) { cases::losses(kCheck); }
TEST(Lowering, Matmul) { cases::matmul(kCheck); }
TEST(Lowering, ConvAndItsGradients) { cases::conv_and_its_gradients(kCheck); }
TEST(Lowering, SparseTimesDense) { cases::sparse_times_dense(kCheck); }
TEST(Lowering, Pooling) { cases::pooling(kCheck); }
TEST(Lowering, MaxPoolGrad) { cases::max_pool_grad(kCheck); }
TEST(Lowering, MaxPoolGradRoutesTiesToTheFirstMaximum) {
  cases::max_pool_grad_routes_ties_to_the_first_maximum(kCheck);
}
TEST(Lowering, ScatterAdd) { cases::scatter_add(kCheck); }

}  // namespace
}  // namespace kiln::loop
