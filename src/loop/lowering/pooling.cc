// Lowerings of the pooling ops (ir/ops/pooling.cc) over x [N, C, *spatial].
//
//   max_pool (kernel [2], stride 2): out[i0, i1, i2] = max(k0, 0, 2, x[i0, i1, i2*2 + k0])
//
// Taps in the padding read a clamped element and are replaced by the reduction's identity
// (-inf for max, 0 for a sum), so padding never wins and never counts. avg_pool divides by the
// kernel volume (count_include_pad) or by the number of real taps, the product over spatial
// dims of the in-range taps. avg_pool_grad sums, for each input element, over the taps whose
// window start (x + pad - tap) / stride is integral and in range.
//
// A separable max_pool (max_pool_is_separable) runs in two steps when lower_group stores it
// (its store nest, loop/lowering/pooling.h), from the step functions at the end of this file.
//
// max_pool_grad's definition is the gather form of the interpreter's scatter: each dx element
// sums, over the windows that contain it, dy of the window where the window's first maximum is
// this element. Along a spatial dim the windows containing position p are q in
// ((p + pad - kernel) / stride, (p + pad) / stride], at most ceil(kernel / stride) of them, so
// the sum runs over that many candidates per dim and a guard drops those outside the window or
// the output, as conv_grad_data's guard drops taps (loop/lowering/contraction.cc). A window's
// first maximum is two reductions over its taps, as argmax: the maximum m, then the first tap
// (row-major) that equals m or is NaN. As a definition the argmax is recomputed for every
// candidate window of every dx element (4 * 18 taps per element for ResNet's 3x3 stride-2
// pool), so lower_group (loop/lower_group.h) stores max_pool_grad as the interpreter computes
// it instead (its store nest): dx zeroed, then each window's argmax (max_pool_window_argmax)
// found once and its dy added at that tap's position (max_pool_tap_position).

#include <functional>
#include <limits>

#include "loop/lowering/lowering_family.h"
#include "loop/lowering/pooling.h"

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
  win.pads_begin =
      pads.empty() ? std::vector<int64_t>(s, 0)
                   : std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<ptrdiff_t>(s));
  return win;
}

// The value of one tap of a window: its kernel index k (over the dims reduced), whether it is
// a real element (not padding) and the source's element there (its read clamped into range,
// so a padding tap reads some real element).
using TapFn =
    std::function<Expr(const std::vector<Expr>& k, const Expr& inside, const Expr& element)>;

// The op's input x at a full index [n, c, *spatial].
ElementAt element_of_x(const ComputeArgs& args) {
  return [&args](const std::vector<Expr>& index) { return args.input(0, index); };
}

// op over the taps, along the spatial dims marked in `reduced`, of the window at `at`
// ([n, c, *spatial]), of tap(...): a reduced dim reads position at * stride - pad + k (x's
// extent bounds it), any other dim reads `at` itself. `read` gives the element at an index.
Expr window_reduce(const ComputeArgs& args, ReduceOp op, const Window& win,
                   const std::vector<Expr>& at, const std::vector<bool>& reduced,
                   const ElementAt& read, const TapFn& tap) {
  const Shape& x = args.inputs[0].shape;
  std::vector<int64_t> extents;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    if (reduced[d]) extents.push_back(win.kernel[d]);
  }
  return reduce_nest(op, extents, args.names, [&](const std::vector<Expr>& k) {
    Expr inside = make_bool(true);
    std::vector<Expr> index = {at[0], at[1]};
    size_t tap_dim = 0;
    for (size_t d = 0; d < win.kernel.size(); ++d) {
      if (!reduced[d]) {
        index.push_back(at[d + 2]);
        continue;
      }
      const Expr pos = at[d + 2] * win.strides[d] - win.pads_begin[d] + k[tap_dim++];
      const int64_t extent = x.dim(static_cast<int>(d) + 2);
      inside = inside && pos >= 0 && pos < extent;
      index.push_back(clamp_index(pos, extent));
    }
    return tap(k, inside, read(index));
  });
}

// op over all the taps of the window of output element `out` ([n, c, *pooled]) of x.
Expr window_reduce(const ComputeArgs& args, ReduceOp op, const Window& win,
                   const std::vector<Expr>& out, const TapFn& tap) {
  return window_reduce(args, op, win, out, std::vector<bool>(win.kernel.size(), true),
                       element_of_x(args), tap);
}

// The maximum over the taps of the dims in `reduced`; padding taps are -inf, so they never
// win.
Expr window_max(const ComputeArgs& args, const Window& win, const std::vector<Expr>& at,
                const std::vector<bool>& reduced, const ElementAt& read) {
  const Expr lowest = make_float(-std::numeric_limits<double>::infinity(), args.inputs[0].dtype);
  return window_reduce(args, ReduceOp::max, win, at, reduced, read,
                       [&](const std::vector<Expr>&, const Expr& inside, const Expr& element) {
                         return select(inside, element, lowest);
                       });
}

// The maximum of the window of `out`.
Expr window_max(const ComputeArgs& args, const Window& win, const std::vector<Expr>& out) {
  return window_max(args, win, out, std::vector<bool>(win.kernel.size(), true),
                    element_of_x(args));
}

// The row-major number of kernel tap k.
Expr flat_tap(const Window& win, const std::vector<Expr>& k) {
  Expr flat = 0;
  for (size_t d = 0; d < k.size(); ++d) flat = flat * win.kernel[d] + k[d];
  return flat;
}

// The row-major number of the tap of the window at `at` that the interpreter's window_argmax
// picks, given the window's maximum m: the first real tap equal to m, or the first NaN (m is
// NaN exactly when some real tap is, and NaN equals nothing). Padding taps never count, even
// where m is -inf. Only the dims marked in `reduced`, a leading run of them, are the
// window's (max_pool_leading_argmax numbers the leading dims' taps alone). Every window holds
// a real tap (pads are smaller than the kernel), so the result is always below the volume of
// the reduced dims, the value of taps that do not match.
Expr window_first_argmax_of(const ComputeArgs& args, const Window& win,
                            const std::vector<Expr>& at, const std::vector<bool>& reduced,
                            const Expr& m) {
  int64_t volume = 1;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    if (reduced[d]) volume *= win.kernel[d];
  }
  return window_reduce(
      args, ReduceOp::min, win, at, reduced, element_of_x(args),
      [&](const std::vector<Expr>& k, const Expr& inside, const Expr& element) {
        return bind(args.names, element, [&](const Expr& v) {
          return select(inside && (v == m || v != v), flat_tap(win, k), Expr(volume));
        });
      });
}

// The same, computing m.
Expr window_first_argmax(const ComputeArgs& args, const Window& win,
                         const std::vector<Expr>& out) {
  return bind(args.names, window_max(args, win, out), [&](const Expr& m) {
    return window_first_argmax_of(args, win, out, std::vector<bool>(win.kernel.size(), true), m);
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
  return window_max(args, window_of(args.attrs), args.index);
}

Expected<Expr> lower_avg_pool(const ComputeArgs& args) {
  const DType dtype = args.outputs[0].dtype;
  const Window win = window_of(args.attrs);
  std::vector<Expr> starts;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    starts.push_back(args.index[d + 2] * win.strides[d] - win.pads_begin[d]);
  }
  const Expr zero = make_zero(dtype);
  const Expr total = window_reduce(
      args, ReduceOp::sum, win, args.index,
      [&](const std::vector<Expr>&, const Expr& inside, const Expr& element) {
        return select(inside, element, zero);
      });
  return total / window_count(args.attrs, win, args.inputs[0].shape, starts, dtype);
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

// The dx element at args.index, the gather form, given each window's argmax by `argmax_of`.
Expr max_pool_grad_gather(const ComputeArgs& args,
                          const std::function<Expr(const std::vector<Expr>&)>& argmax_of) {
  const Shape& grad_out = args.inputs[1].shape;
  const Window win = window_of(args.attrs);
  const Expr zero = make_zero(args.outputs[0].dtype);
  std::vector<int64_t> candidates;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    candidates.push_back((win.kernel[d] + win.strides[d] - 1) / win.strides[d]);
  }
  return reduce_nest(ReduceOp::sum, candidates, args.names, [&](const std::vector<Expr>& j) {
    Expr contains = make_bool(true);
    std::vector<Expr> window = {args.index[0], args.index[1]};
    std::vector<Expr> tap;
    for (size_t d = 0; d < j.size(); ++d) {
      const Expr shifted = args.index[d + 2] + win.pads_begin[d];
      const Expr q = shifted / win.strides[d] - (candidates[d] - 1) + j[d];
      // q * stride <= shifted, so the tap is never negative.
      const Expr t = shifted - q * win.strides[d];
      const int64_t extent = grad_out.dim(static_cast<int>(d) + 2);
      contains = contains && t < win.kernel[d] && q >= 0 && q < extent;
      window.push_back(clamp_index(q, extent));
      tap.push_back(t);
    }
    return select(contains && argmax_of(window) == flat_tap(win, tap), args.input(1, window),
                  zero);
  });
}

// dx[n, c, p...] = sum over the windows q containing p of
// select(argmax(window q) == p's tap in window q, dy[n, c, q...], 0). Along each dim the
// candidates are q = (p + pad) / stride - (candidates - 1) + j for j in [0, candidates): in
// increasing q, as the interpreter visits the windows, so 1-d f64 sums agree exactly.
Expected<Expr> lower_max_pool_grad(const ComputeArgs& args) {
  const Window win = window_of(args.attrs);
  return max_pool_grad_gather(args, [&](const std::vector<Expr>& window) {
    return window_first_argmax(args, win, window);
  });
}

bool separable(const Node& max_pool) { return max_pool_is_separable(max_pool.attrs()); }

}  // namespace

bool max_pool_is_separable(const Attrs& attrs) {
  const std::vector<int64_t>& kernel = attrs.get_ints("kernel");
  if (kernel.size() < 2 || kernel.back() < 2) return false;
  int64_t leading = 1;
  for (size_t d = 0; d + 1 < kernel.size(); ++d) leading *= kernel[d];
  return leading > 1;
}

Expr max_pool_leading_max(const ComputeArgs& args, const std::vector<Expr>& partial) {
  const Window win = window_of(args.attrs);
  std::vector<bool> reduced(win.kernel.size(), true);
  reduced.back() = false;
  return window_max(args, win, partial, reduced, element_of_x(args));
}

Expr max_pool_last_max(const ComputeArgs& args, const ElementAt& partial_of) {
  const Window win = window_of(args.attrs);
  std::vector<bool> reduced(win.kernel.size(), false);
  reduced.back() = true;
  return window_max(args, win, args.index, reduced, partial_of);
}

Expr max_pool_window_argmax(const ComputeArgs& args, const std::vector<Expr>& window) {
  return window_first_argmax(args, window_of(args.attrs), window);
}

// The first tap of x's leading dims at `partial` that equals the leading maximum m there or is
// NaN, numbered row-major over the leading dims' kernel; their volume when none does.
Expr max_pool_leading_argmax(const ComputeArgs& args, const std::vector<Expr>& partial,
                             const Expr& m) {
  const Window win = window_of(args.attrs);
  std::vector<bool> reduced(win.kernel.size(), true);
  reduced.back() = false;
  return window_first_argmax_of(args, win, partial, reduced, m);
}

// The window's first maximum from the two steps' rows: the window maximum m is some column's
// leading maximum, and the row-major first tap equal to m (or the first NaN) lies in a column
// whose leading maximum equals m (or is NaN), at that column's leading argmax; so it is the
// least leading argmax * K + k over such columns k of the last dim's K taps.
Expr max_pool_last_argmax(const ComputeArgs& args, const Expr& m, const ElementAt& partial_max_of,
                          const ElementAt& partial_argmax_of) {
  const Window win = window_of(args.attrs);
  const size_t last = win.kernel.size() - 1;
  const int64_t width = args.inputs[0].shape.dims().back();
  int64_t volume = 1;
  for (int64_t k : win.kernel) volume *= k;
  const auto tap = [&](const std::vector<Expr>& k) {
    const Expr pos = args.index.back() * win.strides[last] - win.pads_begin[last] + k[0];
    std::vector<Expr> at(args.index.begin(), args.index.end() - 1);
    at.push_back(clamp_index(pos, width));
    return bind(args.names, partial_max_of(at), [&](const Expr& v) {
      return select(pos >= 0 && pos < width && (v == m || v != v),
                    partial_argmax_of(at) * win.kernel[last] + k[0], Expr(volume));
    });
  };
  return reduce_nest(ReduceOp::min, {win.kernel[last]}, args.names, tap);
}

std::vector<Expr> max_pool_tap_position(const ComputeArgs& args, const std::vector<Expr>& window,
                                        const Expr& tap) {
  const Shape& x = args.outputs[0].shape;
  const Window win = window_of(args.attrs);
  std::vector<Expr> position = {window[0], window[1]};
  int64_t inner = 1;  // taps per step of dim d: the volume of the dims after it
  for (int64_t k : win.kernel) inner *= k;
  for (size_t d = 0; d < win.kernel.size(); ++d) {
    inner /= win.kernel[d];
    const Expr k = tap / inner % win.kernel[d];
    const Expr p = window[d + 2] * win.strides[d] - win.pads_begin[d] + k;
    position.push_back(clamp_index(p, x.dim(static_cast<int>(d) + 2)));
  }
  return position;
}

void register_pooling_lowerings(LoweringTable& table) {
  table.define(Op::max_pool, &lower_max_pool);
  table.define(Op::avg_pool, &lower_avg_pool);
  table.define(Op::max_pool_grad, &lower_max_pool_grad);
  table.define(Op::avg_pool_grad, &lower_avg_pool_grad);
  table.store_with(Op::max_pool, {.applies = &separable, .build = &max_pool_nest});
  table.store_with(Op::max_pool_grad, {.build = &max_pool_grad_nest});
}

}  // namespace kiln::loop::lowering
