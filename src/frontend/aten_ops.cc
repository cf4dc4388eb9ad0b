// The ATen importer's op converters, one per ATen overload, listed in one table at the end.
//
// The arithmetic is done in the dtype PyTorch's metadata gives the result (its type promotion),
// so integer operands of a float result are cast first, as ATen computes. Comparisons, whose
// result is bool, promote their operands as ATen's result_type does. Shapes that ATen derives
// from arguments (view's size with a -1, squeeze, expand) are taken from the result metadata,
// which is exact.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

#include "frontend/aten_converter.h"

namespace kiln::aten_import {
namespace {

using Results = Expected<std::vector<Value*>>;

Results one(Value* value) { return std::vector<Value*>{value}; }

Value* cast_to(GraphBuilder& b, Value* x, DType dtype) {
  return x->dtype() == dtype ? x : b.cast(x, dtype);
}

// A dim argument as an axis of a tensor of `rank` dims; a 0-d tensor takes dims 0 and -1, as
// ATen's maybe_wrap_dim does.
Expected<int> axis_of(AtenNode& n, std::string_view name, int rank) {
  KILN_ASSIGN_OR_RETURN(int64_t dim, n.integer(name));
  if (rank == 0 && (dim == 0 || dim == -1)) return 0;
  Expected<int> axis = normalize_axis(dim, rank);
  if (!axis) return n.unsupported(name, axis.status().message());
  return *axis;
}

// A list of dims; an absent or empty list means every dim (ATen's reductions over dim=[]).
Expected<std::vector<int64_t>> axes_of(AtenNode& n, std::string_view name, int rank) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, n.integers_or_empty(name));
  std::vector<int64_t> axes;
  if (dims.empty()) {
    axes.resize(static_cast<size_t>(rank));
    std::iota(axes.begin(), axes.end(), 0);
    return axes;
  }
  for (int64_t dim : dims) {
    if (rank == 0 && (dim == 0 || dim == -1)) continue;
    Expected<int> axis = normalize_axis(dim, rank);
    if (!axis) return n.unsupported(name, axis.status().message());
    axes.push_back(*axis);
  }
  return axes;
}

// Whether `x` counts as a wrapped number in ATen's type promotion: a 0-d tensor does not
// decide the dtype against a tensor with dims of the same category.
DType promoted(const Value* a, const Value* b) {
  if (a->dtype() == b->dtype()) return a->dtype();
  const auto category = [](DType d) { return is_floating(d) ? 2 : is_integer(d) ? 1 : 0; };
  if (category(a->dtype()) != category(b->dtype())) {
    return category(a->dtype()) > category(b->dtype()) ? a->dtype() : b->dtype();
  }
  if (a->rank() == 0 && b->rank() > 0) return b->dtype();
  if (b->rank() == 0 && a->rank() > 0) return a->dtype();
  if (is_floating(a->dtype()) && dtype_size_bytes(a->dtype()) == dtype_size_bytes(b->dtype())) {
    return DType::f32;  // f16 with bf16
  }
  return dtype_size_bytes(a->dtype()) > dtype_size_bytes(b->dtype()) ? a->dtype() : b->dtype();
}

// The other operand of a binary op: a tensor, or (for the .Scalar overloads) a number made a
// constant of `dtype`.
Expected<Value*> other_operand(AtenNode& n, bool scalar, DType dtype) {
  if (!scalar) {
    KILN_ASSIGN_OR_RETURN(Value * other, n.tensor("other"));
    return cast_to(n.b, other, dtype);
  }
  KILN_ASSIGN_OR_RETURN(double other, n.number("other"));
  return n.b.scalar(other, dtype);
}

// ---- Elementwise ----------------------------------------------------------------------------

// Unary ops computed in the result's dtype (exp of an int tensor is a float).
Converter unary(Op op) {
  return [op](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
    return one(n.b.unary(op, cast_to(n.b, x, n.output_type().dtype)));
  };
}

Results logical_not(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  return one(n.b.unary(Op::logical_not, cast_to(n.b, x, DType::boolean)));
}

// add, sub (with alpha), mul, div, in their .Tensor and .Scalar overloads.
Converter arithmetic(Op op, bool scalar, bool has_alpha) {
  return [=](AtenNode& n) -> Results {
    const DType dtype = n.output_type().dtype;
    KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
    KILN_ASSIGN_OR_RETURN(Value * other, other_operand(n, scalar, dtype));
    if (has_alpha) {
      KILN_ASSIGN_OR_RETURN(double alpha, n.number("alpha"));
      if (alpha != 1) other = n.b.mul(other, n.b.scalar(alpha, dtype));
    }
    return one(n.b.apply1(op, {cast_to(n.b, self, dtype), other}));
  };
}

Converter binary_tensor(Op op) {
  return [op](AtenNode& n) -> Results {
    const DType dtype = n.output_type().dtype;
    KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
    KILN_ASSIGN_OR_RETURN(Value * other, n.tensor("other"));
    return one(n.b.apply1(op, {cast_to(n.b, self, dtype), cast_to(n.b, other, dtype)}));
  };
}

// eq, ne, lt, le, gt, ge: operands promoted as ATen's result_type, result bool.
Converter comparison(Op op, bool negate, bool scalar) {
  return [=](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
    Value* other = nullptr;
    DType dtype = self->dtype();
    if (scalar) {
      KILN_ASSIGN_OR_RETURN(double value, n.number("other"));
      KILN_ASSIGN_OR_RETURN(bool is_float, n.is_float_number("other"));
      if (is_float && !is_floating(dtype)) dtype = DType::f32;
      if (!is_float && dtype == DType::boolean) dtype = DType::i64;
      other = n.b.scalar(value, dtype);
    } else {
      KILN_ASSIGN_OR_RETURN(other, n.tensor("other"));
      dtype = promoted(self, other);
      other = cast_to(n.b, other, dtype);
    }
    Value* result = n.b.apply1(op, {cast_to(n.b, self, dtype), other});
    return one(negate ? n.b.unary(Op::logical_not, result) : result);
  };
}

Converter logical(Op op) {
  return [op](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
    KILN_ASSIGN_OR_RETURN(Value * other, n.tensor("other"));
    return one(
        n.b.apply1(op, {cast_to(n.b, self, DType::boolean), cast_to(n.b, other, DType::boolean)}));
  };
}

// bitwise_and, _or, _xor, _not: logical ops on bool tensors (integer bits are not converted).
Converter bitwise(Op op) {
  return [op](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
    std::vector<Value*> operands = {self};
    if (op != Op::logical_not) {
      KILN_ASSIGN_OR_RETURN(Value * other, n.tensor("other"));
      operands.push_back(other);
    }
    for (Value* operand : operands) {
      if (operand->dtype() != DType::boolean) {
        return n.unsupported(operands.size() == 1 || operand == self ? "self" : "other",
                             "only bool tensors' bitwise ops are converted");
      }
    }
    return one(n.b.apply1(op, operands));
  };
}

Results where(AtenNode& n) {
  const DType dtype = n.output_type().dtype;
  KILN_ASSIGN_OR_RETURN(Value * condition, n.tensor("condition"));
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * other, n.tensor("other"));
  return one(n.b.where(cast_to(n.b, condition, DType::boolean), cast_to(n.b, self, dtype),
                       cast_to(n.b, other, dtype)));
}

// clamp: max with `min`, then min with `max` (so max wins where min > max, as in ATen); NaN in
// x stays NaN.
Results clamp(AtenNode& n) {
  const DType dtype = n.output_type().dtype;
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> low, n.optional_number("min"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> high, n.optional_number("max"));
  Value* y = cast_to(n.b, x, dtype);
  if (low) y = n.b.max(y, n.b.scalar(*low, dtype));
  if (high) y = n.b.min(y, n.b.scalar(*high, dtype));
  return one(y);
}

// hardtanh: clamp to [min_val, max_val] (relu6 is hardtanh(0, 6)).
Results hardtanh(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double low, n.number("min_val"));
  KILN_ASSIGN_OR_RETURN(double high, n.number("max_val"));
  GraphBuilder& b = n.b;
  return one(b.min(b.max(x, b.scalar(low, x->dtype())), b.scalar(high, x->dtype())));
}

// The gradient passes where min_val < x < max_val (ATen's rule at the bounds: none).
Results hardtanh_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double low, n.number("min_val"));
  KILN_ASSIGN_OR_RETURN(double high, n.number("max_val"));
  GraphBuilder& b = n.b;
  Value* inside = b.apply1(Op::logical_and, {b.greater(x, b.scalar(low, x->dtype())),
                                             b.apply1(Op::less, {x, b.scalar(high, x->dtype())})});
  return one(b.where(inside, grad, b.scalar(0, grad->dtype())));
}

Results leaky_relu(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double slope, n.number("negative_slope"));
  GraphBuilder& b = n.b;
  return one(b.where(b.greater(x, b.scalar(0, x->dtype())), x, b.mul_scalar(x, slope)));
}

Results leaky_relu_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double slope, n.number("negative_slope"));
  KILN_ASSIGN_OR_RETURN(bool self_is_result, n.boolean("self_is_result"));
  (void)self_is_result;  // the result has the input's sign, so either reads the same
  GraphBuilder& b = n.b;
  return one(b.where(b.greater(x, b.scalar(0, x->dtype())), grad, b.mul_scalar(grad, slope)));
}

Results pow_tensor_scalar(AtenNode& n) {
  const DType dtype = n.output_type().dtype;
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double exponent, n.number("exponent"));
  return one(n.b.pow(cast_to(n.b, x, dtype), n.b.scalar(exponent, dtype)));
}

Results pow_tensor_tensor(AtenNode& n) {
  const DType dtype = n.output_type().dtype;
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * exponent, n.tensor("exponent"));
  return one(n.b.pow(cast_to(n.b, x, dtype), cast_to(n.b, exponent, dtype)));
}

Results gelu(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> approximate, n.optional_string("approximate"));
  const std::string form = approximate.value_or("none");
  if (form != "none" && form != "tanh") return n.unsupported("approximate", "not none or tanh");
  return one(n.b.gelu(x, form == "tanh"));
}

// d/dx of x * Phi(x): Phi(x) + x * phi(x), with the exact (erf) form only.
Results gelu_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> approximate, n.optional_string("approximate"));
  if (approximate.value_or("none") != "none") {
    return n.unsupported("approximate", "only the exact (erf) form's gradient is converted");
  }
  GraphBuilder& b = n.b;
  Value* cdf = b.mul_scalar(b.add_scalar(b.erf(b.mul_scalar(x, std::numbers::sqrt2 / 2)), 1), 0.5);
  Value* pdf = b.mul_scalar(b.exp(b.mul_scalar(b.mul(x, x), -0.5)),
                            std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  return one(b.mul(grad, b.add(cdf, b.mul(x, pdf))));
}

Results sigmoid_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * y, n.tensor("output"));
  GraphBuilder& b = n.b;
  return one(b.mul(grad, b.mul(y, b.sub(b.scalar(1, y->dtype()), y))));
}

Results tanh_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * y, n.tensor("output"));
  GraphBuilder& b = n.b;
  return one(b.mul(grad, b.sub(b.scalar(1, y->dtype()), b.mul(y, y))));
}

// grad where self > threshold, else 0 (relu's gradient).
Results threshold_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double threshold, n.number("threshold"));
  GraphBuilder& b = n.b;
  Value* keep = b.greater(x, b.scalar(threshold, x->dtype()));
  return one(b.where(keep, grad, b.scalar(0, grad->dtype())));
}

// log1p in Kahan's form, from log alone and accurate for small |x|: with u = 1 + x, x where u
// rounds to 1, u where u is inf, else log(u) * (x / (u - 1)) (the quotient is near 1, so the
// product overflows no sooner than the result). f16 and bf16 compute in f32.
Results log1p(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * input, n.tensor("self"));
  GraphBuilder& b = n.b;
  const DType dtype = n.output_type().dtype;
  Value* x = cast_to(b, input, accumulation_dtype(dtype));
  Value* u = b.add_scalar(x, 1);
  const double inf = std::numeric_limits<double>::infinity();
  Value* y = b.mul(b.log(u), b.div(x, b.add_scalar(u, -1)));
  y = b.where(b.equal(u, b.scalar(inf, u->dtype())), u, y);
  return one(cast_to(b, b.where(b.equal(u, b.scalar(1, u->dtype())), x, y), dtype));
}

// expm1 in Kahan's form, from exp and log alone: with u = exp(x), x where u rounds to 1, -1
// where u - 1 is -1, u where u is inf, else (u - 1) * (x / log(u)). Floating x only.
Value* expm1_of(GraphBuilder& b, Value* x) {
  const DType dtype = x->dtype();
  const double inf = std::numeric_limits<double>::infinity();
  Value* u = b.exp(x);
  Value* um1 = b.add_scalar(u, -1);
  Value* y = b.mul(um1, b.div(x, b.log(u)));
  y = b.where(b.equal(u, b.scalar(inf, dtype)), u, y);
  y = b.where(b.equal(um1, b.scalar(-1, dtype)), um1, y);
  return b.where(b.equal(u, b.scalar(1, dtype)), x, y);
}

// expm1, f16 and bf16 computed in f32.
Results expm1(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  const DType dtype = n.output_type().dtype;
  return one(cast_to(n.b, expm1_of(n.b, cast_to(n.b, x, accumulation_dtype(dtype))), dtype));
}

// elu (selu and celu are elu with other constants), as ATen's kernel: expm1(x * input_scale) *
// (alpha * scale) where x <= 0, else x * scale.
Results elu(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(double alpha, n.number("alpha"));
  KILN_ASSIGN_OR_RETURN(double scale, n.number("scale"));
  KILN_ASSIGN_OR_RETURN(double input_scale, n.number("input_scale"));
  GraphBuilder& b = n.b;
  const DType dtype = x->dtype();
  Value* inner = b.mul_scalar(cast_to(b, x, accumulation_dtype(dtype)), input_scale);
  Value* negative = b.mul_scalar(cast_to(b, expm1_of(b, inner), dtype), alpha * scale);
  Value* at_most_0 = b.apply1(Op::less_equal, {x, b.scalar(0, dtype)});
  return one(b.where(at_most_0, negative, b.mul_scalar(x, scale)));
}

// elu's gradient, as ATen's kernel, from the result y (is_result) or the input x: where the
// value is <= 0, grad * input_scale * (y + alpha * scale) or grad * input_scale * (alpha *
// scale) * exp(x * input_scale); elsewhere (NaN too) grad * scale.
Results elu_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(double alpha, n.number("alpha"));
  KILN_ASSIGN_OR_RETURN(double scale, n.number("scale"));
  KILN_ASSIGN_OR_RETURN(double input_scale, n.number("input_scale"));
  KILN_ASSIGN_OR_RETURN(bool is_result, n.boolean("is_result"));
  KILN_ASSIGN_OR_RETURN(Value * v, n.tensor("self_or_result"));
  GraphBuilder& b = n.b;
  Value* scaled = b.mul_scalar(grad, input_scale);
  Value* negative =
      is_result ? b.mul(scaled, b.add_scalar(v, alpha * scale))
                : b.mul(b.mul_scalar(scaled, alpha * scale), b.exp(b.mul_scalar(v, input_scale)));
  Value* at_most_0 = b.apply1(Op::less_equal, {v, b.scalar(0, v->dtype())});
  return one(b.where(at_most_0, negative, b.mul_scalar(grad, scale)));
}

// ---- Reductions -----------------------------------------------------------------------------

// sum, mean, amax, amin over `dim` (every dim when absent or empty), in the result's dtype.
Converter reduction(Op op, const char* dim_name, bool has_keepdim, bool has_dtype) {
  return [=](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
    std::vector<int64_t> axes;
    if (dim_name != nullptr) {
      KILN_ASSIGN_OR_RETURN(axes, axes_of(n, dim_name, x->rank()));
    } else {
      axes.resize(static_cast<size_t>(x->rank()));
      std::iota(axes.begin(), axes.end(), 0);
    }
    bool keepdim = false;
    if (has_keepdim) {
      KILN_ASSIGN_OR_RETURN(keepdim, n.boolean("keepdim"));
    }
    if (has_dtype) n.ignore({"dtype"});  // the result's dtype, which the metadata gives
    x = cast_to(n.b, x, n.output_type().dtype);
    if (axes.empty()) return one(n.b.apply1(Op::identity, {x}));
    return one(n.b.apply1(op, {x}, {{"axes", axes}, {"keepdims", keepdim}}));
  };
}

// any over one dim: the largest of the values as 0/1.
Results any_dim(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(bool keepdim, n.boolean("keepdim"));
  GraphBuilder& b = n.b;
  Value* flags = b.cast(cast_to(b, x, DType::boolean), DType::i32);
  if (x->rank() == 0) return one(b.cast(flags, DType::boolean));
  return one(b.cast(b.reduce_max(flags, {axis}, keepdim), DType::boolean));
}

// var with Bessel's correction (1 by default): the sum of squared deviations over N - correction.
Results var_correction(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(std::optional<double> correction, n.optional_number("correction"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, n.boolean("keepdim"));
  GraphBuilder& b = n.b;
  int64_t count = 1;
  for (int64_t axis : axes) count *= x->shape().dim(static_cast<int>(axis));
  Value* centered = b.sub(x, b.mean(x, axes, /*keepdims=*/true));
  Value* squares = b.sum(b.mul(centered, centered), axes, keepdim);
  return one(b.mul_scalar(squares, 1.0 / (static_cast<double>(count) - correction.value_or(1))));
}

// The running sums of x along `axis`: the inclusive scan of Hillis and Steele, ceil(log2(n))
// rounds that each add the sums so far shifted by 1, 2, 4, ... positions (a slice padded with
// -0, which adds nothing, the sign of zero included), so infinities and NaNs reach the same
// positions as in a running sum.
Value* running_sums(GraphBuilder& b, Value* x, int axis) {
  const int64_t size = x->rank() == 0 ? 1 : x->shape().dim(axis);
  for (int64_t shift = 1; shift < size; shift *= 2) {
    std::vector<int64_t> pads(2 * static_cast<size_t>(x->rank()), 0);
    pads[static_cast<size_t>(axis)] = shift;
    x = b.add(x, b.pad(b.slice(x, {0}, {size - shift}, {axis}), pads, -0.0));
  }
  return x;
}

// cumsum along dim: running_sums in the result's dtype (f16 and bf16 accumulate in f32).
Results cumsum(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  n.ignore({"dtype"});  // the result's dtype, which the metadata gives
  GraphBuilder& b = n.b;
  const DType dtype = n.output_type().dtype;
  Value* sums = running_sums(b, cast_to(b, x, accumulation_dtype(dtype)), axis);
  return one(b.apply1(Op::identity, {cast_to(b, sums, dtype)}));
}

// topk along dim, for k up to kMaxTopK: k rounds that each take the first of the largest (or
// smallest) values not taken yet, NaN counting as larger than any number as in ATen. The
// values are ATen's; among equal values Kiln takes lower indices first, where ATen's order
// among ties is its selection algorithm's (unspecified). sorted=False leaves the order to the
// implementation, and Kiln's is sorted.
constexpr int64_t kMaxTopK = 64;

Results topk(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int64_t k, n.integer("k"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(bool largest, n.boolean("largest"));
  KILN_ASSIGN_OR_RETURN(bool sorted, n.boolean("sorted"));
  (void)sorted;  // Kiln's order is sorted, which either value allows
  if (x->rank() == 0) return n.unsupported("self", "must have a dim");
  if (k < 1 || k > kMaxTopK) {
    return n.unsupported("k", fmt::format("only 1 to {} values are converted", kMaxTopK));
  }
  if (!is_floating(x->dtype())) return n.unsupported("self", "only floating tensors");
  GraphBuilder& b = n.b;
  const auto both = [&](Value* p, Value* q) { return b.apply1(Op::logical_and, {p, q}); };
  const auto either = [&](Value* p, Value* q) { return b.apply1(Op::logical_or, {p, q}); };
  const auto negation = [&](Value* p) { return b.apply1(Op::logical_not, {p}); };
  const double inf = std::numeric_limits<double>::infinity();
  Value* nan = negation(b.equal(x, x));
  Value* positions = b.iota(x->shape(), axis);
  Value* taken = b.fill(x->shape(), 0, DType::boolean);
  std::vector<Value*> values, indices;
  for (int64_t round = 0; round < k; ++round) {
    Value* hit = nullptr;
    if (largest) {  // the maximum of the open values, NaN if one is
      Value* best = b.reduce_max(b.where(taken, b.scalar(-inf, x->dtype()), x), {axis}, true);
      Value* equal = either(b.equal(x, best), both(nan, negation(b.equal(best, best))));
      hit = both(negation(taken), equal);
    } else {  // the minimum of the open numbers, else the first open NaN
      Value* closed = either(taken, nan);
      Value* best = b.reduce_min(b.where(closed, b.scalar(inf, x->dtype()), x), {axis}, true);
      Value* number = both(negation(closed), b.equal(x, best));
      Value* found = b.greater(b.reduce_max(b.cast(number, DType::i32), {axis}, true),
                               b.scalar(0, DType::i32));
      hit = b.where(found, number, both(negation(taken), nan));
    }
    Value* index =
        b.apply1(Op::argmax, {b.cast(hit, DType::i32)}, {{"axis", axis}, {"keepdims", true}});
    Value* chosen = b.equal(positions, index);
    values.push_back(b.reduce_max(b.where(chosen, x, b.scalar(-inf, x->dtype())), {axis}, true));
    indices.push_back(index);
    taken = either(taken, chosen);
  }
  if (k == 1) return std::vector<Value*>{values[0], indices[0]};
  return std::vector<Value*>{b.concat(values, axis), b.concat(indices, axis)};
}

// ---- Layout ---------------------------------------------------------------------------------

// view, reshape, squeeze, unsqueeze: the result's shape, from the metadata.
Converter reshape_to_result(std::initializer_list<std::string_view> shape_arguments) {
  std::vector<std::string_view> names(shape_arguments);
  return [names](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
    for (std::string_view name : names) n.ignore({name});
    return one(n.b.reshape(x, n.output_type().shape.dims()));
  };
}

// flip: a slice with step -1 along each of dims.
Results flip(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, n.integers("dims"));
  std::vector<int64_t> starts, ends, axes, steps;
  for (int64_t dim : dims) {
    if (x->rank() == 0 && (dim == 0 || dim == -1)) continue;
    Expected<int> axis = normalize_axis(dim, x->rank());
    if (!axis) return n.unsupported("dims", axis.status().message());
    const int64_t size = x->shape().dim(*axis);
    starts.push_back(size - 1);
    ends.push_back(-size - 1);  // before the first element
    axes.push_back(*axis);
    steps.push_back(-1);
  }
  if (axes.empty()) return one(n.b.apply1(Op::identity, {x}));
  return one(n.b.slice(x, starts, ends, axes, steps));
}

Results expand(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  n.ignore({"size"});  // -1 entries keep x's dim; the metadata has the result
  KILN_ASSIGN_OR_RETURN(bool implicit, n.boolean("implicit"));
  (void)implicit;  // only changes how autograd records the op
  return one(n.b.broadcast_to(x, n.output_type().shape.dims()));
}

Results permute(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, n.integers("dims"));
  for (int64_t& dim : dims) {
    Expected<int> axis = normalize_axis(dim, x->rank());
    if (!axis) return n.unsupported("dims", axis.status().message());
    dim = *axis;
  }
  return one(n.b.transpose(x, dims));
}

Results transpose_int(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int a, axis_of(n, "dim0", x->rank()));
  KILN_ASSIGN_OR_RETURN(int c, axis_of(n, "dim1", x->rank()));
  if (x->rank() < 2) return one(n.b.apply1(Op::identity, {x}));
  std::vector<int64_t> perm(static_cast<size_t>(x->rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(c)]);
  return one(n.b.transpose(x, perm));
}

Results t(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  if (x->rank() < 2) return one(n.b.apply1(Op::identity, {x}));
  return one(n.b.transpose(x, {1, 0}));
}

// clone, alias, lift_fresh_copy: the same values.
Results copy_of(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  n.ignore({"memory_format"});
  return one(n.b.apply1(Op::identity, {x}));
}

// _to_copy: a cast to the result's dtype; where the copy lives does not change its values.
Results to_copy(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  n.ignore({"dtype", "layout", "device", "pin_memory", "non_blocking", "memory_format"});
  const DType dtype = n.output_type().dtype;
  return one(x->dtype() == dtype ? n.b.apply1(Op::identity, {x}) : n.b.cast(x, dtype));
}

// Python's slice clamping of [start, end) to a dim of `size`.
int64_t clamp_index(std::optional<int64_t> index, int64_t fallback, int64_t size) {
  int64_t i = index.value_or(fallback);
  if (i < 0) i += size;
  return std::clamp<int64_t>(i, 0, size);
}

Results slice(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> start, n.optional_integer("start"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> end, n.optional_integer("end"));
  KILN_ASSIGN_OR_RETURN(int64_t step, n.integer("step"));
  if (step < 1) return n.unsupported("step", "ATen's slice step is positive");
  const int64_t size = x->shape().dim(axis);
  const int64_t begin = clamp_index(start, 0, size);
  const int64_t stop = std::max(begin, clamp_index(end, size, size));
  return one(n.b.slice(x, {begin}, {stop}, {axis}, {step}));
}

Results select(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(int64_t index, n.integer("index"));
  const int64_t size = x->shape().dim(axis);
  if (index < -size || index >= size) return n.unsupported("index", "out of range");
  if (index < 0) index += size;
  Value* row = n.b.slice(x, {index}, {index + 1}, {axis});
  return one(n.b.reshape(row, n.output_type().shape.dims()));
}

Results cat(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<Value*> parts, n.tensors("tensors"));
  const TensorType& result = n.output_type();
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", result.shape.rank()));
  std::vector<Value*> kept;
  for (Value* part : parts) {
    // ATen skips empty 1-d tensors in cat, whatever the other tensors' rank.
    if (part->shape().num_elements() == 0) continue;
    kept.push_back(cast_to(n.b, part, result.dtype));
  }
  if (kept.empty()) return n.unsupported("tensors", "every tensor is empty");
  if (kept.size() == 1) return one(n.b.apply1(Op::identity, {kept[0]}));
  return one(n.b.concat(kept, axis));
}

Converter split(bool by_sizes) {
  return [by_sizes](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
    KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
    std::vector<int64_t> sizes;
    if (by_sizes) {
      KILN_ASSIGN_OR_RETURN(sizes, n.integers("split_sizes"));
    } else {
      KILN_ASSIGN_OR_RETURN(int64_t size, n.integer("split_size"));
      if (size < 1) return n.unsupported("split_size", "must be positive");
      for (int64_t left = x->shape().dim(axis); left > 0; left -= size) {
        sizes.push_back(std::min(size, left));
      }
    }
    return n.b.split(x, axis, sizes);
  };
}

// full, full_like, scalar_tensor: a constant of the result's type.
Converter filled(const char* value_name, std::initializer_list<std::string_view> ignored) {
  std::vector<std::string_view> names(ignored);
  return [=](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(double value, n.number(value_name));
    for (std::string_view name : names) n.ignore({name});
    const TensorType& result = n.output_type();
    return one(n.b.fill(result.shape, value, result.dtype));
  };
}

// empty, empty_permuted: memory whose contents are unspecified, given zeros.
Converter empty(std::initializer_list<std::string_view> ignored) {
  std::vector<std::string_view> names(ignored);
  return [names](AtenNode& n) -> Results {
    for (std::string_view name : names) n.ignore({name});
    const TensorType& result = n.output_type();
    return one(n.b.fill(result.shape, 0, result.dtype));
  };
}

// arange: start + i * step for i in [0, the result's length).
Converter arange(bool has_start, bool has_step) {
  return [=](AtenNode& n) -> Results {
    double start = 0;
    double step = 1;
    if (has_start) {
      KILN_ASSIGN_OR_RETURN(start, n.number("start"));
    }
    KILN_ASSIGN_OR_RETURN(double end, n.number("end"));
    (void)end;  // the metadata's length is the count of values
    if (has_step) {
      KILN_ASSIGN_OR_RETURN(step, n.number("step"));
    }
    n.ignore({"dtype", "layout", "device", "pin_memory"});
    const TensorType& result = n.output_type();
    GraphBuilder& b = n.b;
    Value* index = b.iota(result.shape, 0, result.dtype);
    if (step != 1) index = b.mul(index, b.scalar(step, result.dtype));
    if (start != 0) index = b.add(index, b.scalar(start, result.dtype));
    return one(b.apply1(Op::identity, {index}));
  };
}

// triu_indices and tril_indices: the [2, count] coordinates (rows, then columns) of the upper
// or lower triangle of a row x col matrix from diagonal `offset`, in row-major order: a
// constant.
Converter triangle_indices(bool upper) {
  return [upper](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(int64_t rows, n.integer("row"));
    KILN_ASSIGN_OR_RETURN(int64_t cols, n.integer("col"));
    KILN_ASSIGN_OR_RETURN(int64_t offset, n.integer("offset"));
    n.ignore({"dtype", "layout", "device", "pin_memory"});
    std::vector<double> row_of, col_of;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        if (upper ? j - i >= offset : j - i <= offset) {
          row_of.push_back(static_cast<double>(i));
          col_of.push_back(static_cast<double>(j));
        }
      }
    }
    const Shape shape{2, static_cast<int64_t>(row_of.size())};
    row_of.insert(row_of.end(), col_of.begin(), col_of.end());
    return one(n.b.constant(Array(n.output_type().dtype, shape, std::move(row_of))));
  };
}

Results index_select(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(Value * index, n.tensor("index"));
  return one(n.b.gather(x, index, axis));
}

Results embedding(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * weight, n.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(Value * indices, n.tensor("indices"));
  // padding_idx, scale_grad_by_freq and sparse change only the gradient, which
  // embedding_dense_backward converts.
  n.ignore({"padding_idx", "scale_grad_by_freq", "sparse"});
  return one(n.b.gather(weight, indices, 0));
}

// The rows of grad_output added into the rows `indices` name; the padding row gets none.
Results embedding_dense_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * indices, n.tensor("indices"));
  KILN_ASSIGN_OR_RETURN(int64_t num_weights, n.integer("num_weights"));
  KILN_ASSIGN_OR_RETURN(int64_t padding_idx, n.integer("padding_idx"));
  KILN_ASSIGN_OR_RETURN(bool scale_grad_by_freq, n.boolean("scale_grad_by_freq"));
  if (scale_grad_by_freq) return n.unsupported("scale_grad_by_freq", "not converted");
  GraphBuilder& b = n.b;
  if (padding_idx >= 0) {
    Value* padding = b.equal(indices, b.scalar(static_cast<double>(padding_idx), indices->dtype()));
    std::vector<int64_t> mask_shape = indices->shape().dims();
    mask_shape.push_back(1);
    grad = b.where(b.reshape(padding, mask_shape), b.scalar(0, grad->dtype()), grad);
  }
  const int64_t width = grad->shape().dim(grad->rank() - 1);
  Value* zeros = b.fill(Shape{num_weights, width}, 0, grad->dtype());
  return one(b.scatter_add(zeros, indices, grad, 0));
}

// The bags of _embedding_bag and its backward: which bag each of the indices [L] falls in (its
// offset2bag, from running sums of marks at the bags' starts: O(L log L), not an L x bags
// comparison), and whether it counts (is not padding_idx). With include_last_offset the offsets
// list one more than the bags, the end, which ATen requires to be L.
struct Bags {
  Value* bag = nullptr;     // i64 [L]
  Value* counts = nullptr;  // bool [L]
};

Bags bags_of(GraphBuilder& b, Value* indices, Value* offsets, int64_t bags, int64_t padding_idx) {
  const auto i64 = [&](int64_t v) { return b.scalar(static_cast<double>(v), DType::i64); };
  const int64_t length = indices->shape().dim(0);
  offsets = cast_to(b, offsets, DType::i64);
  Value* starts = b.slice(offsets, {0}, {bags}, {0});
  Value* marks = b.scatter_add(b.fill(Shape{length + 1}, 0, DType::i64), starts,
                               b.fill(Shape{bags}, 1, DType::i64), 0);
  Bags result;
  result.bag = b.sub(running_sums(b, b.slice(marks, {0}, {length}, {0}), 0), i64(1));
  result.counts = b.fill(Shape{length}, 1, DType::boolean);
  if (padding_idx >= 0) {
    result.counts =
        b.apply1(Op::logical_not, {b.equal(cast_to(b, indices, DType::i64), i64(padding_idx))});
  }
  return result;
}

// The number of indices that count in each of `count` bags, f32 [count].
Value* bag_sizes(GraphBuilder& b, const Bags& bags, int64_t count) {
  return b.scatter_add(b.fill(Shape{count}, 0, DType::f32), bags.bag,
                       b.cast(bags.counts, DType::f32), 0);
}

// Each bag's row of `sums` over the bag's size, an empty bag's (all 0) over 1.
Value* bag_means(GraphBuilder& b, Value* sums, Value* sizes) {
  Value* divisor = b.max(sizes, b.scalar(1, DType::f32));
  return b.div(sums, cast_to(b, b.reshape(divisor, {-1, 1}), sums->dtype()));
}

// _embedding_bag (and its forward-only form) in sum and mean modes: the rows of weight that
// indices name, times per_sample_weights (sum mode), added into their bags' rows, and divided
// by the bag's size (mean mode; an empty bag gives 0). The other results are those ATen's CPU
// kernel gives: offset2bag (empty in sum mode without padding), the bag sizes (zeros in sum
// mode) and, for sum and mean, max_indices equal to the bag sizes. Max mode, a maximum per bag,
// is refused: Kiln has no segment maximum.
Results embedding_bag(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * weight, n.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(Value * indices, n.tensor("indices"));
  KILN_ASSIGN_OR_RETURN(Value * offsets, n.tensor("offsets"));
  KILN_ASSIGN_OR_RETURN(int64_t mode, n.integer("mode"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> sample_weights,
                        n.optional_tensor("per_sample_weights"));
  KILN_ASSIGN_OR_RETURN(bool include_last_offset, n.boolean("include_last_offset"));
  KILN_ASSIGN_OR_RETURN(int64_t padding_idx, n.integer("padding_idx"));
  // How the gradient is scaled and stored: _embedding_bag_backward's arguments too.
  n.ignore({"scale_grad_by_freq", "sparse"});
  if (mode != 0 && mode != 1) return n.unsupported("mode", "only sum (0) and mean (1)");
  if (indices->rank() != 1 || offsets->rank() != 1) {
    return n.unsupported("indices", "indices and offsets must be vectors");
  }
  GraphBuilder& b = n.b;
  const int64_t count = n.output_type(0).shape.dim(0);
  if (offsets->shape().dim(0) != count + (include_last_offset ? 1 : 0)) {
    return n.unsupported("offsets", "must list each bag's start (and the end, when included)");
  }
  const Bags bags = bags_of(b, indices, offsets, count, padding_idx);
  Value* rows = b.gather(weight, indices, 0);
  if (sample_weights) {
    rows = b.mul(rows, b.reshape(cast_to(b, *sample_weights, rows->dtype()), {-1, 1}));
  }
  rows = b.where(b.reshape(bags.counts, {-1, 1}), rows, b.scalar(0, rows->dtype()));
  const int64_t width = weight->shape().dim(1);
  Value* sums = b.scatter_add(b.fill(Shape{count, width}, 0, weight->dtype()), bags.bag, rows, 0);
  Value* sizes = bag_sizes(b, bags, count);
  std::vector<Value*> results = {mode == 1 ? bag_means(b, sums, sizes) : sums, nullptr, nullptr,
                                 nullptr};
  if (n.wants_output(1)) {
    const TensorType& type = n.output_type(1);
    results[1] = type.shape.num_elements() == 0 ? b.fill(type.shape, 0, type.dtype)
                                                : cast_to(b, bags.bag, type.dtype);
  }
  for (int i : {2, 3}) {
    if (!n.wants_output(i)) continue;
    const TensorType& type = n.output_type(i);
    results[static_cast<size_t>(i)] =
        mode == 0 ? b.fill(type.shape, 0, type.dtype) : cast_to(b, sizes, type.dtype);
  }
  return results;
}

// The gradient of _embedding_bag's weight in sum and mean modes: each bag's gradient row
// (times the index's per-sample weight, over the bag's size in mean mode) added into the
// weight rows its indices name; padding indices add nothing. The bags are found
// from the offsets again, so the forward's offset2bag, bag sizes and max_indices go unread.
Results embedding_bag_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad"));
  KILN_ASSIGN_OR_RETURN(Value * indices, n.tensor("indices"));
  KILN_ASSIGN_OR_RETURN(Value * offsets, n.tensor("offsets"));
  n.ignore({"offset2bag", "bag_size", "maximum_indices"});
  KILN_ASSIGN_OR_RETURN(int64_t num_weights, n.integer("num_weights"));
  KILN_ASSIGN_OR_RETURN(bool scale_grad_by_freq, n.boolean("scale_grad_by_freq"));
  KILN_ASSIGN_OR_RETURN(int64_t mode, n.integer("mode"));
  KILN_ASSIGN_OR_RETURN(bool sparse, n.boolean("sparse"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> sample_weights,
                        n.optional_tensor("per_sample_weights"));
  KILN_ASSIGN_OR_RETURN(int64_t padding_idx, n.integer("padding_idx"));
  if (scale_grad_by_freq) return n.unsupported("scale_grad_by_freq", "not converted");
  if (sparse) return n.unsupported("sparse", "sparse gradients are not converted");
  if (mode != 0 && mode != 1) return n.unsupported("mode", "only sum (0) and mean (1)");
  if (indices->rank() != 1 || offsets->rank() != 1 || grad->rank() != 2) {
    return n.unsupported("indices", "indices and offsets must be vectors");
  }
  GraphBuilder& b = n.b;
  const int64_t count = grad->shape().dim(0);
  if (offsets->shape().dim(0) != count && offsets->shape().dim(0) != count + 1) {
    return n.unsupported("offsets", "must list each bag's start (and maybe the end)");
  }
  const Bags bags = bags_of(b, indices, offsets, count, padding_idx);
  if (mode == 1) grad = bag_means(b, grad, bag_sizes(b, bags, count));
  Value* rows = b.gather(grad, bags.bag, 0);
  if (sample_weights) {
    rows = b.mul(rows, b.reshape(cast_to(b, *sample_weights, rows->dtype()), {-1, 1}));
  }
  rows = b.where(b.reshape(bags.counts, {-1, 1}), rows, b.scalar(0, rows->dtype()));
  Value* zeros = b.fill(Shape{num_weights, grad->shape().dim(1)}, 0, grad->dtype());
  return one(b.scatter_add(zeros, indices, rows, 0));
}

// constant_pad_nd: ATen's pad list runs from the last dim backwards, (begin, end) per dim; a
// negative amount crops (as the gradient of a pad writes it).
Results constant_pad_nd(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, n.integers("pad"));
  KILN_ASSIGN_OR_RETURN(double value, n.number("value"));
  const int rank = x->rank();
  if (pad.size() % 2 != 0 || static_cast<int>(pad.size()) > 2 * rank) {
    return n.unsupported("pad", "must hold a (begin, end) pair for at most every dim");
  }
  const size_t r = static_cast<size_t>(rank);
  std::vector<int64_t> pads(2 * r, 0);
  std::vector<int64_t> starts(r, 0);
  std::vector<int64_t> ends = x->shape().dims();
  bool crops = false;
  bool pads_any = false;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const size_t axis = r - 1 - i;
    const int64_t begin = pad[2 * i];
    const int64_t end = pad[2 * i + 1];
    pads[axis] = std::max<int64_t>(begin, 0);
    pads[axis + r] = std::max<int64_t>(end, 0);
    starts[axis] = std::max<int64_t>(-begin, 0);
    ends[axis] -= std::max<int64_t>(-end, 0);
    crops = crops || begin < 0 || end < 0;
    pads_any = pads_any || begin > 0 || end > 0;
    if (ends[axis] < starts[axis]) return n.unsupported("pad", "crops more than the dim holds");
  }
  if (crops) {
    std::vector<int64_t> axes(r);
    std::iota(axes.begin(), axes.end(), 0);
    x = n.b.slice(x, starts, ends, axes);
  }
  return one(pads_any ? n.b.pad(x, pads, value) : x);
}

// self with src written over the slice [start, end) by step along dim: src padded into place
// (step 1) or scattered (larger steps), chosen where a mask of the slice is set.
Results slice_scatter(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * src, n.tensor("src"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", self->rank()));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> start, n.optional_integer("start"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> end, n.optional_integer("end"));
  KILN_ASSIGN_OR_RETURN(int64_t step, n.integer("step"));
  if (step < 1) return n.unsupported("step", "ATen's slice step is positive");
  GraphBuilder& b = n.b;
  const int64_t size = self->shape().dim(axis);
  const int64_t begin = clamp_index(start, 0, size);
  const int64_t count = src->shape().dim(axis);
  (void)end;  // src's length along dim gives the slice's
  src = cast_to(b, src, self->dtype());
  Value* ones = b.fill(src->shape(), 1, DType::f32);
  Value* placed = nullptr;
  Value* covered = nullptr;
  if (step == 1) {
    const size_t r = static_cast<size_t>(self->rank());
    std::vector<int64_t> pads(2 * r, 0);
    pads[static_cast<size_t>(axis)] = begin;
    pads[static_cast<size_t>(axis) + r] = size - begin - count;
    placed = b.pad(src, pads, 0);
    covered = b.pad(ones, pads, 0);
  } else {
    Value* index =
        b.add(b.mul(b.iota(Shape{count}), b.scalar(static_cast<double>(step), DType::i64)),
              b.scalar(static_cast<double>(begin), DType::i64));
    // scatter_add's updates have data.shape[:axis] + [count] + data.shape[axis+1:], src's.
    placed = b.scatter_add(b.fill(self->shape(), 0, self->dtype()), index, src, axis);
    covered = b.scatter_add(b.fill(self->shape(), 0, DType::f32), index, ones, axis);
  }
  return one(b.where(b.greater(covered, b.scalar(0, DType::f32)), placed, self));
}

// ---- Advanced indexing and scatters ---------------------------------------------------------

// self as index.Tensor and index_put index it: the indexed dims (those with an index tensor)
// moved together and flattened into one axis of `data`, so that one gather or scatter_add
// along `axis` does the indexing. The index tensors broadcast together to a shape B, and
// `flat` [B] holds the position along `axis` that each of B's elements names. As ATen, B takes
// the indexed dims' place when they are consecutive, and goes first otherwise; the result of
// indexing is gather(data, flat, axis).
struct AdvancedIndex {
  Value* data = nullptr;
  Value* flat = nullptr;
  int axis = 0;
  std::vector<int64_t> perm;         // self's dims in data's order (before flattening)
  std::vector<int64_t> moved_shape;  // self's sizes in that order
};

Expected<AdvancedIndex> advanced_index(AtenNode& n, Value* self) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::optional<Value*>> entries, n.optional_tensors("indices"));
  const int rank = self->rank();
  if (static_cast<int>(entries.size()) > rank) {
    return n.unsupported("indices", "more entries than self has dims");
  }
  std::vector<int64_t> indexed;
  std::vector<Value*> tensors;
  Shape broadcast;
  for (size_t d = 0; d < entries.size(); ++d) {
    if (!entries[d]) continue;
    Value* index = *entries[d];
    if (!is_integer(index->dtype())) {
      return n.unsupported("indices",
                           "only integer index tensors are converted (a bool mask gives a "
                           "shape that depends on the values)");
    }
    Expected<Shape> shape = broadcast_shapes(broadcast, index->shape());
    if (!shape) return n.unsupported("indices", shape.status().message());
    broadcast = *shape;
    indexed.push_back(static_cast<int64_t>(d));
    tensors.push_back(index);
  }
  if (indexed.empty()) return n.unsupported("indices", "holds no index tensor");
  GraphBuilder& b = n.b;
  AdvancedIndex a;
  const bool consecutive =
      indexed.back() - indexed.front() + 1 == static_cast<int64_t>(indexed.size());
  a.axis = consecutive ? static_cast<int>(indexed.front()) : 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (static_cast<int>(a.perm.size()) == a.axis) {
      a.perm.insert(a.perm.end(), indexed.begin(), indexed.end());
    }
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) a.perm.push_back(d);
  }
  // The flattened axis's position of each index: a mixed-radix number of the indices (each
  // wrapped once when negative, as ATen's); one index tensor is its own position, which
  // gather and scatter_add wrap.
  int64_t positions = 1;
  Value* flat = nullptr;
  for (size_t k = tensors.size(); k-- > 0;) {
    const int64_t size = self->shape().dim(static_cast<int>(indexed[k]));
    Value* index = tensors[k];
    if (tensors.size() > 1) {
      const auto i64 = [&](int64_t v) { return b.scalar(static_cast<double>(v), DType::i64); };
      index = cast_to(b, index, DType::i64);
      Value* negative = b.apply1(Op::less, {index, i64(0)});
      index = b.add(index, b.where(negative, i64(size), i64(0)));
      if (positions != 1) index = b.mul(index, i64(positions));
    }
    flat = flat == nullptr ? index : b.add(index, flat);
    positions *= size;
  }
  a.flat = flat->shape() == broadcast ? flat : b.broadcast_to(flat, broadcast.dims());
  for (int64_t d : a.perm) a.moved_shape.push_back(self->shape().dim(static_cast<int>(d)));
  std::vector<int64_t> flattened(a.moved_shape.begin(), a.moved_shape.begin() + a.axis);
  flattened.push_back(positions);
  flattened.insert(flattened.end(), a.moved_shape.begin() + a.axis + indexed.size(),
                   a.moved_shape.end());
  const bool moved = !std::is_sorted(a.perm.begin(), a.perm.end());
  a.data = moved ? b.transpose(self, a.perm) : self;
  if (indexed.size() > 1) a.data = b.reshape(a.data, flattened);
  return a;
}

// The inverse of advanced_index's flattening and moving: `data` back in self's layout.
Value* unflatten(GraphBuilder& b, const AdvancedIndex& a, Value* data) {
  if (data->shape().dims() != a.moved_shape) data = b.reshape(data, a.moved_shape);
  if (std::is_sorted(a.perm.begin(), a.perm.end())) return data;
  std::vector<int64_t> inverse(a.perm.size());
  for (size_t i = 0; i < a.perm.size(); ++i) inverse[static_cast<size_t>(a.perm[i])] = i;
  return b.transpose(data, inverse);
}

// index.Tensor, ATen's advanced indexing self[indices] (h[src] in message passing, nearest and
// bilinear upsampling as decomposed): one gather of advanced_index's data.
Results index_tensor(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(AdvancedIndex a, advanced_index(n, self));
  return one(n.b.gather(a.data, a.flat, a.axis));
}

// data with `updates` (scatter_add's layout) added at `index` along `axis` (accumulate), or
// written there. Where an index repeats, ATen leaves which value is written unspecified; Kiln
// writes the mean of the values written there, so the result is exact for unique indices and
// for repeats that write one value. The sums of a write start from -0, which keeps a single
// value's sign of zero. Bool tensors are added (an or) and written as 0/1 in i32.
Value* scatter_into(GraphBuilder& b, Value* data, Value* index, Value* updates, int axis,
                    bool accumulate) {
  if (data->dtype() == DType::boolean) {
    Value* result = scatter_into(b, b.cast(data, DType::i32), index, b.cast(updates, DType::i32),
                                 axis, accumulate);
    return b.cast(result, DType::boolean);
  }
  if (accumulate) return b.scatter_add(data, index, updates, axis);
  const int64_t positions = data->shape().dim(axis);
  const int64_t count = index->shape().num_elements();
  Value* sums = b.scatter_add(b.fill(data->shape(), -0.0, data->dtype()), index, updates, axis);
  Value* counts = b.scatter_add(b.fill(Shape{positions}, 0, DType::f32), b.reshape(index, {count}),
                                b.fill(Shape{count}, 1, DType::f32), 0);
  std::vector<int64_t> along(static_cast<size_t>(data->rank()), 1);
  along[static_cast<size_t>(axis)] = positions;
  counts = b.reshape(counts, along);
  Value* mean = b.div(sums, b.max(cast_to(b, counts, data->dtype()), b.scalar(1, data->dtype())));
  return b.where(b.greater(counts, b.scalar(0, DType::f32)), mean, data);
}

// index_put: values (broadcast to what self[indices] gives) added at the indices
// (accumulate), or written there (scatter_into: exact for unique indices).
Results index_put(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * values, n.tensor("values"));
  KILN_ASSIGN_OR_RETURN(bool accumulate, n.boolean("accumulate"));
  KILN_ASSIGN_OR_RETURN(AdvancedIndex a, advanced_index(n, self));
  GraphBuilder& b = n.b;
  std::vector<int64_t> gathered(a.data->shape().dims().begin(),
                                a.data->shape().dims().begin() + a.axis);
  const std::vector<int64_t>& index_dims = a.flat->shape().dims();
  gathered.insert(gathered.end(), index_dims.begin(), index_dims.end());
  gathered.insert(gathered.end(), a.data->shape().dims().begin() + a.axis + 1,
                  a.data->shape().dims().end());
  values = cast_to(b, values, self->dtype());
  if (values->shape().dims() != gathered) values = b.broadcast_to(values, gathered);
  return one(unflatten(b, a, scatter_into(b, a.data, a.flat, values, a.axis, accumulate)));
}

// index_add: source * alpha added into self's slices along dim that index (a vector) names.
Results index_add(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", self->rank()));
  KILN_ASSIGN_OR_RETURN(Value * index, n.tensor("index"));
  KILN_ASSIGN_OR_RETURN(Value * source, n.tensor("source"));
  KILN_ASSIGN_OR_RETURN(double alpha, n.number("alpha"));
  if (index->rank() > 1) return n.unsupported("index", "must be a vector");
  if (self->rank() == 0) return n.unsupported("self", "must have a dim");
  GraphBuilder& b = n.b;
  const int64_t count = index->shape().num_elements();
  if (index->rank() == 0) index = b.reshape(index, {1});
  std::vector<int64_t> gathered = self->shape().dims();
  gathered[static_cast<size_t>(axis)] = count;
  Value* updates = b.reshape(cast_to(b, source, self->dtype()), gathered);
  if (alpha != 1) updates = b.mul(updates, b.scalar(alpha, self->dtype()));
  return one(b.scatter_add(self, index, updates, axis));
}

// The flat (row-major) positions in self that torch.scatter's index names: for the element of
// index at coordinates c, c with c[dim] replaced by index[c]. index has self's rank and no
// larger size on any dim but dim.
Expected<Value*> scattered_positions(AtenNode& n, Value* self, Value* index, int axis) {
  if (index->rank() != self->rank() || self->rank() == 0) {
    return n.unsupported("index", "must have self's rank, at least 1");
  }
  for (int d = 0; d < self->rank(); ++d) {
    if (d != axis && index->shape().dim(d) > self->shape().dim(d)) {
      return n.unsupported("index", "is larger than self on a dim but dim");
    }
  }
  GraphBuilder& b = n.b;
  const std::vector<int64_t> strides = self->shape().strides();
  Value* flat = nullptr;
  for (int d = 0; d < self->rank(); ++d) {
    Value* coordinate = d == axis ? cast_to(b, index, DType::i64) : b.iota(index->shape(), d);
    const double stride = static_cast<double>(strides[static_cast<size_t>(d)]);
    if (stride != 1) coordinate = b.mul(coordinate, b.scalar(stride, DType::i64));
    flat = flat == nullptr ? coordinate : b.add(flat, coordinate);
  }
  return b.reshape(flat, {index->shape().num_elements()});
}

// src's elements at index's coordinates (src may be larger than index), flattened.
Expected<Value*> scattered_sources(AtenNode& n, Value* src, Value* index, DType dtype) {
  if (src->rank() != index->rank()) return n.unsupported("src", "must have index's rank");
  std::vector<int64_t> starts, ends, axes;
  for (int d = 0; d < src->rank(); ++d) {
    if (src->shape().dim(d) < index->shape().dim(d)) {
      return n.unsupported("src", "is smaller than index on a dim");
    }
    if (src->shape().dim(d) == index->shape().dim(d)) continue;
    starts.push_back(0);
    ends.push_back(index->shape().dim(d));
    axes.push_back(d);
  }
  GraphBuilder& b = n.b;
  if (!axes.empty()) src = b.slice(src, starts, ends, axes);
  return b.reshape(cast_to(b, src, dtype), {index->shape().num_elements()});
}

// src added into (`accumulate`) or written over self where index points along dim, as one
// scatter of the flattened tensors at scattered_positions (scatter_into: a write is exact for
// unique positions).
Results scatter_along_dim(AtenNode& n, bool accumulate) {
  KILN_ASSIGN_OR_RETURN(Value * self, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", self->rank()));
  KILN_ASSIGN_OR_RETURN(Value * index, n.tensor("index"));
  KILN_ASSIGN_OR_RETURN(Value * src, n.tensor("src"));
  KILN_ASSIGN_OR_RETURN(Value * positions, scattered_positions(n, self, index, axis));
  KILN_ASSIGN_OR_RETURN(Value * updates, scattered_sources(n, src, index, self->dtype()));
  GraphBuilder& b = n.b;
  Value* flat = b.reshape(self, {self->shape().num_elements()});
  Value* scattered = scatter_into(b, flat, positions, updates, 0, accumulate);
  return one(b.reshape(scattered, self->shape().dims()));
}

// torch.scatter_add, and torch.scatter of src.
Results scatter_add(AtenNode& n) { return scatter_along_dim(n, /*accumulate=*/true); }
Results scatter_src(AtenNode& n) { return scatter_along_dim(n, /*accumulate=*/false); }

// ---- Contractions ---------------------------------------------------------------------------

Results matmul(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * a, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * c, n.tensor("mat2"));
  return one(n.b.matmul(a, c));
}

// beta * self + alpha * (mat1 @ mat2); with beta = 0, self is not read (NaN in it is ignored).
Results addmm(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * bias, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * a, n.tensor("mat1"));
  KILN_ASSIGN_OR_RETURN(Value * c, n.tensor("mat2"));
  KILN_ASSIGN_OR_RETURN(double beta, n.number("beta"));
  KILN_ASSIGN_OR_RETURN(double alpha, n.number("alpha"));
  GraphBuilder& b = n.b;
  Value* product = b.matmul(a, c);
  if (alpha != 1) product = b.mul_scalar(product, alpha);
  if (beta == 0) return one(b.broadcast_to(product, n.output_type().shape.dims()));
  if (beta != 1) bias = b.mul_scalar(bias, beta);
  return one(b.add(product, bias));
}

struct ConvArguments {
  std::vector<int64_t> strides, pads, dilations;
  int64_t groups = 1;
  bool transposed = false;
};

// A per-spatial-dim list: one value for every dim, or one value each.
Expected<std::vector<int64_t>> per_dim(AtenNode& n, std::string_view name, int spatial) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> values, n.integers(name));
  if (values.size() == 1) values.assign(static_cast<size_t>(spatial), values[0]);
  if (static_cast<int>(values.size()) != spatial) {
    return n.unsupported(name, fmt::format("needs {} entries", spatial));
  }
  return values;
}

Expected<ConvArguments> conv_arguments(AtenNode& n, int spatial) {
  ConvArguments c;
  KILN_ASSIGN_OR_RETURN(c.strides, per_dim(n, "stride", spatial));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> padding, per_dim(n, "padding", spatial));
  c.pads = padding;
  c.pads.insert(c.pads.end(), padding.begin(), padding.end());
  KILN_ASSIGN_OR_RETURN(c.dilations, per_dim(n, "dilation", spatial));
  KILN_ASSIGN_OR_RETURN(c.transposed, n.boolean("transposed"));
  // output_padding lengthens a transposed convolution's result, whose shape the metadata (and
  // the backward's input) gives.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> output_padding, n.integers("output_padding"));
  for (int64_t p : output_padding) {
    if (p != 0 && !c.transposed) {
      return n.unsupported("output_padding", "only for transposed convolutions");
    }
  }
  KILN_ASSIGN_OR_RETURN(c.groups, n.integer("groups"));
  return c;
}

Attrs conv_attrs(const ConvArguments& c) {
  return {
      {"strides", c.strides}, {"pads", c.pads}, {"dilations", c.dilations}, {"groups", c.groups}};
}

// The bias of a convolution result [N, C, *spatial], broadcast along C.
Value* channel_vector(GraphBuilder& b, Value* v, int rank) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[1] = v->shape().dim(0);
  return b.reshape(v, shape);
}

// A convolution, or a transposed one: the gradient of the convolution of a result-shaped input
// by the same weight [C_in, C_out / groups, *kernel] with respect to that input
// (conv_grad_data), output_padding included through the result's shape.
Results convolution(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Value * w, n.tensor("weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> bias, n.optional_tensor("bias"));
  if (x->rank() < 3) return n.unsupported("input", "needs a batch, channels and spatial dims");
  KILN_ASSIGN_OR_RETURN(ConvArguments c, conv_arguments(n, x->rank() - 2));
  Attrs attrs = conv_attrs(c);
  if (c.transposed) attrs.set("input_shape", n.output_type().shape.dims());
  Value* y = n.b.apply1(c.transposed ? Op::conv_grad_data : Op::conv, {x, w}, attrs);
  if (bias) y = n.b.add(y, channel_vector(n.b, *bias, x->rank()));
  return one(y);
}

// The gradients of input, weight and bias that output_mask asks for. For a transposed
// convolution (conv_grad_data of x by w), the input's is the convolution of the gradient by w
// and the weight's that of the convolution of the gradient by w with x as its output gradient.
Results convolution_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("input"));
  KILN_ASSIGN_OR_RETURN(Value * w, n.tensor("weight"));
  n.ignore({"bias_sizes"});  // the bias gradient's shape is [C], from the metadata
  if (x->rank() < 3) return n.unsupported("input", "needs a batch, channels and spatial dims");
  KILN_ASSIGN_OR_RETURN(ConvArguments c, conv_arguments(n, x->rank() - 2));
  KILN_ASSIGN_OR_RETURN(std::vector<bool> mask, n.booleans("output_mask"));
  if (mask.size() != 3) return n.unsupported("output_mask", "needs 3 entries");
  GraphBuilder& b = n.b;
  std::vector<Value*> results(3, nullptr);
  if (mask[0] && c.transposed) {
    results[0] = b.apply1(Op::conv, {grad, w}, conv_attrs(c));
  } else if (mask[0]) {
    Attrs attrs = conv_attrs(c);
    attrs.set("input_shape", x->shape().dims());
    results[0] = b.apply1(Op::conv_grad_data, {grad, w}, attrs);
  }
  if (mask[1]) {
    Attrs attrs = conv_attrs(c);
    attrs.set("weight_shape", w->shape().dims());
    results[1] = c.transposed ? b.apply1(Op::conv_grad_weight, {grad, x}, attrs)
                              : b.apply1(Op::conv_grad_weight, {x, grad}, attrs);
  }
  if (mask[2]) {
    std::vector<int64_t> axes = {0};
    for (int axis = 2; axis < grad->rank(); ++axis) axes.push_back(axis);
    results[2] = b.sum(grad, axes);
  }
  return results;
}

// gather's and scatter's index: self's rank, and self's sizes on every dim but `axis`.
Status check_elementwise_index(AtenNode& n, const Value* x, const Value* index, int axis) {
  if (index->rank() != x->rank() || x->rank() == 0) {
    return n.unsupported("index", "must have self's rank, at least 1");
  }
  for (int d = 0; d < x->rank(); ++d) {
    if (d != axis && index->shape().dim(d) != x->shape().dim(d)) {
      return n.unsupported("index", "must match self's size on every dim but dim");
    }
  }
  return Status::ok();
}

// torch.gather along dim: out[..i..] = self[..index[..i..] at dim..]. Each index is one-hot
// encoded on a new axis after dim and the chosen element summed out of a `where` (exact, with
// infinities too). Index and self must agree on every other dim.
Results gather_elements(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(Value * index, n.tensor("index"));
  KILN_ASSIGN_OR_RETURN(bool sparse_grad, n.boolean("sparse_grad"));
  (void)sparse_grad;  // only how the gradient is stored
  KILN_RETURN_IF_ERROR(check_elementwise_index(n, x, index, axis));
  GraphBuilder& b = n.b;
  const int64_t depth = x->shape().dim(axis);
  Value* chosen = b.one_hot(index, depth, DType::boolean, axis + 1);
  std::vector<int64_t> spread = x->shape().dims();
  spread.insert(spread.begin() + axis, 1);
  Value* values = b.where(chosen, b.reshape(x, spread), b.scalar(0, x->dtype()));
  return one(b.sum(values, {axis + 1}));
}

// torch.scatter of a value along dim: self with value written where index points.
Results scatter_value(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
  KILN_ASSIGN_OR_RETURN(Value * index, n.tensor("index"));
  KILN_ASSIGN_OR_RETURN(double value, n.number("value"));
  KILN_RETURN_IF_ERROR(check_elementwise_index(n, x, index, axis));
  GraphBuilder& b = n.b;
  const int64_t depth = x->shape().dim(axis);
  // [.., k, depth, ..]: which of self's positions each of the k indices names; any of them.
  Value* named = b.one_hot(index, depth, DType::i32, axis + 1);
  Value* hit = b.greater(b.reduce_max(named, {axis}), b.scalar(0, DType::i32));
  return one(b.where(hit, b.scalar(value, x->dtype()), x));
}

// ---- Pooling --------------------------------------------------------------------------------

struct PoolArguments {
  std::vector<int64_t> kernel, strides, pads;
};

// kernel_size, stride (empty: the kernel), padding, and dilation where the op has one (only 1
// is converted). ceil_mode is accepted when it gives the same windows as floor mode, which the
// caller checks against the result's shape.
Expected<PoolArguments> pool_arguments(AtenNode& n, bool has_dilation) {
  PoolArguments p;
  KILN_ASSIGN_OR_RETURN(p.kernel, n.integers("kernel_size"));
  const int spatial = 2;
  if (p.kernel.size() == 1) p.kernel.assign(spatial, p.kernel[0]);
  if (p.kernel.size() != static_cast<size_t>(spatial)) {
    return n.unsupported("kernel_size", "needs 2 entries");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride, n.integers("stride"));
  if (stride.empty()) stride = p.kernel;
  if (stride.size() == 1) stride.assign(spatial, stride[0]);
  if (stride.size() != static_cast<size_t>(spatial)) return n.unsupported("stride", "needs 2");
  p.strides = stride;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> padding, per_dim(n, "padding", spatial));
  p.pads = padding;
  p.pads.insert(p.pads.end(), padding.begin(), padding.end());
  if (has_dilation) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dilation, per_dim(n, "dilation", spatial));
    for (int64_t d : dilation) {
      if (d != 1) return n.unsupported("dilation", "dilated pooling windows are not converted");
    }
  }
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, n.boolean("ceil_mode"));
  (void)ceil_mode;  // the result's shape, checked by each converter, tells whether it matters
  return p;
}

Status check_pooled_shape(AtenNode& n, const Value* pooled, const Shape& expected) {
  if (pooled->shape() != expected) {
    return n.unsupported("ceil_mode",
                         "windows that start past the input's end are not "
                         "converted");
  }
  return Status::ok();
}

// Each window's maximum, and (when used) the flat index h * W + w of the first maximum in
// scan order, a NaN taking the place as in ATen's CPU kernel: the window's taps are visited in
// order, each taking over when it is inside the image and greater than the best so far or NaN.
Results max_pool2d_with_indices(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  if (x->rank() != 4) return n.unsupported("self", "only [N, C, H, W] inputs are converted");
  KILN_ASSIGN_OR_RETURN(PoolArguments p, pool_arguments(n, /*has_dilation=*/true));
  GraphBuilder& b = n.b;
  Value* pooled = b.max_pool(x, p.kernel, p.strides, p.pads);
  if (!b.ok()) return b.status();
  KILN_RETURN_IF_ERROR(check_pooled_shape(n, pooled, n.output_type(0).shape));
  if (!n.wants_output(1)) return std::vector<Value*>{pooled, nullptr};
  const int64_t height = x->shape().dim(2);
  const int64_t width = x->shape().dim(3);
  const int64_t out_h = pooled->shape().dim(2);
  const int64_t out_w = pooled->shape().dim(3);
  const auto i64 = [&](int64_t v) { return b.scalar(static_cast<double>(v), DType::i64); };
  Value* rows = b.iota(Shape{1, 1, out_h, 1}, 2);
  Value* cols = b.iota(Shape{1, 1, 1, out_w}, 3);
  Value* padded = b.pad(x, {0, 0, p.pads[0], p.pads[1], 0, 0, p.pads[2], p.pads[3]},
                        -std::numeric_limits<double>::infinity());
  Value* best = b.fill(pooled->shape(), -std::numeric_limits<double>::infinity(), x->dtype());
  // The first position inside the image of each window: where ATen's index starts.
  Value* h0 = b.max(b.sub(b.mul(rows, i64(p.strides[0])), i64(p.pads[0])), i64(0));
  Value* w0 = b.max(b.sub(b.mul(cols, i64(p.strides[1])), i64(p.pads[1])), i64(0));
  Value* index = b.broadcast_to(b.add(b.mul(h0, i64(width)), w0), pooled->shape().dims());
  for (int64_t kh = 0; kh < p.kernel[0]; ++kh) {
    for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
      Value* tap =
          b.slice(padded, {kh, kw},
                  {kh + (out_h - 1) * p.strides[0] + 1, kw + (out_w - 1) * p.strides[1] + 1},
                  {2, 3}, {p.strides[0], p.strides[1]});
      Value* h = b.add(b.mul(rows, i64(p.strides[0])), i64(kh - p.pads[0]));
      Value* w = b.add(b.mul(cols, i64(p.strides[1])), i64(kw - p.pads[1]));
      Value* inside =
          b.apply1(Op::logical_and,
                   {b.apply1(Op::logical_and,
                             {b.greater_equal(h, i64(0)), b.apply1(Op::less, {h, i64(height)})}),
                    b.apply1(Op::logical_and,
                             {b.greater_equal(w, i64(0)), b.apply1(Op::less, {w, i64(width)})})});
      Value* better = b.apply1(
          Op::logical_or, {b.greater(tap, best), b.apply1(Op::logical_not, {b.equal(tap, tap)})});
      Value* take = b.apply1(Op::logical_and, {inside, better});
      best = b.where(take, tap, best);
      index = b.where(take, b.add(b.mul(h, i64(width)), w), index);
    }
  }
  // The taps' maximum is the pooled value, NaN included, as ATen's kernel gives it: the
  // max_pool node above then only gave the shape, and goes unused.
  return std::vector<Value*>{best, index};
}

// The gradient of max_pool2d_with_indices: each output's gradient added at its index.
Results max_pool2d_with_indices_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
  KILN_ASSIGN_OR_RETURN(Value * indices, n.tensor("indices"));
  if (x->rank() != 4) return n.unsupported("self", "only [N, C, H, W] inputs are converted");
  KILN_ASSIGN_OR_RETURN(PoolArguments p, pool_arguments(n, /*has_dilation=*/true));
  (void)p;  // the indices say where each gradient goes
  GraphBuilder& b = n.b;
  const std::vector<int64_t>& dims = x->shape().dims();
  const int64_t planes = dims[0] * dims[1];
  const int64_t plane = dims[2] * dims[3];
  const int64_t outputs = grad->shape().num_elements();
  // Flat positions in x: each (n, c) plane's offset plus the index within it.
  Value* offsets = b.mul(b.iota(Shape{dims[0], dims[1], 1, 1}, 0, DType::i64),
                         b.scalar(static_cast<double>(dims[1] * plane), DType::i64));
  offsets = b.add(offsets, b.mul(b.iota(Shape{dims[0], dims[1], 1, 1}, 1, DType::i64),
                                 b.scalar(static_cast<double>(plane), DType::i64)));
  Value* flat = b.reshape(b.add(cast_to(b, indices, DType::i64), offsets), {outputs});
  Value* zeros = b.fill(Shape{planes * plane}, 0, grad->dtype());
  Value* spread = b.scatter_add(zeros, flat, b.reshape(grad, {outputs}), 0);
  return one(b.reshape(spread, dims));
}

// avg_pool2d's input and window, its backward's too (a divisor_override is refused), and the
// pooled result, checked against `pooled_shape` (the backward's leaves it unused).
struct AvgPool {
  Value* x = nullptr;
  PoolArguments window;
  bool count_include_pad = false;
  Value* pooled = nullptr;  // avg_pool2d's result
};

Expected<AvgPool> avg_pool_arguments(AtenNode& n, const Shape& pooled_shape) {
  AvgPool a;
  KILN_ASSIGN_OR_RETURN(a.x, n.tensor("self"));
  if (a.x->rank() != 4) return n.unsupported("self", "only [N, C, H, W] inputs are converted");
  KILN_ASSIGN_OR_RETURN(a.window, pool_arguments(n, /*has_dilation=*/false));
  KILN_ASSIGN_OR_RETURN(a.count_include_pad, n.boolean("count_include_pad"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> divisor, n.optional_integer("divisor_override"));
  if (divisor) return n.unsupported("divisor_override", "not converted");
  const PoolArguments& w = a.window;
  a.pooled = n.b.avg_pool(a.x, w.kernel, w.strides, w.pads, a.count_include_pad);
  if (!n.b.ok()) return n.b.status();
  KILN_RETURN_IF_ERROR(check_pooled_shape(n, a.pooled, pooled_shape));
  return a;
}

Results avg_pool2d(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(AvgPool a, avg_pool_arguments(n, n.output_type().shape));
  return one(a.pooled);
}

Results avg_pool2d_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(AvgPool a, avg_pool_arguments(n, grad->shape()));
  const PoolArguments& w = a.window;
  return one(n.b.apply1(Op::avg_pool_grad, {grad},
                        {{"kernel", w.kernel},
                         {"strides", w.strides},
                         {"pads", w.pads},
                         {"count_include_pad", a.count_include_pad},
                         {"input_shape", a.x->shape().dims()}}));
}

// ---- Attention ------------------------------------------------------------------------------

// The scores of scaled-dot-product attention, q k^T * scale with the causal or given mask
// applied, and their log-sum-exp over the keys.
struct AttentionScores {
  Value* scores = nullptr;
  double scale = 1;
};

Expected<AttentionScores> attention_scores(AtenNode& n, Value* q, Value* k) {
  KILN_ASSIGN_OR_RETURN(double dropout_p, n.number("dropout_p"));
  if (dropout_p != 0) return n.unsupported("dropout_p", "attention dropout is not converted");
  KILN_ASSIGN_OR_RETURN(bool is_causal, n.boolean("is_causal"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> mask, n.optional_tensor("attn_mask"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> scale, n.optional_number("scale"));
  if (q->rank() < 2 || q->shape().dim(q->rank() - 1) != k->shape().dim(k->rank() - 1)) {
    return n.unsupported("query", "query and key must share their last dim");
  }
  GraphBuilder& b = n.b;
  AttentionScores a;
  a.scale = scale.value_or(1 / std::sqrt(static_cast<double>(q->shape().dim(q->rank() - 1))));
  a.scores = b.mul_scalar(b.matmul(q, k, false, true), a.scale);
  const int64_t queries = q->shape().dim(q->rank() - 2);
  const int64_t keys = k->shape().dim(k->rank() - 2);
  const double minus_inf = -std::numeric_limits<double>::infinity();
  if (is_causal) {  // query i sees keys j <= i (top-left aligned, as ATen)
    Value* allowed = b.greater_equal(b.iota(Shape{queries, 1}, 0), b.iota(Shape{1, keys}, 1));
    a.scores = b.where(allowed, a.scores, b.scalar(minus_inf, q->dtype()));
  }
  if (mask) {
    a.scores = (*mask)->dtype() == DType::boolean
                   ? b.where(*mask, a.scores, b.scalar(minus_inf, q->dtype()))
                   : b.add(a.scores, cast_to(b, *mask, q->dtype()));
  }
  return a;
}

Value* log_sum_exp(GraphBuilder& b, Value* scores) {
  const int64_t last = scores->rank() - 1;
  Value* peak = b.reduce_max(scores, {last}, /*keepdims=*/true);
  Value* sum = b.sum(b.exp(b.sub(scores, peak)), {last}, /*keepdims=*/true);
  return b.reshape(b.add(b.log(sum), peak), std::vector<int64_t>(scores->shape().dims().begin(),
                                                                 scores->shape().dims().end() - 1));
}

// (softmax(scores) v, logsumexp(scores)); the log-sum-exp only when used (the backward's).
Results sdpa_flash_cpu(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * q, n.tensor("query"));
  KILN_ASSIGN_OR_RETURN(Value * k, n.tensor("key"));
  KILN_ASSIGN_OR_RETURN(Value * v, n.tensor("value"));
  KILN_ASSIGN_OR_RETURN(AttentionScores a, attention_scores(n, q, k));
  GraphBuilder& b = n.b;
  std::vector<Value*> results = {b.matmul(b.softmax(a.scores, -1), v), nullptr};
  if (n.wants_output(1)) results[1] = cast_to(b, log_sum_exp(b, a.scores), n.output_type(1).dtype);
  return results;
}

// The gradients of q, k and v from the saved log-sum-exp: P = exp(S - lse), dV = P^T dO,
// dS = P * (dO V^T - rowsum(dO * O)), dQ = dS K * scale, dK = dS^T Q * scale.
Results sdpa_flash_cpu_backward(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_out"));
  KILN_ASSIGN_OR_RETURN(Value * q, n.tensor("query"));
  KILN_ASSIGN_OR_RETURN(Value * k, n.tensor("key"));
  KILN_ASSIGN_OR_RETURN(Value * v, n.tensor("value"));
  KILN_ASSIGN_OR_RETURN(Value * out, n.tensor("out"));
  KILN_ASSIGN_OR_RETURN(Value * lse, n.tensor("logsumexp"));
  KILN_ASSIGN_OR_RETURN(AttentionScores a, attention_scores(n, q, k));
  GraphBuilder& b = n.b;
  std::vector<int64_t> column = lse->shape().dims();
  column.push_back(1);
  Value* p = b.exp(b.sub(a.scores, b.reshape(cast_to(b, lse, q->dtype()), column)));
  Value* grad_v = b.matmul(p, grad, /*transpose_a=*/true);
  Value* row = b.sum(b.mul(grad, out), {grad->rank() - 1}, /*keepdims=*/true);
  Value* grad_scores = b.mul(p, b.sub(b.matmul(grad, v, false, true), row));
  Value* grad_q = b.mul_scalar(b.matmul(grad_scores, k), a.scale);
  Value* grad_k = b.mul_scalar(b.matmul(grad_scores, q, /*transpose_a=*/true), a.scale);
  return std::vector<Value*>{grad_q, grad_k, grad_v};
}

// ---- Normalization --------------------------------------------------------------------------

Converter softmax(bool log_form) {
  return [log_form](AtenNode& n) -> Results {
    KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("self"));
    KILN_ASSIGN_OR_RETURN(int axis, axis_of(n, "dim", x->rank()));
    KILN_ASSIGN_OR_RETURN(bool half_to_float, n.boolean("half_to_float"));
    if (half_to_float) return n.unsupported("half_to_float", "not converted");
    if (x->rank() == 0) {
      return one(n.b.fill(Shape{}, log_form ? 0 : 1, x->dtype()));
    }
    return one(log_form ? n.b.log_softmax(x, axis) : n.b.softmax(x, axis));
  };
}

// Each result in the dtype PyTorch traced it with (the wanted ones): a normalization of f16 or
// bf16 computes in f32 and gives its output in the input's dtype, its statistics in f32 or
// the input's, as the CPU and CUDA kernels do under autocast.
Results as_traced_dtypes(AtenNode& n, std::vector<Value*> results) {
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i] != nullptr && n.wants_output(static_cast<int>(i))) {
      results[i] = cast_to(n.b, results[i], n.output_type(static_cast<int>(i)).dtype);
    }
  }
  return results;
}

// (normalized x * weight + bias, mean, rstd), the statistics over the normalized trailing dims
// with those dims kept as 1. An f16 or bf16 input (with weights of its dtype or f32, as
// autocast leaves them) is normalized in f32.
Results native_layer_norm(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * input, n.tensor("input"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> normalized, n.integers("normalized_shape"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> weight, n.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> bias, n.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(double eps, n.number("eps"));
  const int axis = input->rank() - static_cast<int>(normalized.size());
  if (axis < 0 || normalized.empty()) {
    return n.unsupported("normalized_shape", "must name 1 to rank trailing dims");
  }
  GraphBuilder& b = n.b;
  const DType dtype = accumulation_dtype(input->dtype());
  Value* x = cast_to(b, input, dtype);
  const Shape trailing(normalized);
  Value* scale = weight ? cast_to(b, *weight, dtype) : b.fill(trailing, 1, dtype);
  Value* shift = bias ? cast_to(b, *bias, dtype) : b.fill(trailing, 0, dtype);
  std::vector<Value*> results = {b.layer_norm(x, scale, shift, axis, eps), nullptr, nullptr};
  if (n.wants_output(1) || n.wants_output(2)) {
    std::vector<int64_t> axes(normalized.size());
    std::iota(axes.begin(), axes.end(), axis);
    Value* mean = b.mean(x, axes, /*keepdims=*/true);
    Value* centered = b.sub(x, mean);
    Value* var = b.mean(b.mul(centered, centered), axes, /*keepdims=*/true);
    results[1] = mean;
    results[2] = b.rsqrt(b.add_scalar(var, eps));
  }
  return as_traced_dtypes(n, std::move(results));
}

// Batch norm in training: (y, batch mean, batch 1/sqrt(var + eps), updated running mean and
// running var), the running var updated with the unbiased batch variance as ATen does. An f16
// or bf16 input is normalized in f32, as ATen's kernels do with autocast's f32 weights and
// statistics.
Results native_batch_norm_functional(AtenNode& n) {
  KILN_ASSIGN_OR_RETURN(Value * input, n.tensor("input"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> weight, n.optional_tensor("weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<Value*> bias, n.optional_tensor("bias"));
  KILN_ASSIGN_OR_RETURN(Value * running_mean, n.tensor("running_mean"));
  KILN_ASSIGN_OR_RETURN(Value * running_var, n.tensor("running_var"));
  KILN_ASSIGN_OR_RETURN(bool training, n.boolean("training"));
  KILN_ASSIGN_OR_RETURN(double momentum, n.number("momentum"));
  KILN_ASSIGN_OR_RETURN(double eps, n.number("eps"));
  if (!training) return n.unsupported("training", "only the training form is converted");
  if (input->rank() < 2) return n.unsupported("input", "needs a batch and channel dim");
  GraphBuilder& b = n.b;
  const DType dtype = accumulation_dtype(input->dtype());
  Value* x = cast_to(b, input, dtype);
  const int rank = x->rank();
  std::vector<int64_t> axes = {0};
  int64_t count = x->shape().dim(0);
  for (int axis = 2; axis < rank; ++axis) {
    axes.push_back(axis);
    count *= x->shape().dim(axis);
  }
  Value* mean = b.mean(x, axes, /*keepdims=*/true);
  Value* centered = b.sub(x, mean);
  Value* var = b.mean(b.mul(centered, centered), axes, /*keepdims=*/true);
  Value* rstd = b.rsqrt(b.add_scalar(var, eps));
  Value* y = b.mul(centered, rstd);
  if (weight) y = b.mul(y, channel_vector(b, cast_to(b, *weight, dtype), rank));
  if (bias) y = b.add(y, channel_vector(b, cast_to(b, *bias, dtype), rank));
  const std::vector<int64_t> channels = {x->shape().dim(1)};
  Value* batch_mean = b.reshape(mean, channels);
  Value* batch_var = b.reshape(var, channels);
  const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1)
                                  : std::numeric_limits<double>::infinity();
  Value* new_mean = b.add(b.mul_scalar(running_mean, 1 - momentum),
                          b.mul_scalar(cast_to(b, batch_mean, running_mean->dtype()), momentum));
  Value* new_var =
      b.add(b.mul_scalar(running_var, 1 - momentum),
            b.mul_scalar(cast_to(b, batch_var, running_var->dtype()), momentum * unbias));
  return as_traced_dtypes(
      n, std::vector<Value*>{y, batch_mean, b.reshape(rstd, channels), new_mean, new_var});
}

// ---- Random ---------------------------------------------------------------------------------

// (input * mask * 1/(1-p), mask), as ATen's CPU kernel computes it (a dropped NaN stays NaN),
// with the mask from Kiln's counter-based RNG and the graph's seed input (aten_import.h): the
// dropout of ones is 1/(1-p) where kept and 0 where dropped, so it is both the scaled mask and,
// above 0, the mask. Outside training (train false) the input passes unchanged.
Results native_dropout(AtenNode& n) {
  GraphBuilder& b = n.b;
  KILN_ASSIGN_OR_RETURN(Value * x, n.tensor("input"));
  KILN_ASSIGN_OR_RETURN(double p, n.number("p"));
  KILN_ASSIGN_OR_RETURN(std::optional<bool> train, n.optional_boolean("train"));
  if (!(p >= 0 && p <= 1)) return n.unsupported("p", fmt::format("{} is not a probability", p));
  const Shape& shape = x->shape();
  if ((train && !*train) || p == 0) {
    return std::vector<Value*>{b.apply1(Op::identity, {x}), b.fill(shape, 1, DType::boolean)};
  }
  if (p == 1) {
    return std::vector<Value*>{b.mul(x, b.fill(shape, 0, x->dtype())),
                               b.fill(shape, 0, DType::boolean)};
  }
  KILN_ASSIGN_OR_RETURN(Value * seed, n.rng_seed());
  const int64_t offset = n.take_rng_offsets(shape.num_elements());
  Value* scaled_mask = b.dropout(b.fill(shape, 1, x->dtype()), p, seed, offset);
  return std::vector<Value*>{b.mul(x, scaled_mask),
                             b.greater(scaled_mask, b.fill(Shape{}, 0, x->dtype()))};
}

// grad * mask * scale, as ATen writes it.
Results native_dropout_backward(AtenNode& n) {
  GraphBuilder& b = n.b;
  KILN_ASSIGN_OR_RETURN(Value * grad, n.tensor("grad_output"));
  KILN_ASSIGN_OR_RETURN(Value * mask, n.tensor("mask"));
  KILN_ASSIGN_OR_RETURN(double scale, n.number("scale"));
  return one(b.mul_scalar(b.mul(grad, cast_to(b, mask, grad->dtype())), scale));
}

}  // namespace

const std::map<std::string, Converter, std::less<>>& converters() {
  static const std::map<std::string, Converter, std::less<>> table = {
      // Elementwise
      {"aten.abs.default", unary(Op::abs)},
      {"aten.neg.default", unary(Op::neg)},
      {"aten.exp.default", unary(Op::exp)},
      {"aten.log.default", unary(Op::log)},
      {"aten.sqrt.default", unary(Op::sqrt)},
      {"aten.rsqrt.default", unary(Op::rsqrt)},
      {"aten.reciprocal.default", unary(Op::reciprocal)},
      {"aten.tanh.default", unary(Op::tanh)},
      {"aten.sigmoid.default", unary(Op::sigmoid)},
      {"aten.relu.default", unary(Op::relu)},
      {"aten.erf.default", unary(Op::erf)},
      {"aten.sin.default", unary(Op::sin)},
      {"aten.cos.default", unary(Op::cos)},
      {"aten.floor.default", unary(Op::floor)},
      {"aten.ceil.default", unary(Op::ceil)},
      {"aten.round.default", unary(Op::round)},
      {"aten.sign.default", unary(Op::sign)},
      {"aten.logical_not.default", logical_not},
      {"aten.add.Tensor", arithmetic(Op::add, /*scalar=*/false, /*has_alpha=*/true)},
      {"aten.add.Scalar", arithmetic(Op::add, true, true)},
      {"aten.sub.Tensor", arithmetic(Op::sub, false, true)},
      {"aten.sub.Scalar", arithmetic(Op::sub, true, true)},
      {"aten.mul.Tensor", arithmetic(Op::mul, false, false)},
      {"aten.mul.Scalar", arithmetic(Op::mul, true, false)},
      {"aten.div.Tensor", arithmetic(Op::div, false, false)},
      {"aten.div.Scalar", arithmetic(Op::div, true, false)},
      {"aten.maximum.default", binary_tensor(Op::max)},
      {"aten.minimum.default", binary_tensor(Op::min)},
      {"aten.pow.Tensor_Scalar", pow_tensor_scalar},
      {"aten.pow.Tensor_Tensor", pow_tensor_tensor},
      {"aten.eq.Tensor", comparison(Op::equal, /*negate=*/false, /*scalar=*/false)},
      {"aten.eq.Scalar", comparison(Op::equal, false, true)},
      {"aten.ne.Tensor", comparison(Op::equal, true, false)},
      {"aten.ne.Scalar", comparison(Op::equal, true, true)},
      {"aten.lt.Tensor", comparison(Op::less, false, false)},
      {"aten.lt.Scalar", comparison(Op::less, false, true)},
      {"aten.le.Tensor", comparison(Op::less_equal, false, false)},
      {"aten.le.Scalar", comparison(Op::less_equal, false, true)},
      {"aten.gt.Tensor", comparison(Op::greater, false, false)},
      {"aten.gt.Scalar", comparison(Op::greater, false, true)},
      {"aten.ge.Tensor", comparison(Op::greater_equal, false, false)},
      {"aten.ge.Scalar", comparison(Op::greater_equal, false, true)},
      {"aten.logical_and.default", logical(Op::logical_and)},
      {"aten.logical_or.default", logical(Op::logical_or)},
      {"aten.logical_xor.default", logical(Op::logical_xor)},
      {"aten.bitwise_and.Tensor", bitwise(Op::logical_and)},
      {"aten.bitwise_or.Tensor", bitwise(Op::logical_or)},
      {"aten.bitwise_xor.Tensor", bitwise(Op::logical_xor)},
      {"aten.bitwise_not.default", bitwise(Op::logical_not)},
      {"aten.where.self", where},
      {"aten.clamp.default", clamp},
      {"aten.hardtanh.default", hardtanh},
      {"aten.hardtanh_backward.default", hardtanh_backward},
      {"aten.leaky_relu.default", leaky_relu},
      {"aten.leaky_relu_backward.default", leaky_relu_backward},
      {"aten.gelu.default", gelu},
      {"aten.gelu_backward.default", gelu_backward},
      {"aten.sigmoid_backward.default", sigmoid_backward},
      {"aten.tanh_backward.default", tanh_backward},
      {"aten.threshold_backward.default", threshold_backward},
      {"aten.log1p.default", log1p},
      {"aten.expm1.default", expm1},
      {"aten.elu.default", elu},
      {"aten.elu_backward.default", elu_backward},
      // Reductions
      {"aten.sum.dim_IntList", reduction(Op::reduce_sum, "dim", true, true)},
      {"aten.sum.default", reduction(Op::reduce_sum, nullptr, false, true)},
      {"aten.mean.dim", reduction(Op::reduce_mean, "dim", true, true)},
      {"aten.mean.default", reduction(Op::reduce_mean, nullptr, false, true)},
      {"aten.amax.default", reduction(Op::reduce_max, "dim", true, false)},
      {"aten.amin.default", reduction(Op::reduce_min, "dim", true, false)},
      {"aten.any.dim", any_dim},
      {"aten.var.correction", var_correction},
      {"aten.cumsum.default", cumsum},
      {"aten.topk.default", topk},
      // Layout
      {"aten.view.default", reshape_to_result({"size"})},
      {"aten._unsafe_view.default", reshape_to_result({"size"})},
      {"aten.unsqueeze.default", reshape_to_result({"dim"})},
      {"aten.squeeze.dim", reshape_to_result({"dim"})},
      {"aten.squeeze.dims", reshape_to_result({"dim"})},
      {"aten.squeeze.default", reshape_to_result({})},
      {"aten.expand.default", expand},
      {"aten.permute.default", permute},
      {"aten.transpose.int", transpose_int},
      {"aten.t.default", t},
      {"aten.clone.default", copy_of},
      {"aten.alias.default", copy_of},
      {"aten.lift_fresh_copy.default", copy_of},
      {"aten._to_copy.default", to_copy},
      {"aten.slice.Tensor", slice},
      {"aten.select.int", select},
      {"aten.cat.default", cat},
      {"aten.flip.default", flip},
      {"aten.split_with_sizes.default", split(/*by_sizes=*/true)},
      {"aten.split.Tensor", split(false)},
      {"aten.full.default",
       filled("fill_value", {"size", "dtype", "layout", "device", "pin_memory"})},
      {"aten.full_like.default",
       filled("fill_value", {"self", "dtype", "layout", "device", "pin_memory", "memory_format"})},
      {"aten.scalar_tensor.default", filled("s", {"dtype", "layout", "device", "pin_memory"})},
      {"aten.empty.memory_format",
       empty({"size", "dtype", "layout", "device", "pin_memory", "memory_format"})},
      {"aten.empty_permuted.default",
       empty({"size", "physical_layout", "dtype", "layout", "device", "pin_memory"})},
      {"aten.arange.default", arange(/*has_start=*/false, /*has_step=*/false)},
      {"aten.arange.start", arange(true, false)},
      {"aten.arange.start_step", arange(true, true)},
      {"aten.triu_indices.default", triangle_indices(/*upper=*/true)},
      {"aten.tril_indices.default", triangle_indices(false)},
      {"aten.index_select.default", index_select},
      {"aten.embedding.default", embedding},
      {"aten.embedding_dense_backward.default", embedding_dense_backward},
      {"aten._embedding_bag.default", embedding_bag},
      {"aten._embedding_bag_forward_only.default", embedding_bag},
      {"aten._embedding_bag_backward.default", embedding_bag_backward},
      {"aten.constant_pad_nd.default", constant_pad_nd},
      {"aten.gather.default", gather_elements},
      {"aten.scatter.value", scatter_value},
      {"aten.slice_scatter.default", slice_scatter},
      {"aten.index.Tensor", index_tensor},
      {"aten.index_put.default", index_put},
      {"aten.index_add.default", index_add},
      {"aten.scatter_add.default", scatter_add},
      {"aten.scatter.src", scatter_src},
      // Contractions
      {"aten.mm.default", matmul},
      {"aten.bmm.default", matmul},
      {"aten.addmm.default", addmm},
      {"aten.convolution.default", convolution},
      {"aten.convolution_backward.default", convolution_backward},
      // Normalization
      {"aten._softmax.default", softmax(/*log_form=*/false)},
      {"aten._log_softmax.default", softmax(true)},
      {"aten.native_layer_norm.default", native_layer_norm},
      {"aten._native_batch_norm_legit_functional.default", native_batch_norm_functional},
      // Pooling
      {"aten.max_pool2d_with_indices.default", max_pool2d_with_indices},
      {"aten.max_pool2d_with_indices_backward.default", max_pool2d_with_indices_backward},
      {"aten.avg_pool2d.default", avg_pool2d},
      {"aten.avg_pool2d_backward.default", avg_pool2d_backward},
      // Attention
      {"aten._scaled_dot_product_flash_attention_for_cpu.default", sdpa_flash_cpu},
      {"aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
       sdpa_flash_cpu_backward},
      // Random
      {"aten.native_dropout.default", native_dropout},
      {"aten.native_dropout_backward.default", native_dropout_backward},
  };
  return table;
}

}  // namespace kiln::aten_import
