// Composite ops: softmax, normalizations, dropout and losses.
//
// They stay whole in the graph so that a later pass can decompose them into primitives (or hand
// them to a library kernel); the reference evaluation here computes them directly, in f64 and in
// numerically stable form (max subtracted before exp, two-pass variance).
//
// Their gradient rules are the closed forms (softmax: y (dy - sum(dy y)); the normalizations'
// three-term formula; cross-entropy: softmax - one_hot), written in primitive ops, so that the
// backward graph needs no composite of its own; batch_norm_train's mean and var outputs pass
// gradients too. Dropout's gradient is dropout with the same seed and offset: the same mask.
// Dropout's seed is an attribute, or an input (a 0-d i64 tensor) when it must change from run to
// run without compiling again (a training step's masks differ at every step).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ir/ops/op_family.h"
#include "support/check.h"
#include "support/counter_rng.h"

namespace kiln::ops {
namespace {

// Product of dims[begin, end); callers pass dims of a valid shape, so it cannot overflow.
int64_t dims_product(const Shape& shape, int begin, int end) {
  int64_t product = 1;
  for (int axis = begin; axis < end; ++axis) product *= shape.dim(axis);
  return product;
}

Expected<int> axis_attr(const Attrs& attrs, const TensorType& x) {
  Expected<int> axis = normalize_axis(attrs.get_int("axis"), x.shape.rank());
  if (!axis) return axis.status().with_context("attribute 'axis'");
  return axis;
}

Status check_epsilon(const Attrs& attrs) {
  const double epsilon = attrs.get_float("epsilon");
  if (std::isfinite(epsilon) && epsilon >= 0) return Status::ok();
  return Status::errorf("attribute 'epsilon' must be finite and non-negative, got {}", epsilon);
}

// Cost of an op spending `flops_per_element` operations per element of input `input` (the data
// the op streams through; its outputs may be much smaller, e.g. a scalar loss), reading every
// input once and writing every output once.
CostFn input_element_cost(size_t input, double flops_per_element) {
  return [input, flops_per_element](std::span<const TensorType> inputs,
                                    std::span<const TensorType> outputs, const Attrs&) {
    Cost cost;
    for (const TensorType& t : inputs) cost.bytes_read += t.size_bytes();
    for (const TensorType& t : outputs) cost.bytes_written += t.size_bytes();
    cost.flops = flops_per_element * static_cast<double>(inputs[input].shape.num_elements());
    return cost;
  };
}

// ---------------------------------------------------------------------------------------------
// softmax, log_softmax

Expected<std::vector<TensorType>> infer_softmax(std::span<const TensorType> in,
                                                const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_floating(in[0], "x"));
  KILN_RETURN_IF_ERROR(axis_attr(attrs, in[0]).status());
  return std::vector<TensorType>{in[0]};
}

// Softmax (or its log) along `axis`, each slice shifted by its max so exp never overflows.
Array softmax_along(const Array& x, int axis, const TensorType& out, bool log_form) {
  const int64_t outer = dims_product(x.shape, 0, axis);
  const int64_t n = x.shape.dim(axis);
  const int64_t inner = dims_product(x.shape, axis + 1, x.shape.rank());
  Array y(out.dtype, out.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < n; ++k) max = std::max(max, x[base + k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[base + k * inner] - max);
      const double log_sum = std::log(sum);
      for (int64_t k = 0; k < n; ++k) {
        const double shifted = x[base + k * inner] - max;
        y[base + k * inner] = log_form ? shifted - log_sum : std::exp(shifted) / sum;
      }
    }
  }
  y.round_to_dtype();
  return y;
}

void define_softmax(OpTable& table, Op op, std::string summary, bool log_form) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::reduction;
  def.input_names = {"x"};
  def.min_inputs = def.max_inputs = 1;
  def.attrs = {{"axis", AttrKind::integer, AttrValue(-1),
                "axis normalized over; negative counts from the end"}};
  def.infer = &infer_softmax;
  // max, subtract, exp, sum, divide (or subtract the log-sum).
  def.cost = input_element_cost(0, 5);
  def.eval = [log_form](std::span<const Array> in, const Attrs& attrs,
                        std::span<const TensorType> out) -> Expected<std::vector<Array>> {
    KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, in[0].type()));
    return std::vector<Array>{softmax_along(in[0], axis, out[0], log_form)};
  };
}

// ---------------------------------------------------------------------------------------------
// layer_norm

Expected<std::vector<TensorType>> infer_layer_norm(std::span<const TensorType> in,
                                                   const Attrs& attrs) {
  const TensorType& x = in[0];
  KILN_RETURN_IF_ERROR(require_floating(x, "x"));
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, x));
  KILN_RETURN_IF_ERROR(check_epsilon(attrs));
  const Shape normalized(std::vector<int64_t>(x.shape.dims().begin() + axis, x.shape.dims().end()));
  for (int i = 1; i <= 2; ++i) {
    const char* name = i == 1 ? "scale" : "bias";
    KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", in[i], name));
    if (in[i].shape != normalized) {
      return Status::errorf("input '{}' must have shape {} (x.shape[{}:] of {}), got {}", name,
                            normalized.to_string(), axis, x.to_string(), in[i].to_string());
    }
  }
  return std::vector<TensorType>{x};
}

Expected<std::vector<Array>> eval_layer_norm(std::span<const Array> in, const Attrs& attrs,
                                             std::span<const TensorType> out) {
  const Array& x = in[0];
  const Array& scale = in[1];
  const Array& bias = in[2];
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, x.type()));
  const double epsilon = attrs.get_float("epsilon");
  const int64_t rows = dims_product(x.shape, 0, axis);
  const int64_t n = dims_product(x.shape, axis, x.shape.rank());
  Array y(out[0].dtype, out[0].shape);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * n;
    double mean = 0;
    for (int64_t k = 0; k < n; ++k) mean += x[base + k];
    mean /= static_cast<double>(n);
    // Biased (population) variance, as PyTorch and ONNX LayerNormalization.
    double var = 0;
    for (int64_t k = 0; k < n; ++k) var += (x[base + k] - mean) * (x[base + k] - mean);
    var /= static_cast<double>(n);
    const double inv_std = 1.0 / std::sqrt(var + epsilon);
    for (int64_t k = 0; k < n; ++k) {
      y[base + k] = (x[base + k] - mean) * inv_std * scale[k] + bias[k];
    }
  }
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

// ---------------------------------------------------------------------------------------------
// batch_norm_train, batch_norm_infer: x is [N, C, ...], the channel axis is 1 (as ONNX
// BatchNormalization and PyTorch BatchNorm*d).

Status check_channel_inputs(std::span<const TensorType> in, std::span<const char* const> names) {
  const TensorType& x = in[0];
  KILN_RETURN_IF_ERROR(require_floating(x, "x"));
  KILN_RETURN_IF_ERROR(require_min_rank(x, "x", 2));
  const Shape channels{x.shape.dim(1)};
  for (size_t i = 1; i < in.size(); ++i) {
    KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", in[i], names[i]));
    if (in[i].shape != channels) {
      return Status::errorf("input '{}' must have shape {} (the channels of x {}), got {}",
                            names[i], channels.to_string(), x.to_string(), in[i].to_string());
    }
  }
  return Status::ok();
}

constexpr const char* kBatchNormTrainInputs[] = {"x", "scale", "bias"};
constexpr const char* kBatchNormInferInputs[] = {"x", "scale", "bias", "mean", "var"};

// Calls fn(linear index) for every element of channel `c` of x [N, C, ...].
template <typename Fn>
void for_each_in_channel(const Shape& shape, int64_t c, Fn&& fn) {
  const int64_t batch = shape.dim(0);
  const int64_t channels = shape.dim(1);
  const int64_t inner = dims_product(shape, 2, shape.rank());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < inner; ++i) fn((b * channels + c) * inner + i);
  }
}

Expected<std::vector<Array>> eval_batch_norm_train(std::span<const Array> in, const Attrs& attrs,
                                                   std::span<const TensorType> out) {
  const Array& x = in[0];
  const Array& scale = in[1];
  const Array& bias = in[2];
  const double epsilon = attrs.get_float("epsilon");
  const int64_t channels = x.shape.dim(1);
  // Elements per channel; an empty batch gives NaN statistics (0 / 0).
  const auto count = static_cast<double>(x.shape.dim(0) * dims_product(x.shape, 2, x.shape.rank()));
  Array y(out[0].dtype, out[0].shape);
  Array mean(out[1].dtype, out[1].shape);
  Array var(out[2].dtype, out[2].shape);
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for_each_in_channel(x.shape, c, [&](int64_t i) { sum += x[i]; });
    const double m = sum / count;
    double squares = 0;
    for_each_in_channel(x.shape, c, [&](int64_t i) { squares += (x[i] - m) * (x[i] - m); });
    // Biased variance: it is the one that normalizes the batch (as PyTorch; the unbiased
    // estimate PyTorch feeds the running variance is left to the graph's update ops).
    const double v = squares / count;
    const double inv_std = 1.0 / std::sqrt(v + epsilon);
    for_each_in_channel(x.shape, c,
                        [&](int64_t i) { y[i] = (x[i] - m) * inv_std * scale[c] + bias[c]; });
    mean[c] = m;
    var[c] = v;
  }
  y.round_to_dtype();
  mean.round_to_dtype();
  var.round_to_dtype();
  return std::vector<Array>{std::move(y), std::move(mean), std::move(var)};
}

Expected<std::vector<Array>> eval_batch_norm_infer(std::span<const Array> in, const Attrs& attrs,
                                                   std::span<const TensorType> out) {
  const Array& x = in[0];
  const double epsilon = attrs.get_float("epsilon");
  Array y(out[0].dtype, out[0].shape);
  for (int64_t c = 0; c < x.shape.dim(1); ++c) {
    const double inv_std = 1.0 / std::sqrt(in[4][c] + epsilon);
    for_each_in_channel(
        x.shape, c, [&](int64_t i) { y[i] = (x[i] - in[3][c]) * inv_std * in[1][c] + in[2][c]; });
  }
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

// ---------------------------------------------------------------------------------------------
// dropout

// The dropout mask is support/counter_rng.h's: element i is kept when
// dropout_bits(seed, offset, i) >= dropout_threshold(ratio). The seed is the input `seed`
// when given, the attribute otherwise; seed and offset enter as their two's-complement uint64
// bits. (The interpreter holds an input seed in a double, exact up to 2^53: callers draw seeds
// below that.)
bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, double ratio) {
  return dropout_bits(seed, offset, index) >= dropout_threshold(ratio);
}

Expected<std::vector<TensorType>> infer_dropout(std::span<const TensorType> in,
                                                const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_floating(in[0], "x"));
  if (in.size() == 2 && !(in[1].dtype == DType::i64 && in[1].shape.rank() == 0)) {
    return Status::errorf("input 'seed' must be i64[], got {}", in[1].to_string());
  }
  const double ratio = attrs.get_float("ratio");
  if (!(ratio >= 0 && ratio < 1)) {
    return Status::errorf("attribute 'ratio' must be in [0, 1), got {}", ratio);
  }
  return std::vector<TensorType>{in[0]};
}

Expected<std::vector<Array>> eval_dropout(std::span<const Array> in, const Attrs& attrs,
                                          std::span<const TensorType> out) {
  const Array& x = in[0];
  const double ratio = attrs.get_float("ratio");
  const auto seed = static_cast<uint64_t>(in.size() == 2 ? static_cast<int64_t>(in[1][0])
                                                         : attrs.get_int("seed"));
  const auto offset = static_cast<uint64_t>(attrs.get_int("offset"));
  Array y(out[0].dtype, out[0].shape);
  for (int64_t i = 0; i < x.size(); ++i) {
    // A dropped element is 0 even when x is NaN or infinite: the mask selects, not multiplies.
    const bool keep = dropout_keep(seed, offset, static_cast<uint64_t>(i), ratio);
    y[i] = keep ? x[i] / (1 - ratio) : 0.0;
  }
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

// ---------------------------------------------------------------------------------------------
// Losses: cross_entropy, binary_cross_entropy, nll_loss. Each computes a per-position loss and
// then applies `reduction`, as PyTorch's losses.

enum class Reduction { mean, sum, none };

Expected<Reduction> reduction_attr(const Attrs& attrs) {
  const std::string& text = attrs.get_string("reduction");
  if (text == "mean") return Reduction::mean;
  if (text == "sum") return Reduction::sum;
  if (text == "none") return Reduction::none;
  return Status::errorf("attribute 'reduction' must be \"mean\", \"sum\" or \"none\", got \"{}\"",
                        text);
}

AttrSpec reduction_spec() {
  return {"reduction", AttrKind::string, AttrValue("mean"),
          "\"mean\" (over all loss positions), \"sum\" or \"none\" (per-position losses)"};
}

// The loss output: a scalar when reduced, else one loss per position.
Expected<TensorType> loss_type(const Attrs& attrs, DType dtype, const Shape& positions) {
  KILN_ASSIGN_OR_RETURN(const Reduction reduction, reduction_attr(attrs));
  if (reduction == Reduction::none) return TensorType{dtype, positions};
  return TensorType{dtype, Shape{}};
}

// Applies the reduction to per-position losses (in f64) and rounds to the output dtype. The mean
// of zero positions is NaN (0 / 0), as PyTorch.
Expected<std::vector<Array>> reduce_losses(const std::vector<double>& losses, const Attrs& attrs,
                                           const TensorType& out) {
  KILN_ASSIGN_OR_RETURN(const Reduction reduction, reduction_attr(attrs));
  if (reduction == Reduction::none) return std::vector<Array>{Array(out.dtype, out.shape, losses)};
  double total = 0;
  for (double loss : losses) total += loss;
  if (reduction == Reduction::mean) total /= static_cast<double>(losses.size());
  return std::vector<Array>{Array::scalar(out.dtype, total)};
}

// Checks the (scores [..., C], labels [...]) pair shared by cross_entropy and nll_loss.
Expected<std::vector<TensorType>> infer_class_loss(std::span<const TensorType> in,
                                                   const Attrs& attrs, const char* scores_name) {
  const TensorType& scores = in[0];
  const TensorType& labels = in[1];
  KILN_RETURN_IF_ERROR(require_floating(scores, scores_name));
  KILN_RETURN_IF_ERROR(require_min_rank(scores, scores_name, 1));
  KILN_RETURN_IF_ERROR(require_integer(labels, "labels"));
  const std::vector<int64_t>& dims = scores.shape.dims();
  const Shape positions(std::vector<int64_t>(dims.begin(), dims.end() - 1));
  if (labels.shape != positions) {
    return Status::errorf("input 'labels' must have shape {} ({} without its class axis), got {}",
                          positions.to_string(), scores.to_string(), labels.to_string());
  }
  KILN_ASSIGN_OR_RETURN(TensorType out, loss_type(attrs, scores.dtype, positions));
  return std::vector<TensorType>{out};
}

// Calls fn(row start in scores, label) for every label position; errors on a label outside
// [0, C).
template <typename Fn>
Status for_each_labelled_row(const Array& scores, const Array& labels, Fn&& fn) {
  const int64_t classes = scores.shape.dim(scores.shape.rank() - 1);
  for (int64_t p = 0; p < labels.size(); ++p) {
    const double label = labels[p];
    if (label < 0 || label >= static_cast<double>(classes)) {
      return Status::errorf("input 'labels': label {} at position {} is outside [0, {})", label, p,
                            classes);
    }
    fn(p * classes, static_cast<int64_t>(label));
  }
  return Status::ok();
}

Expected<std::vector<Array>> eval_cross_entropy(std::span<const Array> in, const Attrs& attrs,
                                                std::span<const TensorType> out) {
  const Array& logits = in[0];
  const int64_t classes = logits.shape.dim(logits.shape.rank() - 1);
  std::vector<double> losses;
  losses.reserve(static_cast<size_t>(in[1].size()));
  KILN_RETURN_IF_ERROR(for_each_labelled_row(logits, in[1], [&](int64_t row, int64_t label) {
    // logsumexp shifted by the row's max, so large logits do not overflow.
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < classes; ++k) max = std::max(max, logits[row + k]);
    double sum = 0;
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(logits[row + k] - max);
    losses.push_back(max + std::log(sum) - logits[row + label]);
  }));
  return reduce_losses(losses, attrs, out[0]);
}

Expected<std::vector<Array>> eval_nll_loss(std::span<const Array> in, const Attrs& attrs,
                                           std::span<const TensorType> out) {
  const Array& log_probs = in[0];
  std::vector<double> losses;
  losses.reserve(static_cast<size_t>(in[1].size()));
  KILN_RETURN_IF_ERROR(for_each_labelled_row(log_probs, in[1], [&](int64_t row, int64_t label) {
    losses.push_back(-log_probs[row + label]);
  }));
  return reduce_losses(losses, attrs, out[0]);
}

Expected<std::vector<TensorType>> infer_binary_cross_entropy(std::span<const TensorType> in,
                                                             const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_floating(in[0], "logits"));
  KILN_RETURN_IF_ERROR(require_same_dtype(in[0], "logits", in[1], "targets"));
  if (in[0].shape != in[1].shape) {
    return Status::errorf("inputs 'logits' ({}) and 'targets' ({}) must have the same shape",
                          in[0].to_string(), in[1].to_string());
  }
  KILN_ASSIGN_OR_RETURN(TensorType out, loss_type(attrs, in[0].dtype, in[0].shape));
  return std::vector<TensorType>{out};
}

Expected<std::vector<Array>> eval_binary_cross_entropy(std::span<const Array> in,
                                                       const Attrs& attrs,
                                                       std::span<const TensorType> out) {
  std::vector<double> losses(static_cast<size_t>(in[0].size()));
  for (int64_t i = 0; i < in[0].size(); ++i) {
    const double z = in[0][i];
    const double t = in[1][i];
    // -[t log sigmoid(z) + (1 - t) log(1 - sigmoid(z))] in the form that never overflows.
    losses[static_cast<size_t>(i)] = std::max(z, 0.0) - z * t + std::log1p(std::exp(-std::fabs(z)));
  }
  return reduce_losses(losses, attrs, out[0]);
}

// ---------------------------------------------------------------------------------------------
// Gradient rules

// A list of the axes [begin, end).
std::vector<int64_t> axis_range(int begin, int end) {
  std::vector<int64_t> axes;
  for (int axis = begin; axis < end; ++axis) axes.push_back(axis);
  return axes;
}

std::vector<Value*> gradient_of_softmax(GraphBuilder& b, const Node& node,
                                        std::span<Value* const> grads) {
  Value* y = node.output(0);
  Value* dy = grads[0];
  const std::vector<int64_t> axis = {node.attrs().get_int("axis")};
  return {b.mul(y, b.sub(dy, b.sum(b.mul(dy, y), axis, /*keepdims=*/true)))};
}

std::vector<Value*> gradient_of_log_softmax(GraphBuilder& b, const Node& node,
                                            std::span<Value* const> grads) {
  Value* dy = grads[0];
  const std::vector<int64_t> axis = {node.attrs().get_int("axis")};
  return {b.sub(dy, b.mul(b.exp(node.output(0)), b.sum(dy, axis, /*keepdims=*/true)))};
}

// The gradient of x -> (x - mean) * rstd over `axes` (normalized together), given
// xhat = (x - mean) * rstd and the gradient dxhat of xhat:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
Value* normalization_gradient(GraphBuilder& b, Value* xhat, Value* rstd, Value* dxhat,
                              const std::vector<int64_t>& axes) {
  Value* mean_dxhat = b.mean(dxhat, axes, /*keepdims=*/true);
  Value* mean_projection = b.mean(b.mul(dxhat, xhat), axes, /*keepdims=*/true);
  return b.mul(rstd, b.sub(b.sub(dxhat, mean_dxhat), b.mul(xhat, mean_projection)));
}

// The statistics of x = node.input(0) over a layer norm's normalized axes, built the one way
// both the gradient and the decomposition build them (so that, decomposed, the forward's and
// the backward's are the same nodes to common-subexpression elimination).
struct LayerNormStatistics {
  std::vector<int64_t> axes;
  Value* rstd;  // (var + epsilon)^(-1/2), keepdims
  Value* xhat;  // (x - mean) * rstd
};

LayerNormStatistics layer_norm_statistics(GraphBuilder& b, const Node& node) {
  Value* x = node.input(0);
  const int axis = *normalize_axis(node.attrs().get_int("axis"), x->rank());
  std::vector<int64_t> axes = axis_range(axis, x->rank());
  Value* centered = b.sub(x, b.mean(x, axes, /*keepdims=*/true));
  Value* var = b.mean(b.mul(centered, centered), axes, /*keepdims=*/true);
  Value* rstd = b.rsqrt(b.add_scalar(var, node.attrs().get_float("epsilon")));
  return {std::move(axes), rstd, b.mul(centered, rstd)};
}

std::vector<Value*> gradient_of_layer_norm(GraphBuilder& b, const Node& node,
                                           std::span<Value* const> grads) {
  Value* scale = node.input(1);
  Value* bias = node.input(2);
  Value* dy = grads[0];
  const LayerNormStatistics stats = layer_norm_statistics(b, node);
  Value* dx = normalization_gradient(b, stats.xhat, stats.rstd, b.mul(dy, scale), stats.axes);
  return {dx, b.sum_to(b.mul(dy, stats.xhat), scale->shape()), b.sum_to(dy, bias->shape())};
}

// Batch norm's per-channel statistics [C] reshaped to [1, C, 1, ...] to broadcast against x.
Value* per_channel(GraphBuilder& b, Value* stats, int rank) {
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  dims[1] = stats->shape().dim(0);
  return b.reshape(stats, std::move(dims));
}

// All axes of x [N, C, ...] but the channel axis 1.
std::vector<int64_t> batch_axes(int rank) {
  std::vector<int64_t> axes = axis_range(0, rank);
  axes.erase(axes.begin() + 1);
  return axes;
}

// x - mean and (var + epsilon)^(-1/2) per channel, from batch norm's statistics [C], built the
// one way both the gradient and the decomposition build them (so that, decomposed, cse merges
// the forward's and the backward's).
Value* centered_by_channel(GraphBuilder& b, Value* x, Value* mean) {
  return b.sub(x, per_channel(b, mean, x->rank()));
}

Value* rstd_by_channel(GraphBuilder& b, const Node& node, Value* var) {
  return b.rsqrt(
      b.add_scalar(per_channel(b, var, node.input(0)->rank()), node.attrs().get_float("epsilon")));
}

// y = xhat * scale + bias with the batch statistics; the mean and var outputs add
// dmean / count and dvar * 2 (x - mean) / count to dx.
std::vector<Value*> gradient_of_batch_norm_train(GraphBuilder& b, const Node& node,
                                                 std::span<Value* const> grads) {
  Value* x = node.input(0);
  const int rank = x->rank();
  const std::vector<int64_t> axes = batch_axes(rank);
  const double count = static_cast<double>(x->shape().num_elements() / x->shape().dim(1));
  Value* centered = centered_by_channel(b, x, node.output(1));
  std::vector<Value*> result(3, nullptr);
  auto add_to_dx = [&](Value* term) { result[0] = result[0] ? b.add(result[0], term) : term; };
  if (Value* dy = grads[0]) {
    Value* rstd = rstd_by_channel(b, node, node.output(2));
    Value* xhat = b.mul(centered, rstd);
    Value* dxhat = b.mul(dy, per_channel(b, node.input(1), rank));
    add_to_dx(normalization_gradient(b, xhat, rstd, dxhat, axes));
    result[1] = b.sum(b.mul(dy, xhat), axes);
    result[2] = b.sum(dy, axes);
  }
  if (Value* dmean = grads[1]) {
    Value* share = b.mul_scalar(per_channel(b, dmean, rank), 1 / count);
    add_to_dx(b.broadcast_to(share, x->shape().dims()));
  }
  if (Value* dvar = grads[2]) {
    add_to_dx(b.mul(b.mul_scalar(per_channel(b, dvar, rank), 2 / count), centered));
  }
  return result;
}

// y = (x - mean) * rstd * scale + bias with rstd = (var + epsilon)^(-1/2), all per channel.
std::vector<Value*> gradient_of_batch_norm_infer(GraphBuilder& b, const Node& node,
                                                 std::span<Value* const> grads) {
  Value* x = node.input(0);
  Value* scale = node.input(1);
  Value* mean = node.input(3);
  Value* var = node.input(4);
  Value* dy = grads[0];
  const int rank = x->rank();
  const std::vector<int64_t> axes = batch_axes(rank);
  Value* rstd = b.rsqrt(b.add_scalar(var, node.attrs().get_float("epsilon")));
  Value* centered = b.sub(x, per_channel(b, mean, rank));
  Value* dx = b.mul(dy, per_channel(b, b.mul(scale, rstd), rank));
  Value* dy_centered = b.sum(b.mul(dy, centered), axes);
  Value* dscale = b.mul(dy_centered, rstd);
  Value* dbias = b.sum(dy, axes);
  Value* dmean = b.neg(b.mul(dbias, b.mul(scale, rstd)));
  Value* rstd_cubed = b.mul(rstd, b.mul(rstd, rstd));
  Value* dvar = b.mul(dy_centered, b.mul_scalar(b.mul(scale, rstd_cubed), -0.5));
  return {dx, dscale, dbias, dmean, dvar};
}

// The factor each position's loss gradient is scaled by: the loss gradient dy itself ("sum"),
// divided by the number of positions ("mean"), or one per position ("none"; with a class axis,
// dy gets a trailing axis of extent 1 to broadcast over it). Input 1 (labels, targets) has one
// element per position.
Value* position_weights(GraphBuilder& b, const Node& node, Value* dy, bool class_axis) {
  const Value* positions = node.input(1);
  switch (*reduction_attr(node.attrs())) {
    case Reduction::mean:
      return b.mul_scalar(dy, 1 / static_cast<double>(positions->shape().num_elements()));
    case Reduction::sum:
      return dy;
    case Reduction::none: {
      if (!class_axis) return dy;
      std::vector<int64_t> dims = positions->shape().dims();
      dims.push_back(1);
      return b.reshape(dy, std::move(dims));
    }
  }
  KILN_UNREACHABLE("bad reduction");
}

// The one-hot rows of the labels, in the scores' dtype: the gradient of scores[label].
Value* label_rows(GraphBuilder& b, const Node& node) {
  const Value* scores = node.input(0);
  return b.one_hot(node.input(1), scores->shape().dim(scores->rank() - 1), scores->dtype());
}

std::vector<Value*> gradient_of_cross_entropy(GraphBuilder& b, const Node& node,
                                              std::span<Value* const> grads) {
  Value* probabilities = b.softmax(node.input(0));
  Value* weights = position_weights(b, node, grads[0], /*class_axis=*/true);
  return {b.mul(b.sub(probabilities, label_rows(b, node)), weights), nullptr};
}

std::vector<Value*> gradient_of_nll_loss(GraphBuilder& b, const Node& node,
                                         std::span<Value* const> grads) {
  Value* weights = position_weights(b, node, grads[0], /*class_axis=*/true);
  return {b.neg(b.mul(label_rows(b, node), weights)), nullptr};
}

// loss = max(z, 0) - z t + log(1 + e^-|z|): d/dz = sigmoid(z) - t, d/dt = -z.
std::vector<Value*> gradient_of_binary_cross_entropy(GraphBuilder& b, const Node& node,
                                                     std::span<Value* const> grads) {
  Value* logits = node.input(0);
  Value* weights = position_weights(b, node, grads[0], /*class_axis=*/false);
  return {b.mul(b.sub(b.sigmoid(logits), node.input(1)), weights), b.mul(b.neg(logits), weights)};
}

// ---------------------------------------------------------------------------------------------
// Decompositions: each composite from primitives, in the forms the gradient rules above use.

// The positions' losses `per_position` reduced as the node's `reduction` says.
Value* reduce_positions(GraphBuilder& b, const Node& node, Value* per_position) {
  if (per_position->rank() == 0) return per_position;  // one position: nothing to reduce
  switch (*reduction_attr(node.attrs())) {
    case Reduction::mean:
      return b.mean(per_position, {});
    case Reduction::sum:
      return b.sum(per_position, {});
    case Reduction::none:
      return per_position;
  }
  KILN_UNREACHABLE("bad reduction");
}

// x - max(x) along `axis` (keepdims), the shift every softmax form starts from.
Value* shifted_by_max(GraphBuilder& b, Value* x, int64_t axis) {
  return b.sub(x, b.reduce_max(x, {axis}, /*keepdims=*/true));
}

std::vector<Value*> decompose_softmax(GraphBuilder& b, const Node& node) {
  const int64_t axis = *normalize_axis(node.attrs().get_int("axis"), node.input(0)->rank());
  Value* e = b.exp(shifted_by_max(b, node.input(0), axis));
  return {b.div(e, b.sum(e, {axis}, /*keepdims=*/true))};
}

std::vector<Value*> decompose_log_softmax(GraphBuilder& b, const Node& node) {
  const int64_t axis = *normalize_axis(node.attrs().get_int("axis"), node.input(0)->rank());
  Value* shifted = shifted_by_max(b, node.input(0), axis);
  return {b.sub(shifted, b.log(b.sum(b.exp(shifted), {axis}, /*keepdims=*/true)))};
}

std::vector<Value*> decompose_layer_norm(GraphBuilder& b, const Node& node) {
  const LayerNormStatistics stats = layer_norm_statistics(b, node);
  return {b.add(b.mul(stats.xhat, node.input(1)), node.input(2))};
}

std::vector<Value*> decompose_batch_norm_train(GraphBuilder& b, const Node& node) {
  Value* x = node.input(0);
  const int rank = x->rank();
  const std::vector<int64_t> axes = batch_axes(rank);
  Value* mean = b.mean(x, axes);
  Value* centered = centered_by_channel(b, x, mean);
  Value* var = b.mean(b.mul(centered, centered), axes);
  Value* xhat = b.mul(centered, rstd_by_channel(b, node, var));
  Value* y =
      b.add(b.mul(xhat, per_channel(b, node.input(1), rank)), per_channel(b, node.input(2), rank));
  return {y, mean, var};
}

// scores [..., C] -> scores[label] per position, [...].
Value* labelled_scores(GraphBuilder& b, const Node& node) {
  Value* scores = node.input(0);
  const int64_t class_axis = scores->rank() - 1;
  return b.sum(b.mul(scores, label_rows(b, node)), {class_axis});
}

// logsumexp(logits) - logits[label], the max-shifted logsumexp sharing its max, exp and sum
// with a decomposed softmax of the same logits (the cross-entropy gradient's).
std::vector<Value*> decompose_cross_entropy(GraphBuilder& b, const Node& node) {
  Value* logits = node.input(0);
  const int64_t class_axis = logits->rank() - 1;
  Value* max = b.reduce_max(logits, {class_axis}, /*keepdims=*/true);
  Value* sum = b.sum(b.exp(b.sub(logits, max)), {class_axis}, /*keepdims=*/true);
  Value* logsumexp = b.add(b.log(sum), max);  // [..., 1]
  std::vector<int64_t> positions = logits->shape().dims();
  positions.pop_back();
  Value* per_position = b.sub(b.reshape(logsumexp, positions), labelled_scores(b, node));
  return {reduce_positions(b, node, per_position)};
}

std::vector<Value*> decompose_nll_loss(GraphBuilder& b, const Node& node) {
  return {reduce_positions(b, node, b.neg(labelled_scores(b, node)))};
}

// max(z, 0) - z t + log(1 + e^-|z|).
std::vector<Value*> decompose_binary_cross_entropy(GraphBuilder& b, const Node& node) {
  Value* z = node.input(0);
  Value* softplus_tail = b.log(b.add_scalar(b.exp(b.neg(b.abs(z))), 1));
  Value* per_position = b.add(b.sub(b.relu(z), b.mul(z, node.input(1))), softplus_tail);
  return {reduce_positions(b, node, per_position)};
}

AttrSpec epsilon_spec() {
  return {"epsilon", AttrKind::floating, AttrValue(1e-5),
          "added to the variance before the square root; finite, >= 0"};
}

}  // namespace

void register_composite_ops(OpTable& table) {
  define_softmax(table, Op::softmax, "exp(x) / sum(exp(x)) along `axis`", false);
  table.define(Op::softmax).gradient = gradient_of_softmax;
  table.define(Op::softmax).decompose = decompose_softmax;
  define_softmax(table, Op::log_softmax, "x - log(sum(exp(x))) along `axis`", true);
  table.define(Op::log_softmax).gradient = gradient_of_log_softmax;
  table.define(Op::log_softmax).decompose = decompose_log_softmax;

  OpDef& layer_norm = table.define(Op::layer_norm);
  layer_norm.summary = "normalize over dims axis..rank-1, then * scale + bias";
  layer_norm.fusion_kind = FusionKind::reduction;
  layer_norm.input_names = {"x", "scale", "bias"};
  layer_norm.min_inputs = layer_norm.max_inputs = 3;
  layer_norm.attrs = {{"axis", AttrKind::integer, AttrValue(-1),
                       "first normalized dim; dims axis..rank-1 are normalized together"},
                      epsilon_spec()};
  layer_norm.infer = &infer_layer_norm;
  // mean (1), centred square (3), normalize, scale and shift (4).
  layer_norm.cost = input_element_cost(0, 8);
  layer_norm.eval = &eval_layer_norm;
  layer_norm.gradient = gradient_of_layer_norm;
  layer_norm.decompose = decompose_layer_norm;

  // Training-mode batch norm. Running-statistics updates are ordinary graph ops outside this op
  // (they read its mean and var outputs), so the op itself is pure.
  OpDef& bn_train = table.define(Op::batch_norm_train);
  bn_train.summary =
      "batch norm on batch stats (axes but 1) -> y, mean, biased var; running stats outside";
  bn_train.fusion_kind = FusionKind::reduction;
  bn_train.input_names = {"x", "scale", "bias"};
  bn_train.min_inputs = bn_train.max_inputs = 3;
  bn_train.attrs = {epsilon_spec()};
  bn_train.infer = [](std::span<const TensorType> in,
                      const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(check_channel_inputs(in, kBatchNormTrainInputs));
    KILN_RETURN_IF_ERROR(check_epsilon(attrs));
    const TensorType stats{in[0].dtype, Shape{in[0].shape.dim(1)}};
    return std::vector<TensorType>{in[0], stats, stats};
  };
  bn_train.cost = input_element_cost(0, 8);
  bn_train.eval = &eval_batch_norm_train;
  bn_train.gradient = gradient_of_batch_norm_train;
  bn_train.decompose = decompose_batch_norm_train;

  OpDef& bn_infer = table.define(Op::batch_norm_infer);
  bn_infer.summary = "(x - mean) / sqrt(var + epsilon) * scale + bias per channel (axis 1)";
  bn_infer.fusion_kind = FusionKind::broadcast;
  bn_infer.input_names = {"x", "scale", "bias", "mean", "var"};
  bn_infer.min_inputs = bn_infer.max_inputs = 5;
  bn_infer.attrs = {epsilon_spec()};
  bn_infer.infer = [](std::span<const TensorType> in,
                      const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    KILN_RETURN_IF_ERROR(check_channel_inputs(in, kBatchNormInferInputs));
    KILN_RETURN_IF_ERROR(check_epsilon(attrs));
    return std::vector<TensorType>{in[0]};
  };
  // subtract, multiply by the per-channel scale / std, add.
  bn_infer.cost = per_element_cost(4);
  bn_infer.eval = &eval_batch_norm_infer;
  bn_infer.gradient = gradient_of_batch_norm_infer;

  OpDef& dropout = table.define(Op::dropout);
  dropout.summary = "zero elements with probability `ratio`, scale the rest by 1/(1-ratio)";
  dropout.fusion_kind = FusionKind::elementwise;
  dropout.input_names = {"x", "seed"};
  dropout.min_inputs = 1;
  dropout.max_inputs = 2;
  dropout.attrs = {
      {"ratio", AttrKind::floating, AttrValue(0.5), "probability of dropping; in [0, 1)"},
      {"seed", AttrKind::integer, AttrValue(0),
       "RNG seed (see dropout_keep), unless the input `seed` gives it"},
      {"offset", AttrKind::integer, AttrValue(0), "counter of element 0 (see dropout_keep)"}};
  dropout.infer = &infer_dropout;
  dropout.cost = per_element_cost(8);
  dropout.eval = &eval_dropout;
  dropout.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    if (node.num_inputs() == 1) {
      return std::vector<Value*>{b.apply1(Op::dropout, {grads[0]}, node.attrs())};
    }
    return std::vector<Value*>{b.apply1(Op::dropout, {grads[0], node.input(1)}, node.attrs()),
                               nullptr};
  };

  OpDef& cross_entropy = table.define(Op::cross_entropy);
  cross_entropy.summary = "logsumexp(logits) - logits[label], class axis last, then reduced";
  cross_entropy.fusion_kind = FusionKind::reduction;
  cross_entropy.input_names = {"logits", "labels"};
  cross_entropy.min_inputs = cross_entropy.max_inputs = 2;
  cross_entropy.attrs = {reduction_spec()};
  cross_entropy.infer = [](std::span<const TensorType> in,
                           const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    return infer_class_loss(in, attrs, "logits");
  };
  // max, subtract, exp, sum per logit.
  cross_entropy.cost = input_element_cost(0, 4);
  cross_entropy.eval = &eval_cross_entropy;
  cross_entropy.gradient = gradient_of_cross_entropy;
  cross_entropy.decompose = decompose_cross_entropy;

  OpDef& bce = table.define(Op::binary_cross_entropy);
  bce.summary = "binary cross-entropy of sigmoid(logits) against targets, then reduced";
  bce.fusion_kind = FusionKind::reduction;
  bce.input_names = {"logits", "targets"};
  bce.min_inputs = bce.max_inputs = 2;
  bce.attrs = {reduction_spec()};
  bce.infer = &infer_binary_cross_entropy;
  // max, multiply, subtract, abs, exp, log1p, add, and the reduction's add.
  bce.cost = input_element_cost(0, 8);
  bce.eval = &eval_binary_cross_entropy;
  bce.gradient = gradient_of_binary_cross_entropy;
  bce.decompose = decompose_binary_cross_entropy;

  OpDef& nll = table.define(Op::nll_loss);
  nll.summary = "-log_probs[label], class axis last, then reduced";
  nll.fusion_kind = FusionKind::reduction;
  nll.input_names = {"log_probs", "labels"};
  nll.min_inputs = nll.max_inputs = 2;
  nll.attrs = {reduction_spec()};
  nll.infer = [](std::span<const TensorType> in,
                 const Attrs& attrs) -> Expected<std::vector<TensorType>> {
    return infer_class_loss(in, attrs, "log_probs");
  };
  // one gather-negate-add per label position.
  nll.cost = input_element_cost(1, 2);
  nll.eval = &eval_nll_loss;
  nll.gradient = gradient_of_nll_loss;
  nll.decompose = decompose_nll_loss;

  // Under mixed precision every composite but dropout computes in f32, as autocast's
  // softmax, log_softmax, layer_norm, batch norm and losses do.
  for (Op op : {Op::softmax, Op::log_softmax, Op::layer_norm, Op::batch_norm_train,
                Op::batch_norm_infer, Op::cross_entropy, Op::binary_cross_entropy,
                Op::nll_loss}) {
    table.define(op).precision = PrecisionPolicy::f32;
  }
}

}  // namespace kiln::ops
