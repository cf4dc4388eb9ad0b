// Elementwise binary ops (arithmetic, comparison, logic) and the ternary `where`, all with
// NumPy broadcasting: out[i] = f(a[broadcast(i)], b[broadcast(i)]).
//
// Gradients are formed at the output's shape and summed back to each operand's shape
// (GraphBuilder::sum_to), the adjoint of broadcasting. max and min send the gradient of a tie to
// `a`; comparisons and logic produce bool, which carries no gradient.
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

// Which input dtypes an op accepts; both inputs must have the same dtype in every case.
enum class Domain { floating, numeric, boolean, any };

// What the output dtype is: that of the inputs, or bool (comparisons).
enum class Result { same, boolean };

Status check_domain(const TensorType& a, Domain domain) {
  switch (domain) {
    case Domain::floating: return require_floating(a, "a");
    case Domain::numeric:
      if (a.dtype == DType::boolean) {
        return Status::errorf("input 'a' must be numeric, got {}", a.to_string());
      }
      return Status::ok();
    case Domain::boolean: return require_bool(a, "a");
    case Domain::any: return Status::ok();
  }
  return Status::ok();
}

// Broadcasts the shapes of the named inputs, checking the result's element count (broadcasting
// two valid shapes, e.g. [2^40,1] and [1,2^40], can exceed what any shape may hold).
Expected<Shape> broadcast_inputs(std::span<const TensorType> in,
                                 std::span<const std::string> names) {
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    Expected<Shape> next = broadcast_shapes(shape, in[i].shape);
    if (!next) {
      std::string listed;
      for (size_t j = 0; j < in.size(); ++j) {
        if (j > 0) listed += j + 1 == in.size() ? " and " : ", ";
        listed += fmt::format("'{}' ({})", names[j], in[j].to_string());
      }
      return Status::errorf("inputs {} cannot be broadcast together", listed);
    }
    shape = std::move(next).value();
  }
  return Shape::make(shape.dims());
}

double divide(double a, double b) { return a / b; }

// Integer division truncating toward zero. Exact for |a| < 2^53 (the integers an Array holds
// exactly): a quotient just below an integer stays farther from it than half an ulp.
double truncating_div(double a, double b) { return std::trunc(a / b); }

// The remainder with the sign of the divisor, as Python's and NumPy's `%` (mod(-1, inf) = inf,
// a zero result takes the divisor's sign).
double floored_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r == 0) return std::copysign(0.0, b);
  if ((r < 0) != (b < 0)) r += b;
  return r;
}

// The remainder with the sign of the dividend, as C fmod.
double truncated_mod(double a, double b) { return std::fmod(a, b); }

// Maximum and minimum propagate NaN from either side, as numpy.maximum / numpy.minimum.
double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

double nan_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

using BinaryFn = double (*)(double, double);

// Applies `fn` over the broadcast output. When `zero_divisor_error` is set, an integer output
// with a zero element in `b` is an error with that message (floats follow IEEE instead).
Expected<Array> map_broadcast(const Array& a, const Array& b, const TensorType& out, BinaryFn fn,
                              const char* zero_divisor_error = nullptr) {
  const bool check_divisor = zero_divisor_error != nullptr && is_integer(out.dtype);
  Array result(out.dtype, out.shape);
  int64_t i = 0;
  bool divided_by_zero = false;
  for_each_index(out.shape, [&](std::span<const int64_t> index) {
    const double x = a[broadcast_offset(a.shape, index)];
    const double y = b[broadcast_offset(b.shape, index)];
    if (check_divisor && y == 0) divided_by_zero = true;
    result[i++] = fn(x, y);
  });
  if (divided_by_zero) return Status::error(zero_divisor_error);
  result.round_to_dtype();
  return result;
}

OpDef& define_binary(OpTable& table, Op op, std::string summary, Domain domain, Result result,
                     double flops, BinaryFn fn) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::broadcast;
  def.input_names = {"a", "b"};
  def.min_inputs = def.max_inputs = 2;
  def.infer = [domain, result, names = def.input_names](
                  std::span<const TensorType> in,
                  const Attrs&) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(require_same_dtype(in[0], "a", in[1], "b"));
    KILN_RETURN_IF_ERROR(check_domain(in[0], domain));
    KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(in, names));
    const DType dtype = result == Result::boolean ? DType::boolean : in[0].dtype;
    return std::vector<TensorType>{{dtype, std::move(shape)}};
  };
  def.cost = per_element_cost(flops);
  def.eval = [fn](std::span<const Array> in, const Attrs&,
                  std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    KILN_ASSIGN_OR_RETURN(Array r, map_broadcast(in[0], in[1], out[0], fn));
    return std::vector<Array>{std::move(r)};
  };
  return def;
}

// The gradients of a binary op at the output's shape, from its inputs, output and dy.
struct BinaryGrads {
  Value* da;
  Value* db;
};
using BinaryGrad = BinaryGrads (*)(GraphBuilder& b, Value* lhs, Value* rhs, Value* y, Value* dy);

GradFn binary_gradient(BinaryGrad fn) {
  return [fn](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    Value* lhs = node.input(0);
    Value* rhs = node.input(1);
    const BinaryGrads full = fn(b, lhs, rhs, node.output(0), grads[0]);
    return std::vector<Value*>{b.sum_to(full.da, lhs->shape()), b.sum_to(full.db, rhs->shape())};
  };
}

// The gradient of max(a, b) (or min with the operands swapped): dy goes where `a_wins` holds,
// ties included, and to b elsewhere.
BinaryGrads select_gradient(GraphBuilder& b, Value* a_wins, Value* dy, const Value* like) {
  Value* zero = scalar_like(b, 0, like);
  return {b.where(a_wins, dy, zero), b.where(a_wins, zero, dy)};
}

// trunc(t) = sign(t) * floor(|t|), for the gradient of fmod.
Value* truncate(GraphBuilder& b, Value* t) { return b.mul(b.sign(t), b.floor(b.abs(t))); }

}  // namespace

void register_binary_ops(OpTable& table) {
  using D = Domain;
  using R = Result;
  using B = GraphBuilder;
  define_binary(table, Op::add, "a + b", D::numeric, R::same, 1,
                [](double a, double b) { return a + b; })
      .gradient = binary_gradient(
      [](B&, Value*, Value*, Value*, Value* dy) { return BinaryGrads{dy, dy}; });
  define_binary(table, Op::sub, "a - b", D::numeric, R::same, 1,
                [](double a, double b) { return a - b; })
      .gradient = binary_gradient(
      [](B& b, Value*, Value*, Value*, Value* dy) { return BinaryGrads{dy, b.neg(dy)}; });
  define_binary(table, Op::mul, "a * b", D::numeric, R::same, 1,
                [](double a, double b) { return a * b; })
      .gradient = binary_gradient([](B& b, Value* lhs, Value* rhs, Value*, Value* dy) {
    return BinaryGrads{b.mul(dy, rhs), b.mul(dy, lhs)};
  });
  // d/da = b a^(b-1); d/db = a^b log(a), defined for a > 0 (NaN elsewhere, as the real power
  // itself is undefined there for non-integer b).
  define_binary(table, Op::pow, "a ^ b", D::floating, R::same, 10,
                [](double a, double b) { return std::pow(a, b); })
      .gradient = binary_gradient([](B& b, Value* lhs, Value* rhs, Value* y, Value* dy) {
    Value* da = b.mul(dy, b.mul(rhs, b.pow(lhs, b.add_scalar(rhs, -1))));
    return BinaryGrads{da, b.mul(dy, b.mul(y, b.log(lhs)))};
  });
  define_binary(table, Op::max, "elementwise maximum; NaN propagates", D::numeric, R::same, 1,
                &nan_max)
      .gradient = binary_gradient([](B& b, Value* lhs, Value* rhs, Value*, Value* dy) {
    return select_gradient(b, b.greater_equal(lhs, rhs), dy, lhs);
  });
  define_binary(table, Op::min, "elementwise minimum; NaN propagates", D::numeric, R::same, 1,
                &nan_min)
      .gradient = binary_gradient([](B& b, Value* lhs, Value* rhs, Value*, Value* dy) {
    return select_gradient(b, b.greater_equal(rhs, lhs), dy, lhs);
  });

  // div: IEEE for floats; integers truncate toward zero, as C and ONNX Div.
  OpDef& div = define_binary(table, Op::div, "a / b; integers truncate toward zero", D::numeric,
                             R::same, 1, &divide);
  div.eval = [](std::span<const Array> in, const Attrs&,
                std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const BinaryFn fn = is_integer(out[0].dtype) ? &truncating_div : &divide;
    KILN_ASSIGN_OR_RETURN(Array r,
                          map_broadcast(in[0], in[1], out[0], fn, "integer division by zero"));
    return std::vector<Array>{std::move(r)};
  };
  div.gradient = binary_gradient([](B& b, Value*, Value* rhs, Value* y, Value* dy) {
    return BinaryGrads{b.div(dy, rhs), b.neg(b.div(b.mul(dy, y), rhs))};
  });

  // mod: one op for both remainders, as ONNX Mod's fmod attribute. Float mod by zero is NaN.
  OpDef& mod = define_binary(table, Op::mod, "remainder; sign of b, or of a when fmod", D::numeric,
                             R::same, 1, &floored_mod);
  mod.attrs = {{"fmod", AttrKind::boolean, AttrValue(false),
                "false: result has the sign of b (Python %); true: of a (C fmod)"}};
  mod.eval = [](std::span<const Array> in, const Attrs& attrs,
                std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const BinaryFn fn = attrs.get_bool("fmod") ? &truncated_mod : &floored_mod;
    KILN_ASSIGN_OR_RETURN(Array r,
                          map_broadcast(in[0], in[1], out[0], fn, "integer modulo by zero"));
    return std::vector<Array>{std::move(r)};
  };
  // a mod b = a - b q, with the quotient q = floor(a / b) (trunc for fmod) piecewise constant.
  mod.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    Value* lhs = node.input(0);
    Value* rhs = node.input(1);
    Value* ratio = b.div(lhs, rhs);
    Value* quotient = node.attrs().get_bool("fmod") ? truncate(b, ratio) : b.floor(ratio);
    return std::vector<Value*>{b.sum_to(grads[0], lhs->shape()),
                               b.sum_to(b.neg(b.mul(grads[0], quotient)), rhs->shape())};
  };

  // Comparisons accept every dtype (bool compares as 0 < 1); NaN compares unequal and unordered.
  define_binary(table, Op::equal, "a == b", D::any, R::boolean, 1,
                [](double a, double b) { return a == b ? 1.0 : 0.0; });
  define_binary(table, Op::less, "a < b", D::any, R::boolean, 1,
                [](double a, double b) { return a < b ? 1.0 : 0.0; });
  define_binary(table, Op::less_equal, "a <= b", D::any, R::boolean, 1,
                [](double a, double b) { return a <= b ? 1.0 : 0.0; });
  define_binary(table, Op::greater, "a > b", D::any, R::boolean, 1,
                [](double a, double b) { return a > b ? 1.0 : 0.0; });
  define_binary(table, Op::greater_equal, "a >= b", D::any, R::boolean, 1,
                [](double a, double b) { return a >= b ? 1.0 : 0.0; });

  define_binary(table, Op::logical_and, "logical and", D::boolean, R::same, 1,
                [](double a, double b) { return a != 0 && b != 0 ? 1.0 : 0.0; });
  define_binary(table, Op::logical_or, "logical or", D::boolean, R::same, 1,
                [](double a, double b) { return a != 0 || b != 0 ? 1.0 : 0.0; });
  define_binary(table, Op::logical_xor, "logical exclusive or", D::boolean, R::same, 1,
                [](double a, double b) { return (a != 0) != (b != 0) ? 1.0 : 0.0; });
  for (Op op : {Op::equal, Op::less, Op::less_equal, Op::greater, Op::greater_equal,
                Op::logical_and, Op::logical_or, Op::logical_xor}) {
    table.define(op).non_differentiable = "output is bool";
  }

  OpDef& where = table.define(Op::where);
  where.summary = "condition ? x : y, elementwise with broadcasting";
  where.fusion_kind = FusionKind::broadcast;
  where.input_names = {"condition", "x", "y"};
  where.min_inputs = where.max_inputs = 3;
  where.infer = [names = where.input_names](std::span<const TensorType> in,
                                            const Attrs&) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(require_bool(in[0], "condition"));
    KILN_RETURN_IF_ERROR(require_same_dtype(in[1], "x", in[2], "y"));
    KILN_ASSIGN_OR_RETURN(Shape shape, broadcast_inputs(in, names));
    return std::vector<TensorType>{{in[1].dtype, std::move(shape)}};
  };
  where.cost = per_element_cost(1);
  where.eval = [](std::span<const Array> in, const Attrs&,
                  std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const Array& condition = in[0];
    const Array& x = in[1];
    const Array& y = in[2];
    Array result(out[0].dtype, out[0].shape);
    int64_t i = 0;
    for_each_index(out[0].shape, [&](std::span<const int64_t> index) {
      result[i++] = condition[broadcast_offset(condition.shape, index)] != 0
                        ? x[broadcast_offset(x.shape, index)]
                        : y[broadcast_offset(y.shape, index)];
    });
    result.round_to_dtype();
    return std::vector<Array>{std::move(result)};
  };
  where.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    Value* condition = node.input(0);
    Value* x = node.input(1);
    Value* y = node.input(2);
    const BinaryGrads full = select_gradient(b, condition, grads[0], x);
    return std::vector<Value*>{nullptr, b.sum_to(full.da, x->shape()),
                               b.sum_to(full.db, y->shape())};
  };

  table.define(Op::pow).precision = PrecisionPolicy::f32;  // as autocast's pow
}

}  // namespace kiln::ops
