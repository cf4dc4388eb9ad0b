// Elementwise unary ops: out[i] = f(x[i]), same shape and (except cast) same dtype.
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

void define_unary(OpTable& table, Op op, std::string summary, Domain domain, double flops,
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
}

}  // namespace

void register_unary_ops(OpTable& table) {
  using D = Domain;
  define_unary(table, Op::neg, "-x", D::numeric, 1, [](double x) { return -x; });
  define_unary(table, Op::abs, "|x|", D::numeric, 1, [](double x) { return std::fabs(x); });
  define_unary(table, Op::exp, "e^x", D::floating, 4, [](double x) { return std::exp(x); });
  define_unary(table, Op::log, "natural logarithm", D::floating, 4,
               [](double x) { return std::log(x); });
  define_unary(table, Op::sqrt, "square root", D::floating, 2,
               [](double x) { return std::sqrt(x); });
  define_unary(table, Op::rsqrt, "1 / sqrt(x)", D::floating, 2,
               [](double x) { return 1.0 / std::sqrt(x); });
  define_unary(table, Op::reciprocal, "1 / x", D::floating, 1, [](double x) { return 1.0 / x; });
  define_unary(table, Op::tanh, "hyperbolic tangent", D::floating, 6,
               [](double x) { return std::tanh(x); });
  define_unary(table, Op::sigmoid, "1 / (1 + e^-x)", D::floating, 5,
               [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  define_unary(table, Op::relu, "max(x, 0)", D::numeric, 1,
               [](double x) { return x > 0 ? x : 0.0; });
  define_unary(table, Op::erf, "Gauss error function", D::floating, 8,
               [](double x) { return std::erf(x); });
  define_unary(table, Op::sin, "sine", D::floating, 6, [](double x) { return std::sin(x); });
  define_unary(table, Op::cos, "cosine", D::floating, 6, [](double x) { return std::cos(x); });
  define_unary(table, Op::floor, "round toward -inf", D::floating, 1,
               [](double x) { return std::floor(x); });
  define_unary(table, Op::ceil, "round toward +inf", D::floating, 1,
               [](double x) { return std::ceil(x); });
  define_unary(table, Op::round, "round half to even", D::floating, 1,
               [](double x) { return std::nearbyint(x); });
  define_unary(table, Op::sign, "-1, 0 or 1", D::numeric, 1, &sign);
  define_unary(table, Op::logical_not, "logical not", D::boolean, 1,
               [](double x) { return x != 0.0 ? 0.0 : 1.0; });
  define_unary(table, Op::identity, "x", D::any, 0, [](double x) { return x; });

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

  // cast: converts to the dtype `to` with round_to_dtype semantics.
  define_unary(table, Op::cast, "convert to dtype `to`", D::any, 1, [](double x) { return x; });
  OpDef& cast = table.define(Op::cast);
  cast.attrs = {{"to", AttrKind::dtype, std::nullopt, "target dtype"}};
  cast.infer = [](std::span<const TensorType> in,
                  const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    return std::vector<TensorType>{{attrs.get_dtype("to"), in[0].shape}};
  };
}

}  // namespace kiln::ops
