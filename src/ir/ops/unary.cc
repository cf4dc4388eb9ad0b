// Elementwise unary ops: out[i] = f(x[i]), same shape and (except cast) same dtype.
//
// Gradients: dx = dy * f'(x), written with f's output y where that is simpler (exp, tanh,
// sigmoid). floor, ceil, round and sign are piecewise constant: no gradient flows through them.
#include <cmath>
#include <numbers>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

enum class Domain { floating, numeric, boolean, any };

Status check_domain(const TensorType& x, Domain domain) {
  switch (domain) {
    case Domain::floating: return require_floating(x, "x");
    case Domain::numeric:
      if (x.dtype == DType::boolean) {
        return Status::errorf("input 'x' must be numeric, got {}", x.to_string());
      }
      return Status::ok();
    case Domain::boolean: return require_bool(x, "x");
    case Domain::any: return Status::ok();
  }
  return Status::ok();
}

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double sign(double x) {
  if (std::isnan(x)) return x;
  return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
}

// Applies `fn` to every element; the result has the output type and is rounded to its dtype.
Array map_elements(const Array& x, const TensorType& out, double (*fn)(double)) {
  Array result(out.dtype, out.shape);
  for (int64_t i = 0; i < x.size(); ++i) result[i] = fn(x[i]);
  result.round_to_dtype();
  return result;
}

OpDef& define_unary(OpTable& table, Op op, std::string summary, Domain domain, double flops,
                    double (*fn)(double)) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::elementwise;
  def.input_names = {"x"};
  def.min_inputs = def.max_inputs = 1;
  def.infer = [domain](std::span<const TensorType> in,
                       const Attrs&) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(check_domain(in[0], domain));
    return std::vector<TensorType>{in[0]};
  };
  def.cost = per_element_cost(flops);
  def.eval = [fn](std::span<const Array> in, const Attrs&,
                  std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    return std::vector<Array>{map_elements(in[0], out[0], fn)};
  };
  return def;
}

// dx of a unary op from its input x, output y and output gradient dy.
using UnaryGrad = Value* (*)(GraphBuilder& b, Value* x, Value* y, Value* dy);

GradFn unary_gradient(UnaryGrad fn) {
  return [fn](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    return std::vector<Value*>{fn(b, node.input(0), node.output(0), grads[0])};
  };
}

// d/dx x * Phi(x) = Phi(x) + x * phi(x), Phi and phi the standard normal CDF and density.
Value* gelu_erf_derivative(GraphBuilder& b, Value* x) {
  Value* cdf = b.mul_scalar(b.add_scalar(b.erf(b.mul_scalar(x, 1 / std::numbers::sqrt2)), 1), 0.5);
  const double inv_sqrt_2pi = 1 / std::sqrt(2 * std::numbers::pi);
  Value* pdf = b.mul_scalar(b.exp(b.mul_scalar(b.mul(x, x), -0.5)), inv_sqrt_2pi);
  return b.add(cdf, b.mul(x, pdf));
}

// d/dx 0.5 x (1 + t), t = tanh(u), u = k (x + c x^3):
//   0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
Value* gelu_tanh_derivative(GraphBuilder& b, Value* x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double c = 0.044715;
  Value* x2 = b.mul(x, x);
  Value* t = b.tanh(b.mul_scalar(b.add(x, b.mul_scalar(b.mul(x2, x), c)), k));
  Value* sech2 = b.add_scalar(b.neg(b.mul(t, t)), 1);
  Value* du = b.mul_scalar(b.add_scalar(b.mul_scalar(x2, 3 * c), 1), k);
  return b.mul_scalar(b.add(b.add_scalar(t, 1), b.mul(x, b.mul(sech2, du))), 0.5);
}

}  // namespace

void register_unary_ops(OpTable& table) {
  using D = Domain;
  using B = GraphBuilder;
  define_unary(table, Op::neg, "-x", D::numeric, 1, [](double x) { return -x; }).gradient =
      unary_gradient([](B& b, Value*, Value*, Value* dy) { return b.neg(dy); });
  define_unary(table, Op::abs, "|x|", D::numeric, 1, [](double x) { return std::fabs(x); })
      .gradient = unary_gradient(
      [](B& b, Value* x, Value*, Value* dy) { return b.mul(dy, b.sign(x)); });
  define_unary(table, Op::exp, "e^x", D::floating, 4, [](double x) { return std::exp(x); })
      .gradient = unary_gradient([](B& b, Value*, Value* y, Value* dy) { return b.mul(dy, y); });
  define_unary(table, Op::log, "natural logarithm", D::floating, 4,
               [](double x) { return std::log(x); })
      .gradient = unary_gradient([](B& b, Value* x, Value*, Value* dy) { return b.div(dy, x); });
  define_unary(table, Op::sqrt, "square root", D::floating, 2,
               [](double x) { return std::sqrt(x); })
      .gradient = unary_gradient(
      [](B& b, Value*, Value* y, Value* dy) { return b.div(dy, b.mul_scalar(y, 2)); });
  // d/dx x^(-1/2) = -0.5 y^3.
  define_unary(table, Op::rsqrt, "1 / sqrt(x)", D::floating, 2,
               [](double x) { return 1.0 / std::sqrt(x); })
      .gradient = unary_gradient([](B& b, Value*, Value* y, Value* dy) {
    return b.mul(dy, b.mul_scalar(b.mul(y, b.mul(y, y)), -0.5));
  });
  define_unary(table, Op::reciprocal, "1 / x", D::floating, 1, [](double x) { return 1.0 / x; })
      .gradient = unary_gradient(
      [](B& b, Value*, Value* y, Value* dy) { return b.neg(b.mul(dy, b.mul(y, y))); });
  define_unary(table, Op::tanh, "hyperbolic tangent", D::floating, 6,
               [](double x) { return std::tanh(x); })
      .gradient = unary_gradient([](B& b, Value*, Value* y, Value* dy) {
    return b.mul(dy, b.add_scalar(b.neg(b.mul(y, y)), 1));
  });
  define_unary(table, Op::sigmoid, "1 / (1 + e^-x)", D::floating, 5,
               [](double x) { return 1.0 / (1.0 + std::exp(-x)); })
      .gradient = unary_gradient([](B& b, Value*, Value* y, Value* dy) {
    return b.mul(dy, b.mul(y, b.add_scalar(b.neg(y), 1)));
  });
  // The derivative at the kink x = 0 is taken as 0, as PyTorch.
  define_unary(table, Op::relu, "max(x, 0)", D::numeric, 1,
               [](double x) { return x > 0 ? x : 0.0; })
      .gradient = unary_gradient([](B& b, Value* x, Value*, Value* dy) {
    return b.where(b.greater(x, scalar_like(b, 0, x)), dy, scalar_like(b, 0, x));
  });
  define_unary(table, Op::erf, "Gauss error function", D::floating, 8,
               [](double x) { return std::erf(x); })
      .gradient = unary_gradient([](B& b, Value* x, Value*, Value* dy) {
    const double two_over_sqrt_pi = 2 * std::numbers::inv_sqrtpi;
    return b.mul(dy, b.mul_scalar(b.exp(b.neg(b.mul(x, x))), two_over_sqrt_pi));
  });
  define_unary(table, Op::sin, "sine", D::floating, 6, [](double x) { return std::sin(x); })
      .gradient = unary_gradient(
      [](B& b, Value* x, Value*, Value* dy) { return b.mul(dy, b.cos(x)); });
  define_unary(table, Op::cos, "cosine", D::floating, 6, [](double x) { return std::cos(x); })
      .gradient = unary_gradient(
      [](B& b, Value* x, Value*, Value* dy) { return b.neg(b.mul(dy, b.sin(x))); });
  define_unary(table, Op::floor, "round toward -inf", D::floating, 1,
               [](double x) { return std::floor(x); })
      .gradient = zero_gradient();
  define_unary(table, Op::ceil, "round toward +inf", D::floating, 1,
               [](double x) { return std::ceil(x); })
      .gradient = zero_gradient();
  define_unary(table, Op::round, "round half to even", D::floating, 1,
               [](double x) { return std::nearbyint(x); })
      .gradient = zero_gradient();
  define_unary(table, Op::sign, "-1, 0 or 1", D::numeric, 1, &sign).gradient = zero_gradient();
  define_unary(table, Op::logical_not, "logical not", D::boolean, 1,
               [](double x) { return x != 0.0 ? 0.0 : 1.0; })
      .non_differentiable = "input and output are bool";
  define_unary(table, Op::identity, "x", D::any, 0, [](double x) { return x; }).gradient =
      unary_gradient([](B&, Value*, Value*, Value* dy) { return dy; });

  // gelu: one op, two forms, as PyTorch's approximate="none" | "tanh".
  define_unary(table, Op::gelu, "x * Phi(x); approximate=\"tanh\" for the tanh form",
               D::floating, 10, &gelu_erf);
  OpDef& gelu = table.define(Op::gelu);
  gelu.attrs = {{"approximate", AttrKind::string, AttrValue("none"),
                 "\"none\" (exact, with erf) or \"tanh\""}};
  gelu.infer = [](std::span<const TensorType> in,
                  const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(require_floating(in[0], "x"));
    const std::string& form = attrs.get_string("approximate");
    if (form != "none" && form != "tanh") {
      return Status::errorf("attribute 'approximate' must be \"none\" or \"tanh\", got \"{}\"",
                            form);
    }
    return std::vector<TensorType>{in[0]};
  };
  gelu.eval = [](std::span<const Array> in, const Attrs& attrs,
                 std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const bool tanh_form = attrs.get_string("approximate") == "tanh";
    return std::vector<Array>{map_elements(in[0], out[0], tanh_form ? &gelu_tanh : &gelu_erf)};
  };
  gelu.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    Value* x = node.input(0);
    const bool tanh_form = node.attrs().get_string("approximate") == "tanh";
    Value* derivative = tanh_form ? gelu_tanh_derivative(b, x) : gelu_erf_derivative(b, x);
    return std::vector<Value*>{b.mul(grads[0], derivative)};
  };

  // cast: converts to the dtype `to` with round_to_dtype semantics. Between floating types the
  // gradient is cast back; integer and bool values carry no gradient.
  define_unary(table, Op::cast, "convert to dtype `to`", D::any, 1, [](double x) { return x; });
  OpDef& cast = table.define(Op::cast);
  cast.attrs = {{"to", AttrKind::dtype, std::nullopt, "target dtype"}};
  cast.infer = [](std::span<const TensorType> in,
                  const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    return std::vector<TensorType>{{attrs.get_dtype("to"), in[0].shape}};
  };
  cast.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    const DType from = node.input(0)->dtype();
    const bool flows = is_floating(from) && is_floating(node.output(0)->dtype());
    return std::vector<Value*>{flows ? b.cast(grads[0], from) : nullptr};
  };

  // exp, log and the reciprocals in f32 under mixed precision (autocast's f32 list).
  for (Op op : {Op::exp, Op::log, Op::rsqrt, Op::reciprocal}) {
    table.define(op).precision = PrecisionPolicy::f32;
  }
}

}  // namespace kiln::ops
