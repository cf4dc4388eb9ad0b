// Scalar values of the loop IR and the one definition of what each operator computes.
//
// A Scalar holds an integer or bool value as int64 (bool is 0 or 1, i32 values are in i32's
// range) and a floating value as a double already rounded to its type. The evaluator
// (loop/evaluator.h) and the simplifier's constant folding both compute through these
// functions, so folding a constant can never disagree with running the code. The semantics
// are those stated in loop/expr.h: integer arithmetic wraps (overflow is undefined in the IR,
// so any defined result is allowed), integer `/` and `%` are floor division and its remainder
// with x / 0 = x % 0 = 0, floating operations round once to the type.
#pragma once

#include <cstdint>
#include <span>
#include <variant>

#include "ir/dtype.h"
#include "loop/expr.h"

namespace kiln::loop {

using Scalar = std::variant<int64_t, double>;

// `value` wrapped to the range of `type` (i32: two's complement; bool: value != 0).
int64_t wrap_to_type(int64_t value, DType type);
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

// `a op b` for operands of type `operand_type`; comparisons and logical ops return a bool.
Scalar apply_binary(BinaryOp op, DType operand_type, const Scalar& a, const Scalar& b);
Scalar apply_not(const Scalar& a);
Scalar apply_cast(DType to, DType from, const Scalar& value);
Scalar apply_intrinsic(Intrinsic intrinsic, DType type, std::span<const Scalar> args);
// The value of a reduction over an empty range.
Scalar reduce_identity(ReduceOp op, DType type);

// The Scalar of a constant expression (IntImm or FloatImm), and back.
Scalar const_value(const Expr& constant);
Expr make_scalar(DType type, const Scalar& value);
bool is_true(const Scalar& value);  // for bool scalars

}  // namespace kiln::loop
