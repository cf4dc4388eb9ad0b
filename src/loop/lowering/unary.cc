// Lowerings of the elementwise unary ops (ir/ops/unary.cc): out[i] = f(x[i]).
//
// Most map to one loop-IR operator or intrinsic. round (half to even) has no intrinsic: it is
// floor(x) + 1 where the fraction exceeds 1/2 or is exactly 1/2 above an odd floor (the
// fraction x - floor(x) is exact, except just below 0 where its rounding cannot cross 1/2
// the wrong way). relu and sign are selects, so that NaN behaves as the interpreter's.
#include <cmath>
#include <numbers>

#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

using UnaryFn = Expr (*)(NameGenerator& names, const Expr& x);

void define_unary(LoweringTable& table, Op op, UnaryFn fn) {
  table.define(op, [fn](const ComputeArgs& args) -> Expected<Expr> {
    return fn(args.names, args.input(0, args.index));
  });
}

Expr intrinsic_of(Intrinsic f, const Expr& x) { return call(f, {x}); }

Expr round_half_even(NameGenerator& names, const Expr& x) {
  return bind(names, x, [&](const Expr& v) {
    return bind(names, call(Intrinsic::floor, {v}), [&](const Expr& f) {
      return bind(names, v - f, [&](const Expr& fraction) {
        const Expr odd = f - call(Intrinsic::floor, {f * 0.5}) * 2.0 == 1.0;
        return select(fraction > 0.5 || (fraction == 0.5 && odd), f + 1.0, f);
      });
    });
  });
}

Expr sign_of(NameGenerator& names, const Expr& x) {
  return bind(names, x, [](const Expr& v) {
    const Expr zero = make_zero(v.type());
    // A NaN (or a zero) passes through, as the interpreter's sign.
    return select(v > zero, constant_of(v.type(), 1),
                  select(v < zero, constant_of(v.type(), -1), is_floating(v.type()) ? v : zero));
  });
}

Expr gelu_erf(NameGenerator& names, const Expr& x) {
  return bind(names, x, [](const Expr& v) {
    return v * 0.5 * (call(Intrinsic::erf, {v * (1 / std::numbers::sqrt2)}) + 1.0);
  });
}

Expr gelu_tanh(NameGenerator& names, const Expr& x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return bind(names, x, [k](const Expr& v) {
    return v * 0.5 * (call(Intrinsic::tanh, {(v + v * v * v * 0.044715) * k}) + 1.0);
  });
}

}  // namespace

void register_unary_lowerings(LoweringTable& table) {
  using N = NameGenerator;
  define_unary(table, Op::neg, [](N&, const Expr& x) { return -x; });
  define_unary(table, Op::abs, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::abs, x); });
  define_unary(table, Op::exp, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::exp, x); });
  define_unary(table, Op::log, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::log, x); });
  define_unary(table, Op::sqrt,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::sqrt, x); });
  define_unary(table, Op::rsqrt,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::rsqrt, x); });
  define_unary(table, Op::reciprocal,
               [](N&, const Expr& x) { return constant_of(x.type(), 1) / x; });
  define_unary(table, Op::tanh,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::tanh, x); });
  define_unary(table, Op::sigmoid,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::sigmoid, x); });
  define_unary(table, Op::relu, [](N& names, const Expr& x) {
    return bind(names, x, [](const Expr& v) {
      return select(v > make_zero(v.type()), v, make_zero(v.type()));
    });
  });
  define_unary(table, Op::erf, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::erf, x); });
  define_unary(table, Op::sin, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::sin, x); });
  define_unary(table, Op::cos, [](N&, const Expr& x) { return intrinsic_of(Intrinsic::cos, x); });
  define_unary(table, Op::floor,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::floor, x); });
  define_unary(table, Op::ceil,
               [](N&, const Expr& x) { return intrinsic_of(Intrinsic::ceil, x); });
  define_unary(table, Op::round, &round_half_even);
  define_unary(table, Op::sign, &sign_of);
  define_unary(table, Op::logical_not, [](N&, const Expr& x) { return !x; });
  define_unary(table, Op::identity, [](N&, const Expr& x) { return x; });
  table.define(Op::gelu, [](const ComputeArgs& args) -> Expected<Expr> {
    const UnaryFn form = args.attrs.get_string("approximate") == "tanh" ? &gelu_tanh : &gelu_erf;
    return form(args.names, args.input(0, args.index));
  });
  table.define(Op::cast, [](const ComputeArgs& args) -> Expected<Expr> {
    return cast(args.outputs[0].dtype, args.input(0, args.index));
  });
}

}  // namespace kiln::loop::lowering
