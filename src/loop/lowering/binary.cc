// Lowerings of the elementwise binary ops and `where` (ir/ops/binary.cc), with NumPy
// broadcasting: each input is read at broadcast_index(out index), 0 on stretched dims.
//
// Integer division truncates toward zero and fmod takes the dividend's sign, both built from
// loop IR's floor division and remainder. A float remainder is computed in f64 as
// a - b * floor(a / b) (trunc for fmod) and rounded to the dtype: exact for f32 operands of
// moderate ratio, where the interpreter's fmod is exact. Comparisons of bool operands compare
// them as i32 (false < true), since loop IR orders only numbers.
#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

using BinaryFn = Expr (*)(NameGenerator& names, const Expr& a, const Expr& b);

void define_binary(LoweringTable& table, Op op, BinaryFn fn) {
  table.define(op, [fn](const ComputeArgs& args) -> Expected<Expr> {
    const Expr a = args.input(0, broadcast_index(args.index, args.inputs[0].shape));
    const Expr b = args.input(1, broadcast_index(args.index, args.inputs[1].shape));
    return fn(args.names, a, b);
  });
}

// a / b rounded toward zero, for integers.
Expr truncating_div(NameGenerator& names, const Expr& a, const Expr& b) {
  return bind(names, a, [&](const Expr& x) {
    return bind(names, b, [&](const Expr& y) {
      const Expr zero = make_zero(x.type());
      const Expr inexact = x % y != zero && (x < zero) != (y < zero);
      return select(inexact, x / y + 1, x / y);
    });
  });
}

// The float remainder a - b * q with q = floor(a / b), or trunc(a / b) for fmod, in f64.
Expr float_mod(NameGenerator& names, const Expr& a, const Expr& b, bool fmod) {
  const DType type = a.type();
  return bind(names, cast(DType::f64, a), [&](const Expr& x) {
    return bind(names, cast(DType::f64, b), [&](const Expr& y) {
      return bind(names, x / y, [&](const Expr& ratio) {
        Expr q = call(Intrinsic::floor, {ratio});
        if (fmod) q = select(ratio < 0.0, call(Intrinsic::ceil, {ratio}), q);
        return cast(type, x - y * q);
      });
    });
  });
}

// The integer remainder with the dividend's sign (C's %).
Expr truncated_int_mod(NameGenerator& names, const Expr& a, const Expr& b) {
  return bind(names, a, [&](const Expr& x) {
    return bind(names, b, [&](const Expr& y) {
      return bind(names, x % y, [&](const Expr& r) {
        const Expr zero = make_zero(r.type());
        return select(r != zero && (r < zero) != (x < zero), r - y, r);
      });
    });
  });
}

Expr orderable(const Expr& e) { return e.type() == DType::boolean ? cast(DType::i32, e) : e; }

void define_comparison(LoweringTable& table, Op op, BinaryOp comparison) {
  table.define(op, [comparison](const ComputeArgs& args) -> Expected<Expr> {
    const Expr a = args.input(0, broadcast_index(args.index, args.inputs[0].shape));
    const Expr b = args.input(1, broadcast_index(args.index, args.inputs[1].shape));
    return binary(comparison, orderable(a), orderable(b));
  });
}

}  // namespace

void register_binary_lowerings(LoweringTable& table) {
  using N = NameGenerator;
  define_binary(table, Op::add, [](N&, const Expr& a, const Expr& b) { return a + b; });
  define_binary(table, Op::sub, [](N&, const Expr& a, const Expr& b) { return a - b; });
  define_binary(table, Op::mul, [](N&, const Expr& a, const Expr& b) { return a * b; });
  define_binary(table, Op::div, [](N& names, const Expr& a, const Expr& b) {
    return is_floating(a.type()) ? a / b : truncating_div(names, a, b);
  });
  define_binary(table, Op::pow,
                [](N&, const Expr& a, const Expr& b) { return call(Intrinsic::pow, {a, b}); });
  define_binary(table, Op::max, [](N&, const Expr& a, const Expr& b) { return max(a, b); });
  define_binary(table, Op::min, [](N&, const Expr& a, const Expr& b) { return min(a, b); });
  table.define(Op::mod, [](const ComputeArgs& args) -> Expected<Expr> {
    const Expr a = args.input(0, broadcast_index(args.index, args.inputs[0].shape));
    const Expr b = args.input(1, broadcast_index(args.index, args.inputs[1].shape));
    const bool fmod = args.attrs.get_bool("fmod");
    if (is_floating(a.type())) return float_mod(args.names, a, b, fmod);
    return fmod ? truncated_int_mod(args.names, a, b) : a % b;
  });
  define_comparison(table, Op::equal, BinaryOp::eq);
  define_comparison(table, Op::less, BinaryOp::lt);
  define_comparison(table, Op::less_equal, BinaryOp::le);
  define_comparison(table, Op::greater, BinaryOp::gt);
  define_comparison(table, Op::greater_equal, BinaryOp::ge);
  define_binary(table, Op::logical_and, [](N&, const Expr& a, const Expr& b) { return a && b; });
  define_binary(table, Op::logical_or, [](N&, const Expr& a, const Expr& b) { return a || b; });
  define_binary(table, Op::logical_xor, [](N&, const Expr& a, const Expr& b) { return a != b; });
  table.define(Op::where, [](const ComputeArgs& args) -> Expected<Expr> {
    std::vector<Expr> operands;
    for (int i = 0; i < 3; ++i) {
      operands.push_back(args.input(i, broadcast_index(args.index, args.inputs[i].shape)));
    }
    return select(operands[0], operands[1], operands[2]);
  });
}

}  // namespace kiln::loop::lowering
