// Op costs (flops, bytes read, bytes written) and fusion kinds from the registry, against
// formulas worked out by hand for small shapes.
#include <gtest/gtest.h>

#include <vector>

#include "ir/op.h"

namespace kiln {
namespace {

// The cost of `op` on inputs of `input_types`, with attributes canonicalized and output types
// inferred through the registry as a node would have them.
Cost cost_of(Op op, const std::vector<TensorType>& input_types, const Attrs& attrs = {}) {
  const OpDef& def = op_def(op);
  Expected<Attrs> canonical = canonicalize_attrs(def, attrs);
  EXPECT_TRUE(canonical.has_value()) << canonical.status().message();
  Expected<std::vector<TensorType>> outputs = infer_types(def, input_types, *canonical);
  EXPECT_TRUE(outputs.has_value()) << outputs.status().message();
  return def.cost(input_types, *outputs, *canonical);
}

TEST(OpCost, MatmulCountsTwoFlopsPerMultiplyAdd) {
  // [2,3,4] x [4,5] -> [2,3,5]; each of the 30 outputs is a length-4 dot product.
  const Cost cost = cost_of(Op::matmul, {{DType::f32, {2, 3, 4}}, {DType::f32, {4, 5}}});
  EXPECT_EQ(cost.flops, 2.0 * 30 * 4);
  EXPECT_EQ(cost.bytes_read, (24 + 20) * 4);
  EXPECT_EQ(cost.bytes_written, 30 * 4);
}

TEST(OpCost, MatmulTransposeFlagsDoNotChangeTheWork) {
  // a^T with a = [4,3] is [3,4]; b^T with b = [5,4] is [4,5].
  const Cost cost = cost_of(Op::matmul, {{DType::f64, {4, 3}}, {DType::f64, {5, 4}}},
                            {{"transpose_a", true}, {"transpose_b", true}});
  EXPECT_EQ(cost.flops, 2.0 * 15 * 4);
  EXPECT_EQ(cost.bytes_read, (12 + 20) * 8);
  EXPECT_EQ(cost.bytes_written, 15 * 8);
}

TEST(OpCost, GroupedConvolutionCountsOnlyItsGroupsChannels) {
  // x [1,4,8,8], w [6,2,3,3] with 2 groups: y [1,6,6,6]; each output sums 2*3*3 products.
  const Cost cost =
      cost_of(Op::conv, {{DType::f32, {1, 4, 8, 8}}, {DType::f32, {6, 2, 3, 3}}}, {{"groups", 2}});
  EXPECT_EQ(cost.flops, 2.0 * 216 * 18);
  EXPECT_EQ(cost.bytes_read, (256 + 108) * 4);
  EXPECT_EQ(cost.bytes_written, 216 * 4);
}

TEST(OpCost, BroadcastBinaryReadsEachInputOnceAndCountsOutputs) {
  // f16 [4,4] + [4]: 16 adds, reads 16 + 4 halves, writes 16.
  const Cost cost = cost_of(Op::add, {{DType::f16, {4, 4}}, {DType::f16, {4}}});
  EXPECT_EQ(cost.flops, 16);
  EXPECT_EQ(cost.bytes_read, 20 * 2);
  EXPECT_EQ(cost.bytes_written, 16 * 2);
}

TEST(OpCost, ReductionCountsInputElements) {
  // sum of i64 [8,16] over axis 1: 128 additions (one per input element), writes 8.
  const Cost cost = cost_of(Op::reduce_sum, {{DType::i64, {8, 16}}}, {{"axes", {1}}});
  EXPECT_EQ(cost.flops, 128);
  EXPECT_EQ(cost.bytes_read, 128 * 8);
  EXPECT_EQ(cost.bytes_written, 8 * 8);
}

TEST(OpCost, PoolingCountsOneFlopPerWindowElement) {
  // max_pool of [1,2,6,6] with a 2x2 kernel, stride 2: 18 windows of 4 elements.
  const Cost cost = cost_of(Op::max_pool, {{DType::f32, {1, 2, 6, 6}}},
                            {{"kernel", {2, 2}}, {"strides", {2, 2}}});
  EXPECT_EQ(cost.flops, 18 * 4);
  EXPECT_EQ(cost.bytes_read, 72 * 4);
  EXPECT_EQ(cost.bytes_written, 18 * 4);
}

TEST(OpCost, LayoutOpsMoveBytesWithoutArithmetic) {
  const Cost cost = cost_of(Op::transpose, {{DType::bf16, {3, 5}}}, {{"perm", {1, 0}}});
  EXPECT_EQ(cost.flops, 0);
  EXPECT_EQ(cost.bytes_read, 15 * 2);
  EXPECT_EQ(cost.bytes_written, 15 * 2);
}

TEST(OpFusionKind, FollowsTheOpsAccessPattern) {
  EXPECT_EQ(op_def(Op::exp).fusion_kind, FusionKind::elementwise);
  EXPECT_EQ(op_def(Op::add).fusion_kind, FusionKind::broadcast);
  EXPECT_EQ(op_def(Op::transpose).fusion_kind, FusionKind::injective);
  EXPECT_EQ(op_def(Op::gather).fusion_kind, FusionKind::injective);
  EXPECT_EQ(op_def(Op::reduce_sum).fusion_kind, FusionKind::reduction);
  EXPECT_EQ(op_def(Op::softmax).fusion_kind, FusionKind::reduction);
  EXPECT_EQ(op_def(Op::matmul).fusion_kind, FusionKind::contraction);
  EXPECT_EQ(op_def(Op::conv).fusion_kind, FusionKind::contraction);
}

}  // namespace
}  // namespace kiln
