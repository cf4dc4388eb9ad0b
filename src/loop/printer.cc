#include "loop/printer.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/check.h"

namespace kiln::loop {
namespace {

// Binding strength of the operator at the root of an expression; atoms bind tightest.
enum Precedence { kOr = 1, kAnd, kCompare, kAdd, kMul, kAtom };

Precedence binary_precedence(BinaryOp op) {
  switch (op) {
    case BinaryOp::logical_or: return kOr;
    case BinaryOp::logical_and: return kAnd;
    case BinaryOp::add:
    case BinaryOp::sub: return kAdd;
    case BinaryOp::mul:
    case BinaryOp::div:
    case BinaryOp::mod: return kMul;
    case BinaryOp::min:
    case BinaryOp::max: return kAtom;
    default: return kCompare;
  }
}

Precedence precedence(const Expr& e) {
  const Binary* b = e.as<Binary>();
  return b == nullptr ? kAtom : binary_precedence(b->op);
}

// Shortest text that reads back to the same value in `type`, always recognisable as a float.
std::string print_float(double value, DType type) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  auto [end, ec] = type == DType::f64
                       ? std::to_chars(buffer, buffer + sizeof(buffer), value)
                       : std::to_chars(buffer, buffer + sizeof(buffer), static_cast<float>(value));
  KILN_CHECK(ec == std::errc(), "cannot print {}", value);
  std::string text(buffer, end);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string print_constant(const Expr& e) {
  if (const IntImm* imm = e.as<IntImm>()) {
    switch (e.type()) {
      case DType::boolean: return imm->value != 0 ? "true" : "false";
      case DType::i64: return fmt::format("{}", imm->value);
      default: return fmt::format("{}({})", dtype_name(e.type()), imm->value);
    }
  }
  const double value = e.as<FloatImm>()->value;
  switch (e.type()) {
    case DType::f64: return print_float(value, DType::f64);
    case DType::f32:
      if (std::isfinite(value)) return print_float(value, DType::f32) + "f";
      [[fallthrough]];
    default: return fmt::format("{}({})", dtype_name(e.type()), print_float(value, e.type()));
  }
}

class ExprPrinter {
 public:
  std::string print(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::int_imm:
      case ExprKind::float_imm: return print_constant(e);
      case ExprKind::variable: return e.as<Variable>()->name;
      case ExprKind::binary: return print_binary(*e.as<Binary>());
      case ExprKind::logical_not: {
        const Expr& a = e.as<Not>()->a;
        return precedence(a) == kAtom ? "!" + print(a) : "!(" + print(a) + ")";
      }
      case ExprKind::select: {
        const Select& s = *e.as<Select>();
        return fmt::format("select({}, {}, {})", print(s.condition), print(s.true_value),
                           print(s.false_value));
      }
      case ExprKind::cast:
        return fmt::format("{}({})", dtype_name(e.type()), print(e.as<Cast>()->value));
      case ExprKind::load: {
        const Load& l = *e.as<Load>();
        return fmt::format("{}[{}]", l.buffer.name(), print(l.index));
      }
      case ExprKind::call: return print_call(*e.as<Call>());
      case ExprKind::let: {
        const Let& l = *e.as<Let>();
        return fmt::format("(let {} = {} in {})", l.name, print(l.value), print(l.body));
      }
      case ExprKind::reduce: {
        const Reduce& r = *e.as<Reduce>();
        return fmt::format("{}{}({}, {}, {}, {})", r.vectorized ? "vectorized " : "",
                           reduce_op_name(r.op), r.var, print(r.min), print(r.extent),
                           print(r.body));
      }
    }
    KILN_UNREACHABLE("bad expression kind {}", static_cast<int>(e.kind()));
  }

 private:
  std::string print_binary(const Binary& b) {
    if (b.op == BinaryOp::min || b.op == BinaryOp::max) {
      return fmt::format("{}({}, {})", binary_op_symbol(b.op), print(b.a), print(b.b));
    }
    const Precedence p = binary_precedence(b.op);
    // Comparisons do not chain: a comparison operand of a comparison is parenthesised.
    const Precedence left_min = p == kCompare ? kAdd : p;
    const Precedence right_min = static_cast<Precedence>(p + 1);
    // Products and quotients print tight (i*16 + j), everything else spaced (i % 4).
    const char* space = b.op == BinaryOp::mul || b.op == BinaryOp::div ? "" : " ";
    return fmt::format("{}{}{}{}{}", operand(b, b.a, left_min), space, binary_op_symbol(b.op),
                       space, operand(b, b.b, right_min));
  }

  std::string print_call(const Call& c) {
    std::string out = fmt::format("{}(", intrinsic_name(c.intrinsic));
    for (size_t i = 0; i < c.args.size(); ++i) {
      if (i > 0) out += ", ";
      out += print(c.args[i]);
    }
    return out + ")";
  }

  // Operand `e` of `parent`, parenthesised unless it binds at least as tightly as `min`.
  // A spaced % next to a tight * or / would misread ((x % 2)/3 is not x % 2/3).
  std::string operand(const Binary& parent, const Expr& e, Precedence min) {
    const Binary* child = e.as<Binary>();
    const bool mixes_mod = child != nullptr && binary_precedence(child->op) == kMul &&
                           binary_precedence(parent.op) == kMul &&
                           (child->op == BinaryOp::mod) != (parent.op == BinaryOp::mod);
    return precedence(e) >= min && !mixes_mod ? print(e) : "(" + print(e) + ")";
  }
};

class StmtPrinter {
 public:
  explicit StmtPrinter(int indent) : indent_(indent) {}

  void print(const Stmt& s) {
    switch (s.kind()) {
      case StmtKind::for_loop: return print_for(*s.as<For>());
      case StmtKind::store: {
        const Store& st = *s.as<Store>();
        return line(fmt::format("{}{}[{}] = {}", st.atomic ? "atomic " : "", st.buffer.name(),
                                expr(st.index), expr(st.value)));
      }
      case StmtKind::let_stmt: {
        const LetStmt& l = *s.as<LetStmt>();
        line(fmt::format("let {} = {}", l.name, expr(l.value)));
        return print(l.body);
      }
      case StmtKind::allocate: {
        const Allocate& a = *s.as<Allocate>();
        return scope(fmt::format("allocate {}", print_buffer_decl(a.buffer)), a.body);
      }
      case StmtKind::if_then_else: return print_if(*s.as<IfThenElse>());
      case StmtKind::block:
        for (const Stmt& child : s.as<Block>()->stmts) print(child);
        return;
      case StmtKind::library_call:
        return print_library_call(*s.as<LibraryCall>());
    }
    KILN_UNREACHABLE("bad statement kind {}", static_cast<int>(s.kind()));
  }

  std::string take() { return std::move(out_); }

 private:
  void print_for(const For& f) {
    const std::string kind =
        f.for_kind == ForKind::serial ? "" : fmt::format("{} ", for_kind_name(f.for_kind));
    scope(fmt::format("{}for ({}, {}, {})", kind, f.var, expr(f.min), expr(f.extent)), f.body);
  }

  // A library call in its operation's form (below). Its dtypes are its operands' (the
  // verifier's rule), so the text leaves them out.
  void print_library_call(const LibraryCall& call) {
    if (call.op == LibraryOp::gemm) return print_gemm(call);
    print_conv(call);
  }

  // gemm(m, n, k) c[offset, ld] = a[offset, ld]^T * b[offset, ld]   (+= when accumulating),
  // then ` packed in NAME` when B is kept packed.
  void print_gemm(const LibraryCall& g) {
    const auto region = [](const MatrixRegion& r, bool transposed) {
      return fmt::format("{}[{}, ld {}]{}", r.buffer.name(), expr(r.offset), r.leading_dim,
                         transposed ? "^T" : "");
    };
    line(fmt::format("gemm({}, {}, {}) {} {} {} * {}{}", expr(g.gemm().m), expr(g.gemm().n),
                     expr(g.gemm().k), region(g.c(), false), g.gemm().accumulate ? "+=" : "=",
                     region(g.a(), g.gemm().transpose_a), region(g.b(), g.gemm().transpose_b),
                     g.hints.packed.defined() ? " packed in " + g.hints.packed.name() : ""));
  }

  // conv(images N, channels C to O, groups G, in [D], out [Y], kernel [K], strides [S],
  // pads [P], dilations [L]) y[offset] = x[offset] * w, then ` + bias` with a bias, ` relu`
  // with the relu and ` packed in NAME` when w is kept reordered.
  void print_conv(const LibraryCall& c) {
    const ConvGeometry& g = c.conv();
    const auto ints = [](const std::vector<int64_t>& v) {
      return fmt::format("{}", fmt::join(v, ", "));
    };
    line(fmt::format(
        "conv(images {}, channels {} to {}, groups {}, in [{}], out [{}], kernel [{}], "
        "strides [{}], pads [{}], dilations [{}]) {}[{}] = {}[{}] * {}{}{}{}{}",
        g.images, g.channels, g.out_channels, g.groups, ints(g.in_spatial), ints(g.out_spatial),
        ints(g.kernel), ints(g.strides), ints(g.pads_begin), ints(g.dilations), c.y().buffer.name(),
        expr(c.y().offset), c.x().buffer.name(), expr(c.x().offset), c.w().buffer.name(),
        c.bias().defined() ? " + " + c.bias().name() : "",
        c.applies(EpilogueKind::relu) ? " relu" : "", c.hints.winograd ? " winograd" : "",
        c.hints.packed.defined() ? " packed in " + c.hints.packed.name() : ""));
  }

  void print_if(const IfThenElse& s) {
    line(fmt::format("if ({}) {{", expr(s.condition)));
    nested(s.then_case);
    if (s.else_case.defined()) {
      line("} else {");
      nested(s.else_case);
    }
    line("}");
  }

  void scope(const std::string& header, const Stmt& body) {
    line(header + " {");
    nested(body);
    line("}");
  }

  void nested(const Stmt& body) {
    ++indent_;
    print(body);
    --indent_;
  }

  void line(const std::string& text) {
    out_.append(static_cast<size_t>(2 * indent_), ' ');
    out_ += text;
    out_ += '\n';
  }

  static std::string expr(const Expr& e) { return ExprPrinter().print(e); }

  int indent_;
  std::string out_;
};

std::string join_ints(const std::vector<int64_t>& values) {
  return fmt::format("{}", fmt::join(values, ", "));
}

}  // namespace

std::string print(const Expr& expr) { return ExprPrinter().print(expr); }

std::string print(const Stmt& stmt, int indent) {
  StmtPrinter printer(indent);
  printer.print(stmt);
  return printer.take();
}

std::string print_buffer_decl(const Buffer& buffer) {
  std::string out = fmt::format("{}: {}[{}]", buffer.name(), dtype_name(buffer.dtype()),
                                join_ints(buffer.shape()));
  if (!buffer.is_row_major()) out += fmt::format(" strides [{}]", join_ints(buffer.strides()));
  if (buffer.scope() != MemoryScope::global) {
    out += fmt::format(" in {}", memory_scope_name(buffer.scope()));
  }
  return out;
}

std::string print(const Kernel& kernel) {
  std::string out = fmt::format("kernel {}(", kernel.name);
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (i > 0) out += ", ";
    out += print_buffer_decl(kernel.params[i]);
  }
  out += ") {\n";
  out += print(kernel.body, 1);
  return out + "}\n";
}

}  // namespace kiln::loop
