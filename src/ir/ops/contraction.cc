// Contraction ops: matmul, convolution with its two gradients, and sparse (CSR) x dense matmul.
// All accumulate in f64 and round once to the output dtype.
//
// Gradients are contractions again: matmul's are matmuls with transposed operands (summed over
// broadcast batch dims); conv's are conv_grad_data and conv_grad_weight, and since all three
// conv ops are bilinear adjoints of one another, each one's gradient is made of the others.
// spmm's gradient with respect to dense is spmm with the sparse matrix transposed.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

// ---------------------------------------------------------------------------------------------
// matmul

// The last two dims of a matmul operand, after its optional transpose.
struct MatrixDims {
  int64_t rows = 0;
  int64_t cols = 0;
};

MatrixDims matrix_dims(const Shape& shape, bool transposed) {
  const int64_t r = shape.dim(shape.rank() - 2);
  const int64_t c = shape.dim(shape.rank() - 1);
  return transposed ? MatrixDims{c, r} : MatrixDims{r, c};
}

Shape batch_dims(const Shape& shape) {
  return Shape(std::vector<int64_t>(shape.dims().begin(), shape.dims().end() - 2));
}

Expected<std::vector<TensorType>> infer_matmul(std::span<const TensorType> in,
                                               const Attrs& attrs) {
  const TensorType& a = in[0];
  const TensorType& b = in[1];
  for (const auto& [type, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}}) {
    KILN_RETURN_IF_ERROR(require_min_rank(*type, name, 2));
    if (type->dtype == DType::boolean) {
      return Status::errorf("input '{}' must be numeric, got {}", name, type->to_string());
    }
  }
  KILN_RETURN_IF_ERROR(require_same_dtype(a, "a", b, "b"));
  const bool ta = attrs.get_bool("transpose_a");
  const bool tb = attrs.get_bool("transpose_b");
  const MatrixDims ma = matrix_dims(a.shape, ta);
  const MatrixDims mb = matrix_dims(b.shape, tb);
  if (ma.cols != mb.rows) {
    return Status::errorf(
        "contracted dims differ: 'a' {} (transpose_a={}) has k = {}, 'b' {} (transpose_b={}) "
        "has k = {}",
        a.to_string(), ta, ma.cols, b.to_string(), tb, mb.rows);
  }
  Expected<Shape> batch = broadcast_shapes(batch_dims(a.shape), batch_dims(b.shape));
  if (!batch) return batch.status().with_context("batch dims of 'a' and 'b'");
  std::vector<int64_t> dims = batch->dims();
  dims.push_back(ma.rows);
  dims.push_back(mb.cols);
  KILN_ASSIGN_OR_RETURN(Shape out, Shape::make(std::move(dims)));
  return std::vector<TensorType>{{a.dtype, std::move(out)}};
}

Cost matmul_cost(std::span<const TensorType> in, std::span<const TensorType> out,
                 const Attrs& attrs) {
  const int64_t k = matrix_dims(in[0].shape, attrs.get_bool("transpose_a")).cols;
  Cost cost;
  cost.flops = 2.0 * static_cast<double>(out[0].shape.num_elements()) * static_cast<double>(k);
  cost.bytes_read = in[0].size_bytes() + in[1].size_bytes();
  cost.bytes_written = out[0].size_bytes();
  return cost;
}

Expected<std::vector<Array>> eval_matmul(std::span<const Array> in, const Attrs& attrs,
                                         std::span<const TensorType> out) {
  const Array& a = in[0];
  const Array& b = in[1];
  const bool ta = attrs.get_bool("transpose_a");
  const bool tb = attrs.get_bool("transpose_b");
  const MatrixDims ma = matrix_dims(a.shape, ta);
  const MatrixDims mb = matrix_dims(b.shape, tb);
  const int64_t m = ma.rows;
  const int64_t k = ma.cols;
  const int64_t n = mb.cols;
  // Element (i, j) of an operand, through its transpose flag; `base` is its matrix's offset.
  auto a_at = [&](int64_t base, int64_t i, int64_t j) {
    return ta ? a[base + j * m + i] : a[base + i * k + j];
  };
  auto b_at = [&](int64_t base, int64_t i, int64_t j) {
    return tb ? b[base + j * k + i] : b[base + i * n + j];
  };
  const Shape a_batch = batch_dims(a.shape);
  const Shape b_batch = batch_dims(b.shape);
  Array result(out[0].dtype, out[0].shape);
  int64_t out_base = 0;
  for_each_index(batch_dims(out[0].shape), [&](std::span<const int64_t> index) {
    const int64_t a_base = broadcast_offset(a_batch, index) * m * k;
    const int64_t b_base = broadcast_offset(b_batch, index) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += a_at(a_base, i, p) * b_at(b_base, p, j);
        result[out_base + i * n + j] = sum;
      }
    }
    out_base += m * n;
  });
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---------------------------------------------------------------------------------------------
// conv, conv_grad_data, conv_grad_weight
//
// Layout as ONNX Conv: x [N, C, *spatial], w [O, C/groups, *kernel], y [N, O, *out_spatial],
// with 1 to 3 spatial dims. The three ops share one loop over the multiply-adds of conv, so
// each gradient is the exact adjoint of the forward op.

// Attribute values are bounded so that the shape arithmetic below cannot overflow int64; larger
// values could not describe a valid convolution of a shape of at most 2^48 elements anyway.
constexpr int64_t kMaxWindowParam = kMaxElements;

struct ConvParams {
  int spatial = 0;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads_begin;
  std::vector<int64_t> pads_end;
  std::vector<int64_t> dilations;
  int64_t groups = 1;
};

// Reads an ints attribute holding one value per spatial dim (`count` values), or empty for all
// `fill`; each value must lie in [lo, kMaxWindowParam].
Expected<std::vector<int64_t>> per_dim_attr(const Attrs& attrs, std::string_view name,
                                            size_t count, int64_t fill, int64_t lo) {
  std::vector<int64_t> values = attrs.get_ints(name);
  if (values.empty()) return std::vector<int64_t>(count, fill);
  if (values.size() != count) {
    return Status::errorf("attribute '{}' must be empty or have {} entries, got [{}]", name, count,
                          fmt::join(values, ","));
  }
  for (int64_t v : values) {
    if (v < lo || v > kMaxWindowParam) {
      return Status::errorf("attribute '{}' entries must be in [{}, 2^48], got [{}]", name, lo,
                            fmt::join(values, ","));
    }
  }
  return values;
}

Expected<ConvParams> conv_params(const Attrs& attrs, int spatial) {
  const size_t s = static_cast<size_t>(spatial);
  ConvParams p;
  p.spatial = spatial;
  KILN_ASSIGN_OR_RETURN(p.strides, per_dim_attr(attrs, "strides", s, 1, 1));
  KILN_ASSIGN_OR_RETURN(p.dilations, per_dim_attr(attrs, "dilations", s, 1, 1));
  // pads = [begin_0..begin_{s-1}, end_0..end_{s-1}] as ONNX.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_dim_attr(attrs, "pads", 2 * s, 0, 0));
  p.pads_begin.assign(pads.begin(), pads.begin() + spatial);
  p.pads_end.assign(pads.begin() + spatial, pads.end());
  p.groups = attrs.get_int("groups");
  if (p.groups < 1) return Status::errorf("attribute 'groups' must be >= 1, got {}", p.groups);
  return p;
}

// Checks x's rank (3 to 5) and returns its number of spatial dims.
Expected<int> spatial_rank(const Shape& x, std::string_view what) {
  if (x.rank() < 3 || x.rank() > 5) {
    return Status::errorf("{} must have rank 3, 4 or 5 ([N, C, 1 to 3 spatial dims]), got {}",
                          what, x.to_string());
  }
  return x.rank() - 2;
}

// The output shape of conv of x by w (both already of equal rank 3..5), or an error naming
// `x_name` and `w_name` (inputs, or a shape attribute of a gradient op).
Expected<Shape> conv_output_shape(const Shape& x, std::string_view x_name, const Shape& w,
                                  std::string_view w_name, const ConvParams& p) {
  if (w.rank() != x.rank()) {
    return Status::errorf("{} {} and {} {} must have the same rank", x_name, x.to_string(),
                          w_name, w.to_string());
  }
  const int64_t channels = x.dim(1);
  const int64_t out_channels = w.dim(0);
  if (channels % p.groups != 0 || out_channels % p.groups != 0) {
    return Status::errorf("groups = {} must divide the channels of {} {} and of {} {}", p.groups,
                          x_name, x.to_string(), w_name, w.to_string());
  }
  if (w.dim(1) != channels / p.groups) {
    return Status::errorf("{} {} must have C / groups = {} / {} input channels, got {}", w_name,
                          w.to_string(), channels, p.groups, w.dim(1));
  }
  std::vector<int64_t> dims = {x.dim(0), out_channels};
  for (int i = 0; i < p.spatial; ++i) {
    const int64_t extent = x.dim(i + 2);
    const int64_t kernel = w.dim(i + 2);
    if (kernel < 1) {
      return Status::errorf("{} {} has an empty kernel dim", w_name, w.to_string());
    }
    const size_t si = static_cast<size_t>(i);
    const int64_t padded = extent + p.pads_begin[si] + p.pads_end[si];
    const int64_t dilation = p.dilations[si];
    // Output extent = floor((padded - dilation * (kernel - 1) - 1) / stride) + 1, which must be
    // >= 1; the test is written so that dilation * (kernel - 1) cannot overflow.
    if (padded < 1 || kernel - 1 > (padded - 1) / dilation) {
      return Status::errorf(
          "spatial dim {}: padded extent {} (of {} {}) is smaller than the dilated kernel "
          "(kernel {}, dilation {}); the output would be empty",
          i, padded, x_name, x.to_string(), kernel, dilation);
    }
    dims.push_back((padded - 1 - dilation * (kernel - 1)) / p.strides[si] + 1);
  }
  return Shape::make(std::move(dims));
}

// Parses a shape attribute of a gradient op (input_shape, weight_shape).
Expected<Shape> shape_attr(const Attrs& attrs, std::string_view name) {
  Expected<Shape> shape = Shape::make(attrs.get_ints(name));
  if (!shape) return shape.status().with_context(fmt::format("attribute '{}'", name));
  return shape;
}

Status require_same_shape(const Shape& expected, const TensorType& actual,
                          std::string_view actual_name, std::string_view why) {
  if (actual.shape == expected) return Status::ok();
  return Status::errorf("input '{}' is {} but {} gives {}", actual_name, actual.to_string(), why,
                        expected.to_string());
}

Expected<std::vector<TensorType>> infer_conv(std::span<const TensorType> in, const Attrs& attrs) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  KILN_RETURN_IF_ERROR(require_floating(x, "x"));
  KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", w, "w"));
  KILN_ASSIGN_OR_RETURN(int spatial, spatial_rank(x.shape, "input 'x'"));
  KILN_ASSIGN_OR_RETURN(ConvParams p, conv_params(attrs, spatial));
  KILN_ASSIGN_OR_RETURN(Shape y, conv_output_shape(x.shape, "input 'x'", w.shape, "input 'w'", p));
  return std::vector<TensorType>{{x.dtype, std::move(y)}};
}

Expected<std::vector<TensorType>> infer_conv_grad_data(std::span<const TensorType> in,
                                                       const Attrs& attrs) {
  const TensorType& grad_out = in[0];
  const TensorType& w = in[1];
  KILN_RETURN_IF_ERROR(require_floating(grad_out, "grad_out"));
  KILN_RETURN_IF_ERROR(require_same_dtype(grad_out, "grad_out", w, "w"));
  KILN_ASSIGN_OR_RETURN(Shape x, shape_attr(attrs, "input_shape"));
  KILN_ASSIGN_OR_RETURN(int spatial, spatial_rank(x, "attribute 'input_shape'"));
  KILN_ASSIGN_OR_RETURN(ConvParams p, conv_params(attrs, spatial));
  KILN_ASSIGN_OR_RETURN(
      Shape y, conv_output_shape(x, "attribute 'input_shape'", w.shape, "input 'w'", p));
  KILN_RETURN_IF_ERROR(require_same_shape(y, grad_out, "grad_out", "conv of input_shape by w"));
  return std::vector<TensorType>{{grad_out.dtype, std::move(x)}};
}

Expected<std::vector<TensorType>> infer_conv_grad_weight(std::span<const TensorType> in,
                                                         const Attrs& attrs) {
  const TensorType& x = in[0];
  const TensorType& grad_out = in[1];
  KILN_RETURN_IF_ERROR(require_floating(x, "x"));
  KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", grad_out, "grad_out"));
  KILN_ASSIGN_OR_RETURN(int spatial, spatial_rank(x.shape, "input 'x'"));
  KILN_ASSIGN_OR_RETURN(ConvParams p, conv_params(attrs, spatial));
  KILN_ASSIGN_OR_RETURN(Shape w, shape_attr(attrs, "weight_shape"));
  KILN_ASSIGN_OR_RETURN(
      Shape y, conv_output_shape(x.shape, "input 'x'", w, "attribute 'weight_shape'", p));
  KILN_RETURN_IF_ERROR(require_same_shape(y, grad_out, "grad_out", "conv of x by weight_shape"));
  return std::vector<TensorType>{{x.dtype, std::move(w)}};
}

// Calls fn(x_offset, w_offset, y_offset) once for every multiply-add of conv(x, w) = y, that is
// for every pair of a non-padded input element and a weight element that meet in an output
// element. Cross-correlation (no kernel flip), as ONNX and PyTorch.
template <typename Fn>
void for_each_conv_term(const Shape& x, const Shape& w, const Shape& y, const ConvParams& p,
                        Fn&& fn) {
  const std::vector<int64_t> xs = x.strides();
  const std::vector<int64_t> ws = w.strides();
  const std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  const int64_t group_in = w.dim(1);
  const int64_t group_out = y.dim(1) / p.groups;
  int64_t y_offset = 0;
  for_each_index(y, [&](std::span<const int64_t> yi) {
    const int64_t oc = yi[1];
    const int64_t first_channel = oc / group_out * group_in;
    for (int64_t ic = 0; ic < group_in; ++ic) {
      const int64_t x_base = yi[0] * xs[0] + (first_channel + ic) * xs[1];
      const int64_t w_base = oc * ws[0] + ic * ws[1];
      for_each_index(Shape(kernel), [&](std::span<const int64_t> ki) {
        int64_t x_offset = x_base;
        int64_t w_offset = w_base;
        for (int i = 0; i < p.spatial; ++i) {
          const size_t si = static_cast<size_t>(i);
          const int64_t pos =
              yi[si + 2] * p.strides[si] - p.pads_begin[si] + ki[si] * p.dilations[si];
          if (pos < 0 || pos >= x.dim(i + 2)) return;
          x_offset += pos * xs[si + 2];
          w_offset += ki[si] * ws[si + 2];
        }
        fn(x_offset, w_offset, y_offset);
      });
    }
    ++y_offset;
  });
}

// Multiply-adds of conv(x, w) = y: one per (output element, weight element of its group).
Cost conv_cost(std::span<const TensorType> in, std::span<const TensorType> out,
               const Shape& w, const Shape& y) {
  double per_output = 1;
  for (int i = 1; i < w.rank(); ++i) per_output *= static_cast<double>(w.dim(i));
  Cost cost;
  cost.flops = 2.0 * static_cast<double>(y.num_elements()) * per_output;
  for (const TensorType& t : in) cost.bytes_read += t.size_bytes();
  for (const TensorType& t : out) cost.bytes_written += t.size_bytes();
  return cost;
}

// Reads the conv params for an eval; infer has validated them.
ConvParams eval_params(const Attrs& attrs, const Shape& x) {
  return *conv_params(attrs, x.rank() - 2);
}

Expected<std::vector<Array>> eval_conv(std::span<const Array> in, const Attrs& attrs,
                                       std::span<const TensorType> out) {
  const Array& x = in[0];
  const Array& w = in[1];
  Array y(out[0].dtype, out[0].shape);
  for_each_conv_term(x.shape, w.shape, y.shape, eval_params(attrs, x.shape),
                     [&](int64_t xo, int64_t wo, int64_t yo) { y[yo] += x[xo] * w[wo]; });
  y.round_to_dtype();
  return std::vector<Array>{std::move(y)};
}

Expected<std::vector<Array>> eval_conv_grad_data(std::span<const Array> in, const Attrs& attrs,
                                                 std::span<const TensorType> out) {
  const Array& grad_out = in[0];
  const Array& w = in[1];
  Array dx(out[0].dtype, out[0].shape);
  for_each_conv_term(dx.shape, w.shape, grad_out.shape, eval_params(attrs, dx.shape),
                     [&](int64_t xo, int64_t wo, int64_t yo) { dx[xo] += grad_out[yo] * w[wo]; });
  dx.round_to_dtype();
  return std::vector<Array>{std::move(dx)};
}

Expected<std::vector<Array>> eval_conv_grad_weight(std::span<const Array> in, const Attrs& attrs,
                                                   std::span<const TensorType> out) {
  const Array& x = in[0];
  const Array& grad_out = in[1];
  Array dw(out[0].dtype, out[0].shape);
  for_each_conv_term(x.shape, dw.shape, grad_out.shape, eval_params(attrs, x.shape),
                     [&](int64_t xo, int64_t wo, int64_t yo) { dw[wo] += x[xo] * grad_out[yo]; });
  dw.round_to_dtype();
  return std::vector<Array>{std::move(dw)};
}

// conv_channels_last: conv on images with their channels last, x [N, *spatial, C] and
// y [N, *out_spatial, O], the weights as conv's, plus an optional bias [O] per output channel,
// then relu when its attribute says so (the epilogue oneDNN fuses into its convolution). The
// CPU compiler's layout stage (passes/channels_last.h) makes it, and sets `winograd` where
// Winograd's minimal filtering computes a 3x3 kernel faster: the same sum with fewer
// multiplications (its transforms round differently, within f32's error of the direct sum).
// The attribute changes how the sum is computed, never its value, so evaluation ignores it.

// F(2x2, 3x3), the form oneDNN takes for most shapes, computes each 2x2 tile of outputs with
// 16 multiplications per channel pair instead of 36: the fraction of conv's flops it costs
// (its input and output transforms are additions, and the tiles share them across channels).
constexpr double kWinogradFlopsFraction = 16.0 / 36.0;

// The shape of `shape` with its dim 1 moved last ([N, C, D...] -> [N, D..., C]), or back.
Shape channels_moved(const Shape& shape, bool to_last) {
  std::vector<int64_t> dims = shape.dims();
  if (to_last) {
    std::rotate(dims.begin() + 1, dims.begin() + 2, dims.end());
  } else {
    std::rotate(dims.begin() + 1, dims.end() - 1, dims.end());
  }
  return *Shape::make(std::move(dims));
}

// `a` with its dim 1 moved last, or back, by transpose's own evaluation.
Array channels_moved(const Array& a, bool to_last) {
  const int rank = a.shape.rank();
  std::vector<int64_t> perm = {0};
  if (!to_last) perm.push_back(rank - 1);
  for (int d = to_last ? 2 : 1; d < (to_last ? rank : rank - 1); ++d) perm.push_back(d);
  if (to_last) perm.push_back(1);
  const TensorType moved{a.dtype, channels_moved(a.shape, to_last)};
  return std::move(op_def(Op::transpose).eval({&a, 1}, Attrs{{"perm", perm}}, {&moved, 1})->at(0));
}

// conv's inference on x with its channels first (its errors show x so), then the bias checked
// and y's channels moved last.
Expected<std::vector<TensorType>> infer_conv_channels_last(std::span<const TensorType> in,
                                                           const Attrs& attrs) {
  const TensorType& x = in[0];
  const TensorType& w = in[1];
  KILN_RETURN_IF_ERROR(spatial_rank(x.shape, "input 'x'").status());
  const TensorType first[] = {{x.dtype, channels_moved(x.shape, false)}, w};
  KILN_ASSIGN_OR_RETURN(std::vector<TensorType> y, infer_conv(first, attrs));
  if (in.size() == 3) {
    KILN_RETURN_IF_ERROR(require_same_dtype(x, "x", in[2], "bias"));
    if (in[2].shape != Shape{w.shape.dim(0)}) {
      return Status::errorf("input 'bias' must be [{}], one per output channel, got {}",
                            w.shape.dim(0), in[2].shape.to_string());
    }
  }
  return std::vector<TensorType>{{x.dtype, channels_moved(y[0].shape, true)}};
}

Expected<std::vector<Array>> eval_conv_channels_last(std::span<const Array> in, const Attrs& attrs,
                                                     std::span<const TensorType> out) {
  const Array x = channels_moved(in[0], false);
  const TensorType first{out[0].dtype, channels_moved(out[0].shape, false)};
  KILN_ASSIGN_OR_RETURN(std::vector<Array> y,
                        eval_conv(std::vector<Array>{x, in[1]}, attrs, {&first, 1}));
  Array result = channels_moved(y[0], true);
  const int64_t channels = out[0].shape.dim(out[0].shape.rank() - 1);
  const bool relu = attrs.get_bool("relu");
  for (int64_t i = 0; i < result.size(); ++i) {
    // Each step rounded, as the compiled code computes it in the dtype.
    Array sum = Array::scalar(result.dtype, result[i] + (in.size() == 3 ? in[2][i % channels] : 0));
    result[i] = relu && !(sum[0] > 0) ? 0.0 : sum[0];
  }
  return std::vector<Array>{std::move(result)};
}

std::vector<AttrSpec> conv_attrs() {
  return {
      {"strides", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "step per spatial dim; empty means all 1"},
      {"pads", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "[begin_0..begin_{s-1}, end_0..end_{s-1}] zero padding as ONNX; empty means none"},
      {"dilations", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "kernel element spacing per spatial dim; empty means all 1"},
      {"groups", AttrKind::integer, AttrValue(1),
       "number of channel groups; C and O must be divisible by it"},
  };
}

// ---------------------------------------------------------------------------------------------
// spmm

// The number of columns K of spmm's sparse matrix [M, K]: attribute `num_cols`, which may be
// left at -1 without transpose, where K is the rows of dense.
Expected<int64_t> spmm_num_cols(const Attrs& attrs, const TensorType& dense) {
  const int64_t num_cols = attrs.get_int("num_cols");
  const bool transpose = attrs.get_bool("transpose");
  if (num_cols < -1 || (transpose && num_cols == -1)) {
    return Status::errorf("attribute 'num_cols' must be >= 0{}, got {}",
                          transpose ? " with transpose" : " or -1", num_cols);
  }
  if (!transpose && num_cols != -1 && num_cols != dense.shape.dim(0)) {
    return Status::errorf("attribute 'num_cols' is {} but input 'dense' {} has {} rows", num_cols,
                          dense.to_string(), dense.shape.dim(0));
  }
  return transpose ? num_cols : dense.shape.dim(0);
}

Expected<std::vector<TensorType>> infer_spmm(std::span<const TensorType> in, const Attrs& attrs) {
  const TensorType& row_ptr = in[0];
  const TensorType& col_indices = in[1];
  const TensorType& values = in[2];
  const TensorType& dense = in[3];
  // The two index inputs may have different integer dtypes: they never mix in arithmetic.
  KILN_RETURN_IF_ERROR(require_integer(row_ptr, "row_ptr"));
  KILN_RETURN_IF_ERROR(require_rank(row_ptr, "row_ptr", 1));
  KILN_RETURN_IF_ERROR(require_integer(col_indices, "col_indices"));
  KILN_RETURN_IF_ERROR(require_rank(col_indices, "col_indices", 1));
  KILN_RETURN_IF_ERROR(require_floating(values, "values"));
  KILN_RETURN_IF_ERROR(require_rank(values, "values", 1));
  KILN_RETURN_IF_ERROR(require_same_dtype(values, "values", dense, "dense"));
  KILN_RETURN_IF_ERROR(require_rank(dense, "dense", 2));
  if (row_ptr.shape.dim(0) < 1) {
    return Status::errorf("input 'row_ptr' must have M + 1 >= 1 entries, got {}",
                          row_ptr.to_string());
  }
  if (col_indices.shape != values.shape) {
    return Status::errorf("inputs 'col_indices' ({}) and 'values' ({}) must have the same length",
                          col_indices.to_string(), values.to_string());
  }
  KILN_ASSIGN_OR_RETURN(const int64_t num_cols, spmm_num_cols(attrs, dense));
  const int64_t rows = row_ptr.shape.dim(0) - 1;
  if (!attrs.get_bool("transpose")) {
    KILN_ASSIGN_OR_RETURN(Shape out, Shape::make({rows, dense.shape.dim(1)}));
    return std::vector<TensorType>{{values.dtype, std::move(out)}};
  }
  if (dense.shape.dim(0) != rows) {
    return Status::errorf(
        "with transpose, input 'dense' {} must have M = {} rows (entries of 'row_ptr' - 1)",
        dense.to_string(), rows);
  }
  KILN_ASSIGN_OR_RETURN(Shape out, Shape::make({num_cols, dense.shape.dim(1)}));
  return std::vector<TensorType>{{values.dtype, std::move(out)}};
}

Cost spmm_cost(std::span<const TensorType> in, std::span<const TensorType> out, const Attrs&) {
  Cost cost;
  cost.flops = 2.0 * static_cast<double>(in[2].shape.num_elements()) *
               static_cast<double>(out[0].shape.dim(1));
  for (const TensorType& t : in) cost.bytes_read += t.size_bytes();
  cost.bytes_written = out[0].size_bytes();
  return cost;
}

// Checks the CSR structure, which only the data can tell; `cols_source` says where the number
// of columns came from.
Status check_csr(const Array& row_ptr, const Array& col_indices, int64_t num_cols,
                 std::string_view cols_source) {
  const int64_t rows = row_ptr.size() - 1;
  const int64_t nnz = col_indices.size();
  if (row_ptr[0] != 0) return Status::errorf("input 'row_ptr' must start at 0, got {}", row_ptr[0]);
  for (int64_t r = 0; r < rows; ++r) {
    if (row_ptr[r + 1] < row_ptr[r]) {
      return Status::errorf("input 'row_ptr' must be non-decreasing, but entry {} is {} after {}",
                            r + 1, row_ptr[r + 1], row_ptr[r]);
    }
  }
  if (row_ptr[rows] != static_cast<double>(nnz)) {
    return Status::errorf("input 'row_ptr' must end at nnz = {} (the length of 'values'), got {}",
                          nnz, row_ptr[rows]);
  }
  for (int64_t i = 0; i < nnz; ++i) {
    if (col_indices[i] < 0 || col_indices[i] >= static_cast<double>(num_cols)) {
      return Status::errorf("input 'col_indices' entry {} is {}, outside [0, {}) ({})", i,
                            col_indices[i], num_cols, cols_source);
    }
  }
  return Status::ok();
}

// A [M, K] x dense [K, N], or with transpose A^T x dense [M, N]: each non-zero A[r, c] adds
// A[r, c] * dense[c, :] to out[r, :] (transposed: A[r, c] * dense[r, :] to out[c, :]).
Expected<std::vector<Array>> eval_spmm(std::span<const Array> in, const Attrs& attrs,
                                       std::span<const TensorType> out) {
  const Array& row_ptr = in[0];
  const Array& col_indices = in[1];
  const Array& values = in[2];
  const Array& dense = in[3];
  const bool transpose = attrs.get_bool("transpose");
  const int64_t num_cols = *spmm_num_cols(attrs, dense.type());
  KILN_RETURN_IF_ERROR(check_csr(row_ptr, col_indices, num_cols,
                                 transpose ? "attribute 'num_cols'" : "rows of 'dense'"));
  const int64_t n = dense.shape.dim(1);
  Array result(out[0].dtype, out[0].shape);
  for (int64_t r = 0; r + 1 < row_ptr.size(); ++r) {
    for (auto i = static_cast<int64_t>(row_ptr[r]); i < static_cast<int64_t>(row_ptr[r + 1]);
         ++i) {
      const auto col = static_cast<int64_t>(col_indices[i]);
      const int64_t from = transpose ? r : col;
      const int64_t to = transpose ? col : r;
      for (int64_t j = 0; j < n; ++j) result[to * n + j] += values[i] * dense[from * n + j];
    }
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---------------------------------------------------------------------------------------------
// Gradient rules

std::vector<Value*> gradient_of_matmul(GraphBuilder& b, const Node& node,
                                       std::span<Value* const> grads) {
  Value* lhs = node.input(0);
  Value* rhs = node.input(1);
  Value* dy = grads[0];
  const bool ta = node.attrs().get_bool("transpose_a");
  const bool tb = node.attrs().get_bool("transpose_b");
  // y = op(a) op(b): d op(a) = dy op(b)^T and d op(b) = op(a)^T dy, transposed back where the
  // operand was transposed, each written as one matmul.
  Value* da = ta ? b.matmul(rhs, dy, tb, true) : b.matmul(dy, rhs, false, !tb);
  Value* db = tb ? b.matmul(dy, lhs, true, ta) : b.matmul(lhs, dy, !ta, false);
  return {b.sum_to(da, lhs->shape()), b.sum_to(db, rhs->shape())};
}

// The window attributes of a conv-family node (strides, pads, dilations, groups), plus the
// shape attribute `shape_name` (input_shape or weight_shape) when given.
Attrs conv_window(const Attrs& attrs, std::string_view shape_name = {}, const Shape& shape = {}) {
  Attrs window;
  for (const char* name : {"strides", "pads", "dilations", "groups"}) {
    window.set(name, attrs.get(name));
  }
  if (!shape_name.empty()) window.set(shape_name, shape.dims());
  return window;
}

std::vector<Value*> gradient_of_conv(GraphBuilder& b, const Node& node,
                                     std::span<Value* const> grads) {
  Value* x = node.input(0);
  Value* w = node.input(1);
  Value* dy = grads[0];
  const Attrs& attrs = node.attrs();
  return {b.apply1(Op::conv_grad_data, {dy, w}, conv_window(attrs, "input_shape", x->shape())),
          b.apply1(Op::conv_grad_weight, {x, dy}, conv_window(attrs, "weight_shape", w->shape()))};
}

// conv_grad_data(g, w) is bilinear: its gradient in g is conv by w, in w conv_grad_weight.
std::vector<Value*> gradient_of_conv_grad_data(GraphBuilder& b, const Node& node,
                                               std::span<Value* const> grads) {
  Value* grad_out = node.input(0);
  Value* w = node.input(1);
  Value* ddx = grads[0];
  const Attrs& attrs = node.attrs();
  return {b.apply1(Op::conv, {ddx, w}, conv_window(attrs)),
          b.apply1(Op::conv_grad_weight, {ddx, grad_out},
                   conv_window(attrs, "weight_shape", w->shape()))};
}

// conv_grad_weight(x, g) is bilinear: its gradient in x is conv_grad_data, in g conv by it.
std::vector<Value*> gradient_of_conv_grad_weight(GraphBuilder& b, const Node& node,
                                                 std::span<Value* const> grads) {
  Value* x = node.input(0);
  Value* grad_out = node.input(1);
  Value* ddw = grads[0];
  const Attrs& attrs = node.attrs();
  return {b.apply1(Op::conv_grad_data, {grad_out, ddw},
                   conv_window(attrs, "input_shape", x->shape())),
          b.apply1(Op::conv, {x, ddw}, conv_window(attrs))};
}

// The row of each non-zero of a CSR matrix: the number of rows r >= 1 with row_ptr[r] <= i,
// counted by comparing every non-zero with every row start (O(nnz * M) work).
Value* csr_row_ids(GraphBuilder& b, Value* row_ptr, int64_t nnz) {
  const int64_t rows = row_ptr->shape().dim(0) - 1;
  Value* ends = b.reshape(b.cast(b.slice(row_ptr, {1}, {rows + 1}), DType::i64), {1, rows});
  Value* positions = b.iota(Shape{nnz, 1});
  return b.sum(b.cast(b.greater_equal(positions, ends), DType::i64), {1});
}

// spmm is linear in values and in dense. With out[to] += v_i dense[from] per non-zero i:
//   d dense = A^T dy (A dy with transpose), d v_i = dot(dy[to], dense[from]).
// The structure inputs get no gradient.
std::vector<Value*> gradient_of_spmm(GraphBuilder& b, const Node& node,
                                     std::span<Value* const> grads) {
  Value* row_ptr = node.input(0);
  Value* col_indices = node.input(1);
  Value* values = node.input(2);
  Value* dense = node.input(3);
  Value* dy = grads[0];
  const bool transpose = node.attrs().get_bool("transpose");
  // A's columns are dense's rows without transpose and dy's rows with it.
  const int64_t num_cols = (transpose ? dy : dense)->shape().dim(0);
  Value* d_dense = b.spmm(row_ptr, col_indices, values, dy, !transpose, num_cols);
  Value* rows = csr_row_ids(b, row_ptr, values->shape().dim(0));
  Value* out_rows = b.gather(dy, transpose ? col_indices : rows);
  Value* dense_rows = b.gather(dense, transpose ? rows : col_indices);
  Value* d_values = b.sum(b.mul(out_rows, dense_rows), {1});
  return {nullptr, nullptr, d_values, d_dense};
}

}  // namespace

void register_contraction_ops(OpTable& table) {
  OpDef& matmul = table.define(Op::matmul);
  matmul.summary = "batched matrix product [..., m, k] x [..., k, n], batch dims broadcast";
  matmul.fusion_kind = FusionKind::contraction;
  matmul.input_names = {"a", "b"};
  matmul.min_inputs = matmul.max_inputs = 2;
  matmul.attrs = {
      {"transpose_a", AttrKind::boolean, AttrValue(false), "use the transpose of a's last 2 dims"},
      {"transpose_b", AttrKind::boolean, AttrValue(false), "use the transpose of b's last 2 dims"},
  };
  matmul.infer = infer_matmul;
  matmul.cost = matmul_cost;
  matmul.eval = eval_matmul;
  matmul.gradient = gradient_of_matmul;

  OpDef& conv = table.define(Op::conv);
  conv.summary = "N-d grouped, strided, dilated cross-correlation of x [N,C,...] by w [O,C/g,...]";
  conv.fusion_kind = FusionKind::contraction;
  conv.input_names = {"x", "w"};
  conv.min_inputs = conv.max_inputs = 2;
  conv.attrs = conv_attrs();
  conv.infer = infer_conv;
  conv.cost = [](std::span<const TensorType> in, std::span<const TensorType> out, const Attrs&) {
    return conv_cost(in, out, in[1].shape, out[0].shape);
  };
  conv.eval = eval_conv;
  conv.gradient = gradient_of_conv;

  OpDef& grad_data = table.define(Op::conv_grad_data);
  grad_data.summary = "gradient of conv with respect to x (the adjoint of conv in x)";
  grad_data.fusion_kind = FusionKind::contraction;
  grad_data.input_names = {"grad_out", "w"};
  grad_data.min_inputs = grad_data.max_inputs = 2;
  grad_data.attrs = conv_attrs();
  grad_data.attrs.push_back(
      {"input_shape", AttrKind::ints, std::nullopt, "full shape of conv's input x"});
  grad_data.infer = infer_conv_grad_data;
  grad_data.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                      const Attrs&) { return conv_cost(in, out, in[1].shape, in[0].shape); };
  grad_data.eval = eval_conv_grad_data;
  grad_data.gradient = gradient_of_conv_grad_data;

  OpDef& grad_weight = table.define(Op::conv_grad_weight);
  grad_weight.summary = "gradient of conv with respect to w (the adjoint of conv in w)";
  grad_weight.fusion_kind = FusionKind::contraction;
  grad_weight.input_names = {"x", "grad_out"};
  grad_weight.min_inputs = grad_weight.max_inputs = 2;
  grad_weight.attrs = conv_attrs();
  grad_weight.attrs.push_back(
      {"weight_shape", AttrKind::ints, std::nullopt, "full shape of conv's weight w"});
  grad_weight.infer = infer_conv_grad_weight;
  grad_weight.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                        const Attrs&) { return conv_cost(in, out, out[0].shape, in[1].shape); };
  grad_weight.eval = eval_conv_grad_weight;
  grad_weight.gradient = gradient_of_conv_grad_weight;

  OpDef& channels_last = table.define(Op::conv_channels_last);
  channels_last.summary =
      "conv of images with channels last, x [N,...,C] by w [O,C/g,...], plus bias, then relu";
  channels_last.fusion_kind = FusionKind::contraction;
  channels_last.input_names = {"x", "w", "bias"};
  channels_last.min_inputs = 2;
  channels_last.max_inputs = 3;
  channels_last.attrs = conv_attrs();
  channels_last.attrs.push_back(
      {"relu", AttrKind::boolean, AttrValue(false), "max(y + bias, 0), as relu"});
  channels_last.attrs.push_back(
      {"winograd", AttrKind::boolean, AttrValue(false),
       "computed by Winograd's minimal filtering (a 3x3 kernel at stride 1): fewer "
       "multiplications, the same sum to f32's rounding"});
  channels_last.infer = infer_conv_channels_last;
  channels_last.cost = [](std::span<const TensorType> in, std::span<const TensorType> out,
                          const Attrs& attrs) {
    Cost cost = conv_cost(in, out, in[1].shape, out[0].shape);
    if (attrs.get_bool("winograd")) cost.flops *= kWinogradFlopsFraction;
    return cost;
  };
  channels_last.eval = eval_conv_channels_last;
  channels_last.non_differentiable =
      "the compiler's layout stage makes it for inference only; training takes conv";

  OpDef& spmm = table.define(Op::spmm);
  spmm.summary = "sparse CSR A [M, K] times dense [K, N], or A^T times dense [M, N]";
  spmm.fusion_kind = FusionKind::contraction;
  spmm.input_names = {"row_ptr", "col_indices", "values", "dense"};
  spmm.min_inputs = spmm.max_inputs = 4;
  spmm.attrs = {
      {"transpose", AttrKind::boolean, AttrValue(false), "multiply by A^T instead of A"},
      {"num_cols", AttrKind::integer, AttrValue(-1),
       "K, the columns of A; required with transpose, -1 (dense's rows) allowed without"},
  };
  spmm.infer = infer_spmm;
  spmm.cost = spmm_cost;
  spmm.eval = eval_spmm;
  spmm.gradient = gradient_of_spmm;

  // Mixed precision (passes/precision.h): the contractions run in the low dtype; a sparse
  // product, memory-bound and summed by scattering, stays in f32.
  for (Op op : {Op::matmul, Op::conv, Op::conv_grad_data, Op::conv_grad_weight,
                Op::conv_channels_last}) {
    table.define(op).precision = PrecisionPolicy::low;
  }
  table.define(Op::spmm).precision = PrecisionPolicy::f32;
}

}  // namespace kiln::ops
