// The C++ spelling of loop-IR types, constants and operators, shared by the CPU and CUDA code
// generators (codegen/cpu/emitter.h, codegen/cuda/emitter.h). Both preludes define the helpers
// these spellings call (kiln_min, kiln_div, kiln_round_f16, kiln_limits, kiln_bool, ...) with
// the semantics of loop/expr.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/dtype.h"
#include "loop/expr.h"
#include "loop/scalar.h"

namespace kiln::codegen {

// The C++ type that holds a value of `dtype` in generated code: float for f32, f16 and bf16.
std::string_view value_type(DType dtype);
// The C++ type of one element of a buffer of `dtype` in memory: f16 and bf16 as their 16-bit
// patterns (uint16_t), bool as the prelude's one-byte kiln_bool.
std::string_view storage_type(DType dtype);
// `value` (a float or double expression) rounded to `dtype` where the C++ type holding it is
// wider than the dtype.
std::string round_to(DType dtype, std::string value);
// An element read from memory as a value, and a value as the element to store.
std::string load_value(DType dtype, std::string element);
std::string stored_value(DType dtype, std::string value);
std::string int_constant(int64_t value, DType dtype);
// A floating constant, exactly: hexadecimal literals for finite values.
std::string float_constant(double value, DType dtype);
std::string scalar_constant(const loop::Scalar& value, DType dtype);
// `value` of type `from` converted as loop IR's cast does.
std::string cast(DType to, DType from, std::string value);
// `a op b` for operands of type `type` (op is arithmetic, a comparison or logical).
std::string binary(loop::BinaryOp op, DType type, const std::string& a, const std::string& b);

}  // namespace kiln::codegen
