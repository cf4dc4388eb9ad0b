#include "codegen/c_syntax.h"

#include <algorithm>
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

std::string intrinsic(loop::Intrinsic f, DType type, const std::vector<std::string>& args,
                      std::string_view math_prefix) {
  using loop::Intrinsic;
  if (f == Intrinsic::dropout_bits) {
    return fmt::format("kiln_dropout_bits({}, {}, {})", args[0], args[1], args[2]);
  }
  if (!is_floating(type)) {
    KILN_CHECK(f == Intrinsic::abs, "{} of an integer passed the verifier", intrinsic_name(f));
    return fmt::format("kiln_abs<{}>({})", value_type(type), args[0]);
  }
  std::string call;
  switch (f) {
    case Intrinsic::abs: call = fmt::format("{}fabs({})", math_prefix, args[0]); break;
    case Intrinsic::rsqrt: call = fmt::format("kiln_rsqrt({})", args[0]); break;
    case Intrinsic::sigmoid: call = fmt::format("kiln_sigmoid({})", args[0]); break;
    case Intrinsic::pow: call = fmt::format("{}pow({}, {})", math_prefix, args[0], args[1]); break;
    default: call = fmt::format("{}{}({})", math_prefix, loop::intrinsic_name(f), args[0]); break;
  }
  return round_to(type, std::move(call));
}

void ExprEmitter::line(const std::string& text) {
  out_.append(static_cast<size_t>(indent_) * 2, ' ');
  out_ += text;
  out_ += '\n';
}

void ExprEmitter::emit_nested(const loop::Stmt& s) {
  ++indent_;
  emit_stmt(s);
  --indent_;
}

bool ExprEmitter::emit_structured(const loop::Stmt& s) {
  switch (s.kind()) {
    case loop::StmtKind::let_stmt: {
      const auto* let = s.as<loop::LetStmt>();
      const std::string value = emit_expr(let->value);
      const std::string ident = bind_var(let->name);
      line(fmt::format("const {} {} = {};", value_type(let->value.type()), ident, value));
      emit_stmt(let->body);
      unbind_var();
      return true;
    }
    case loop::StmtKind::if_then_else: {
      const auto* branch = s.as<loop::IfThenElse>();
      line(fmt::format("if ({}) {{", emit_expr(branch->condition)));
      emit_nested(branch->then_case);
      if (branch->else_case.defined() && !loop::is_no_op(branch->else_case)) {
        line("} else {");
        emit_nested(branch->else_case);
      }
      line("}");
      return true;
    }
    case loop::StmtKind::block:
      for (const loop::Stmt& child : s.as<loop::Block>()->stmts) emit_stmt(child);
      return true;
    default: return false;
  }
}

std::string ExprEmitter::fresh_name(char prefix) {
  return fmt::format("{}{}", prefix, next_name_++);
}

std::string ExprEmitter::bind_var(const std::string& name) {
  std::string ident = fresh_name('v');
  vars_.emplace_back(name, ident);
  return ident;
}

const std::string& ExprEmitter::lookup(const Scope& scope, const std::string& name) {
  auto it = std::find_if(scope.rbegin(), scope.rend(),
                         [&](const auto& entry) { return entry.first == name; });
  KILN_CHECK(it != scope.rend(), "unbound name passed the verifier");
  return it->second;
}

std::string ExprEmitter::emit_expr(const loop::Expr& e) {
  switch (e.kind()) {
    case loop::ExprKind::int_imm: return int_constant(e.as<loop::IntImm>()->value, e.type());
    case loop::ExprKind::float_imm: return float_constant(e.as<loop::FloatImm>()->value, e.type());
    case loop::ExprKind::variable: return lookup(vars_, e.as<loop::Variable>()->name);
    case loop::ExprKind::binary: {
      const auto* b = e.as<loop::Binary>();
      return emit_binary(b->op, b->a.type(), emit_expr(b->a), emit_expr(b->b));
    }
    case loop::ExprKind::logical_not: return fmt::format("(!{})", emit_expr(e.as<loop::Not>()->a));
    case loop::ExprKind::select: {
      const auto* s = e.as<loop::Select>();
      return fmt::format("kiln_select<{}>({}, {}, {})", value_type(e.type()),
                         emit_expr(s->condition), emit_expr(s->true_value),
                         emit_expr(s->false_value));
    }
    case loop::ExprKind::cast: {
      const auto* c = e.as<loop::Cast>();
      return cast(c->type, c->value.type(), emit_expr(c->value));
    }
    case loop::ExprKind::load: return emit_load(*e.as<loop::Load>());
    case loop::ExprKind::call: {
      const auto* c = e.as<loop::Call>();
      std::vector<std::string> args;
      for (const loop::Expr& arg : c->args) args.push_back(emit_expr(arg));
      return emit_call(*c, args);
    }
    case loop::ExprKind::let: return emit_let(*e.as<loop::Let>());
    case loop::ExprKind::reduce: return emit_reduce(*e.as<loop::Reduce>());
  }
  KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
}

std::string ExprEmitter::emit_load(const loop::Load& load) {
  return load_value(load.type, element(load.buffer, load.index));
}

std::string ExprEmitter::element(const loop::Buffer& buffer, const loop::Expr& index) {
  return fmt::format("{}[{}]", lookup(buffers_, buffer.name()), emit_expr(index));
}

}  // namespace kiln::codegen
