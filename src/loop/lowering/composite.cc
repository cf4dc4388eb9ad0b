// Lowerings of the composite ops (ir/ops/composite.cc), in the interpreter's stable forms:
// softmax subtracts the slice's max before exp, normalizations use the two-pass variance.
//
//   softmax (x [R, N], axis 1):
//     out[i0, i1] = let m = max(k0, 0, N, x[i0, k0]) in
//                   let s = sum(k1, 0, N, exp(x[i0, k1] - m)) in exp(x[i0, i1] - m) / s
//
// Statistics are recomputed for every output element of a one-op definition; lower_group
// materialises a composite's output, and schedules decide where statistics live. Labels out
// of [0, C) (an error in the interpreter) are clamped. dropout draws its mask from the
// dropout_bits intrinsic (support/counter_rng.h), the same counter-based hash the interpreter
// uses, indexed by the element's row-major position, so compiled and interpreted masks agree.
#include "loop/lowering/lowering_family.h"
#include "support/counter_rng.h"

namespace kiln::loop::lowering {
namespace {

// Per-position losses are reduced as the op's `reduction` attribute says: "none" keeps them,
// "sum" adds them, "mean" divides the sum by the number of positions.
Expected<Expr> reduce_losses(const ComputeArgs& args, const Shape& positions,
                             const std::function<Expr(const std::vector<Expr>&)>& loss_at) {
  const std::string& reduction = args.attrs.get_string("reduction");
  if (reduction == "none") return loss_at(args.index);
  const Expr total = reduce_nest(ReduceOp::sum, positions.dims(), args.names, loss_at);
  if (reduction == "sum") return total;
  return total / constant_of(args.outputs[0].dtype, static_cast<double>(positions.num_elements()));
}

Shape positions_of(const Shape& scores) {
  return Shape(std::vector<int64_t>(scores.dims().begin(), scores.dims().end() - 1));
}

// max over `axis` of x (at `index` elsewhere), and the sum of exp(x - max) over it, bound to
// fresh names around body(max, sum).
Expr with_softmax_stats(const ComputeArgs& args, int input, int axis, std::vector<Expr> index,
                        const std::function<Expr(const Expr&, const Expr&)>& body) {
  const TensorType& x = args.inputs[static_cast<size_t>(input)];
  const int64_t n = x.shape.dim(axis);
  auto element = [&](const Expr& k) {
    index[static_cast<size_t>(axis)] = k;
    return args.input(input, index);
  };
  const std::string m = args.names.fresh("m");
  const std::string s = args.names.fresh("s");
  const Expr max_value = var(m, x.dtype);
  const Expr row_max = reduce_nest(ReduceOp::max, {n}, args.names,
                                   [&](const std::vector<Expr>& k) { return element(k[0]); });
  const Expr row_sum = reduce_nest(ReduceOp::sum, {n}, args.names, [&](const std::vector<Expr>& k) {
    return call(Intrinsic::exp, {element(k[0]) - max_value});
  });
  return let(m, row_max, let(s, row_sum, body(max_value, var(s, x.dtype))));
}

void define_softmax(LoweringTable& table, Op op, bool log_form) {
  table.define(op, [log_form](const ComputeArgs& args) -> Expected<Expr> {
    const int axis = axis_of(args.attrs.get_int("axis"), args.inputs[0].shape.rank());
    const Expr x = args.input(0, args.index);
    return with_softmax_stats(args, 0, axis, args.index, [&](const Expr& m, const Expr& s) {
      return log_form ? (x - m) - call(Intrinsic::log, {s}) : call(Intrinsic::exp, {x - m}) / s;
    });
  });
}

// The mean over the dims in `reduced` of term(x's element), at args.index with those dims
// running over their extents.
Expr mean_over(const ComputeArgs& args, const std::vector<bool>& reduced,
               const std::function<Expr(const Expr&)>& term) {
  const TensorType& x = args.inputs[0];
  std::vector<int64_t> extents;
  int64_t count = 1;
  for (int d = 0; d < x.shape.rank(); ++d) {
    if (!reduced[static_cast<size_t>(d)]) continue;
    extents.push_back(x.shape.dim(d));
    count *= x.shape.dim(d);
  }
  const Expr sum = reduce_nest(ReduceOp::sum, extents, args.names, [&](const std::vector<Expr>& k) {
    std::vector<Expr> index = args.index;
    for (size_t d = 0, next = 0; d < reduced.size(); ++d) {
      if (reduced[d]) index[d] = k[next++];
    }
    return term(args.input(0, index));
  });
  return sum / constant_of(x.dtype, static_cast<double>(count));
}

// The biased variance of x over the dims in `reduced` at args.index, about `mean`: the mean of
// the squared deviations, as the interpreter computes it.
Expr variance_about(const ComputeArgs& args, const std::vector<bool>& reduced, const Expr& mean) {
  return mean_over(args, reduced, [&](const Expr& x) {
    return bind(args.names, x - mean, [](const Expr& d) { return d * d; });
  });
}

// Mean and biased variance of x over the multi-index `index` with the axes in `reduced` running
// over their extents, bound to fresh names around body(mean, var).
Expr with_moments(const ComputeArgs& args, const std::vector<bool>& reduced,
                  const std::function<Expr(const Expr&, const Expr&)>& body) {
  const DType dtype = args.inputs[0].dtype;
  const std::string mean_name = args.names.fresh("mean");
  const std::string var_name = args.names.fresh("var");
  const Expr mean = var(mean_name, dtype);
  const Expr average = mean_over(args, reduced, [](const Expr& x) { return x; });
  return let(mean_name, average,
             let(var_name, variance_about(args, reduced, mean), body(mean, var(var_name, dtype))));
}

Expected<Expr> lower_layer_norm(const ComputeArgs& args) {
  const Shape& x = args.inputs[0].shape;
  const int axis = axis_of(args.attrs.get_int("axis"), x.rank());
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  for (int d = axis; d < x.rank(); ++d) reduced[static_cast<size_t>(d)] = true;
  const std::vector<Expr> param_index(args.index.begin() + axis, args.index.end());
  const Expr epsilon = constant_of(args.inputs[0].dtype, args.attrs.get_float("epsilon"));
  return with_moments(args, reduced, [&](const Expr& mean, const Expr& variance) {
    return (args.input(0, args.index) - mean) * call(Intrinsic::rsqrt, {variance + epsilon}) *
               args.input(1, param_index) +
           args.input(2, param_index);
  });
}

// Batch norm's (x - mean) * rsqrt(variance + epsilon) * scale + bias at channel c, with the
// channel's factor rsqrt(variance + epsilon) * scale bound in a let: its value depends on the
// channel only, so the schedule's hoist computes it once per channel, not per element.
Expr normalize_by_channel(const ComputeArgs& args, const Expr& mean, const Expr& variance,
                          const std::vector<Expr>& c) {
  const Expr epsilon = constant_of(args.inputs[0].dtype, args.attrs.get_float("epsilon"));
  const std::string factor = args.names.fresh("f");
  return let(
      factor, call(Intrinsic::rsqrt, {variance + epsilon}) * args.input(1, c),
      (args.input(0, args.index) - mean) * var(factor, args.inputs[0].dtype) + args.input(2, c));
}

// batch_norm_train reduces x over every dim but the channels (1).
std::vector<bool> batch_norm_reduced(const ComputeArgs& args) {
  std::vector<bool> reduced(static_cast<size_t>(args.inputs[0].shape.rank()), true);
  reduced[1] = false;
  return reduced;
}

// batch_norm_train's args with the index of a statistics output ([C]) laid over x's, at
// channel position 1.
ComputeArgs batch_norm_statistics_at_x(const ComputeArgs& args, std::vector<Expr>& index) {
  index.assign(static_cast<size_t>(args.inputs[0].shape.rank()), Expr(0));
  index[1] = args.index[0];
  return {args.attrs, args.inputs, args.outputs, args.output, index, args.input, args.names};
}

Expected<Expr> lower_batch_norm_train(const ComputeArgs& args) {
  std::vector<Expr> index;
  const ComputeArgs at_x = args.output > 0 ? batch_norm_statistics_at_x(args, index) : args;
  return with_moments(at_x, batch_norm_reduced(args), [&](const Expr& mean, const Expr& variance) {
    if (args.output == 1) return mean;
    if (args.output == 2) return variance;
    return batch_norm_normalize(args, mean, variance);
  });
}

}  // namespace

Expr batch_norm_normalize(const ComputeArgs& args, const Expr& mean, const Expr& variance) {
  const std::vector<Expr> c = {args.index[1]};
  return normalize_by_channel(args, mean, variance, c);
}

Expr batch_norm_variance(const ComputeArgs& args, const Expr& mean) {
  std::vector<Expr> index;
  return variance_about(batch_norm_statistics_at_x(args, index), batch_norm_reduced(args), mean);
}

namespace {

Expected<Expr> lower_batch_norm_infer(const ComputeArgs& args) {
  const std::vector<Expr> c = {args.index[1]};
  return normalize_by_channel(args, args.input(3, c), args.input(4, c), c);
}

// The label at a position, as an in-range i64 class index.
Expr label_at(const ComputeArgs& args, const std::vector<Expr>& position) {
  const int64_t classes = args.inputs[0].shape.dims().back();
  return clamp_index(cast(DType::i64, args.input(1, position)), classes);
}

Expected<Expr> lower_cross_entropy(const ComputeArgs& args) {
  const Shape& logits = args.inputs[0].shape;
  const int axis = logits.rank() - 1;
  return reduce_losses(args, positions_of(logits), [&](const std::vector<Expr>& position) {
    std::vector<Expr> index = position;
    index.push_back(label_at(args, position));
    const Expr target = args.input(0, index);
    return with_softmax_stats(args, 0, axis, index, [&](const Expr& m, const Expr& s) {
      return m + call(Intrinsic::log, {s}) - target;
    });
  });
}

Expected<Expr> lower_nll_loss(const ComputeArgs& args) {
  return reduce_losses(args, positions_of(args.inputs[0].shape),
                       [&](const std::vector<Expr>& position) {
                         std::vector<Expr> index = position;
                         index.push_back(label_at(args, position));
                         return -args.input(0, index);
                       });
}

// max(z, 0) - z t + log(1 + exp(-|z|)), the form that never overflows. Loop IR has no
// log1p, so for |z| beyond about 17 (f64; 9 in f32) the last term rounds to 0 where the
// interpreter keeps exp(-|z|).
Expected<Expr> lower_binary_cross_entropy(const ComputeArgs& args) {
  return reduce_losses(args, args.inputs[0].shape, [&](const std::vector<Expr>& position) {
    return bind(args.names, args.input(0, position), [&](const Expr& z) {
      const Expr softplus =
          call(Intrinsic::log, {call(Intrinsic::exp, {-call(Intrinsic::abs, {z})}) + 1.0});
      return max(z, 0.0) - z * args.input(1, position) + softplus;
    });
  });
}

Expected<Expr> lower_dropout(const ComputeArgs& args) {
  const TensorType& x = args.inputs[0];
  const double ratio = args.attrs.get_float("ratio");
  Expr linear;
  for (int axis = 0; axis < x.shape.rank(); ++axis) {
    const int64_t stride = dims_product(x.shape, axis + 1, x.shape.rank());
    const Expr term = stride == 1 ? args.index[static_cast<size_t>(axis)]
                                  : args.index[static_cast<size_t>(axis)] * Expr(stride);
    linear = linear.defined() ? linear + term : term;
  }
  if (!linear.defined()) linear = Expr(int64_t{0});
  const Expr seed = args.inputs.size() == 2 ? args.input(1, {}) : Expr(args.attrs.get_int("seed"));
  const Expr bits =
      call(Intrinsic::dropout_bits, {seed, Expr(args.attrs.get_int("offset")), linear});
  const Expr keep = bits >= Expr(dropout_threshold(ratio));
  const Expr x_value = args.input(0, args.index);
  return select(keep, x_value / constant_of(x.dtype, 1 - ratio), constant_of(x.dtype, 0));
}

}  // namespace

void register_composite_lowerings(LoweringTable& table) {
  define_softmax(table, Op::softmax, /*log_form=*/false);
  define_softmax(table, Op::log_softmax, /*log_form=*/true);
  table.define(Op::layer_norm, &lower_layer_norm);
  table.define(Op::batch_norm_train, &lower_batch_norm_train);
  table.define(Op::batch_norm_infer, &lower_batch_norm_infer);
  table.define(Op::dropout, &lower_dropout);
  table.define(Op::cross_entropy, &lower_cross_entropy);
  table.define(Op::binary_cross_entropy, &lower_binary_cross_entropy);
  table.define(Op::nll_loss, &lower_nll_loss);
}

}  // namespace kiln::loop::lowering
