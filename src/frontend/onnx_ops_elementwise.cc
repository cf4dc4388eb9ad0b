// ONNX elementwise ops: unary math, activations (decomposed into Kiln primitives where Kiln has
// no op of their own), binary and variadic arithmetic, comparisons, logic, Where, Clip, Cast,
// Constant, Identity and inference-mode Dropout.
#include <cmath>
#include <limits>

#include "frontend/onnx_converter.h"
#include "frontend/onnx_tensor.h"

namespace kiln::onnx_import {
namespace {

// One Kiln op applied to every input, one output.
template <Op kOp>
Status direct(NodeContext& ctx) {
  std::vector<Operand> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(Operand input, ctx.input(i));
    inputs.push_back(input);
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(kOp, inputs));
  return ctx.set_output(0, y);
}

// Before opset 7, a binary op broadcast only when its `broadcast` attribute said so, and then
// B's dims lined up with A's from `axis` on (by default A's last dims: numpy's rule, except
// that B may sit in the middle, as a channel bias on [N, C, H, W] did with axis 1). Returns B
// reshaped so that numpy's rule, which the ops follow, gives the same alignment.
Expected<Operand> legacy_broadcast(NodeContext& ctx, const Operand& a, const Operand& b) {
  if (ctx.opset() >= 7) return b;
  KILN_ASSIGN_OR_RETURN(const int64_t broadcast, ctx.attr_int("broadcast", 0));
  KILN_ASSIGN_OR_RETURN(const int64_t axis, ctx.attr_int("axis", a.rank() - b.rank()));
  if (broadcast == 0) {
    if (a.shape() != b.shape()) {
      return Status::errorf("before opset 7, inputs of shapes {} and {} need broadcast = 1",
                            a.shape().to_string(), b.shape().to_string());
    }
    return b;
  }
  if (axis < 0 || axis + b.rank() > a.rank()) {
    return Status::errorf("axis {} does not place B (rank {}) inside A (rank {})", axis, b.rank(),
                          a.rank());
  }
  std::vector<int64_t> dims(static_cast<size_t>(a.rank() - axis), 1);
  for (int d = 0; d < b.rank(); ++d) dims[static_cast<size_t>(d)] = b.shape().dim(d);
  return ctx.emit(Op::reshape, {b}, {{"shape", std::move(dims)}});
}

// A binary op, numpy-broadcast (legacy_broadcast before opset 7).
template <Op kOp>
Status binary(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand a, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand b, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(b, legacy_broadcast(ctx, a, b));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(kOp, {a, b}));
  return ctx.set_output(0, y);
}

Status convert_identity(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  return ctx.set_output(0, x);
}

// Max, Min, Sum: a left fold of the binary op over the (broadcast) inputs.
template <Op kOp>
Status variadic(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand acc, ctx.input(0));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(Operand next, ctx.input(i));
    KILN_ASSIGN_OR_RETURN(acc, ctx.emit(kOp, {acc, next}));
  }
  return ctx.set_output(0, acc);
}

Status convert_mean(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand acc, ctx.input(0));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(Operand next, ctx.input(i));
    KILN_ASSIGN_OR_RETURN(acc, ctx.emit(Op::add, {acc, next}));
  }
  KILN_ASSIGN_OR_RETURN(Operand y,
                        ctx.emit(Op::div, {acc, scalar(acc.dtype(), ctx.num_inputs())}));
  return ctx.set_output(0, y);
}

Status convert_mod(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand a, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand b, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(int64_t fmod, ctx.attr_int("fmod", 0));
  if (fmod == 0 && is_floating(a.dtype())) {
    return Status::error("Mod with fmod=0 on floating inputs is invalid ONNX; set fmod=1");
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::mod, {a, b}, {{"fmod", fmod != 0}}));
  return ctx.set_output(0, y);
}

// Pow: the exponent is cast to the base's dtype (ONNX allows them to differ). Integer bases are
// raised in f64 and cast back, which is exact while the result fits in 2^53.
Status convert_pow(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand base, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand exponent, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(exponent, legacy_broadcast(ctx, base, exponent));
  const DType dtype = base.dtype();
  const DType compute = is_floating(dtype) ? dtype : DType::f64;
  if (compute != dtype) {
    KILN_ASSIGN_OR_RETURN(base, ctx.emit(Op::cast, {base}, {{"to", compute}}));
  }
  if (exponent.dtype() != compute) {
    KILN_ASSIGN_OR_RETURN(exponent, ctx.emit(Op::cast, {exponent}, {{"to", compute}}));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::pow, {base, exponent}));
  if (compute != dtype) {
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::cast, {y}, {{"to", dtype}}));
  }
  return ctx.set_output(0, y);
}

// ---- activations, as compositions of Kiln primitives -------------------------------------------

// where(x < 0, negative, positive)
Expected<Operand> select_negative(NodeContext& ctx, const Operand& x, const Operand& negative,
                                  const Operand& positive) {
  KILN_ASSIGN_OR_RETURN(Operand is_negative, ctx.emit(Op::less, {x, scalar(x.dtype(), 0)}));
  return ctx.emit(Op::where, {is_negative, negative, positive});
}

Status convert_leaky_relu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 0.01));
  KILN_ASSIGN_OR_RETURN(Operand scaled, ctx.emit(Op::mul, {x, scalar(x.dtype(), alpha)}));
  KILN_ASSIGN_OR_RETURN(Operand y, select_negative(ctx, x, scaled, x));
  return ctx.set_output(0, y);
}

// PRelu's slope broadcasts against x (opset 7 on). A slope of one value per channel, [C]
// against [N, C, ...] where it would not broadcast, is what `nn.PReLU(num_parameters=C)` meant
// and what opset 6 said (one slope per channel) and older exporters wrote: it is read per
// channel, as [C, 1, ..., 1].
Status convert_prelu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand slope, ctx.input(1));
  const int64_t channels = slope.rank() == 1 ? slope.shape()[0] : 0;
  if (x.rank() >= 3 && channels > 1 && channels == x.shape()[1] &&
      channels != x.shape()[x.rank() - 1]) {
    std::vector<int64_t> per_channel(static_cast<size_t>(x.rank() - 1), 1);
    per_channel[0] = channels;
    KILN_ASSIGN_OR_RETURN(slope, ctx.emit(Op::reshape, {slope}, {{"shape", per_channel}}));
  }
  KILN_ASSIGN_OR_RETURN(Operand scaled, ctx.emit(Op::mul, {x, slope}));
  KILN_ASSIGN_OR_RETURN(Operand y, select_negative(ctx, x, scaled, x));
  return ctx.set_output(0, y);
}

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between (soft shrink; hard shrink is
// bias 0). Integer inputs would compare with a rounded lambd, which ONNX does not define.
Status convert_shrink(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  if (!is_floating(x.dtype())) {
    return Status::errorf(ErrorCode::unsupported,
                          "Shrink of {} is unsupported (floating types only)",
                          dtype_name(x.dtype()));
  }
  KILN_ASSIGN_OR_RETURN(const double lambd, ctx.attr_float("lambd", 0.5));
  KILN_ASSIGN_OR_RETURN(const double bias, ctx.attr_float("bias", 0.0));
  const DType dtype = x.dtype();
  KILN_ASSIGN_OR_RETURN(Operand below, ctx.emit(Op::less, {x, scalar(dtype, -lambd)}));
  KILN_ASSIGN_OR_RETURN(Operand above, ctx.emit(Op::greater, {x, scalar(dtype, lambd)}));
  KILN_ASSIGN_OR_RETURN(Operand raised, ctx.emit(Op::add, {x, scalar(dtype, bias)}));
  KILN_ASSIGN_OR_RETURN(Operand lowered, ctx.emit(Op::sub, {x, scalar(dtype, bias)}));
  KILN_ASSIGN_OR_RETURN(Operand outer, ctx.emit(Op::where, {above, lowered, scalar(dtype, 0)}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::where, {below, raised, outer}));
  return ctx.set_output(0, y);
}

// alpha * (exp(x) - 1), the negative branch of Elu and Selu.
Expected<Operand> scaled_expm1(NodeContext& ctx, const Operand& x, double alpha) {
  KILN_ASSIGN_OR_RETURN(Operand e, ctx.emit(Op::exp, {x}));
  KILN_ASSIGN_OR_RETURN(Operand em1, ctx.emit(Op::sub, {e, scalar(x.dtype(), 1)}));
  return ctx.emit(Op::mul, {em1, scalar(x.dtype(), alpha)});
}

Status convert_elu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(Operand negative, scaled_expm1(ctx, x, alpha));
  KILN_ASSIGN_OR_RETURN(Operand y, select_negative(ctx, x, negative, x));
  return ctx.set_output(0, y);
}

Status convert_selu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1.67326319217681884765625));
  KILN_ASSIGN_OR_RETURN(double gamma, ctx.attr_float("gamma", 1.05070102214813232421875));
  KILN_ASSIGN_OR_RETURN(Operand negative, scaled_expm1(ctx, x, alpha));
  // ONNX: y = gamma * (alpha * e^x - alpha) for x <= 0, gamma * x otherwise; at 0 both are 0.
  KILN_ASSIGN_OR_RETURN(Operand selected, select_negative(ctx, x, negative, x));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::mul, {selected, scalar(x.dtype(), gamma)}));
  return ctx.set_output(0, y);
}

Status convert_celu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1.0));
  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
  KILN_ASSIGN_OR_RETURN(Operand scaled_x, ctx.emit(Op::div, {x, scalar(x.dtype(), alpha)}));
  KILN_ASSIGN_OR_RETURN(Operand negative, scaled_expm1(ctx, scaled_x, alpha));
  KILN_ASSIGN_OR_RETURN(Operand low, ctx.emit(Op::min, {negative, scalar(x.dtype(), 0)}));
  KILN_ASSIGN_OR_RETURN(Operand high, ctx.emit(Op::relu, {x}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::add, {high, low}));
  return ctx.set_output(0, y);
}

// max(0, min(1, alpha * x + beta))
Expected<Operand> hard_sigmoid(NodeContext& ctx, const Operand& x, double alpha, double beta) {
  KILN_ASSIGN_OR_RETURN(Operand ax, ctx.emit(Op::mul, {x, scalar(x.dtype(), alpha)}));
  KILN_ASSIGN_OR_RETURN(Operand axb, ctx.emit(Op::add, {ax, scalar(x.dtype(), beta)}));
  KILN_ASSIGN_OR_RETURN(Operand capped, ctx.emit(Op::min, {axb, scalar(x.dtype(), 1)}));
  return ctx.emit(Op::max, {capped, scalar(x.dtype(), 0)});
}

Status convert_hard_sigmoid(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 0.2));
  KILN_ASSIGN_OR_RETURN(double beta, ctx.attr_float("beta", 0.5));
  KILN_ASSIGN_OR_RETURN(Operand y, hard_sigmoid(ctx, x, alpha, beta));
  return ctx.set_output(0, y);
}

Status convert_hard_swish(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand gate, hard_sigmoid(ctx, x, 1.0 / 6.0, 0.5));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::mul, {x, gate}));
  return ctx.set_output(0, y);
}

// log(exp(x) + 1), as ONNX defines it.
Expected<Operand> softplus(NodeContext& ctx, const Operand& x) {
  KILN_ASSIGN_OR_RETURN(Operand e, ctx.emit(Op::exp, {x}));
  KILN_ASSIGN_OR_RETURN(Operand e1, ctx.emit(Op::add, {e, scalar(x.dtype(), 1)}));
  return ctx.emit(Op::log, {e1});
}

Status convert_softplus(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand y, softplus(ctx, x));
  return ctx.set_output(0, y);
}

Status convert_mish(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand sp, softplus(ctx, x));
  KILN_ASSIGN_OR_RETURN(Operand t, ctx.emit(Op::tanh, {sp}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::mul, {x, t}));
  return ctx.set_output(0, y);
}

// Gelu (opset 20): Kiln's gelu op, whose two forms are ONNX's and PyTorch's.
Status convert_gelu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  Expected<std::string> form = ctx.attr_string("approximate", "none");
  if (!form) return form.status();
  if (*form != "none" && *form != "tanh") {
    return ctx.unsupported(fmt::format("Gelu approximate '{}'", *form));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::gelu, {x}, {{"approximate", *form}}));
  return ctx.set_output(0, y);
}

Status convert_softsign(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand ax, ctx.emit(Op::abs, {x}));
  KILN_ASSIGN_OR_RETURN(Operand denominator, ctx.emit(Op::add, {ax, scalar(x.dtype(), 1)}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::div, {x, denominator}));
  return ctx.set_output(0, y);
}

Status convert_thresholded_relu(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(Operand above, ctx.emit(Op::greater, {x, scalar(x.dtype(), alpha)}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::where, {above, x, scalar(x.dtype(), 0)}));
  return ctx.set_output(0, y);
}

Status convert_tan(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand s, ctx.emit(Op::sin, {x}));
  KILN_ASSIGN_OR_RETURN(Operand c, ctx.emit(Op::cos, {x}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::div, {s, c}));
  return ctx.set_output(0, y);
}

Status convert_is_nan(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand same, ctx.emit(Op::equal, {x, x}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::logical_not, {same}));
  return ctx.set_output(0, y);
}

Status convert_is_inf(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t positive, ctx.attr_int("detect_positive", 1));
  KILN_ASSIGN_OR_RETURN(int64_t negative, ctx.attr_int("detect_negative", 1));
  const double inf = std::numeric_limits<double>::infinity();
  KILN_ASSIGN_OR_RETURN(Operand is_pos, ctx.emit(Op::equal, {x, scalar(x.dtype(), inf)}));
  KILN_ASSIGN_OR_RETURN(Operand is_neg, ctx.emit(Op::equal, {x, scalar(x.dtype(), -inf)}));
  Operand y;
  if (positive != 0 && negative != 0) {
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::logical_or, {is_pos, is_neg}));
  } else if (positive != 0) {
    y = is_pos;
  } else if (negative != 0) {
    y = is_neg;
  } else {
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::logical_and, {is_pos, is_neg}));  // all false
  }
  return ctx.set_output(0, y);
}

// ---- Clip, Cast, Constant, Dropout -----------------------------------------------------------

Status convert_clip(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.input(0));
  const DType dtype = y.dtype();
  if (ctx.opset() < 11) {
    KILN_ASSIGN_OR_RETURN(double low, ctx.attr_float("min", -std::numeric_limits<double>::max()));
    KILN_ASSIGN_OR_RETURN(double high, ctx.attr_float("max", std::numeric_limits<double>::max()));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::max, {y, scalar(dtype, low)}));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::min, {y, scalar(dtype, high)}));
    return ctx.set_output(0, y);
  }
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(Operand low, ctx.input(1));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::max, {y, low}));
  }
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(Operand high, ctx.input(2));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::min, {y, high}));
  }
  return ctx.set_output(0, y);
}

// Opset 19's `saturate` says how a cast to a float8 type treats values beyond its range; Kiln
// has no float8 type (an input or a `to` of one is refused), so it changes nothing here.
Status convert_cast(NodeContext& ctx) {
  if (ctx.opset() < 6) return ctx.unsupported("Cast before opset 6 (a string 'to')");
  ctx.ignore_attr("saturate");
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t to, ctx.attr_int("to"));
  KILN_ASSIGN_OR_RETURN(DType dtype, dtype_from_onnx(static_cast<int32_t>(to)));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::cast, {x}, {{"to", dtype}}));
  return ctx.set_output(0, y);
}

Status convert_cast_like(NodeContext& ctx) {
  ctx.ignore_attr("saturate");  // as Cast's
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand like, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::cast, {x}, {{"to", like.dtype()}}));
  return ctx.set_output(0, y);
}

Status convert_constant(NodeContext& ctx) {
  Array value;
  if (ctx.has_attr("value")) {
    KILN_ASSIGN_OR_RETURN(value, ctx.attr_tensor("value"));
  } else if (ctx.has_attr("value_float")) {
    KILN_ASSIGN_OR_RETURN(double v, ctx.attr_float("value_float"));
    value = Array::scalar(DType::f32, v);
  } else if (ctx.has_attr("value_int")) {
    KILN_ASSIGN_OR_RETURN(int64_t v, ctx.attr_int("value_int"));
    value = Array::scalar(DType::i64, static_cast<double>(v));
  } else if (ctx.has_attr("value_floats")) {
    KILN_ASSIGN_OR_RETURN(std::vector<double> v, ctx.attr_floats("value_floats"));
    value = Array(DType::f32, Shape{static_cast<int64_t>(v.size())}, std::move(v));
  } else if (ctx.has_attr("value_ints")) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> v, ctx.attr_ints("value_ints"));
    std::vector<double> data(v.begin(), v.end());
    value = Array(DType::i64, Shape{static_cast<int64_t>(v.size())}, std::move(data));
  } else {
    return ctx.unsupported("Constant form (only value, value_float(s) and value_int(s))");
  }
  return ctx.set_output(0, Operand::of(std::move(value)));
}

// Dropout in inference mode, or with ratio 0, is the identity; its mask is all true. Other
// training-mode dropout is rejected: ONNX leaves its random stream unspecified, so no import
// could match it.
Status convert_dropout(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  bool training = false;
  if (ctx.opset() >= 12 && ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(Array mode, ctx.constant_input(2, "training_mode"));
    training = mode.size() == 1 && mode[0] != 0;
  }
  if (ctx.opset() < 12) {
    KILN_ASSIGN_OR_RETURN(int64_t is_test, ctx.attr_int("is_test", 0));
    training = ctx.opset() < 7 && is_test == 0;
  }
  if (training) {
    // A drop ratio of 0 keeps every element in training mode too (ONNX defines it so);
    // exporters emit it for F.dropout(x, p=0.0) without training=False, as in torchvision's
    // Swin Transformer. Any other ratio is unsupported.
    double ratio = 0.5;
    if (ctx.opset() >= 12 && ctx.has_input(1)) {
      KILN_ASSIGN_OR_RETURN(Array given, ctx.constant_input(1, "the training-mode ratio"));
      if (given.size() != 1) return Status::error("ratio must hold one element");
      ratio = given[0];
    } else if (ctx.opset() < 12) {
      KILN_ASSIGN_OR_RETURN(ratio, ctx.attr_float("ratio", 0.5));
    }
    if (ratio != 0) return ctx.unsupported("Dropout in training mode");
  }
  // The drop ratio and the seed matter only in training mode.
  ctx.ignore_attr("ratio");
  ctx.ignore_attr("seed");
  KILN_RETURN_IF_ERROR(ctx.set_output(0, x));
  if (ctx.wants_output(1)) {
    KILN_ASSIGN_OR_RETURN(Operand mask, ctx.emit(Op::fill, {}, {{"shape", x.shape().dims()},
                                                                {"value", 1.0},
                                                                {"dtype", DType::boolean}}));
    KILN_RETURN_IF_ERROR(ctx.set_output(1, mask));
  }
  return Status::ok();
}

}  // namespace

std::vector<ConverterEntry> elementwise_converters() {
  return {
      {"Abs", &direct<Op::abs>},
      {"Neg", &direct<Op::neg>},
      {"Exp", &direct<Op::exp>},
      {"Log", &direct<Op::log>},
      {"Sqrt", &direct<Op::sqrt>},
      {"Reciprocal", &direct<Op::reciprocal>},
      {"Tanh", &direct<Op::tanh>},
      {"Sigmoid", &direct<Op::sigmoid>},
      {"Relu", &direct<Op::relu>},
      {"Erf", &direct<Op::erf>},
      {"Sin", &direct<Op::sin>},
      {"Cos", &direct<Op::cos>},
      {"Tan", &convert_tan},
      {"Floor", &direct<Op::floor>},
      {"Ceil", &direct<Op::ceil>},
      {"Round", &direct<Op::round>},
      {"Sign", &direct<Op::sign>},
      {"Not", &direct<Op::logical_not>},
      {"Identity", &convert_identity},
      {"IsNaN", &convert_is_nan},
      {"IsInf", &convert_is_inf},
      {"Add", &binary<Op::add>},
      {"Sub", &binary<Op::sub>},
      {"Mul", &binary<Op::mul>},
      {"Div", &binary<Op::div>},
      {"Pow", &convert_pow},
      {"Mod", &convert_mod},
      {"Equal", &binary<Op::equal>},
      {"Less", &binary<Op::less>},
      {"LessOrEqual", &direct<Op::less_equal>},
      {"Greater", &binary<Op::greater>},
      {"GreaterOrEqual", &direct<Op::greater_equal>},
      {"And", &binary<Op::logical_and>},
      {"Or", &binary<Op::logical_or>},
      {"Xor", &binary<Op::logical_xor>},
      {"Where", &direct<Op::where>},
      {"Max", &variadic<Op::max>},
      {"Min", &variadic<Op::min>},
      {"Sum", &variadic<Op::add>},
      {"Mean", &convert_mean},
      {"LeakyRelu", &convert_leaky_relu},
      {"PRelu", &convert_prelu},
      {"Shrink", &convert_shrink},
      {"Elu", &convert_elu},
      {"Selu", &convert_selu},
      {"Celu", &convert_celu},
      {"HardSigmoid", &convert_hard_sigmoid},
      {"HardSwish", &convert_hard_swish},
      {"Softplus", &convert_softplus},
      {"Softsign", &convert_softsign},
      {"Mish", &convert_mish},
      {"Gelu", &convert_gelu},
      {"ThresholdedRelu", &convert_thresholded_relu},
      {"Clip", &convert_clip},
      {"Cast", &convert_cast},
      {"CastLike", &convert_cast_like},
      {"Constant", &convert_constant},
      {"Dropout", &convert_dropout},
  };
}

}  // namespace kiln::onnx_import
