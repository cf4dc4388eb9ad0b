#include "loop/lower_conv.h"

#include <algorithm>
#include <functional>

#include "loop/lowering/lowering_family.h"
#include "loop/tuning.h"

namespace kiln::loop {
namespace {

// The sizes of one convolution in the header's names, whichever of the three ops it is.
struct ConvShape {
  Shape x, w, y;  // conv's input [N, C, D...], weight [O, Cg, taps...], output [N, O, Y...]
  lowering::ConvParams params;
  int spatial = 0;
  int64_t cg = 0, og = 0;  // channels per group, in and out
  int64_t taps = 0;        // K: kernel elements per channel
  int64_t positions = 0;   // Y: output positions per channel
  int64_t inputs = 0;      // D: input positions per channel
  bool pointwise = false;  // x is already the column matrix

  int64_t col_rows() const { return cg * taps; }
  std::vector<int64_t> x_spatial() const { return {x.dims().begin() + 2, x.dims().end()}; }
  std::vector<int64_t> w_spatial() const { return {w.dims().begin() + 2, w.dims().end()}; }
  std::vector<int64_t> y_spatial() const { return {y.dims().begin() + 2, y.dims().end()}; }
};

int64_t product(const std::vector<int64_t>& dims) {
  int64_t result = 1;
  for (int64_t d : dims) result *= d;
  return result;
}

ConvShape conv_shape(const Node& node) {
  ConvShape s;
  const Shape& in0 = node.input(0)->shape();
  const Shape& in1 = node.input(1)->shape();
  const Shape& out = node.output(0)->shape();
  switch (node.op()) {
    case Op::conv: s.x = in0, s.w = in1, s.y = out; break;
    case Op::conv_grad_data: s.y = in0, s.w = in1, s.x = out; break;
    default: s.x = in0, s.y = in1, s.w = out; break;  // conv_grad_weight
  }
  s.spatial = s.x.rank() - 2;
  s.params = lowering::conv_params(node.attrs(), s.spatial);
  s.cg = s.w.dim(1);
  s.og = s.w.dim(0) / s.params.groups;
  s.taps = product(s.w_spatial());
  s.positions = product(s.y_spatial());
  s.inputs = product(s.x_spatial());
  s.pointwise = s.taps == 1 && s.x_spatial() == s.y_spatial();
  for (int d = 0; d < s.spatial; ++d) {
    const auto i = static_cast<size_t>(d);
    s.pointwise = s.pointwise && s.params.strides[i] == 1 && s.params.pads_begin[i] == 0;
  }
  return s;
}

// Row-major offset of `index` in `dims`.
Expr flat(std::span<const Expr> index, const std::vector<int64_t>& dims) {
  Expr offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset = offset * dims[d] + index[d];
  return offset;
}

// A loop nest over `extents` (outermost first) around body(index).
Stmt loop_nest(NameGenerator& names, const std::vector<int64_t>& extents,
               const std::function<Stmt(const std::vector<Expr>&)>& body) {
  std::vector<std::string> vars;
  std::vector<Expr> index;
  for (size_t d = 0; d < extents.size(); ++d) {
    vars.push_back(names.fresh("i"));
    index.push_back(var(vars.back()));
  }
  Stmt nest = body(index);
  for (size_t d = extents.size(); d-- > 0;) nest = for_loop(vars[d], 0, extents[d], nest);
  return nest;
}

// Whether `s` runs as one gemm over all its images: below kBatchColumnsBelow output
// positions per image (loop/tuning.h), a gemm per image has too few columns to run at the
// library's rate (ResNet-50's last stage has 7 x 7 = 49), so the images' columns are laid
// side by side, as long as the batch's column buffer stays within kMaxBatchColumnBytes.
bool batches_columns(const ConvShape& s, DType dtype) {
  const int64_t images = s.x.dim(0);
  return images > 1 && s.params.groups == 1 && s.positions < kBatchColumnsBelow &&
         s.col_rows() * images * s.positions * dtype_size_bytes(dtype) <= kMaxBatchColumnBytes;
}

// Whether a conv runs one gemm per tap over its padded input (the header's third form): 1-D,
// stride 1, more than one tap, enough channels per group for each tap's gemm to run well, not
// batched (one gemm per image and group), and of a dtype that accumulates in itself: the taps'
// gemms add into y, which would round a bf16 or f16 sum once per tap.
bool gemms_per_tap(const Node& node, const ConvShape& s, bool batched) {
  const DType dtype = node.output(0)->dtype();
  return node.op() == Op::conv && !batched && s.spatial == 1 && s.taps > 1 &&
         s.params.strides[0] == 1 && s.cg >= kTapGemmsFromChannels &&
         accumulation_dtype(dtype) == dtype;
}

class ConvLowerer {
 public:
  ConvLowerer(const Node& node, NameGenerator& names, const ConvEpilogue& epilogue)
      : node_(node),
        s_(conv_shape(node)),
        names_(names),
        batched_(batches_columns(s_, node.output(0)->dtype())),
        per_tap_(gemms_per_tap(node, s_, batched_)),
        epilogue_(epilogue) {}

  Stmt lower(const Buffer& in0, const Buffer& in1, const Buffer& out) {
    const DType dtype = node_.output(0)->dtype();
    if (per_tap_) {
      col_ = Buffer::local(names_.fresh("xpad"), dtype, s_.cg * padded_length());
      const Buffer wt = Buffer::local(names_.fresh("wt"), dtype, s_.w.num_elements());
      return allocate(wt, block({weights_by_tap(in1, wt), conv_by_taps(in0, wt, out)}));
    }
    // A data gradient's columns are its gemm's sums, which col2im adds up further: in bf16
    // and f16 they stay f32 (the header).
    const DType col_dtype =
        node_.op() == Op::conv_grad_data ? accumulation_dtype(dtype) : dtype;
    col_ = Buffer::local(names_.fresh("col"), col_dtype,
                         std::max<int64_t>(s_.col_rows() * col_length(), 1));
    if (batched_) {
      // The batch's output (conv) or output gradient (the other two) as [Og, N*Y].
      rows_ = Buffer::local(names_.fresh("rows"), dtype,
                            std::max<int64_t>(s_.og * col_length(), 1));
    }
    Stmt body;
    switch (node_.op()) {
      case Op::conv:
        body = batched_ ? batched_conv(in0, in1, out) : conv(in0, in1, out);
        break;
      case Op::conv_grad_data:
        body = batched_ ? batched_grad_data(in0, in1, out) : grad_data(in0, in1, out);
        break;
      default:
        body = batched_ ? batched_grad_weight(in0, in1, out) : grad_weight(in0, in1, out);
        break;
    }
    return batched_ ? allocate(col_, allocate(rows_, body)) : body;
  }

 private:
  // for (n) for (g) body(n, g), with the column buffer allocated in each (n, g): it holds
  // that image and group's columns alone, so a GPU may give every (n, g) a slice of its own
  // and run them together (loop/distribute_host_loops.h). On a CPU, loop/scratch.h hoists a
  // column buffer over kMaxKernelLocalBytes out of the serial loops, one buffer for every
  // (n, g) as before; a smaller one is a stack array in each (n, g).
  Stmt per_image_and_group(const std::function<Stmt(const Expr&, const Expr&)>& body) {
    return loop_nest(names_, {s_.x.dim(0), s_.params.groups}, [&](const std::vector<Expr>& i) {
      return s_.pointwise ? body(i[0], i[1]) : allocate(col_, body(i[0], i[1]));
    });
  }

  // Offsets of (n, g)'s channel block in x [N, C, D...] and y [N, O, Y...], and of g's
  // weights in w [O, Cg, taps...].
  Expr x_block(const Expr& n, const Expr& g) const {
    return (n * s_.x.dim(1) + g * s_.cg) * s_.inputs;
  }
  Expr y_block(const Expr& n, const Expr& g) const {
    return (n * s_.y.dim(1) + g * s_.og) * s_.positions;
  }
  Expr w_block(const Expr& g) const { return g * s_.og * s_.col_rows(); }

  // `body`, which completes image n, group g of the output, then the epilogue on that block.
  Stmt then_epilogue(Stmt body, const Expr& n, const Expr& g) const {
    if (!epilogue_) return body;
    return block({std::move(body), epilogue_(n, g)});
  }

  static int64_t ld(int64_t columns) { return std::max<int64_t>(columns, 1); }

  // The length of col's rows: Y for one image at a time, N*Y when the batch's columns lie side
  // by side; and the column of image n's output position 0.
  int64_t col_length() const { return batched_ ? s_.x.dim(0) * s_.positions : s_.positions; }
  Expr col_offset(const Expr& n) const { return batched_ ? n * s_.positions : Expr(0); }

  // The column matrix of (n, g): col itself, or x's channel block when pointwise.
  MatrixRegion columns(const Buffer& x, const Expr& n, const Expr& g) const {
    if (s_.pointwise) return {x, x_block(n, g), ld(s_.inputs)};
    return {col_, 0, ld(s_.positions)};
  }

  // col[(c, tap...), (y...)] = x at the tap's position, or 0 in the padding. One nest per tap
  // of the last spatial dim (kx), so that the output positions whose tap lies inside x form a
  // constant range [lo, hi): that row segment loads x without clamping (contiguously at stride
  // 1, so it vectorizes) and the ends are zero. As one loop over all taps that clamps every
  // position, the copy stayed scalar: about half of ResNet-50's 3x3 convolutions' time. The
  // nests grow with the kernel's last dim (3 and 7 in ResNet, up to 8 in XML-CNN).
  //
  //   for (c, k[0..s-2]) { for each kx: for (y[0..s-2]) {
  //       for (ox, 0, lo) col[...] = 0
  //       for (ox, lo, hi - lo) col[...] = select(leading taps inside,
  //                                                x[..., ox*stride - pad + kx*dilation], 0)
  //       for (ox, hi, OX - hi) col[...] = 0 } }
  //
  // Image n's columns start at col_offset(n) in rows of col_length() (when the batch's columns
  // lie side by side, even a pointwise convolution copies x, into that layout).
  Stmt im2col(const Buffer& x, const Expr& n, const Expr& g) {
    if (s_.pointwise && !batched_) return no_op();
    const auto spatial = static_cast<size_t>(s_.spatial);
    const size_t last = spatial - 1;
    const std::vector<int64_t> taps = s_.w_spatial(), outs = s_.y_spatial();
    std::vector<int64_t> outer = {s_.cg};
    outer.insert(outer.end(), taps.begin(), taps.end() - 1);
    const std::vector<int64_t> rows(outs.begin(), outs.end() - 1);
    return loop_nest(names_, outer, [&](const std::vector<Expr>& ck) {
      std::vector<Stmt> per_tap;
      for (int64_t kx = 0; kx < taps.back(); ++kx) {
        per_tap.push_back(loop_nest(names_, rows, [&](const std::vector<Expr>& row) {
          // col's index and x's position, all but the last output position.
          std::vector<Expr> col_index(ck.begin(), ck.end());
          col_index.push_back(kx);
          col_index.insert(col_index.end(), row.begin(), row.end());
          Expr inside = make_bool(true);
          std::vector<Expr> position;
          for (size_t d = 0; d < last; ++d) {
            const Expr p = lowering::tap_position(s_.params, d, row[d], ck[1 + d]);
            const int64_t extent = s_.x.dim(static_cast<int>(d) + 2);
            inside = inside && p >= 0 && p < extent;
            position.push_back(lowering::clamp_index(p, extent));
          }
          const auto [lo, hi] = inside_range(last, kx);
          std::vector<int64_t> row_dims = {s_.cg};
          row_dims.insert(row_dims.end(), taps.begin(), taps.end());
          const size_t split = row_dims.size();
          const Expr zero = make_zero(x.dtype());
          // col[..., ox] for ox in [begin, end): x's element there, or zero.
          const auto segment = [&](int64_t begin, int64_t end, bool reads_x) {
            const std::string ox = names_.fresh("i");
            std::vector<Expr> col_at = col_index;
            col_at.push_back(var(ox));
            std::vector<Expr> x_at = position;
            x_at.push_back(lowering::tap_position(s_.params, last, var(ox), kx));
            const Expr value =
                load(x, x_block(n, g) + ck[0] * s_.inputs + flat(x_at, s_.x_spatial()));
            const std::span<const Expr> at_row = std::span(col_at).first(split);
            const std::span<const Expr> at_position = std::span(col_at).subspan(split);
            const Expr at = flat(at_row, row_dims) * col_length() + col_offset(n) +
                            flat(at_position, outs);
            return for_loop(ox, begin, end - begin,
                            store(col_, at, reads_x ? select(inside, value, zero) : zero));
          };
          std::vector<Stmt> parts;
          if (lo > 0) parts.push_back(segment(0, lo, false));
          if (hi > lo) parts.push_back(segment(lo, hi, true));
          if (outs.back() > hi) parts.push_back(segment(hi, outs.back(), false));
          return block(std::move(parts));
        }));
      }
      return block(std::move(per_tap));
    });
  }

  // The output positions [lo, hi) along spatial dim d whose tap `tap` lies inside x:
  // 0 <= q * stride - pad + tap * dilation < X. Empty (lo >= hi) when the tap sees only padding.
  std::pair<int64_t, int64_t> inside_range(size_t d, int64_t tap) const {
    const int64_t stride = s_.params.strides[d];
    const int64_t shift = tap * s_.params.dilations[d] - s_.params.pads_begin[d];
    const int64_t extent = s_.x.dim(static_cast<int>(d) + 2);
    const int64_t outputs = s_.y.dim(static_cast<int>(d) + 2);
    // The first q with q * stride + shift >= 0, and one past the last with q * stride + shift
    // <= extent - 1 (quotients of possibly negative numerators, rounded down).
    const auto floor_div = [](int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); };
    const int64_t lo = std::max<int64_t>(0, -floor_div(shift, stride));
    const int64_t hi = std::min<int64_t>(outputs, floor_div(extent - 1 - shift, stride) + 1);
    return {std::min(lo, outputs), std::max(hi, std::min(lo, outputs))};
  }

  // dx[n, g*Cg + c, x...] = the sum, over the taps in row-major order, of col[(c, tap), q] at
  // the output position q where that tap lands on x (x = q * stride - pad + tap * dilation per
  // spatial dim), as a scatter: dx's channel plane is zeroed, then each tap adds its row of
  // col where it lands. Along each dim the positions q whose tap lies inside x form a
  // constant range (inside_range, as in im2col), so a tap's nest has no guard and, at stride
  // 1, its last loop reads col and writes dx contiguously and vectorizes; the terms of each dx
  // element are added in the gather's order. As a gather (each dx element summing its taps
  // with a guard and a clamped load per tap) it stayed scalar, and the data gradient of
  // XML-CNN's width-8 convolution ran slower (docs/benchmarks.md).
  //
  //   for (c) { for (x...) dx[..., c, x] = 0
  //             for each tap t: for (q in the ranges of t) dx[..., c, q*s - p + t*d] += col[(c, t), q] }
  //
  // In bf16 and f16 the taps add into an f32 plane, which is then rounded into dx's.
  //
  // Image n's columns as for im2col.
  Stmt col2im(const Buffer& dx, const Expr& n, const Expr& g) {
    const std::vector<int64_t> taps = s_.w_spatial(), outs = s_.y_spatial(), xs = s_.x_spatial();
    const size_t spatial = taps.size();
    const DType wide = accumulation_dtype(dx.dtype());
    return loop_nest(names_, {s_.cg}, [&](const std::vector<Expr>& c) {
      const Expr dx_plane = x_block(n, g) + c[0] * s_.inputs;
      // The plane the taps add into: dx's own, or one of f32 for bf16 and f16.
      const bool widened = wide != dx.dtype();
      const Buffer sum = widened ? Buffer::local(names_.fresh("sum"), wide, s_.inputs) : dx;
      const Expr plane = widened ? Expr(0) : dx_plane;
      std::vector<Stmt> parts = {loop_nest(names_, xs, [&](const std::vector<Expr>& x) {
        return store(sum, plane + flat(x, xs), make_zero(wide));
      })};
      std::vector<int64_t> tap(spatial, 0);
      for (int64_t t = 0; t < s_.taps; ++t) {
        for (int64_t rest = t, d = static_cast<int64_t>(spatial) - 1; d >= 0; --d) {
          tap[static_cast<size_t>(d)] = rest % taps[static_cast<size_t>(d)];
          rest /= taps[static_cast<size_t>(d)];
        }
        std::vector<std::pair<int64_t, int64_t>> ranges;
        bool empty = false;
        for (size_t d = 0; d < spatial; ++d) {
          ranges.push_back(inside_range(d, tap[d]));
          empty = empty || ranges.back().first >= ranges.back().second;
        }
        if (empty) continue;
        std::vector<std::string> vars;
        std::vector<Expr> q, position;
        for (size_t d = 0; d < spatial; ++d) {
          vars.push_back(names_.fresh("i"));
          q.push_back(var(vars.back()));
          position.push_back(lowering::tap_position(s_.params, d, q.back(), tap[d]));
        }
        const Expr at = plane + flat(position, xs);
        const Expr row = c[0] * s_.taps + t;
        const Expr term = load(col_, row * col_length() + col_offset(n) + flat(q, outs));
        Stmt add = store(sum, at, load(sum, at) + lowering::narrow_to(wide, term));
        for (size_t d = spatial; d-- > 0;) {
          add = for_loop(vars[d], ranges[d].first, ranges[d].second - ranges[d].first, add);
        }
        parts.push_back(add);
      }
      if (!widened) return block(std::move(parts));
      parts.push_back(loop_nest(names_, {s_.inputs}, [&](const std::vector<Expr>& i) {
        return store(dx, dx_plane + i[0], lowering::narrow_to(dx.dtype(), load(sum, i[0])));
      }));
      return allocate(sum, block(std::move(parts)));
    });
  }

  // The padded input's length per channel when gemms_per_tap: what the last tap reads.
  int64_t padded_length() const {
    return s_.positions + (s_.taps - 1) * s_.params.dilations[0];
  }

  // wt[tap, o, c] = w[o, c, tap].
  Stmt weights_by_tap(const Buffer& w, const Buffer& wt) {
    const int64_t channels = s_.w.dim(0);
    return loop_nest(names_, {s_.taps, channels, s_.cg}, [&](const std::vector<Expr>& i) {
      return store(wt, (i[0] * channels + i[1]) * s_.cg + i[2],
                   load(w, (i[1] * s_.cg + i[2]) * s_.taps + i[0]));
    });
  }

  // xpad[c, p] = x[n, g*Cg + c, p - pad], zero outside x: three loops per channel (the
  // leading padding, x's row, the trailing padding), so that the middle one is a plain copy.
  Stmt pad_input(const Buffer& x, const Expr& n, const Expr& g) {
    const int64_t length = padded_length(), pad = s_.params.pads_begin[0];
    const int64_t lo = std::min(pad, length), hi = std::min(pad + s_.inputs, length);
    return loop_nest(names_, {s_.cg}, [&](const std::vector<Expr>& c) {
      const Expr row = c[0] * length;
      const auto segment = [&](int64_t begin, int64_t end, bool reads_x) {
        const std::string p = names_.fresh("i");
        const Expr value = reads_x ? load(x, x_block(n, g) + c[0] * s_.inputs + var(p) - pad)
                                   : make_zero(x.dtype());
        return for_loop(p, begin, end - begin, store(col_, row + var(p), value));
      };
      std::vector<Stmt> parts;
      if (lo > 0) parts.push_back(segment(0, lo, false));
      if (hi > lo) parts.push_back(segment(lo, hi, true));
      if (length > hi) parts.push_back(segment(hi, length, false));
      return block(std::move(parts));
    });
  }

  // y[n, g] = the sum over taps of wt[tap]'s group-g rows x xpad shifted by the tap.
  Stmt conv_by_taps(const Buffer& x, const Buffer& wt, const Buffer& y) {
    const int64_t channels = s_.w.dim(0);
    return per_image_and_group([&](const Expr& n, const Expr& g) {
      std::vector<Stmt> parts = {pad_input(x, n, g)};
      for (int64_t tap = 0; tap < s_.taps; ++tap) {
        parts.push_back(gemm({.a = {wt, (tap * channels + g * s_.og) * s_.cg, ld(s_.cg)},
                              .b = {col_, tap * s_.params.dilations[0], ld(padded_length())},
                              .c = {y, y_block(n, g), ld(s_.positions)},
                              .m = s_.og,
                              .n = s_.positions,
                              .k = s_.cg,
                              .accumulate = tap > 0}));
      }
      return then_epilogue(block(std::move(parts)), n, g);
    });
  }

  Stmt conv(const Buffer& x, const Buffer& w, const Buffer& y) {
    return per_image_and_group([&](const Expr& n, const Expr& g) {
      return then_epilogue(block({im2col(x, n, g),
                                  gemm({.a = {w, w_block(g), ld(s_.col_rows())},
                                        .b = columns(x, n, g),
                                        .c = {y, y_block(n, g), ld(s_.positions)},
                                        .m = s_.og,
                                        .n = s_.positions,
                                        .k = s_.col_rows()})}),
                           n, g);
    });
  }

  Stmt grad_data(const Buffer& dy, const Buffer& w, const Buffer& dx) {
    return per_image_and_group([&](const Expr& n, const Expr& g) {
      const MatrixRegion target = s_.pointwise
                                      ? MatrixRegion{dx, x_block(n, g), ld(s_.inputs)}
                                      : MatrixRegion{col_, 0, ld(s_.positions)};
      const Stmt product = gemm({.a = {w, w_block(g), ld(s_.col_rows())},
                                 .b = {dy, y_block(n, g), ld(s_.positions)},
                                 .c = target,
                                 .transpose_a = true,
                                 .m = s_.col_rows(),
                                 .n = s_.positions,
                                 .k = s_.og});
      return then_epilogue(s_.pointwise ? product : block({product, col2im(dx, n, g)}), n, g);
    });
  }

  // dw is zeroed, then every (n, g) adds its product. A bf16 or f16 dw would round its sum
  // once per image that way, so the products add into an f32 copy of dw instead (gemms of a
  // 16-bit A and B into an f32 C), which is rounded into dw at the end.
  Stmt grad_weight(const Buffer& x, const Buffer& dy, const Buffer& dw) {
    const DType wide = accumulation_dtype(dw.dtype());
    const int64_t elements = s_.w.num_elements();
    const Buffer sum = wide == dw.dtype() ? dw : Buffer::local(names_.fresh("sum"), wide, elements);
    const Stmt zero = loop_nest(names_, {elements}, [&](const std::vector<Expr>& i) {
      return store(sum, i[0], make_zero(wide));
    });
    const Stmt products = per_image_and_group([&](const Expr& n, const Expr& g) {
      return block({im2col(x, n, g), gemm({.a = {dy, y_block(n, g), ld(s_.positions)},
                                           .b = columns(x, n, g),
                                           .c = {sum, w_block(g), ld(s_.col_rows())},
                                           .transpose_b = true,
                                           .m = s_.og,
                                           .n = s_.col_rows(),
                                           .k = s_.positions,
                                           .accumulate = true})});
    });
    if (wide == dw.dtype()) return block({zero, products});
    const Stmt round = loop_nest(names_, {elements}, [&](const std::vector<Expr>& i) {
      return store(dw, i[0], lowering::narrow_to(dw.dtype(), load(sum, i[0])));
    });
    return allocate(sum, block({zero, products, round}));
  }

  // One gemm over the batch (groups == 1), with the images' columns side by side:
  //
  //   col  [K, N*Y]   im2col of every image, image n in columns [n*Y, (n+1)*Y)
  //   rows [Og, N*Y]  the output (conv) or the output gradient (the gradients), image n in
  //                   the same columns
  //   conv:              rows = w x col, then y[n, o, p] = rows[o, n*Y + p] (image by image,
  //                      each followed by the epilogue)
  //   conv_grad_weight:  rows[o, n*Y + p] = dy[n, o, p], then dw = rows x col^T (one gemm: no
  //                      accumulation over images)
  //   conv_grad_data:    rows as above, col = w^T x rows, then col2im of each image (a
  //                      pointwise convolution copies col back instead)
  Stmt batched_conv(const Buffer& x, const Buffer& w, const Buffer& y) {
    return block({each_image([&](const Expr& n) { return im2col(x, n, 0); }),
                  gemm({.a = {w, 0, ld(s_.col_rows())},
                        .b = {col_, 0, ld(col_length())},
                        .c = {rows_, 0, ld(col_length())},
                        .m = s_.og,
                        .n = col_length(),
                        .k = s_.col_rows()}),
                  each_image([&](const Expr& n) {
                    return then_epilogue(copy_image(y, rows_, s_.og, /*into_matrix=*/false, n),
                                         n, 0);
                  })});
  }

  Stmt batched_grad_weight(const Buffer& x, const Buffer& dy, const Buffer& dw) {
    return block({copy_batch(dy, rows_, s_.og, /*into_matrix=*/true),
                  each_image([&](const Expr& n) { return im2col(x, n, 0); }),
                  gemm({.a = {rows_, 0, ld(col_length())},
                        .b = {col_, 0, ld(col_length())},
                        .c = {dw, 0, ld(s_.col_rows())},
                        .transpose_b = true,
                        .m = s_.og,
                        .n = s_.col_rows(),
                        .k = col_length()})});
  }

  Stmt batched_grad_data(const Buffer& dy, const Buffer& w, const Buffer& dx) {
    // A pointwise convolution's columns are dx itself, laid out [C, N*Y].
    const Stmt back = each_image([&](const Expr& n) {
      return then_epilogue(s_.pointwise ? copy_image(dx, col_, s_.cg, /*into_matrix=*/false, n)
                                        : col2im(dx, n, 0),
                           n, 0);
    });
    return block({copy_batch(dy, rows_, s_.og, /*into_matrix=*/true),
                  gemm({.a = {w, 0, ld(s_.col_rows())},
                        .b = {rows_, 0, ld(col_length())},
                        .c = {col_, 0, ld(col_length())},
                        .transpose_a = true,
                        .m = s_.col_rows(),
                        .n = col_length(),
                        .k = s_.og}),
                  back});
  }

  Stmt each_image(const std::function<Stmt(const Expr&)>& body) {
    return loop_nest(names_, {s_.x.dim(0)}, [&](const std::vector<Expr>& i) { return body(i[0]); });
  }

  // matrix[c, n*Y + p] = t[n, c, p] (into_matrix) or the reverse, for t [N, channels, Y] and a
  // matrix of `channels` rows of col_length(): every image, or image n.
  Stmt copy_batch(const Buffer& t, const Buffer& matrix, int64_t channels, bool into_matrix) {
    return each_image(
        [&](const Expr& n) { return copy_image(t, matrix, channels, into_matrix, n); });
  }
  Stmt copy_image(const Buffer& t, const Buffer& matrix, int64_t channels, bool into_matrix,
                  const Expr& n) {
    return loop_nest(names_, {channels, s_.positions}, [&](const std::vector<Expr>& i) {
      const Expr in_t = (n * channels + i[0]) * s_.positions + i[1];
      const Expr in_matrix = i[0] * col_length() + n * s_.positions + i[1];
      return into_matrix
                 ? store(matrix, in_matrix, lowering::narrow_to(matrix.dtype(), load(t, in_t)))
                 : store(t, in_t, lowering::narrow_to(t.dtype(), load(matrix, in_matrix)));
    });
  }

  const Node& node_;
  const ConvShape s_;
  NameGenerator& names_;
  const bool batched_;
  const bool per_tap_;
  const ConvEpilogue& epilogue_;
  Buffer col_;
  Buffer rows_;
};

}  // namespace

bool lowers_conv_to_gemm(const Node& node) {
  const Op op = node.op();
  const DType dtype = node.output(0)->dtype();
  return (op == Op::conv || op == Op::conv_grad_data || op == Op::conv_grad_weight) &&
         (dtype == DType::f32 || dtype == DType::f64 || is_low_precision(dtype));
}

Stmt conv_as_gemm(const Node& node, const Buffer& in0, const Buffer& in1, const Buffer& out,
                  NameGenerator& names, const ConvEpilogue& epilogue) {
  return ConvLowerer(node, names, epilogue).lower(in0, in1, out);
}

}  // namespace kiln::loop
