// Lowerings of the pooling ops (ir/ops/pooling.cc) over x [N, C, *spatial].
//
//   max_pool (kernel [2], stride 2): out[i0, i1, i2] = max(k0, 0, 2, x[i0, i1, i2*2 + k0])
//
// Taps in the padding read a clamped element and are replaced by the reduction's identity
// (-inf for max, 0 for a sum), so padding never wins and never counts. avg_pool divides by the
// kernel volume (count_include_pad) or by the number of real taps, the product over spatial
// dims of the in-range taps. avg_pool_grad sums, for each input element, over the taps whose
// window start (x + pad - tap) / stride is integral and in range. max_pool_grad is not
// lowered: routing dy to each window's first maximum needs the window's argmax inside a sum
// over the windows that contain the element, which is expressible but left for later.
#include <limits>

#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

struct Window {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads_begin;
};

Window window_of(const Attrs& attrs) {
  Window win;
  win.kernel = attrs.get_ints("kernel");
  const size_t s = win.kernel.size();
  win.strides = attrs.get_ints("strides");
  if (win.strides.empty()) win.strides.assign(s, 1);
  const std::vector<int64_t>& pads = attrs.get_ints("pads");
  win.pads_begin = pads.empty() ? std::vector<int64_t>(s, 0)
                                : std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<ptrdiff_t>(s));
  return win;
}

// op over the window of output element `index` of x's tap values, `outside` for padding taps.
Expr window_reduce(const ComputeArgs& args, ReduceOp op, const Window& win, const Expr& outside) {
  const Shape& x = args.inputs[0].shape;
  return reduce_nest(op, win.kernel, args.names, [&](const std::vector<Expr>& k) {
    Expr inside = make_bool(true);
    std::vector<Expr> index = {args.index[0], args.index[1]};
    for (size_t d = 0; d < k.size(); ++d) {
      const Expr pos = args.index[d + 2] * win.strides[d] - win.pads_begin[d] + k[d];
      const int64_t extent = x.dim(static_cast<int>(d) + 2);
      inside = inside && pos >= 0 && pos < extent;
      index.push_back(clamp_index(pos, extent));
    }
    return select(inside, args.input(0, index), outside);
  });
}

// The number of real (non-padded) taps of the window starting at `starts` (one per spatial
// dim), as a float of `dtype`; or the kernel volume with count_include_pad.
Expr window_count(const Attrs& attrs, const Window& win, const Shape& x,
                  const std::vector<Expr>& starts, DType dtype) {
  if (attrs.get_bool("count_include_pad")) {
    double volume = 1;
    for (int64_t k : win.kernel) volume *= static_cast<double>(k);
    return constant_of(dtype, volume);
  }
  Expr count = 1;
  for (size_t d = 0; d < starts.size(); ++d) {
    const Expr first = max(starts[d], 0);
    const Expr end = min(starts[d] + win.kernel[d], x.dim(static_cast<int>(d) + 2));
    count = count * (end - first);
  }
  return cast(dtype, count);
}

Expected<Expr> lower_max_pool(const ComputeArgs& args) {
  const DType dtype = args.outputs[0].dtype;
  return window_reduce(args, ReduceOp::max, window_of(args.attrs),
                       make_float(-std::numeric_limits<double>::infinity(), dtype));
}

Expected<Expr> lower_avg_pool(const ComputeArgs& args) {
  const DType dtype = args.outputs[0].dtype;
  const Window win = window_of(args.attrs);
  std::vector<Expr> starts;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    starts.push_back(args.index[d + 2] * win.strides[d] - win.pads_begin[d]);
  }
  return window_reduce(args, ReduceOp::sum, win, make_zero(dtype)) /
         window_count(args.attrs, win, args.inputs[0].shape, starts, dtype);
}

Expected<Expr> lower_avg_pool_grad(const ComputeArgs& args) {
  const Shape& grad_out = args.inputs[0].shape;
  const Shape& x = args.outputs[0].shape;
  const DType dtype = args.outputs[0].dtype;
  const Window win = window_of(args.attrs);
  return reduce_nest(ReduceOp::sum, win.kernel, args.names, [&](const std::vector<Expr>& k) {
    Expr inside = make_bool(true);
    std::vector<Expr> y_index = {args.index[0], args.index[1]};
    std::vector<Expr> starts;
    for (size_t d = 0; d < k.size(); ++d) {
      const Expr shifted = args.index[d + 2] + win.pads_begin[d] - k[d];
      const int64_t extent = grad_out.dim(static_cast<int>(d) + 2);
      const Expr q = clamp_index(shifted / win.strides[d], extent);
      inside = inside && shifted % win.strides[d] == 0 && shifted >= 0 &&
               shifted / win.strides[d] < extent;
      y_index.push_back(q);
      starts.push_back(q * win.strides[d] - win.pads_begin[d]);
    }
    return select(inside, args.input(0, y_index) / window_count(args.attrs, win, x, starts, dtype),
                  make_zero(dtype));
  });
}

}  // namespace

void register_pooling_lowerings(LoweringTable& table) {
  table.define(Op::max_pool, &lower_max_pool);
  table.define(Op::avg_pool, &lower_avg_pool);
  table.not_lowered(Op::max_pool_grad,
                    "not lowered yet: routing dy to each window's first maximum needs the "
                    "window's argmax inside a sum over the windows containing the element");
  table.define(Op::avg_pool_grad, &lower_avg_pool_grad);
}

}  // namespace kiln::loop::lowering
