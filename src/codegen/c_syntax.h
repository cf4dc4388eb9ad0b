// The C++ spelling of loop-IR types, constants and operators, shared by the CPU and CUDA code
// generators (codegen/cpu/emitter.h, codegen/cuda/emitter.h). Both preludes define the helpers
// these spellings call (kiln_min, kiln_div, kiln_round_f16, kiln_limits, kiln_bool, ...) with
// the semantics of loop/expr.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/dtype.h"
#include "loop/expr.h"
#include "loop/scalar.h"
#include "loop/stmt.h"

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
// A math intrinsic of `type`: math functions are `math_prefix` + their C name ("std::exp" on
// the CPU, the CUDA prelude's "kiln_exp"); rsqrt, sigmoid, integer abs and dropout_bits are
// the preludes' kiln_ helpers.
std::string intrinsic(loop::Intrinsic f, DType type, const std::vector<std::string>& args,
                      std::string_view math_prefix);

// What the two code generators share: loop-IR names (never emitted) mapped to fresh
// identifiers (vN for variables, other letters for the generator's own); every kind of
// expression but `let` and `reduce`, which each back end spells its own way; and the indented
// output with the statements both spell alike (let, if, block), the rest being each back
// end's emit_stmt.
class ExprEmitter {
 public:
  virtual ~ExprEmitter() = default;

 protected:
  using Scope = std::vector<std::pair<std::string, std::string>>;  // loop-IR name, identifier

  explicit ExprEmitter(std::string_view math_prefix) : math_prefix_(math_prefix) {}

  std::string fresh_name(char prefix);
  std::string bind_var(const std::string& name);
  void unbind_var() { vars_.pop_back(); }
  static const std::string& lookup(const Scope& scope, const std::string& name);

  std::string emit_expr(const loop::Expr& e);
  std::string element(const loop::Buffer& buffer, const loop::Expr& index);
  // The element read as a value; a back end may read it from somewhere else.
  virtual std::string emit_load(const loop::Load& load);
  // A binary operation on emitted operands; a back end may spell some differently.
  virtual std::string emit_binary(loop::BinaryOp op, DType type, const std::string& a,
                                  const std::string& b) {
    return binary(op, type, a, b);
  }
  // A math intrinsic on emitted arguments; a back end may spell some differently.
  virtual std::string emit_call(const loop::Call& call, const std::vector<std::string>& args) {
    return intrinsic(call.intrinsic, call.type, args, math_prefix_);
  }
  virtual std::string emit_let(const loop::Let& let) = 0;
  virtual std::string emit_reduce(const loop::Reduce& reduce) = 0;

  // One line of output at the current indentation.
  void line(const std::string& text);
  // `s` one level deeper.
  void emit_nested(const loop::Stmt& s);
  // Writes `s` when it is a let, an if or a block (their parts through emit_stmt); false for
  // any other statement.
  bool emit_structured(const loop::Stmt& s);
  virtual void emit_stmt(const loop::Stmt& s) = 0;

  Scope vars_;
  Scope buffers_;  // innermost last
  std::string out_;
  int indent_ = 0;

 private:
  std::string math_prefix_;
  int next_name_ = 0;
};

}  // namespace kiln::codegen
