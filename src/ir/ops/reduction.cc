// Reductions over axes: sum, mean, max, min, prod (attribute `axes`) and argmax / argmin
// (attribute `axis`), each with `keepdims`.
//
// Gradients broadcast dy back over the reduced axes: sum copies it, mean divides by the count,
// max and min share it equally among the elements equal to the extremum (as PyTorch's amax),
// prod multiplies by the product of the other elements (zeros included).
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

enum class Domain { floating, numeric };

Status check_domain(const TensorType& x, Domain domain) {
  if (domain == Domain::floating) return require_floating(x, "x");
  if (x.dtype == DType::boolean) {
    return Status::errorf("input 'x' must be numeric, got {}", x.to_string());
  }
  return Status::ok();
}

// The shape of `x` with every reduced axis set to 1 (keepdims) or dropped.
Shape reduced_shape(const Shape& x, const std::vector<bool>& reduced, bool keepdims) {
  std::vector<int64_t> dims;
  for (int axis = 0; axis < x.rank(); ++axis) {
    if (!reduced[static_cast<size_t>(axis)]) {
      dims.push_back(x.dim(axis));
    } else if (keepdims) {
      dims.push_back(1);
    }
  }
  return Shape(std::move(dims));
}

// flops = one per input element; per_element_cost would count output elements instead.
Cost reduction_cost(std::span<const TensorType> inputs, std::span<const TensorType> outputs,
                    const Attrs&) {
  Cost cost;
  cost.flops = static_cast<double>(inputs[0].shape.num_elements());
  cost.bytes_read = inputs[0].size_bytes();
  cost.bytes_written = outputs[0].size_bytes();
  return cost;
}

enum class Kind { sum, mean, max, min, prod };

double initial_value(Kind kind) {
  switch (kind) {
    case Kind::sum:
    case Kind::mean: return 0.0;
    case Kind::prod: return 1.0;
    case Kind::max: return -std::numeric_limits<double>::infinity();
    case Kind::min: return std::numeric_limits<double>::infinity();
  }
  return 0.0;
}

// Folds one element into an accumulator; max and min propagate NaN, as numpy.max / numpy.min.
double accumulate(Kind kind, double acc, double v) {
  switch (kind) {
    case Kind::sum:
    case Kind::mean: return acc + v;
    case Kind::prod: return acc * v;
    case Kind::max: return std::isnan(v) || v > acc ? v : acc;  // a NaN acc compares false
    case Kind::min: return std::isnan(v) || v < acc ? v : acc;
  }
  return acc;
}

// Gradient rules. `v` has the reduce node's output shape; the result has the reduced axes
// restored at extent 1, so that it broadcasts against the input.
Value* keep_reduced_axes(GraphBuilder& b, const Node& node, Value* v) {
  const TensorType& x = node.input(0)->type();
  const std::vector<bool> reduced = *reduced_axes(x, node.attrs().get_ints("axes"));
  const Shape kept = reduced_shape(x.shape, reduced, /*keepdims=*/true);
  if (v != nullptr && v->shape() == kept) return v;
  return b.reshape(v, kept.dims());
}

// The reduced axes summed over again, keeping them: the shape keep_reduced_axes produces.
Value* sum_reduced_axes(GraphBuilder& b, const Node& node, Value* v) {
  return b.sum(v, node.attrs().get_ints("axes"), /*keepdims=*/true);
}

GradFn sum_gradient(Kind kind) {
  return [kind](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    Value* x = node.input(0);
    Value* dx = b.broadcast_to(keep_reduced_axes(b, node, grads[0]), x->shape().dims());
    if (kind == Kind::mean) {
      // 1 / count, the number of elements each output averages.
      const auto outputs = static_cast<double>(node.output(0)->shape().num_elements());
      dx = b.mul_scalar(dx, outputs / static_cast<double>(x->shape().num_elements()));
    }
    return std::vector<Value*>{dx};
  };
}

Value* extremum_gradient(GraphBuilder& b, const Node& node, Value* dy) {
  Value* x = node.input(0);
  Value* is_extremum = b.cast(b.equal(x, keep_reduced_axes(b, node, node.output(0))), x->dtype());
  Value* ties = sum_reduced_axes(b, node, is_extremum);
  return b.mul(is_extremum, b.div(keep_reduced_axes(b, node, dy), ties));
}

// d prod / d x_i is the product of the other elements: y / x_i where no element is zero; where
// exactly one is, the product of the rest for that element and 0 for the others; 0 where more
// than one is.
Value* prod_gradient(GraphBuilder& b, const Node& node, Value* dy) {
  Value* x = node.input(0);
  Value* zero = scalar_like(b, 0, x);
  Value* one = scalar_like(b, 1, x);
  Value* is_zero = b.equal(x, zero);
  Value* x_or_one = b.where(is_zero, one, x);
  Value* nonzero_product = b.prod(x_or_one, node.attrs().get_ints("axes"), /*keepdims=*/true);
  Value* zeros = sum_reduced_axes(b, node, b.cast(is_zero, x->dtype()));
  Value* at_nonzero = b.where(b.equal(zeros, zero), b.div(nonzero_product, x_or_one), zero);
  Value* at_zero = b.where(b.equal(zeros, one), nonzero_product, zero);
  return b.mul(keep_reduced_axes(b, node, dy), b.where(is_zero, at_zero, at_nonzero));
}

OpDef& define_reduce(OpTable& table, Op op, std::string summary, Kind kind, Domain domain) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::reduction;
  def.input_names = {"x"};
  def.min_inputs = def.max_inputs = 1;
  def.attrs = {
      {"axes", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "axes to reduce, negative counting from the end; empty reduces every axis"},
      {"keepdims", AttrKind::boolean, AttrValue(false), "keep reduced axes with extent 1"},
  };
  def.infer = [kind, domain](std::span<const TensorType> in,
                             const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(check_domain(in[0], domain));
    KILN_ASSIGN_OR_RETURN(std::vector<bool> reduced, reduced_axes(in[0], attrs.get_ints("axes")));
    // max and min have no identity element, so an empty reduced extent has no answer (NumPy
    // raises too). sum, prod and mean use 0, 1 and 0 / 0 = NaN.
    if (kind == Kind::max || kind == Kind::min) {
      for (int axis = 0; axis < in[0].shape.rank(); ++axis) {
        if (reduced[static_cast<size_t>(axis)] && in[0].shape.dim(axis) == 0) {
          return Status::errorf("cannot reduce over axis {} of input 'x' ({}): it is empty", axis,
                                in[0].to_string());
        }
      }
    }
    const Shape shape = reduced_shape(in[0].shape, reduced, attrs.get_bool("keepdims"));
    return std::vector<TensorType>{{in[0].dtype, shape}};
  };
  def.cost = &reduction_cost;
  def.eval = [kind](std::span<const Array> in, const Attrs& attrs,
                    std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const Array& x = in[0];
    KILN_ASSIGN_OR_RETURN(std::vector<bool> reduced,
                          reduced_axes(x.type(), attrs.get_ints("axes")));
    // With reduced axes kept at extent 1, broadcast_offset maps an input index to its output.
    const Shape kept = reduced_shape(x.shape, reduced, /*keepdims=*/true);
    Array result(out[0].dtype, out[0].shape);
    for (double& v : result.data) v = initial_value(kind);
    int64_t i = 0;
    for_each_index(x.shape, [&](std::span<const int64_t> index) {
      double& acc = result[broadcast_offset(kept, index)];
      acc = accumulate(kind, acc, x[i++]);
    });
    if (kind == Kind::mean) {
      // An empty reduced extent gives 0 / 0 = NaN, as NumPy.
      double count = 1;
      for (int axis = 0; axis < x.shape.rank(); ++axis) {
        if (reduced[static_cast<size_t>(axis)]) count *= static_cast<double>(x.shape.dim(axis));
      }
      for (double& v : result.data) v /= count;
    }
    result.round_to_dtype();
    return std::vector<Array>{std::move(result)};
  };
  return def;
}

// Whether `v`, met after `best` along the axis, becomes the new arg extremum.
bool replaces_best(double v, double best, bool is_max, bool select_last) {
  if (std::isnan(best)) return select_last && std::isnan(v);
  if (std::isnan(v)) return true;
  return (is_max ? v > best : v < best) || (select_last && v == best);
}

// argmax / argmin. NaN counts as the extremum, as NumPy: the first NaN along the axis wins
// (the last one with select_last_index, which treats equal extrema, NaNs included, as ties).
void define_arg_reduce(OpTable& table, Op op, std::string summary, bool is_max) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::reduction;
  def.input_names = {"x"};
  def.min_inputs = def.max_inputs = 1;
  def.attrs = {
      {"axis", AttrKind::integer, AttrValue(0), "axis to reduce, negative counting from the end"},
      {"keepdims", AttrKind::boolean, AttrValue(false), "keep the reduced axis with extent 1"},
      {"select_last_index", AttrKind::boolean, AttrValue(false),
       "on ties, return the last index instead of the first"},
  };
  def.infer = [](std::span<const TensorType> in,
                 const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(check_domain(in[0], Domain::numeric));
    Expected<int> axis = normalize_axis(attrs.get_int("axis"), in[0].shape.rank());
    if (!axis) {
      return Status::errorf("attribute 'axis': {} (input 'x' is {})", axis.status().message(),
                            in[0].to_string());
    }
    if (in[0].shape.dim(*axis) == 0) {
      return Status::errorf("cannot reduce over axis {} of input 'x' ({}): it is empty", *axis,
                            in[0].to_string());
    }
    std::vector<bool> reduced(static_cast<size_t>(in[0].shape.rank()), false);
    reduced[static_cast<size_t>(*axis)] = true;
    return std::vector<TensorType>{
        {DType::i64, reduced_shape(in[0].shape, reduced, attrs.get_bool("keepdims"))}};
  };
  def.cost = &reduction_cost;
  def.eval = [is_max](std::span<const Array> in, const Attrs& attrs,
                      std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    const Array& x = in[0];
    KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(attrs.get_int("axis"), x.shape.rank()));
    const bool last = attrs.get_bool("select_last_index");
    std::vector<bool> reduced(static_cast<size_t>(x.shape.rank()), false);
    reduced[static_cast<size_t>(axis)] = true;
    const Shape kept = reduced_shape(x.shape, reduced, /*keepdims=*/true);
    Array result(out[0].dtype, out[0].shape);
    std::vector<double> best(static_cast<size_t>(result.size()));
    std::vector<bool> seen(static_cast<size_t>(result.size()), false);
    // Row-major order visits each output's candidates in increasing index along `axis`.
    int64_t i = 0;
    for_each_index(x.shape, [&](std::span<const int64_t> index) {
      const int64_t o = broadcast_offset(kept, index);
      const double v = x[i++];
      if (!seen[static_cast<size_t>(o)] ||
          replaces_best(v, best[static_cast<size_t>(o)], is_max, last)) {
        seen[static_cast<size_t>(o)] = true;
        best[static_cast<size_t>(o)] = v;
        result[o] = static_cast<double>(index[static_cast<size_t>(axis)]);
      }
    });
    result.round_to_dtype();
    return std::vector<Array>{std::move(result)};
  };
}

}  // namespace

void register_reduction_ops(OpTable& table) {
  define_reduce(table, Op::reduce_sum, "sum over axes", Kind::sum, Domain::numeric).gradient =
      sum_gradient(Kind::sum);
  define_reduce(table, Op::reduce_mean, "mean over axes", Kind::mean, Domain::floating).gradient =
      sum_gradient(Kind::mean);
  for (auto [op, summary, kind] :
       {std::tuple{Op::reduce_max, "maximum over axes; NaN propagates", Kind::max},
        std::tuple{Op::reduce_min, "minimum over axes; NaN propagates", Kind::min}}) {
    define_reduce(table, op, summary, kind, Domain::numeric).gradient =
        [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
          return std::vector<Value*>{extremum_gradient(b, node, grads[0])};
        };
  }
  define_reduce(table, Op::reduce_prod, "product over axes", Kind::prod, Domain::numeric)
      .gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    return std::vector<Value*>{prod_gradient(b, node, grads[0])};
  };
  define_arg_reduce(table, Op::argmax, "index of the maximum along `axis`", /*is_max=*/true);
  define_arg_reduce(table, Op::argmin, "index of the minimum along `axis`", /*is_max=*/false);
  table.define(Op::argmax).non_differentiable = "output is an integer index";
  table.define(Op::argmin).non_differentiable = "output is an integer index";

  // Sums, means and products in f32 under mixed precision; maxima and minima are exact.
  for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_prod}) {
    table.define(op).precision = PrecisionPolicy::f32;
  }
}

}  // namespace kiln::ops
