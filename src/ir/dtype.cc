#include "ir/dtype.h"

#include <cmath>
#include <limits>

#include "support/check.h"
#include "support/float16.h"

namespace kiln {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

int64_t dtype_size_bytes(DType dtype) {
  switch (dtype) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 ||
         dtype == DType::bf16;
}

bool is_integer(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

namespace {

template <typename Int>
double saturate_to_integer(double value) {
  if (std::isnan(value)) return 0.0;
  const double truncated = std::trunc(value);
  const double lo = static_cast<double>(std::numeric_limits<Int>::min());
  // The largest integral double not above the type's max (for i64 the max itself is not a
  // double: 2^63 - 1 would round up to 2^63).
  const double hi =
      std::trunc(std::nextafter(static_cast<double>(std::numeric_limits<Int>::max()) + 1.0, 0.0));
  if (truncated < lo) return lo;
  if (truncated > hi) return hi;
  return truncated + 0.0;  // integers have no negative zero: trunc(-0.5) is -0.0, this is +0.0
}

}  // namespace

bool is_low_precision(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

DType accumulation_dtype(DType dtype) { return is_low_precision(dtype) ? DType::f32 : dtype; }

double round_to_dtype(double value, DType dtype) {
  switch (dtype) {
    case DType::f64: return value;
    case DType::f32: return static_cast<double>(static_cast<float>(value));
    // Rounding through f32 first gives the same result as rounding once: f32 carries 24
    // significand bits, at least 2p+2 for p = 11 (f16) and p = 8 (bf16), so the double
    // rounding is innocuous.
    case DType::f16: return half_bits_to_float(float_to_half_bits(static_cast<float>(value)));
    case DType::bf16:
      return bfloat16_bits_to_float(float_to_bfloat16_bits(static_cast<float>(value)));
    case DType::i32: return saturate_to_integer<int32_t>(value);
    case DType::i64: return saturate_to_integer<int64_t>(value);
    case DType::boolean: return value != 0.0 ? 1.0 : 0.0;
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

}  // namespace kiln
