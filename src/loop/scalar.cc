#include "loop/scalar.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "support/check.h"
#include "support/counter_rng.h"

namespace kiln::loop {
namespace {

int64_t wrapping(uint64_t value) { return static_cast<int64_t>(value); }

int64_t integer_arithmetic(BinaryOp op, int64_t a, int64_t b) {
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case BinaryOp::add: return wrapping(ua + ub);
    case BinaryOp::sub: return wrapping(ua - ub);
    case BinaryOp::mul: return wrapping(ua * ub);
    case BinaryOp::div: return floor_div(a, b);
    case BinaryOp::mod: return floor_mod(a, b);
    case BinaryOp::min: return std::min(a, b);
    case BinaryOp::max: return std::max(a, b);
    default: KILN_UNREACHABLE("'{}' is not arithmetic", binary_op_symbol(op));
  }
}

double floating_arithmetic(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::mod: return a - b * std::floor(a / b);
    case BinaryOp::min:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                            : std::min(a, b);
    case BinaryOp::max:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                            : std::max(a, b);
    default: KILN_UNREACHABLE("'{}' is not arithmetic", binary_op_symbol(op));
  }
}

template <typename T>
bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
    default: KILN_UNREACHABLE("'{}' is not a comparison", binary_op_symbol(op));
  }
}

int64_t saturate(int64_t value, DType type) {
  if (type == DType::boolean) return value != 0 ? 1 : 0;
  if (type == DType::i32) {
    return std::clamp<int64_t>(value, std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max());
  }
  return value;
}

double floating_intrinsic(Intrinsic intrinsic, double x, double y) {
  switch (intrinsic) {
    case Intrinsic::abs: return std::fabs(x);
    case Intrinsic::exp: return std::exp(x);
    case Intrinsic::log: return std::log(x);
    case Intrinsic::sqrt: return std::sqrt(x);
    case Intrinsic::rsqrt: return 1.0 / std::sqrt(x);
    case Intrinsic::tanh: return std::tanh(x);
    case Intrinsic::erf: return std::erf(x);
    case Intrinsic::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Intrinsic::sin: return std::sin(x);
    case Intrinsic::cos: return std::cos(x);
    case Intrinsic::floor: return std::floor(x);
    case Intrinsic::ceil: return std::ceil(x);
    case Intrinsic::pow: return std::pow(x, y);
    case Intrinsic::dropout_bits: break;  // integer only
  }
  KILN_UNREACHABLE("bad intrinsic {}", static_cast<int>(intrinsic));
}

}  // namespace

int64_t wrap_to_type(int64_t value, DType type) {
  if (type == DType::boolean) return value != 0 ? 1 : 0;
  if (type == DType::i32) return static_cast<int32_t>(static_cast<uint32_t>(value));
  return value;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return wrapping(0 - static_cast<uint64_t>(a));  // INT64_MIN / -1 wraps
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

Scalar apply_binary(BinaryOp op, DType operand_type, const Scalar& a, const Scalar& b) {
  if (is_logical(op)) {
    const bool x = is_true(a), y = is_true(b);
    return int64_t{op == BinaryOp::logical_and ? (x && y) : (x || y)};
  }
  if (is_floating(operand_type)) {
    const double x = std::get<double>(a), y = std::get<double>(b);
    if (is_comparison(op)) return int64_t{compare(op, x, y)};
    return round_to_dtype(floating_arithmetic(op, x, y), operand_type);
  }
  const int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
  if (is_comparison(op)) return int64_t{compare(op, x, y)};
  return wrap_to_type(integer_arithmetic(op, x, y), operand_type);
}

Scalar apply_not(const Scalar& a) { return int64_t{!is_true(a)}; }

Scalar apply_cast(DType to, DType from, const Scalar& value) {
  if (is_floating(to)) {
    const double x =
        is_floating(from) ? std::get<double>(value) : static_cast<double>(std::get<int64_t>(value));
    return round_to_dtype(x, to);
  }
  if (is_floating(from)) {
    return static_cast<int64_t>(round_to_dtype(std::get<double>(value), to));
  }
  return saturate(std::get<int64_t>(value), to);
}

Scalar apply_intrinsic(Intrinsic intrinsic, DType type, std::span<const Scalar> args) {
  KILN_CHECK(static_cast<int>(args.size()) == intrinsic_arity(intrinsic), "{} takes {} arguments",
             intrinsic_name(intrinsic), intrinsic_arity(intrinsic));
  if (intrinsic == Intrinsic::dropout_bits) {
    KILN_CHECK(type == DType::i64, "dropout_bits of {}", dtype_name(type));
    return dropout_bits(static_cast<uint64_t>(std::get<int64_t>(args[0])),
                        static_cast<uint64_t>(std::get<int64_t>(args[1])),
                        static_cast<uint64_t>(std::get<int64_t>(args[2])));
  }
  if (!is_floating(type)) {
    KILN_CHECK(intrinsic == Intrinsic::abs, "{} of an integer", intrinsic_name(intrinsic));
    const int64_t x = std::get<int64_t>(args[0]);
    return wrap_to_type(x < 0 ? wrapping(0 - static_cast<uint64_t>(x)) : x, type);
  }
  const double y = args.size() > 1 ? std::get<double>(args[1]) : 0.0;
  return round_to_dtype(floating_intrinsic(intrinsic, std::get<double>(args[0]), y), type);
}

Scalar reduce_identity(ReduceOp op, DType type) {
  const bool floating = is_floating(type);
  switch (op) {
    case ReduceOp::sum: return floating ? Scalar(0.0) : Scalar(int64_t{0});
    case ReduceOp::prod: return floating ? Scalar(1.0) : Scalar(int64_t{1});
    case ReduceOp::min:
      if (floating) return std::numeric_limits<double>::infinity();
      return type == DType::i32 ? int64_t{std::numeric_limits<int32_t>::max()}
                                : std::numeric_limits<int64_t>::max();
    case ReduceOp::max:
      if (floating) return -std::numeric_limits<double>::infinity();
      return type == DType::i32 ? int64_t{std::numeric_limits<int32_t>::min()}
                                : std::numeric_limits<int64_t>::min();
  }
  KILN_UNREACHABLE("bad reduce op {}", static_cast<int>(op));
}

Scalar const_value(const Expr& constant) {
  if (const IntImm* imm = constant.as<IntImm>()) return imm->value;
  if (const FloatImm* imm = constant.as<FloatImm>()) return imm->value;
  KILN_UNREACHABLE("not a constant");
}

Expr make_scalar(DType type, const Scalar& value) {
  if (is_floating(type)) return make_float(std::get<double>(value), type);
  return make_int(std::get<int64_t>(value), type);
}

bool is_true(const Scalar& value) { return std::get<int64_t>(value) != 0; }

}  // namespace kiln::loop
