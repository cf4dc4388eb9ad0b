// ONNX neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling, normalizations, Softmax,
// LogSoftmax, LRN, reductions, ArgMax/ArgMin and the two classification losses.
#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/ranges.h>

#include "frontend/onnx_converter.h"
#include "frontend/onnx_tensor.h"
#include "support/check.h"

namespace kiln::onnx_import {
namespace {

Expected<Operand> reshape(NodeContext& ctx, const Operand& x, std::vector<int64_t> dims) {
  return ctx.emit(Op::reshape, {x}, {{"shape", std::move(dims)}});
}

// A per-channel vector [C] viewed as [C, 1, ..., 1] so that it broadcasts against [N, C, ...].
Expected<Operand> per_channel(NodeContext& ctx, const Operand& v, int x_rank) {
  std::vector<int64_t> dims(static_cast<size_t>(x_rank - 1), 1);
  dims[0] = v.shape().num_elements();
  return reshape(ctx, v, std::move(dims));
}

// ---- MatMul, Gemm ------------------------------------------------------------------------------

// NumPy matmul: a 1-d left operand is a row [1, k], a 1-d right operand a column [k, 1]; the
// added axis is removed from the result.
Status convert_matmul(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand a, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand b, ctx.input(1));
  if (a.rank() == 0 || b.rank() == 0) return Status::error("MatMul operands must not be scalars");
  const bool a_vector = a.rank() == 1;
  const bool b_vector = b.rank() == 1;
  if (a_vector) {
    KILN_ASSIGN_OR_RETURN(a, reshape(ctx, a, {1, a.shape()[0]}));
  }
  if (b_vector) {
    KILN_ASSIGN_OR_RETURN(b, reshape(ctx, b, {b.shape()[0], 1}));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::matmul, {a, b}));
  if (a_vector || b_vector) {
    std::vector<int64_t> dims = y.shape().dims();
    if (b_vector) dims.erase(dims.end() - 1);
    if (a_vector) dims.erase(dims.end() - (b_vector ? 1 : 2));
    KILN_ASSIGN_OR_RETURN(y, reshape(ctx, y, std::move(dims)));
  }
  return ctx.set_output(0, y);
}

// Y = alpha * op(A) op(B) + beta * C
// Before opset 7, Gemm's `broadcast` said whether C may broadcast to A * B's shape; without it
// C has that shape, which broadcasting then leaves as it is. Models the version converter
// cannot upgrade (a legacy broadcast at an axis elsewhere) reach here as written.
Status convert_gemm(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand a, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand b, ctx.input(1));
  int64_t broadcast = 1;
  if (ctx.opset() < 7) {
    KILN_ASSIGN_OR_RETURN(broadcast, ctx.attr_int("broadcast", 0));
  }
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(double beta, ctx.attr_float("beta", 1.0));
  KILN_ASSIGN_OR_RETURN(int64_t trans_a, ctx.attr_int("transA", 0));
  KILN_ASSIGN_OR_RETURN(int64_t trans_b, ctx.attr_int("transB", 0));
  if (a.rank() != 2 || b.rank() != 2) {
    return Status::errorf("Gemm needs 2-d A and B, got {} and {}", a.type().to_string(),
                          b.type().to_string());
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::matmul, {a, b}, {{"transpose_a", trans_a != 0},
                                                                 {"transpose_b", trans_b != 0}}));
  if (alpha != 1.0) {
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::mul, {y, scalar(y.dtype(), alpha)}));
  }
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(Operand c, ctx.input(2));
    if (broadcast == 0 && c.shape() != y.shape()) {
      return Status::errorf(
          "Gemm of opset {} without broadcast needs C of A * B's shape {}, got {}", ctx.opset(),
          y.shape().to_string(), c.shape().to_string());
    }
    if (beta != 1.0) {
      KILN_ASSIGN_OR_RETURN(c, ctx.emit(Op::mul, {c, scalar(c.dtype(), beta)}));
    }
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::add, {y, c}));
  }
  return ctx.set_output(0, y);
}

// ---- windows: Conv, ConvTranspose, pooling ------------------------------------------------------

struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
};

// Whether every value lies in [lo, 2^48], as Kiln's window ops require: sums of a few such
// values, and of extents (at most 2^48 too), cannot overflow.
bool within_limits(const std::vector<int64_t>& values, int64_t lo) {
  return std::all_of(values.begin(), values.end(),
                     [lo](int64_t v) { return v >= lo && v <= kMaxElements; });
}

// (kernel - 1) * dilation + 1 for values within_limits(.., 1), or an error beyond 2^48.
Expected<int64_t> dilated_extent(int64_t kernel, int64_t dilation) {
  if (kernel - 1 > (kMaxElements - 1) / dilation) {
    return Status::errorf("kernel {} with dilation {} spans more than 2^48", kernel, dilation);
  }
  return (kernel - 1) * dilation + 1;
}

// Reads kernel_shape (or takes `kernel`), strides, dilations and pads, resolving auto_pad for a
// forward window over `spatial` input extents.
Expected<Window> read_window(NodeContext& ctx, const std::vector<int64_t>& spatial,
                             std::vector<int64_t> kernel) {
  const size_t n = spatial.size();
  Window window;
  KILN_ASSIGN_OR_RETURN(window.kernel, ctx.attr_ints("kernel_shape", kernel));
  if (window.kernel.size() != n) {
    return Status::errorf("kernel_shape has {} entries for {} spatial dims", window.kernel.size(),
                          n);
  }
  KILN_ASSIGN_OR_RETURN(window.strides, ctx.attr_ints("strides", std::vector<int64_t>(n, 1)));
  KILN_ASSIGN_OR_RETURN(window.dilations,
                        ctx.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  KILN_ASSIGN_OR_RETURN(window.pads, ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  if (window.strides.size() != n || window.dilations.size() != n || window.pads.size() != 2 * n) {
    return Status::errorf("strides, dilations and pads must have {}, {} and {} entries", n, n,
                          2 * n);
  }
  if (!within_limits(window.kernel, 1) || !within_limits(window.strides, 1) ||
      !within_limits(window.dilations, 1) || !within_limits(window.pads, 0)) {
    return Status::error("kernel_shape, strides and dilations must be in [1, 2^48], pads in "
                         "[0, 2^48]");
  }
  KILN_ASSIGN_OR_RETURN(std::string auto_pad, ctx.attr_string("auto_pad", "NOTSET"));
  if (auto_pad == "VALID") {
    std::fill(window.pads.begin(), window.pads.end(), 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // Output extent ceil(in / stride); the odd padding element goes to the end for SAME_UPPER.
    for (size_t i = 0; i < n; ++i) {
      const int64_t stride = window.strides[i];
      const int64_t out = (spatial[i] + stride - 1) / stride;
      KILN_ASSIGN_OR_RETURN(const int64_t extent,
                            dilated_extent(window.kernel[i], window.dilations[i]));
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride + extent - spatial[i]);
      const int64_t small = total / 2;
      window.pads[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      window.pads[i + n] = total - window.pads[i];
    }
  } else if (auto_pad != "NOTSET") {
    return ctx.unsupported(fmt::format("auto_pad '{}'", auto_pad));
  }
  return window;
}

std::vector<int64_t> spatial_dims(const Operand& x) {
  return std::vector<int64_t>(x.shape().dims().begin() + 2, x.shape().dims().end());
}

Status convert_conv(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand w, ctx.input(1));
  if (x.rank() < 3 || w.rank() != x.rank()) {
    return Status::errorf("Conv needs [N, C, ...] input and weight of the same rank, got {} and {}",
                          x.type().to_string(), w.type().to_string());
  }
  KILN_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  KILN_ASSIGN_OR_RETURN(Window window,
                        read_window(ctx, spatial_dims(x), spatial_dims(w)));
  if (window.kernel != spatial_dims(w)) {
    return Status::errorf("kernel_shape [{}] differs from the weight's spatial extents [{}]",
                          fmt::join(window.kernel, ", "), fmt::join(spatial_dims(w), ", "));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::conv, {x, w}, {{"strides", window.strides},
                                                               {"pads", window.pads},
                                                               {"dilations", window.dilations},
                                                               {"groups", group}}));
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(Operand bias, ctx.input(2));
    KILN_ASSIGN_OR_RETURN(bias, per_channel(ctx, bias, y.rank()));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::add, {y, bias}));
  }
  return ctx.set_output(0, y);
}

// ConvTranspose is the adjoint of Conv in its input: conv_grad_data with the same weight layout
// [C_in, C_out / group, k...] and the output shape that ONNX computes.
Status convert_conv_transpose(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand w, ctx.input(1));
  if (x.rank() < 3 || w.rank() != x.rank()) {
    return Status::errorf("ConvTranspose needs [N, C, ...] input and weight of the same rank");
  }
  const std::vector<int64_t> in = spatial_dims(x);
  const size_t n = in.size();
  KILN_ASSIGN_OR_RETURN(int64_t group, ctx.attr_int("group", 1));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                        ctx.attr_ints("kernel_shape", spatial_dims(w)));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                        ctx.attr_ints("strides", std::vector<int64_t>(n, 1)));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dilations,
                        ctx.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                        ctx.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> output_padding,
                        ctx.attr_ints("output_padding", std::vector<int64_t>(n, 0)));
  KILN_ASSIGN_OR_RETURN(std::string auto_pad, ctx.attr_string("auto_pad", "NOTSET"));
  if (kernel != spatial_dims(w) || strides.size() != n || dilations.size() != n ||
      pads.size() != 2 * n || output_padding.size() != n) {
    return Status::error("kernel_shape, strides, dilations, pads or output_padding have the "
                         "wrong number of entries");
  }
  if (!within_limits(strides, 1) || !within_limits(dilations, 1) || !within_limits(pads, 0) ||
      !within_limits(output_padding, 0) || group < 1 ||
      (w.shape()[1] > 0 && group > kMaxElements / w.shape()[1])) {
    return Status::error("strides, dilations and group must be in [1, 2^48], pads and "
                         "output_padding in [0, 2^48]");
  }
  // The extent of the whole output, before pads crop it.
  std::vector<int64_t> full;
  for (size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(const int64_t extent, dilated_extent(kernel[i], dilations[i]));
    if (in[i] > 1 && strides[i] > kMaxElements / (in[i] - 1)) {
      return Status::errorf("strides {} make the output longer than 2^48", strides[i]);
    }
    full.push_back(strides[i] * (in[i] - 1) + output_padding[i] + extent);
  }
  std::vector<int64_t> output_shape;
  if (ctx.has_attr("output_shape")) {
    KILN_ASSIGN_OR_RETURN(output_shape, ctx.attr_ints("output_shape"));
    if (output_shape.size() == n + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
    if (output_shape.size() != n || !within_limits(output_shape, 0)) {
      return Status::error("output_shape has the wrong rank or an entry outside [0, 2^48]");
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) output_shape.push_back(in[i] * strides[i]);
  } else if (auto_pad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  } else if (auto_pad != "NOTSET") {
    return ctx.unsupported(fmt::format("auto_pad '{}'", auto_pad));
  }
  if (!output_shape.empty()) {
    // Total padding from the requested output; ONNX puts the odd element at the start unless
    // auto_pad is SAME_UPPER.
    for (size_t i = 0; i < n; ++i) {
      const int64_t total = full[i] - output_shape[i];
      // Floor division, as ONNX's reference: a negative total extends the end first.
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[i + n] = total - pads[i];
    }
  }
  // A negative pad (an output_shape larger than the natural one) adds output positions that no
  // input reaches: compute with that pad at 0, then pad the result with zeros.
  std::vector<int64_t> conv_pads(pads.size()), zero_pads(2 * (n + 2), 0);
  for (size_t i = 0; i < pads.size(); ++i) {
    conv_pads[i] = std::max<int64_t>(pads[i], 0);
    const size_t axis = 2 + i % n;
    zero_pads[i < n ? axis : axis + n + 2] = std::max<int64_t>(-pads[i], 0);
  }
  std::vector<int64_t> x_shape = {x.shape()[0], w.shape()[1] * group};
  for (size_t i = 0; i < n; ++i) x_shape.push_back(full[i] - conv_pads[i] - conv_pads[i + n]);
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::conv_grad_data, {x, w},
                                            {{"strides", strides},
                                             {"pads", conv_pads},
                                             {"dilations", dilations},
                                             {"groups", group},
                                             {"input_shape", x_shape}}));
  if (std::any_of(zero_pads.begin(), zero_pads.end(), [](int64_t p) { return p > 0; })) {
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::pad, {y}, {{"pads", zero_pads}}));
  }
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(Operand bias, ctx.input(2));
    KILN_ASSIGN_OR_RETURN(bias, per_channel(ctx, bias, y.rank()));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::add, {y, bias}));
  }
  return ctx.set_output(0, y);
}

// A max pool with dilations, which Kiln's max_pool lacks, as what it computes: x padded with
// its dtype's lowest value (which never wins, as every window holds an element of x), one
// strided slice per offset of the window, and their elementwise max (one fused kernel).
Expected<Operand> dilated_max_pool(NodeContext& ctx, const Operand& x, const Window& window) {
  const size_t n = window.kernel.size();
  const auto rank = static_cast<size_t>(x.rank());
  std::vector<int64_t> pads(2 * rank, 0);
  for (size_t i = 0; i < n; ++i) {
    pads[2 + i] = window.pads[i];
    pads[rank + 2 + i] = window.pads[n + i];
  }
  double lowest = double{std::numeric_limits<int32_t>::min()};
  if (x.dtype() == DType::i64) lowest = double(std::numeric_limits<int64_t>::min());
  if (is_floating(x.dtype())) lowest = double{std::numeric_limits<float>::lowest()};
  if (x.dtype() == DType::f64) lowest = std::numeric_limits<double>::lowest();
  KILN_ASSIGN_OR_RETURN(Operand padded,
                        ctx.emit(Op::pad, {x}, {{"pads", pads}, {"value", lowest}}));
  std::vector<int64_t> axes, out;
  for (size_t i = 0; i < n; ++i) {
    axes.push_back(static_cast<int64_t>(2 + i));
    KILN_ASSIGN_OR_RETURN(const int64_t extent,
                          dilated_extent(window.kernel[i], window.dilations[i]));
    const int64_t span = padded.shape()[static_cast<int>(2 + i)] - extent;
    if (span < 0) return Status::errorf("the dilated window ({}) exceeds the padded input", extent);
    out.push_back(span / window.strides[i] + 1);
  }
  std::optional<Operand> y;
  std::vector<int64_t> offset(n, 0);  // the window position, odometer order
  while (true) {
    std::vector<int64_t> starts, ends;
    for (size_t i = 0; i < n; ++i) {
      starts.push_back(offset[i] * window.dilations[i]);
      ends.push_back(starts.back() + (out[i] - 1) * window.strides[i] + 1);
    }
    KILN_ASSIGN_OR_RETURN(Operand tap,
                          ctx.emit(Op::slice, {padded}, {{"starts", starts}, {"ends", ends},
                                                         {"axes", axes},
                                                         {"steps", window.strides}}));
    if (y) {
      KILN_ASSIGN_OR_RETURN(tap, ctx.emit(Op::max, {*y, tap}));
    }
    y = tap;
    size_t i = n;
    while (i > 0 && ++offset[i - 1] == window.kernel[i - 1]) offset[--i] = 0;
    if (i == 0) return *y;
  }
}

// Pooling: Kiln pools take floor-mode windows; ceil_mode adds the end padding that makes the
// last partial window appear. That is exact for max pooling (padding never wins) and for
// average pooling that excludes padding from the count.
Status convert_pool(NodeContext& ctx, Op op) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  if (x.rank() < 3) return Status::errorf("pooling input must be [N, C, ...], got rank {}", x.rank());
  if (ctx.wants_output(1)) return ctx.unsupported("MaxPool Indices output");
  const std::vector<int64_t> in = spatial_dims(x);
  KILN_ASSIGN_OR_RETURN(Window window, read_window(ctx, in, {}));
  const bool dilated = std::any_of(window.dilations.begin(), window.dilations.end(),
                                   [](int64_t d) { return d != 1; });
  if (dilated && op != Op::max_pool) return ctx.unsupported("average pooling with dilations");
  KILN_ASSIGN_OR_RETURN(int64_t ceil_mode, ctx.attr_int("ceil_mode", 0));
  KILN_ASSIGN_OR_RETURN(int64_t count_include_pad, ctx.attr_int("count_include_pad", 0));
  const size_t n = in.size();
  if (ceil_mode != 0) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t padded = in[i] + window.pads[i] + window.pads[i + n];
      KILN_ASSIGN_OR_RETURN(const int64_t extent,
                            dilated_extent(window.kernel[i], window.dilations[i]));
      const int64_t span = padded - extent;
      const int64_t stride = window.strides[i];
      if (stride <= 0 || span < 0) continue;  // the op's own checks report these
      int64_t extra = (stride - span % stride) % stride;
      // As ONNX (and PyTorch): a last window that would start inside the end padding is dropped.
      if (extra > 0 && (span + extra) / stride * stride >= in[i] + window.pads[i]) extra = 0;
      if (extra > 0 && op == Op::avg_pool && count_include_pad != 0) {
        return ctx.unsupported("AveragePool with ceil_mode and count_include_pad");
      }
      window.pads[i + n] += extra;
    }
  }
  if (dilated) {
    KILN_ASSIGN_OR_RETURN(Operand y, dilated_max_pool(ctx, x, window));
    return ctx.set_output(0, y);
  }
  Attrs attrs = {{"kernel", window.kernel}, {"strides", window.strides}, {"pads", window.pads}};
  if (op == Op::avg_pool) attrs.set("count_include_pad", count_include_pad != 0);
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(op, {x}, attrs));
  return ctx.set_output(0, y);
}

Status convert_max_pool(NodeContext& ctx) {
  ctx.ignore_attr("storage_order");  // only affects the Indices output, which is rejected
  return convert_pool(ctx, Op::max_pool);
}
Status convert_average_pool(NodeContext& ctx) { return convert_pool(ctx, Op::avg_pool); }

// GlobalAveragePool / GlobalMaxPool: reduce every spatial axis, keeping it with extent 1.
template <Op kReduce>
Status convert_global_pool(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  if (x.rank() < 3) return Status::errorf("input must be [N, C, ...], got rank {}", x.rank());
  std::vector<int64_t> axes;
  for (int i = 2; i < x.rank(); ++i) axes.push_back(i);
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(kReduce, {x}, {{"axes", axes}, {"keepdims", true}}));
  return ctx.set_output(0, y);
}

// ---- normalizations ---------------------------------------------------------------------------

Status convert_batch_norm(NodeContext& ctx) {
  std::vector<Operand> in;
  for (int i = 0; i < 5; ++i) {
    KILN_ASSIGN_OR_RETURN(Operand operand, ctx.input(i));
    in.push_back(operand);
  }
  if (ctx.opset() < 7) return ctx.unsupported("BatchNormalization before opset 7");
  KILN_ASSIGN_OR_RETURN(double epsilon, ctx.attr_float("epsilon", 1e-5));
  KILN_ASSIGN_OR_RETURN(int64_t spatial, ctx.attr_int("spatial", 1));
  if (ctx.opset() < 9 && spatial != 1) return ctx.unsupported("BatchNormalization spatial=0");
  KILN_ASSIGN_OR_RETURN(int64_t training, ctx.attr_int("training_mode", 0));
  if (training == 0) {
    ctx.ignore_attr("momentum");  // only updates running statistics, which inference leaves be
    if (ctx.wants_output(1) || ctx.wants_output(2)) {
      return ctx.unsupported("running-statistics outputs of inference-mode BatchNormalization");
    }
    KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::batch_norm_infer, in, {{"epsilon", epsilon}}));
    return ctx.set_output(0, y);
  }
  // Training mode: normalize with the batch statistics; running statistics are the momentum
  // blend of the given ones and the batch's (biased) ones, as the ONNX reference computes.
  KILN_ASSIGN_OR_RETURN(double momentum, ctx.attr_float("momentum", 0.9));
  KILN_ASSIGN_OR_RETURN(std::vector<Operand> outputs,
                        ctx.emit_all(Op::batch_norm_train, {in[0], in[1], in[2]},
                                     {{"epsilon", epsilon}}));
  KILN_RETURN_IF_ERROR(ctx.set_output(0, outputs[0]));
  const DType dtype = in[0].dtype();
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.wants_output(i)) continue;
    KILN_ASSIGN_OR_RETURN(Operand kept, ctx.emit(Op::mul, {in[static_cast<size_t>(2 + i)],
                                                           scalar(dtype, momentum)}));
    KILN_ASSIGN_OR_RETURN(Operand fresh, ctx.emit(Op::mul, {outputs[static_cast<size_t>(i)],
                                                            scalar(dtype, 1 - momentum)}));
    KILN_ASSIGN_OR_RETURN(Operand running, ctx.emit(Op::add, {kept, fresh}));
    KILN_RETURN_IF_ERROR(ctx.set_output(i, running));
  }
  return Status::ok();
}

// LayerNormalization's optional outputs: the mean and 1 / sqrt(variance + epsilon) over the
// normalized axes (kept with extent 1), computed in the stash dtype.
Status layer_norm_statistics(NodeContext& ctx, Operand x, int axis, double epsilon, DType stash) {
  std::vector<int64_t> axes;
  for (int i = axis; i < x.rank(); ++i) axes.push_back(i);
  if (x.dtype() != stash) {
    KILN_ASSIGN_OR_RETURN(x, ctx.emit(Op::cast, {x}, {{"to", stash}}));
  }
  const Attrs reduce = {{"axes", axes}, {"keepdims", true}};
  KILN_ASSIGN_OR_RETURN(Operand mean, ctx.emit(Op::reduce_mean, {x}, reduce));
  KILN_ASSIGN_OR_RETURN(Operand centred, ctx.emit(Op::sub, {x, mean}));
  KILN_ASSIGN_OR_RETURN(Operand squared, ctx.emit(Op::mul, {centred, centred}));
  KILN_ASSIGN_OR_RETURN(Operand variance, ctx.emit(Op::reduce_mean, {squared}, reduce));
  KILN_ASSIGN_OR_RETURN(Operand shifted, ctx.emit(Op::add, {variance, scalar(stash, epsilon)}));
  KILN_ASSIGN_OR_RETURN(Operand inv_std_dev, ctx.emit(Op::rsqrt, {shifted}));
  if (ctx.wants_output(1)) KILN_RETURN_IF_ERROR(ctx.set_output(1, mean));
  if (ctx.wants_output(2)) KILN_RETURN_IF_ERROR(ctx.set_output(2, inv_std_dev));
  return Status::ok();
}

Status convert_layer_norm(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand scale, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", -1));
  KILN_ASSIGN_OR_RETURN(double epsilon, ctx.attr_float("epsilon", 1e-5));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, x.rank()));
  KILN_ASSIGN_OR_RETURN(int64_t stash_type, ctx.attr_int("stash_type", 1));
  if (ctx.wants_output(1) || ctx.wants_output(2)) {
    KILN_ASSIGN_OR_RETURN(DType stash, dtype_from_onnx(static_cast<int32_t>(stash_type)));
    KILN_RETURN_IF_ERROR(layer_norm_statistics(ctx, x, axis, epsilon, stash));
  }
  const std::vector<int64_t> normalized(x.shape().dims().begin() + axis, x.shape().dims().end());
  // Scale and bias broadcast to the normalized shape in ONNX; Kiln's layer_norm takes them whole.
  if (scale.shape().dims() != normalized) {
    KILN_ASSIGN_OR_RETURN(scale, ctx.emit(Op::broadcast_to, {scale}, {{"shape", normalized}}));
  }
  Operand bias;
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(bias, ctx.input(2));
    if (bias.shape().dims() != normalized) {
      KILN_ASSIGN_OR_RETURN(bias, ctx.emit(Op::broadcast_to, {bias}, {{"shape", normalized}}));
    }
  } else {
    KILN_ASSIGN_OR_RETURN(bias, ctx.emit(Op::fill, {}, {{"shape", normalized},
                                                       {"dtype", x.dtype()}}));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::layer_norm, {x, scale, bias},
                                            {{"axis", axis_attr}, {"epsilon", epsilon}}));
  return ctx.set_output(0, y);
}

// InstanceNormalization: layer_norm over the spatial axes of each (n, c), then the per-channel
// scale and bias.
Status convert_instance_norm(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand scale, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(Operand bias, ctx.input(2));
  KILN_ASSIGN_OR_RETURN(double epsilon, ctx.attr_float("epsilon", 1e-5));
  if (x.rank() < 3) return Status::errorf("input must be [N, C, ...], got rank {}", x.rank());
  const std::vector<int64_t> spatial = spatial_dims(x);
  KILN_ASSIGN_OR_RETURN(Operand ones, ctx.emit(Op::fill, {}, {{"shape", spatial},
                                                             {"value", 1.0},
                                                             {"dtype", x.dtype()}}));
  KILN_ASSIGN_OR_RETURN(Operand zeros, ctx.emit(Op::fill, {}, {{"shape", spatial},
                                                              {"dtype", x.dtype()}}));
  KILN_ASSIGN_OR_RETURN(Operand normalized, ctx.emit(Op::layer_norm, {x, ones, zeros},
                                                     {{"axis", 2}, {"epsilon", epsilon}}));
  KILN_ASSIGN_OR_RETURN(scale, per_channel(ctx, scale, x.rank()));
  KILN_ASSIGN_OR_RETURN(bias, per_channel(ctx, bias, x.rank()));
  KILN_ASSIGN_OR_RETURN(Operand scaled, ctx.emit(Op::mul, {normalized, scale}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::add, {scaled, bias}));
  return ctx.set_output(0, y);
}

// Softmax and LogSoftmax. From opset 13 they normalize along `axis`; before, the input is viewed
// as 2-d [prod(dims < axis), prod(dims >= axis)] and normalized along its rows.
template <Op kOp>
Status convert_softmax(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", ctx.opset() >= 13 ? -1 : 1));
  if (ctx.opset() >= 13) {
    KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(kOp, {x}, {{"axis", axis_attr}}));
    return ctx.set_output(0, y);
  }
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, x.rank()));
  const std::span<const int64_t> dims = x.shape().dims();
  const int64_t outer = std::accumulate(dims.begin(), dims.begin() + axis, int64_t{1},
                                        std::multiplies<>());
  const int64_t inner = std::accumulate(dims.begin() + axis, dims.end(), int64_t{1},
                                        std::multiplies<>());
  KILN_ASSIGN_OR_RETURN(Operand rows, reshape(ctx, x, {outer, inner}));
  KILN_ASSIGN_OR_RETURN(Operand normalized, ctx.emit(kOp, {rows}, {{"axis", 1}}));
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, normalized, x.shape().dims()));
  return ctx.set_output(0, y);
}

// LRN: x / (bias + alpha / size * sum of x^2 over a window of `size` channels)^beta. The window
// sum is an average pool (counting padding) over the channel axis, times size.
Status convert_lrn(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(double alpha, ctx.attr_float("alpha", 1e-4));
  KILN_ASSIGN_OR_RETURN(double beta, ctx.attr_float("beta", 0.75));
  KILN_ASSIGN_OR_RETURN(double bias, ctx.attr_float("bias", 1.0));
  KILN_ASSIGN_OR_RETURN(int64_t size, ctx.attr_int("size"));
  if (x.rank() < 3) return Status::errorf("input must be [N, C, ...], got rank {}", x.rank());
  if (size <= 0) return Status::errorf("size must be positive, got {}", size);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t positions = x.shape().num_elements() / std::max<int64_t>(1, n * c);
  KILN_ASSIGN_OR_RETURN(Operand squared, ctx.emit(Op::mul, {x, x}));
  KILN_ASSIGN_OR_RETURN(Operand planes, reshape(ctx, squared, {n, 1, c, positions}));
  const int64_t before = (size - 1) / 2;
  const int64_t after = size - 1 - before;
  KILN_ASSIGN_OR_RETURN(Operand window_mean,
                        ctx.emit(Op::avg_pool, {planes}, {{"kernel", {size, 1}},
                                                          {"pads", {before, 0, after, 0}},
                                                          {"count_include_pad", true}}));
  KILN_ASSIGN_OR_RETURN(Operand mean, reshape(ctx, window_mean, x.shape().dims()));
  const DType dtype = x.dtype();
  KILN_ASSIGN_OR_RETURN(Operand scaled, ctx.emit(Op::mul, {mean, scalar(dtype, alpha)}));
  KILN_ASSIGN_OR_RETURN(Operand base, ctx.emit(Op::add, {scaled, scalar(dtype, bias)}));
  KILN_ASSIGN_OR_RETURN(Operand denominator, ctx.emit(Op::pow, {base, scalar(dtype, beta)}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::div, {x, denominator}));
  return ctx.set_output(0, y);
}

// ---- reductions -------------------------------------------------------------------------------

enum class Reduce { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

Expected<Operand> reduce(NodeContext& ctx, Reduce kind, const Operand& x, const Attrs& attrs) {
  switch (kind) {
    case Reduce::sum: return ctx.emit(Op::reduce_sum, {x}, attrs);
    case Reduce::mean: return ctx.emit(Op::reduce_mean, {x}, attrs);
    case Reduce::max: return ctx.emit(Op::reduce_max, {x}, attrs);
    case Reduce::min: return ctx.emit(Op::reduce_min, {x}, attrs);
    case Reduce::prod: return ctx.emit(Op::reduce_prod, {x}, attrs);
    case Reduce::l1: {
      KILN_ASSIGN_OR_RETURN(Operand magnitude, ctx.emit(Op::abs, {x}));
      return ctx.emit(Op::reduce_sum, {magnitude}, attrs);
    }
    case Reduce::l2: {
      KILN_ASSIGN_OR_RETURN(Operand squared, ctx.emit(Op::mul, {x, x}));
      KILN_ASSIGN_OR_RETURN(Operand total, ctx.emit(Op::reduce_sum, {squared}, attrs));
      return ctx.emit(Op::sqrt, {total});
    }
    case Reduce::log_sum: {
      KILN_ASSIGN_OR_RETURN(Operand total, ctx.emit(Op::reduce_sum, {x}, attrs));
      return ctx.emit(Op::log, {total});
    }
    case Reduce::log_sum_exp: {
      KILN_ASSIGN_OR_RETURN(Operand e, ctx.emit(Op::exp, {x}));
      KILN_ASSIGN_OR_RETURN(Operand total, ctx.emit(Op::reduce_sum, {e}, attrs));
      return ctx.emit(Op::log, {total});
    }
    case Reduce::sum_square: {
      KILN_ASSIGN_OR_RETURN(Operand squared, ctx.emit(Op::mul, {x, x}));
      return ctx.emit(Op::reduce_sum, {squared}, attrs);
    }
  }
  KILN_UNREACHABLE("bad reduction kind");
}

// ReduceSum takes its axes as an input from opset 13, the others from opset 18.
template <Reduce kKind>
Status convert_reduce(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  const int axes_input_opset = kKind == Reduce::sum ? 13 : 18;
  std::vector<int64_t> axes;
  if (ctx.opset() < axes_input_opset) {
    KILN_ASSIGN_OR_RETURN(axes, ctx.attr_ints("axes", std::vector<int64_t>{}));
  } else if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(axes, ctx.ints_input(1, "axes"));
  }
  KILN_ASSIGN_OR_RETURN(int64_t keepdims, ctx.attr_int("keepdims", 1));
  KILN_ASSIGN_OR_RETURN(int64_t noop, ctx.attr_int("noop_with_empty_axes", 0));
  if (axes.empty() && noop != 0) return ctx.set_output(0, x);
  const Attrs attrs = {{"axes", axes}, {"keepdims", keepdims != 0}};
  KILN_ASSIGN_OR_RETURN(Operand y, reduce(ctx, kKind, x, attrs));
  return ctx.set_output(0, y);
}

template <Op kOp>
Status convert_arg_reduce(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(int64_t keepdims, ctx.attr_int("keepdims", 1));
  KILN_ASSIGN_OR_RETURN(int64_t last, ctx.attr_int("select_last_index", 0));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(kOp, {x}, {{"axis", axis},
                                                      {"keepdims", keepdims != 0},
                                                      {"select_last_index", last != 0}}));
  return ctx.set_output(0, y);
}

// ---- losses ----------------------------------------------------------------------------------

// Scores [N, C, d1, ...] with the class axis moved last, as Kiln's losses take them.
Expected<Operand> classes_last(NodeContext& ctx, const Operand& scores) {
  if (scores.rank() < 2) return Status::errorf("scores must be [N, C, ...], got rank {}", scores.rank());
  if (scores.rank() == 2) return scores;
  std::vector<int64_t> perm = {0};
  for (int i = 2; i < scores.rank(); ++i) perm.push_back(i);
  perm.push_back(1);
  return ctx.emit(Op::transpose, {scores}, {{"perm", perm}});
}

Status check_loss_options(NodeContext& ctx) {
  if (ctx.has_input(2)) return ctx.unsupported("class weights in a loss");
  if (ctx.has_attr("ignore_index")) return ctx.unsupported("ignore_index in a loss");
  return Status::ok();
}

template <Op kLoss>
Status convert_loss(NodeContext& ctx) {
  KILN_RETURN_IF_ERROR(check_loss_options(ctx));
  KILN_ASSIGN_OR_RETURN(Operand scores, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand labels, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "mean"));
  KILN_ASSIGN_OR_RETURN(Operand last, classes_last(ctx, scores));
  KILN_ASSIGN_OR_RETURN(Operand loss, ctx.emit(kLoss, {last, labels}, {{"reduction", reduction}}));
  KILN_RETURN_IF_ERROR(ctx.set_output(0, loss));
  if (ctx.wants_output(1)) {  // SoftmaxCrossEntropyLoss's log_prob, in the input's layout
    KILN_ASSIGN_OR_RETURN(Operand log_prob, ctx.emit(Op::log_softmax, {scores}, {{"axis", 1}}));
    KILN_RETURN_IF_ERROR(ctx.set_output(1, log_prob));
  }
  return Status::ok();
}

}  // namespace

std::vector<ConverterEntry> nn_converters() {
  return {
      {"MatMul", &convert_matmul},
      {"Gemm", &convert_gemm},
      {"Conv", &convert_conv},
      {"ConvTranspose", &convert_conv_transpose},
      {"MaxPool", &convert_max_pool},
      {"AveragePool", &convert_average_pool},
      {"GlobalAveragePool", &convert_global_pool<Op::reduce_mean>},
      {"GlobalMaxPool", &convert_global_pool<Op::reduce_max>},
      {"BatchNormalization", &convert_batch_norm},
      {"LayerNormalization", &convert_layer_norm},
      {"InstanceNormalization", &convert_instance_norm},
      {"Softmax", &convert_softmax<Op::softmax>},
      {"LogSoftmax", &convert_softmax<Op::log_softmax>},
      {"LRN", &convert_lrn},
      {"ReduceSum", &convert_reduce<Reduce::sum>},
      {"ReduceMean", &convert_reduce<Reduce::mean>},
      {"ReduceMax", &convert_reduce<Reduce::max>},
      {"ReduceMin", &convert_reduce<Reduce::min>},
      {"ReduceProd", &convert_reduce<Reduce::prod>},
      {"ReduceL1", &convert_reduce<Reduce::l1>},
      {"ReduceL2", &convert_reduce<Reduce::l2>},
      {"ReduceLogSum", &convert_reduce<Reduce::log_sum>},
      {"ReduceLogSumExp", &convert_reduce<Reduce::log_sum_exp>},
      {"ReduceSumSquare", &convert_reduce<Reduce::sum_square>},
      {"ArgMax", &convert_arg_reduce<Op::argmax>},
      {"ArgMin", &convert_arg_reduce<Op::argmin>},
      {"SoftmaxCrossEntropyLoss", &convert_loss<Op::cross_entropy>},
      {"NegativeLogLikelihoodLoss", &convert_loss<Op::nll_loss>},
  };
}

}  // namespace kiln::onnx_import
