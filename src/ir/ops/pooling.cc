// Pooling ops: max and average pooling over 1 to 3 spatial dims, and their gradients.
// Layout as conv (and ONNX): x [N, C, *spatial], y [N, C, *out_spatial]; windows never dilate.
//
// Gradients: max_pool's is max_pool_grad (dy routed to each window's maximum), avg_pool's is
// avg_pool_grad, and avg_pool_grad, being avg_pool's adjoint, has avg_pool as its own.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

// Attribute values are bounded so that the shape arithmetic below cannot overflow int64; larger
// values could not describe a valid window over a shape of at most 2^48 elements anyway.
constexpr int64_t kMaxWindowParam = kMaxElements;

struct Window {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;

  int spatial() const { return static_cast<int>(kernel.size()); }
  double volume() const {
    double v = 1;
    for (int64_t k : kernel) v *= static_cast<double>(k);
    return v;
  }
};

Status check_range(std::string_view name, const std::vector<int64_t>& values, int64_t lo) {
  for (int64_t v : values) {
    if (v < lo || v > kMaxWindowParam) {
      return Status::errorf("attribute '{}' entries must be in [{}, 2^48], got [{}]", name, lo,
                            fmt::join(values, ","));
    }
  }
  return Status::ok();
}

// Reads and validates the window attributes for an input with `spatial` spatial dims.
Expected<Window> window_params(const Attrs& attrs, int spatial) {
  const size_t s = static_cast<size_t>(spatial);
  Window win;
  win.kernel = attrs.get_ints("kernel");
  if (win.kernel.size() != s) {
    return Status::errorf("attribute 'kernel' must have {} entries (one per spatial dim), got [{}]",
                          s, fmt::join(win.kernel, ","));
  }
  KILN_RETURN_IF_ERROR(check_range("kernel", win.kernel, 1));
  if (!Shape::make(win.kernel)) {
    return Status::errorf("attribute 'kernel' [{}] has more than 2^48 elements",
                          fmt::join(win.kernel, ","));
  }
  // Empty strides mean all 1, as ONNX (not PyTorch, whose default stride is the kernel).
  win.strides = attrs.get_ints("strides");
  if (win.strides.empty()) win.strides.assign(s, 1);
  if (win.strides.size() != s) {
    return Status::errorf("attribute 'strides' must be empty or have {} entries, got [{}]", s,
                          fmt::join(win.strides, ","));
  }
  KILN_RETURN_IF_ERROR(check_range("strides", win.strides, 1));
  // pads = [begin_0..begin_{s-1}, end_0..end_{s-1}] as ONNX.
  std::vector<int64_t> pads = attrs.get_ints("pads");
  if (pads.empty()) pads.assign(2 * s, 0);
  if (pads.size() != 2 * s) {
    return Status::errorf("attribute 'pads' must be empty or have {} entries, got [{}]", 2 * s,
                          fmt::join(pads, ","));
  }
  KILN_RETURN_IF_ERROR(check_range("pads", pads, 0));
  win.pads_begin.assign(pads.begin(), pads.begin() + spatial);
  win.pads_end.assign(pads.begin() + spatial, pads.end());
  // A pad smaller than the kernel keeps a real element in every window (given a non-empty
  // input), so max never sees only padding and the average never divides by zero.
  for (size_t i = 0; i < s; ++i) {
    if (win.pads_begin[i] >= win.kernel[i] || win.pads_end[i] >= win.kernel[i]) {
      return Status::errorf(
          "attribute 'pads' [{}] must be smaller than 'kernel' [{}] in every spatial dim",
          fmt::join(pads, ","), fmt::join(win.kernel, ","));
    }
  }
  return win;
}

// The pooled shape of `x` (named `x_name` in errors) and the validated window.
struct Pooling {
  Window window;
  Shape pooled;
};

Expected<Pooling> pooling_of(const Shape& x, std::string_view x_name, const Attrs& attrs) {
  if (x.rank() < 3 || x.rank() > 5) {
    return Status::errorf("{} must have rank 3, 4 or 5 ([N, C, 1 to 3 spatial dims]), got {}",
                          x_name, x.to_string());
  }
  KILN_ASSIGN_OR_RETURN(Window win, window_params(attrs, x.rank() - 2));
  std::vector<int64_t> dims = {x.dim(0), x.dim(1)};
  for (int i = 0; i < win.spatial(); ++i) {
    const size_t si = static_cast<size_t>(i);
    const int64_t extent = x.dim(i + 2);
    if (extent < 1) {
      return Status::errorf("{} {} has an empty spatial dim", x_name, x.to_string());
    }
    const int64_t padded = extent + win.pads_begin[si] + win.pads_end[si];
    if (padded < win.kernel[si]) {
      return Status::errorf(
          "spatial dim {}: padded extent {} (of {} {}) is smaller than the kernel {}; the output "
          "would be empty",
          i, padded, x_name, x.to_string(), win.kernel[si]);
    }
    // Output extent as conv with dilation 1.
    dims.push_back((padded - win.kernel[si]) / win.strides[si] + 1);
  }
  KILN_ASSIGN_OR_RETURN(Shape pooled, Shape::make(std::move(dims)));
  return Pooling{std::move(win), std::move(pooled)};
}

Status require_pooled_shape(const Pooling& pooling, const TensorType& grad_out,
                            std::string_view why) {
  if (grad_out.shape == pooling.pooled) return Status::ok();
  return Status::errorf("input 'grad_out' is {} but {} gives {}", grad_out.to_string(), why,
                        pooling.pooled.to_string());
}

Expected<std::vector<TensorType>> infer_pool(std::span<const TensorType> in, const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_floating(in[0], "x"));
  KILN_ASSIGN_OR_RETURN(Pooling pooling, pooling_of(in[0].shape, "input 'x'", attrs));
  return std::vector<TensorType>{{in[0].dtype, std::move(pooling.pooled)}};
}

Expected<std::vector<TensorType>> infer_max_pool_grad(std::span<const TensorType> in,
                                                      const Attrs& attrs) {
  const TensorType& x = in[0];
  const TensorType& grad_out = in[1];
  KILN_RETURN_IF_ERROR(require_floating(x, "x"));
  KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", grad_out, "grad_out"));
  KILN_ASSIGN_OR_RETURN(Pooling pooling, pooling_of(x.shape, "input 'x'", attrs));
  KILN_RETURN_IF_ERROR(require_pooled_shape(pooling, grad_out, "max_pool of x"));
  return std::vector<TensorType>{x};
}

Expected<std::vector<TensorType>> infer_avg_pool_grad(std::span<const TensorType> in,
                                                      const Attrs& attrs) {
  const TensorType& grad_out = in[0];
  KILN_RETURN_IF_ERROR(require_floating(grad_out, "grad_out"));
  Expected<Shape> x = Shape::make(attrs.get_ints("input_shape"));
  if (!x) return x.status().with_context("attribute 'input_shape'");
  KILN_ASSIGN_OR_RETURN(Pooling pooling, pooling_of(*x, "attribute 'input_shape'", attrs));
  KILN_RETURN_IF_ERROR(require_pooled_shape(pooling, grad_out, "avg_pool of input_shape"));
  return std::vector<TensorType>{{grad_out.dtype, std::move(*x)}};
}

// Flops: one per (window, kernel element), whichever way the window is traversed.
Cost pool_cost(std::span<const TensorType> in, std::span<const TensorType> out,
               const Attrs& attrs, const Shape& pooled) {
  double volume = 1;
  for (int64_t k : attrs.get_ints("kernel")) volume *= static_cast<double>(k);
  Cost cost;
  cost.flops = static_cast<double>(pooled.num_elements()) * volume;
  for (const TensorType& t : in) cost.bytes_read += t.size_bytes();
  for (const TensorType& t : out) cost.bytes_written += t.size_bytes();
  return cost;
}

// Calls fn(y_offset, real) for every window, in row-major order of the pooled output; `real`
// lists the offsets in x of the window's non-padded elements, in row-major window order.
template <typename Fn>
void for_each_window(const Shape& x, const Shape& pooled, const Window& win, Fn&& fn) {
  const std::vector<int64_t> xs = x.strides();
  std::vector<int64_t> real;
  int64_t y_offset = 0;
  for_each_index(pooled, [&](std::span<const int64_t> yi) {
    real.clear();
    const int64_t base = yi[0] * xs[0] + yi[1] * xs[1];
    for_each_index(Shape(win.kernel), [&](std::span<const int64_t> ki) {
      int64_t offset = base;
      for (int i = 0; i < win.spatial(); ++i) {
        const size_t si = static_cast<size_t>(i);
        const int64_t pos = yi[si + 2] * win.strides[si] - win.pads_begin[si] + ki[si];
        if (pos < 0 || pos >= x.dim(i + 2)) return;
        offset += pos * xs[si + 2];
      }
      real.push_back(offset);
    });
    fn(y_offset, std::span<const int64_t>(real));
    ++y_offset;
  });
}

// The offset of the window's maximum: the first in window order on ties; a NaN wins (the first
// NaN), so that NaN propagates as in PyTorch. Padding never wins, as if it were -inf.
int64_t window_argmax(const Array& x, std::span<const int64_t> real) {
  int64_t best = real[0];
  for (int64_t offset : real.subspan(1)) {
    if (std::isnan(x[best])) break;
    if (x[offset] > x[best] || std::isnan(x[offset])) best = offset;
  }
  return best;
}

// The divisor of a window's sum: its real element count, or the kernel volume with
// count_include_pad (as ONNX AveragePool).
double avg_divisor(const Window& win, bool count_include_pad, std::span<const int64_t> real) {
  return count_include_pad ? win.volume() : static_cast<double>(real.size());
}

Pooling eval_pooling(const Shape& x, const Attrs& attrs) {
  return *pooling_of(x, "x", attrs);  // infer has validated it
}

Expected<std::vector<Array>> eval_max_pool(std::span<const Array> in, const Attrs& attrs,
                                           std::span<const TensorType> out) {
  const Array& x = in[0];
  Array y(out[0].dtype, out[0].shape);
  for_each_window(x.shape, y.shape, eval_pooling(x.shape, attrs).window,
                  [&](int64_t yo, std::span<const int64_t> real) {
                    y[yo] = x[window_argmax(x, real)];
                  });
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

Expected<std::vector<Array>> eval_avg_pool(std::span<const Array> in, const Attrs& attrs,
                                           std::span<const TensorType> out) {
  const Array& x = in[0];
  const bool include_pad = attrs.get_bool("count_include_pad");
  const Window win = eval_pooling(x.shape, attrs).window;
  Array y(out[0].dtype, out[0].shape);
  for_each_window(x.shape, y.shape, win, [&](int64_t yo, std::span<const int64_t> real) {
    double sum = 0;
    for (int64_t offset : real) sum += x[offset];
    y[yo] = sum / avg_divisor(win, include_pad, real);
  });
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

Expected<std::vector<Array>> eval_max_pool_grad(std::span<const Array> in, const Attrs& attrs,
                                                std::span<const TensorType> out) {
  const Array& x = in[0];
  const Array& grad_out = in[1];
  Array dx(out[0].dtype, out[0].shape);
  for_each_window(x.shape, grad_out.shape, eval_pooling(x.shape, attrs).window,
                  [&](int64_t yo, std::span<const int64_t> real) {
                    dx[window_argmax(x, real)] += grad_out[yo];
                  });
  dx.round_to_dtype();
  return std::vector<Array>{std::move(dx)};
}

Expected<std::vector<Array>> eval_avg_pool_grad(std::span<const Array> in, const Attrs& attrs,
                                                std::span<const TensorType> out) {
  const Array& grad_out = in[0];
  const bool include_pad = attrs.get_bool("count_include_pad");
  Array dx(out[0].dtype, out[0].shape);
  const Window win = eval_pooling(dx.shape, attrs).window;
  for_each_window(dx.shape, grad_out.shape, win, [&](int64_t yo, std::span<const int64_t> real) {
    const double share = grad_out[yo] / avg_divisor(win, include_pad, real);
    for (int64_t offset : real) dx[offset] += share;
  });
  dx.round_to_dtype();
  return std::vector<Array>{std::move(dx)};
}

std::vector<AttrSpec> window_attrs() {
  return {
      {"kernel", AttrKind::ints, std::nullopt, "window extent per spatial dim"},
      {"strides", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "window step per spatial dim; empty means all 1, as ONNX"},
      {"pads", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "[begin_0..begin_{s-1}, end_0..end_{s-1}], each < kernel; empty means none"},
  };
}

AttrSpec count_include_pad_attr() {
  return {"count_include_pad", AttrKind::boolean, AttrValue(false),
          "divide by the kernel volume instead of the count of non-padded elements"};
}

// The attributes of a pooling node without `input_shape`, for building avg_pool from
// avg_pool_grad's attributes; or with it set to `input_shape`, for the reverse.
Attrs avg_pool_attrs(const Attrs& attrs, const Shape* input_shape) {
  Attrs result;
  for (const char* name : {"kernel", "strides", "pads", "count_include_pad"}) {
    result.set(name, attrs.get(name));
  }
  if (input_shape != nullptr) result.set("input_shape", input_shape->dims());
  return result;
}

}  // namespace

void register_pooling_ops(OpTable& table) {
  OpDef& max_pool = table.define(Op::max_pool);
  max_pool.summary = "maximum over sliding windows of x [N, C, *spatial]; padding never wins";
  max_pool.fusion_kind = FusionKind::reduction;
  max_pool.input_names = {"x"};
  max_pool.min_inputs = max_pool.max_inputs = 1;
  max_pool.attrs = window_attrs();
  max_pool.infer = infer_pool;
  max_pool.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                     const Attrs& attrs) { return pool_cost(in, out, attrs, out[0].shape); };
  max_pool.eval = eval_max_pool;
  max_pool.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    return std::vector<Value*>{
        b.apply1(Op::max_pool_grad, {node.input(0), grads[0]}, node.attrs())};
  };

  OpDef& avg_pool = table.define(Op::avg_pool);
  avg_pool.summary = "mean over sliding windows of x [N, C, *spatial]";
  avg_pool.fusion_kind = FusionKind::reduction;
  avg_pool.input_names = {"x"};
  avg_pool.min_inputs = avg_pool.max_inputs = 1;
  avg_pool.attrs = window_attrs();
  avg_pool.attrs.push_back(count_include_pad_attr());
  avg_pool.infer = infer_pool;
  avg_pool.cost = max_pool.cost;
  avg_pool.eval = eval_avg_pool;
  avg_pool.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    const Attrs attrs = avg_pool_attrs(node.attrs(), &node.input(0)->shape());
    return std::vector<Value*>{b.apply1(Op::avg_pool_grad, {grads[0]}, attrs)};
  };

  OpDef& max_grad = table.define(Op::max_pool_grad);
  max_grad.summary = "gradient of max_pool: grad_out routed to each window's (first) maximum";
  max_grad.fusion_kind = FusionKind::opaque;
  max_grad.input_names = {"x", "grad_out"};
  max_grad.min_inputs = max_grad.max_inputs = 2;
  max_grad.attrs = window_attrs();
  max_grad.infer = infer_max_pool_grad;
  max_grad.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                     const Attrs& attrs) { return pool_cost(in, out, attrs, in[1].shape); };
  max_grad.eval = eval_max_pool_grad;
  max_grad.non_differentiable =
      "second-order gradients of max_pool are not supported (they need a gather at each "
      "window's maximum)";

  OpDef& avg_grad = table.define(Op::avg_pool_grad);
  avg_grad.summary = "gradient of avg_pool (its adjoint): grad_out spread over each window";
  avg_grad.fusion_kind = FusionKind::opaque;
  avg_grad.input_names = {"grad_out"};
  avg_grad.min_inputs = avg_grad.max_inputs = 1;
  avg_grad.attrs = window_attrs();
  avg_grad.attrs.push_back(count_include_pad_attr());
  avg_grad.attrs.push_back(
      {"input_shape", AttrKind::ints, std::nullopt, "full shape of avg_pool's input x"});
  avg_grad.infer = infer_avg_pool_grad;
  avg_grad.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                     const Attrs& attrs) { return pool_cost(in, out, attrs, in[0].shape); };
  avg_grad.eval = eval_avg_pool_grad;
  avg_grad.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    const Attrs attrs = avg_pool_attrs(node.attrs(), nullptr);
    return std::vector<Value*>{b.apply1(Op::avg_pool, {grads[0]}, attrs)};
  };
}

}  // namespace kiln::ops
