// Loop IR expressions: immutable, typed, side-effect-free trees.
//
// An `Expr` is a shared handle to an immutable node; passes build new trees and share the
// subtrees they keep. Every expression has one scalar type, a kiln::DType (f32, f64, f16,
// bf16, i32, i64, bool). There is no implicit promotion: operands of a binary operator have
// equal types and `cast` is explicit (the verifier checks this, so constructors never reject
// ill-typed trees; `make_*` helpers just compute the node's type).
//
// Semantics (the evaluator in loop/evaluator.h is its executable form):
//  - Index arithmetic is i64. Integer overflow is undefined: passes may assume it does not
//    happen (as in C and Halide); the evaluator wraps. Integer `/` and `%` use *floor*
//    semantics (x / y rounds toward -inf, x % y has the sign of y), so (-7) / 2 = -4 and
//    (-7) % 2 = 1; x / 0 and x % 0 are 0.
//  - Floating arithmetic is IEEE in the expression's type: each operation is computed exactly
//    and rounded to nearest-even in that type. Float `%` is x - y * floor(x / y). `min` and
//    `max` return NaN when either operand is NaN.
//  - `cast` is round_to_dtype (ir/dtype.h): floats round, float-to-integer truncates toward
//    zero and saturates (NaN becomes 0), integer-to-integer saturates, bool is `x != 0`.
//  - Variables are identified by name. Binders (Let, Reduce, and the For and LetStmt
//    statements) scope a name over their body; the verifier forbids binding a name that is
//    already bound in an enclosing scope, so substitution never captures.
//  - `load(b, i)` reads element i of buffer b (a flat i64 offset); out of bounds is an error.
//  - `select(c, a, b)` evaluates c, a and b, then picks a or b: both branches are evaluated,
//    so a load in either must be in bounds (lowering clamps data-dependent indices), and code
//    generators may compute both and blend, which is what lets a compiler vectorize a select.
//  - `Reduce` is the reduction *expression* sum/prod/min/max over var in [min, min+extent) of
//    body: body(min) combined with body(min+1), ... in order, or the op's identity (0, 1, the
//    type's largest, its smallest; infinities for floats) when the extent is <= 0. Reductions are
//    expressions, not statements, because lowering writes each op as a compute definition
//    (an output element as an expression of input elements) and fusion inlines producers into
//    consumers by substitution: a reduction must be a value that can sit inside a larger
//    expression (softmax's divisor, a bias added to a dot product). Scheduling turns it into
//    an accumulator and a loop when it decides where the accumulator lives. Floating
//    reductions combine in order of increasing var; schedules may reassociate them.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"
#include "loop/buffer.h"
#include "support/check.h"

namespace kiln::loop {

enum class ExprKind : uint8_t {
  int_imm, float_imm, variable, binary, logical_not, select, cast, load, call, let, reduce
};

enum class BinaryOp : uint8_t {
  add, sub, mul, div, mod, min, max,  // arithmetic: operand type
  eq, ne, lt, le, gt, ge,             // comparisons: bool
  logical_and, logical_or,            // bool operands, bool result
};

// Floating math functions, abs (also of integers), and dropout_bits(seed, offset, index): the
// i64 counter-based random bits of support/counter_rng.h, whose three i64 arguments are taken
// as uint64 bits (so offset + index wraps rather than overflows).
enum class Intrinsic : uint8_t {
  abs, exp, log, sqrt, rsqrt, tanh, erf, sigmoid, sin, cos, floor, ceil, pow, dropout_bits
};

enum class ReduceOp : uint8_t { sum, prod, min, max };

std::string_view binary_op_symbol(BinaryOp op);  // "+", "min", "&&", ...
bool is_comparison(BinaryOp op);
bool is_logical(BinaryOp op);
std::string_view intrinsic_name(Intrinsic intrinsic);
int intrinsic_arity(Intrinsic intrinsic);
// Whether the intrinsic is a math-library call (exp, erf, ...) rather than an instruction or two.
bool is_math_call(Intrinsic intrinsic);
std::string_view reduce_op_name(ReduceOp op);
// The BinaryOp that combines two partial results of a reduction.
BinaryOp reduce_combiner(ReduceOp op);

struct ExprNode {
  ExprNode(ExprKind node_kind, DType node_type) : kind(node_kind), type(node_type) {}
  virtual ~ExprNode() = default;
  ExprNode(const ExprNode&) = delete;
  ExprNode& operator=(const ExprNode&) = delete;

  const ExprKind kind;
  const DType type;
};

class Expr {
 public:
  Expr() = default;
  Expr(int value);      // NOLINT(google-explicit-constructor): an i64 constant
  Expr(int64_t value);  // NOLINT(google-explicit-constructor): an i64 constant
  Expr(double) = delete;  // floats need a type: make_float(value, type)
  Expr(bool) = delete;    // make_bool
  explicit Expr(std::shared_ptr<const ExprNode> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }
  const ExprNode* get() const { return node_.get(); }
  ExprKind kind() const { return node_->kind; }
  DType type() const { return node_->type; }
  // The node as T, or nullptr when it is another kind.
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  // Same node object (not structural equality: see `equal`).
  bool same_as(const Expr& other) const { return node_ == other.node_; }

 private:
  std::shared_ptr<const ExprNode> node_;
};

// Integer constant of type i32, i64 or bool (0 or 1); the value fits the type.
struct IntImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::int_imm;
  IntImm(DType t, int64_t v) : ExprNode(kKind, t), value(v) {}
  const int64_t value;
};

// Floating constant, exactly representable in its type.
struct FloatImm final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::float_imm;
  FloatImm(DType t, double v) : ExprNode(kKind, t), value(v) {}
  const double value;
};

struct Variable final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::variable;
  Variable(DType t, std::string n) : ExprNode(kKind, t), name(std::move(n)) {}
  const std::string name;
};

struct Binary final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::binary;
  Binary(DType t, BinaryOp o, Expr lhs, Expr rhs)
      : ExprNode(kKind, t), op(o), a(std::move(lhs)), b(std::move(rhs)) {}
  const BinaryOp op;
  const Expr a, b;
};

struct Not final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::logical_not;
  explicit Not(Expr operand) : ExprNode(kKind, DType::boolean), a(std::move(operand)) {}
  const Expr a;
};

// condition ? true_value : false_value (both evaluated; expressions have no side effects).
struct Select final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::select;
  Select(DType t, Expr c, Expr tv, Expr fv)
      : ExprNode(kKind, t), condition(std::move(c)), true_value(std::move(tv)),
        false_value(std::move(fv)) {}
  const Expr condition, true_value, false_value;
};

// `value` converted to this node's type.
struct Cast final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::cast;
  Cast(DType t, Expr v) : ExprNode(kKind, t), value(std::move(v)) {}
  const Expr value;
};

struct Load final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::load;
  Load(DType t, Buffer buf, Expr i)
      : ExprNode(kKind, t), buffer(std::move(buf)), index(std::move(i)) {}
  const Buffer buffer;
  const Expr index;  // i64 element offset
};

// A pure math function; arguments and result share the type (see loop/scalar.h).
struct Call final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::call;
  Call(DType t, Intrinsic f, std::vector<Expr> arguments)
      : ExprNode(kKind, t), intrinsic(f), args(std::move(arguments)) {}
  const Intrinsic intrinsic;
  const std::vector<Expr> args;
};

// `body` with `name` bound to `value`.
struct Let final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::let;
  Let(DType t, std::string n, Expr v, Expr b)
      : ExprNode(kKind, t), name(std::move(n)), value(std::move(v)), body(std::move(b)) {}
  const std::string name;
  const Expr value, body;
};

// op over `var` (i64) in [min, min + extent) of body. `vectorized` is how code generators
// evaluate it, never what it computes: a vectorized reduction may combine its terms in any
// order (partial results per vector lane, combined at the end), so a floating sum may round
// differently from the in-order sum the evaluator computes (loop/schedule.h: vectorize).
struct Reduce final : ExprNode {
  static constexpr ExprKind kKind = ExprKind::reduce;
  Reduce(DType t, ReduceOp o, std::string v, Expr lo, Expr n, Expr b, bool vec)
      : ExprNode(kKind, t), op(o), var(std::move(v)), min(std::move(lo)), extent(std::move(n)),
        body(std::move(b)), vectorized(vec) {}
  const ReduceOp op;
  const std::string var;
  const Expr min, extent, body;
  const bool vectorized;
};

// --- Construction -------------------------------------------------------------------------

Expr make_int(int64_t value, DType type = DType::i64);  // i32, i64 or bool; wraps to the type
Expr make_float(double value, DType type = DType::f32);  // rounds to the type
Expr make_bool(bool value);
// `value` in `type`: an IntImm for integer and bool types (value must be integral), a
// FloatImm for floating types.
Expr make_const(DType type, double value);
Expr make_zero(DType type);
Expr var(std::string name, DType type = DType::i64);
Expr binary(BinaryOp op, Expr a, Expr b);
Expr select(Expr condition, Expr true_value, Expr false_value);
Expr cast(DType type, Expr value);
Expr load(Buffer buffer, Expr index);
// load(buffer, element_offset(buffer, indices)).
Expr load(const Buffer& buffer, const std::vector<Expr>& indices);
// sum of indices[k] * strides[k]: the flat offset of a multi-index.
Expr element_offset(const Buffer& buffer, const std::vector<Expr>& indices);
Expr call(Intrinsic intrinsic, std::vector<Expr> args);
Expr let(std::string name, Expr value, Expr body);
Expr reduce(ReduceOp op, std::string var, Expr min, Expr extent, Expr body,
            bool vectorized = false);
inline Expr sum(std::string v, Expr min, Expr extent, Expr body) {
  return reduce(ReduceOp::sum, std::move(v), std::move(min), std::move(extent), std::move(body));
}

Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);
Expr operator%(Expr a, Expr b);
Expr operator-(Expr a);  // zero - a
Expr operator==(Expr a, Expr b);
Expr operator!=(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr operator!(Expr a);

// A C++ number next to an Expr becomes a constant of the Expr's type, so `i * 16 + j` and
// `x * 0.5` (x: f32) read as written. A floating number next to an integer Expr is a bug.
namespace detail {
template <typename T>
Expr constant_like(const Expr& e, T value) {
  if constexpr (std::floating_point<T>) {
    KILN_CHECK(is_floating(e.type()), "floating constant {} next to a non-floating expression",
               value);
    return make_float(static_cast<double>(value), e.type());
  } else if (is_floating(e.type())) {
    return make_float(static_cast<double>(value), e.type());
  } else {
    return make_int(static_cast<int64_t>(value), e.type());
  }
}
}  // namespace detail

template <typename T>
concept Number = (std::integral<T> && !std::same_as<T, bool>) || std::floating_point<T>;

#define KILN_LOOP_NUMBER_OPERATOR(op)                                                      \
  template <Number T>                                                                      \
  Expr operator op(Expr a, T b) {                                                          \
    Expr c = detail::constant_like(a, b);                                                  \
    return std::move(a) op std::move(c);                                                   \
  }                                                                                        \
  template <Number T>                                                                      \
  Expr operator op(T a, Expr b) {                                                          \
    Expr c = detail::constant_like(b, a);                                                  \
    return std::move(c) op std::move(b);                                                   \
  }
KILN_LOOP_NUMBER_OPERATOR(+)
KILN_LOOP_NUMBER_OPERATOR(-)
KILN_LOOP_NUMBER_OPERATOR(*)
KILN_LOOP_NUMBER_OPERATOR(/)
KILN_LOOP_NUMBER_OPERATOR(%)
KILN_LOOP_NUMBER_OPERATOR(==)
KILN_LOOP_NUMBER_OPERATOR(!=)
KILN_LOOP_NUMBER_OPERATOR(<)
KILN_LOOP_NUMBER_OPERATOR(<=)
KILN_LOOP_NUMBER_OPERATOR(>)
KILN_LOOP_NUMBER_OPERATOR(>=)
#undef KILN_LOOP_NUMBER_OPERATOR

template <Number T>
Expr min(Expr a, T b) {
  Expr c = detail::constant_like(a, b);
  return min(std::move(a), std::move(c));
}
template <Number T>
Expr max(Expr a, T b) {
  Expr c = detail::constant_like(a, b);
  return max(std::move(a), std::move(c));
}
template <Number T>
Expr min(T a, Expr b) {
  Expr c = detail::constant_like(b, a);
  return min(std::move(c), std::move(b));
}
template <Number T>
Expr max(T a, Expr b) {
  Expr c = detail::constant_like(b, a);
  return max(std::move(c), std::move(b));
}
Expr operator&&(Expr a, bool b);
Expr operator&&(bool a, Expr b);
Expr operator||(Expr a, bool b);
Expr operator||(bool a, Expr b);

// --- Queries ------------------------------------------------------------------------------

// Structural equality: same kinds, types, names, constants and buffers, recursively.
bool equal(const Expr& a, const Expr& b);
bool is_const(const Expr& e);  // IntImm or FloatImm
// The value of an IntImm (including bool), if `e` is one.
std::optional<int64_t> as_const_int(const Expr& e);

}  // namespace kiln::loop
