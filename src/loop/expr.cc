#include "loop/expr.h"

#include <cmath>

#include "loop/scalar.h"

namespace kiln::loop {

std::string_view binary_op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "+";
    case BinaryOp::sub: return "-";
    case BinaryOp::mul: return "*";
    case BinaryOp::div: return "/";
    case BinaryOp::mod: return "%";
    case BinaryOp::min: return "min";
    case BinaryOp::max: return "max";
    case BinaryOp::eq: return "==";
    case BinaryOp::ne: return "!=";
    case BinaryOp::lt: return "<";
    case BinaryOp::le: return "<=";
    case BinaryOp::gt: return ">";
    case BinaryOp::ge: return ">=";
    case BinaryOp::logical_and: return "&&";
    case BinaryOp::logical_or: return "||";
  }
  KILN_UNREACHABLE("bad binary op {}", static_cast<int>(op));
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq && op <= BinaryOp::ge; }

bool is_logical(BinaryOp op) { return op == BinaryOp::logical_and || op == BinaryOp::logical_or; }

std::string_view intrinsic_name(Intrinsic intrinsic) {
  switch (intrinsic) {
    case Intrinsic::abs: return "abs";
    case Intrinsic::exp: return "exp";
    case Intrinsic::log: return "log";
    case Intrinsic::sqrt: return "sqrt";
    case Intrinsic::rsqrt: return "rsqrt";
    case Intrinsic::tanh: return "tanh";
    case Intrinsic::erf: return "erf";
    case Intrinsic::sigmoid: return "sigmoid";
    case Intrinsic::sin: return "sin";
    case Intrinsic::cos: return "cos";
    case Intrinsic::floor: return "floor";
    case Intrinsic::ceil: return "ceil";
    case Intrinsic::pow: return "pow";
    case Intrinsic::dropout_bits: return "dropout_bits";
  }
  KILN_UNREACHABLE("bad intrinsic {}", static_cast<int>(intrinsic));
}

int intrinsic_arity(Intrinsic intrinsic) {
  switch (intrinsic) {
    case Intrinsic::pow: return 2;
    case Intrinsic::dropout_bits: return 3;
    default: return 1;
  }
}

bool is_math_call(Intrinsic intrinsic) {
  switch (intrinsic) {
    case Intrinsic::exp:
    case Intrinsic::log:
    case Intrinsic::tanh:
    case Intrinsic::erf:
    case Intrinsic::sigmoid:
    case Intrinsic::sin:
    case Intrinsic::cos:
    case Intrinsic::pow:
      return true;
    case Intrinsic::abs:
    case Intrinsic::sqrt:
    case Intrinsic::rsqrt:
    case Intrinsic::floor:
    case Intrinsic::ceil:
    case Intrinsic::dropout_bits:
      return false;
  }
  return false;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "minimum";
    case ReduceOp::max: return "maximum";
  }
  KILN_UNREACHABLE("bad reduce op {}", static_cast<int>(op));
}

BinaryOp reduce_combiner(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return BinaryOp::add;
    case ReduceOp::prod: return BinaryOp::mul;
    case ReduceOp::min: return BinaryOp::min;
    case ReduceOp::max: return BinaryOp::max;
  }
  KILN_UNREACHABLE("bad reduce op {}", static_cast<int>(op));
}

Expr::Expr(int value) : Expr(make_int(value)) {}
Expr::Expr(int64_t value) : Expr(make_int(value)) {}

Expr make_int(int64_t value, DType type) {
  KILN_CHECK(is_integer(type) || type == DType::boolean, "make_int of type {}", dtype_name(type));
  return Expr(std::make_shared<const IntImm>(type, wrap_to_type(value, type)));
}

Expr make_float(double value, DType type) {
  KILN_CHECK(is_floating(type), "make_float of type {}", dtype_name(type));
  return Expr(std::make_shared<const FloatImm>(type, round_to_dtype(value, type)));
}

Expr make_bool(bool value) { return make_int(value ? 1 : 0, DType::boolean); }

Expr make_const(DType type, double value) {
  if (is_floating(type)) return make_float(value, type);
  KILN_CHECK(std::trunc(value) == value, "non-integral constant {} of type {}", value,
             dtype_name(type));
  return make_int(static_cast<int64_t>(value), type);
}

Expr make_zero(DType type) { return make_const(type, 0); }

Expr var(std::string name, DType type) {
  return Expr(std::make_shared<const Variable>(type, std::move(name)));
}

Expr binary(BinaryOp op, Expr a, Expr b) {
  KILN_CHECK(a.defined() && b.defined(), "binary '{}' with an undefined operand",
             binary_op_symbol(op));
  const DType type = is_comparison(op) || is_logical(op) ? DType::boolean : a.type();
  return Expr(std::make_shared<const Binary>(type, op, std::move(a), std::move(b)));
}

Expr select(Expr condition, Expr true_value, Expr false_value) {
  KILN_CHECK(condition.defined() && true_value.defined() && false_value.defined(),
             "select with an undefined operand");
  const DType type = true_value.type();
  return Expr(std::make_shared<const Select>(type, std::move(condition), std::move(true_value),
                                             std::move(false_value)));
}

Expr cast(DType type, Expr value) {
  KILN_CHECK(value.defined(), "cast of an undefined expression");
  return Expr(std::make_shared<const Cast>(type, std::move(value)));
}

Expr load(Buffer buffer, Expr index) {
  KILN_CHECK(buffer.defined() && index.defined(), "load with an undefined buffer or index");
  const DType type = buffer.dtype();
  return Expr(std::make_shared<const Load>(type, std::move(buffer), std::move(index)));
}

Expr load(const Buffer& buffer, const std::vector<Expr>& indices) {
  return load(buffer, element_offset(buffer, indices));
}

Expr element_offset(const Buffer& buffer, const std::vector<Expr>& indices) {
  KILN_CHECK(indices.size() == buffer.shape().size(), "buffer '{}' has rank {}, indexed with {}",
             buffer.name(), buffer.shape().size(), indices.size());
  Expr offset;
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t stride = buffer.strides()[k];
    if (stride == 0) continue;  // a broadcast axis adds nothing
    Expr term = stride == 1 ? indices[k] : indices[k] * stride;
    offset = offset.defined() ? offset + term : term;
  }
  return offset.defined() ? offset : Expr(0);
}

Expr call(Intrinsic intrinsic, std::vector<Expr> args) {
  KILN_CHECK(!args.empty() && args[0].defined(), "call '{}' without arguments",
             intrinsic_name(intrinsic));
  const DType type = args[0].type();
  return Expr(std::make_shared<const Call>(type, intrinsic, std::move(args)));
}

Expr let(std::string name, Expr value, Expr body) {
  KILN_CHECK(value.defined() && body.defined(), "let '{}' with an undefined part", name);
  const DType type = body.type();
  return Expr(
      std::make_shared<const Let>(type, std::move(name), std::move(value), std::move(body)));
}

Expr reduce(ReduceOp op, std::string v, Expr min, Expr extent, Expr body, bool vectorized) {
  KILN_CHECK(min.defined() && extent.defined() && body.defined(),
             "reduction over '{}' with an undefined part", v);
  const DType type = body.type();
  return Expr(std::make_shared<const Reduce>(type, op, std::move(v), std::move(min),
                                             std::move(extent), std::move(body), vectorized));
}

Expr min(Expr a, Expr b) { return binary(BinaryOp::min, std::move(a), std::move(b)); }
Expr max(Expr a, Expr b) { return binary(BinaryOp::max, std::move(a), std::move(b)); }
Expr operator+(Expr a, Expr b) { return binary(BinaryOp::add, std::move(a), std::move(b)); }
Expr operator-(Expr a, Expr b) { return binary(BinaryOp::sub, std::move(a), std::move(b)); }
Expr operator*(Expr a, Expr b) { return binary(BinaryOp::mul, std::move(a), std::move(b)); }
Expr operator/(Expr a, Expr b) { return binary(BinaryOp::div, std::move(a), std::move(b)); }
Expr operator%(Expr a, Expr b) { return binary(BinaryOp::mod, std::move(a), std::move(b)); }
Expr operator-(Expr a) {
  Expr zero = make_zero(a.type());
  return binary(BinaryOp::sub, std::move(zero), std::move(a));
}
Expr operator==(Expr a, Expr b) { return binary(BinaryOp::eq, std::move(a), std::move(b)); }
Expr operator!=(Expr a, Expr b) { return binary(BinaryOp::ne, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return binary(BinaryOp::lt, std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return binary(BinaryOp::le, std::move(a), std::move(b)); }
Expr operator>(Expr a, Expr b) { return binary(BinaryOp::gt, std::move(a), std::move(b)); }
Expr operator>=(Expr a, Expr b) { return binary(BinaryOp::ge, std::move(a), std::move(b)); }
Expr operator&&(Expr a, Expr b) {
  return binary(BinaryOp::logical_and, std::move(a), std::move(b));
}
Expr operator||(Expr a, Expr b) { return binary(BinaryOp::logical_or, std::move(a), std::move(b)); }
Expr operator&&(Expr a, bool b) { return std::move(a) && make_bool(b); }
Expr operator&&(bool a, Expr b) { return make_bool(a) && std::move(b); }
Expr operator||(Expr a, bool b) { return std::move(a) || make_bool(b); }
Expr operator||(bool a, Expr b) { return make_bool(a) || std::move(b); }
Expr operator!(Expr a) {
  KILN_CHECK(a.defined(), "logical not of an undefined expression");
  return Expr(std::make_shared<const Not>(std::move(a)));
}

bool equal(const Expr& a, const Expr& b) {
  if (a.same_as(b)) return true;
  if (!a.defined() || !b.defined() || a.kind() != b.kind() || a.type() != b.type()) return false;
  switch (a.kind()) {
    case ExprKind::int_imm: return a.as<IntImm>()->value == b.as<IntImm>()->value;
    case ExprKind::float_imm: {
      // Bitwise: 0.0 and -0.0 differ, NaN equals NaN.
      const double x = a.as<FloatImm>()->value, y = b.as<FloatImm>()->value;
      return std::signbit(x) == std::signbit(y) && (x == y || (std::isnan(x) && std::isnan(y)));
    }
    case ExprKind::variable: return a.as<Variable>()->name == b.as<Variable>()->name;
    case ExprKind::binary: {
      const Binary *x = a.as<Binary>(), *y = b.as<Binary>();
      return x->op == y->op && equal(x->a, y->a) && equal(x->b, y->b);
    }
    case ExprKind::logical_not: return equal(a.as<Not>()->a, b.as<Not>()->a);
    case ExprKind::select: {
      const Select *x = a.as<Select>(), *y = b.as<Select>();
      return equal(x->condition, y->condition) && equal(x->true_value, y->true_value) &&
             equal(x->false_value, y->false_value);
    }
    case ExprKind::cast: return equal(a.as<Cast>()->value, b.as<Cast>()->value);
    case ExprKind::load: {
      const Load *x = a.as<Load>(), *y = b.as<Load>();
      return x->buffer.node() == y->buffer.node() && equal(x->index, y->index);
    }
    case ExprKind::call: {
      const Call *x = a.as<Call>(), *y = b.as<Call>();
      if (x->intrinsic != y->intrinsic || x->args.size() != y->args.size()) return false;
      for (size_t i = 0; i < x->args.size(); ++i) {
        if (!equal(x->args[i], y->args[i])) return false;
      }
      return true;
    }
    case ExprKind::let: {
      const Let *x = a.as<Let>(), *y = b.as<Let>();
      return x->name == y->name && equal(x->value, y->value) && equal(x->body, y->body);
    }
    case ExprKind::reduce: {
      const Reduce *x = a.as<Reduce>(), *y = b.as<Reduce>();
      return x->op == y->op && x->var == y->var && x->vectorized == y->vectorized &&
             equal(x->min, y->min) && equal(x->extent, y->extent) && equal(x->body, y->body);
    }
  }
  KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(a.kind()));
}

bool is_const(const Expr& e) {
  return e.defined() && (e.kind() == ExprKind::int_imm || e.kind() == ExprKind::float_imm);
}

std::optional<int64_t> as_const_int(const Expr& e) {
  if (const IntImm* imm = e.as<IntImm>()) return imm->value;
  return std::nullopt;
}

}  // namespace kiln::loop
