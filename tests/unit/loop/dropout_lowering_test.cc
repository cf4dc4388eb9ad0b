// dropout lowered through the dropout_bits intrinsic keeps exactly the elements the reference
// keeps (the same counter-based mask), for several ratios, seeds, offsets and shapes.
#include <gtest/gtest.h>

#include "unit/loop/lowering_check.h"

namespace kiln::loop {
namespace {

using testing::fixed;
using testing::in;
using testing::op_matches_interpreter;

TEST(Lowering, DropoutKeepsTheReferenceMask) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double ratio : {0.0, 0.1, 0.5, 0.9}) {
      for (int64_t seed : {int64_t{0}, int64_t{12345}, int64_t{-3}}) {
        EXPECT_TRUE(op_matches_interpreter(
            Op::dropout, {in(dtype, {3, 7, 5})},
            {{"ratio", ratio}, {"seed", seed}, {"offset", int64_t{1} << 40}}))
            << dtype_name(dtype) << " ratio " << ratio << " seed " << seed;
      }
    }
  }
  EXPECT_TRUE(op_matches_interpreter(Op::dropout, {in(DType::f32, {})}, {{"ratio", 0.3}}));
  EXPECT_TRUE(op_matches_interpreter(Op::dropout, {in(DType::f32, {1, 1, 9})}, {{"ratio", 0.3}}));
  // The seed an input, read from memory at run time.
  EXPECT_TRUE(op_matches_interpreter(
      Op::dropout, {in(DType::f32, {3, 7, 5}), fixed(Array::scalar(DType::i64, 123456789))},
      {{"ratio", 0.5}, {"offset", int64_t{11}}}));
}

}  // namespace
}  // namespace kiln::loop
