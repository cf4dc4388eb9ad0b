#include "codegen/c_syntax.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "support/check.h"

namespace kiln::codegen {

std::string_view value_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
    case DType::f16:
    case DType::bf16: return "float";
    case DType::f64: return "double";
    case DType::i32: return "int32_t";
    case DType::i64: return "int64_t";
    case DType::boolean: return "bool";
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

std::string_view storage_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
    case DType::bf16: return "uint16_t";
    case DType::boolean: return "kiln_bool";
    default: return value_type(dtype);
  }
}

std::string round_to(DType dtype, std::string value) {
  if (dtype == DType::f16) return fmt::format("kiln_round_f16({})", value);
  if (dtype == DType::bf16) return fmt::format("kiln_round_bf16({})", value);
  return value;
}

std::string load_value(DType dtype, std::string element) {
  switch (dtype) {
    case DType::f16: return fmt::format("kiln_half_value({})", element);
    case DType::bf16: return fmt::format("kiln_bfloat16_value({})", element);
    case DType::boolean: return fmt::format("(static_cast<uint8_t>({}) != 0)", element);
    default: return element;
  }
}

std::string stored_value(DType dtype, std::string value) {
  switch (dtype) {
    case DType::f16: return fmt::format("kiln_half_bits({})", value);
    case DType::bf16: return fmt::format("kiln_bfloat16_bits({})", value);
    case DType::boolean: return fmt::format("static_cast<kiln_bool>({})", value);
    default: return value;
  }
}

std::string int_constant(int64_t value, DType dtype) {
  if (dtype == DType::boolean) return value != 0 ? "true" : "false";
  if (dtype == DType::i32) {
    if (value == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
    return value < 0 ? fmt::format("({})", value) : fmt::format("{}", value);
  }
  if (value == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807L - 1)";
  return value < 0 ? fmt::format("({}L)", value) : fmt::format("{}L", value);
}

std::string float_constant(double value, DType dtype) {
  const std::string_view type = value_type(dtype);
  if (std::isnan(value)) return fmt::format("kiln_limits<{}>::quiet_NaN()", type);
  if (std::isinf(value)) {
    return fmt::format("({}kiln_limits<{}>::infinity())", value < 0 ? "-" : "", type);
  }
  const std::string literal = fmt::format("{:a}{}", value, type == "float" ? "f" : "");
  return std::signbit(value) ? fmt::format("({})", literal) : literal;
}

std::string scalar_constant(const loop::Scalar& value, DType dtype) {
  if (const double* x = std::get_if<double>(&value)) return float_constant(*x, dtype);
  return int_constant(std::get<int64_t>(value), dtype);
}

std::string cast(DType to, DType from, std::string value) {
  if (to == from) return value;
  if (is_floating(to)) {
    // f16 and bf16 values are exactly representable in the float that holds them.
    if (to == DType::f32 && value_type(from) == "float") return value;
    std::string wide =
        from == DType::f64 ? value : fmt::format("static_cast<double>({})", value);
    if (to == DType::f64) return wide;
    if (to == DType::f32) return fmt::format("static_cast<float>({})", wide);
    return round_to(to, std::move(wide));
  }
  if (to == DType::boolean) return fmt::format("({} != 0)", value);
  if (is_floating(from)) {
    return fmt::format("{}({})", to == DType::i32 ? "kiln_to_i32" : "kiln_to_i64", value);
  }
  if (to == DType::i32 && from == DType::i64) return fmt::format("kiln_clamp_i32({})", value);
  return fmt::format("static_cast<{}>({})", value_type(to), value);
}

std::string binary(loop::BinaryOp op, DType type, const std::string& a, const std::string& b) {
  using loop::BinaryOp;
  if (loop::is_comparison(op) || loop::is_logical(op)) {
    return fmt::format("({} {} {})", a, loop::binary_op_symbol(op), b);
  }
  switch (op) {
    case BinaryOp::min: return fmt::format("kiln_min<{}>({}, {})", value_type(type), a, b);
    case BinaryOp::max: return fmt::format("kiln_max<{}>({}, {})", value_type(type), a, b);
    case BinaryOp::div:
      if (!is_floating(type)) return fmt::format("kiln_div<{}>({}, {})", value_type(type), a, b);
      break;
    case BinaryOp::mod:
      if (is_floating(type)) return cast(type, DType::f64, fmt::format("kiln_fmod({}, {})", a, b));
      return fmt::format("kiln_mod<{}>({}, {})", value_type(type), a, b);
    default: break;
  }
  const std::string result = fmt::format("({} {} {})", a, loop::binary_op_symbol(op), b);
  return is_floating(type) ? round_to(type, result) : result;
}

}  // namespace kiln::codegen
