// Layout and data-movement ops: constants and generators (constant, iota, fill), reshaping
// (reshape, transpose, broadcast_to), slicing and joining (slice, concat, split, pad) and
// indexing (gather, scatter_add, one_hot). Each output element is one input element or a
// constant, except in scatter_add, which accumulates.
//
// Gradients move dy back to where each element came from: the inverse reshape or permutation,
// the sum over broadcast axes, padding (or scatter_add for strided slices) for slice, slices for
// concat and pad, scatter_add for gather. Integer indices get no gradient.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/ops/op_family.h"

namespace kiln::ops {
namespace {

// "[1,-1,3]": an int list in the form Shape::to_string uses.
std::string list_string(const std::vector<int64_t>& values) {
  return fmt::format("[{}]", fmt::join(values, ","));
}

// Product of dims[begin, end).
int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) n *= dims[i];
  return n;
}

// A shape viewed as [outer, extent, inner] around one axis: the element at (o, a, i) is at
// (o * extent + a) * inner + i in row-major order.
struct AxisView {
  int64_t outer = 1;
  int64_t extent = 1;
  int64_t inner = 1;
};

AxisView view_around(const Shape& shape, int axis) {
  const std::vector<int64_t>& dims = shape.dims();
  const size_t a = static_cast<size_t>(axis);
  return {product(dims, 0, a), dims[a], product(dims, a + 1, dims.size())};
}

// The shape in attribute `name`, validated by Shape::make (non-negative, bounded size).
Expected<Shape> shape_attr(const Attrs& attrs, std::string_view name) {
  Expected<Shape> shape = Shape::make(attrs.get_ints(name));
  if (!shape) return shape.status().with_context(fmt::format("attribute '{}'", name));
  return shape;
}

// The int attribute `name` as an axis of a rank-`rank` tensor (negative counts from the end).
Expected<int> axis_attr(const Attrs& attrs, std::string_view name, int rank) {
  Expected<int> axis = normalize_axis(attrs.get_int(name), rank);
  if (!axis) return axis.status().with_context(fmt::format("attribute '{}'", name));
  return axis;
}

Expected<std::vector<TensorType>> single(TensorType type) {
  return std::vector<TensorType>{std::move(type)};
}

// ---- constant, iota, fill -------------------------------------------------------------------

Expected<std::vector<TensorType>> infer_constant(std::span<const TensorType>, const Attrs& attrs) {
  const Array& value = attrs.get_tensor("value");
  Expected<Shape> shape = Shape::make(value.shape.dims());
  if (!shape) return shape.status().with_context("attribute 'value'");
  if (value.size() != shape->num_elements()) {
    return Status::errorf("attribute 'value' holds {} elements but its type is {}", value.size(),
                          value.type().to_string());
  }
  return single(value.type());
}

Expected<std::vector<Array>> eval_constant(std::span<const Array>, const Attrs& attrs,
                                           std::span<const TensorType> out) {
  Array result(out[0].dtype, out[0].shape);
  result.data = attrs.get_tensor("value").data;
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_iota(std::span<const TensorType>, const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(Shape shape, shape_attr(attrs, "shape"));
  if (shape.rank() == 0) {
    return Status::error("attribute 'shape' must have rank at least 1 (iota counts along an axis)");
  }
  KILN_RETURN_IF_ERROR(axis_attr(attrs, "axis", shape.rank()).status());
  return single({attrs.get_dtype("dtype"), std::move(shape)});
}

Expected<std::vector<Array>> eval_iota(std::span<const Array>, const Attrs& attrs,
                                       std::span<const TensorType> out) {
  const int axis = *normalize_axis(attrs.get_int("axis"), out[0].shape.rank());
  const AxisView view = view_around(out[0].shape, axis);
  Array result(out[0].dtype, out[0].shape);
  for (int64_t i = 0; i < result.size(); ++i) {
    result[i] = static_cast<double>((i / view.inner) % view.extent);
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_fill(std::span<const TensorType>, const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(Shape shape, shape_attr(attrs, "shape"));
  return single({attrs.get_dtype("dtype"), std::move(shape)});
}

Expected<std::vector<Array>> eval_fill(std::span<const Array>, const Attrs& attrs,
                                       std::span<const TensorType> out) {
  Array result(out[0].dtype, out[0].shape);
  std::fill(result.data.begin(), result.data.end(), attrs.get_float("value"));
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---- reshape, transpose, broadcast_to -------------------------------------------------------

Expected<std::vector<TensorType>> infer_reshape(std::span<const TensorType> in,
                                                const Attrs& attrs) {
  const std::vector<int64_t>& spec = attrs.get_ints("shape");
  const int64_t count = in[0].shape.num_elements();
  // The -1 entry stands in as 1 while the other extents are validated and multiplied.
  std::vector<int64_t> dims = spec;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      if (inferred) {
        return Status::errorf("attribute 'shape' may contain at most one -1, got {}",
                              list_string(spec));
      }
      inferred = i;
      dims[i] = 1;
    } else if (dims[i] < 0) {
      return Status::errorf("attribute 'shape' has a negative extent other than -1: {}",
                            list_string(spec));
    }
  }
  Expected<Shape> made = Shape::make(dims);
  if (!made) return made.status().with_context("attribute 'shape'");
  Shape known = std::move(made).value();
  if (inferred) {
    // As NumPy: -1 cannot be resolved next to a zero extent (any value would fit).
    const int64_t known_count = known.num_elements();
    if (known_count == 0 || count % known_count != 0) {
      return Status::errorf("attribute 'shape' {} cannot hold the {} elements of input 'x' ({})",
                            list_string(spec), count, in[0].to_string());
    }
    dims[*inferred] = count / known_count;
    return single({in[0].dtype, Shape(std::move(dims))});
  }
  if (known.num_elements() != count) {
    return Status::errorf("attribute 'shape' {} has {} elements but input 'x' ({}) has {}",
                          list_string(spec), known.num_elements(), in[0].to_string(), count);
  }
  return single({in[0].dtype, std::move(known)});
}

// Copies the elements of x in row-major order into the output type (reshape's eval).
Expected<std::vector<Array>> eval_reshape(std::span<const Array> in, const Attrs&,
                                          std::span<const TensorType> out) {
  Array result(out[0].dtype, out[0].shape);
  result.data = in[0].data;
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// The permutation transpose applies: `perm`, or the reversed axes when it is empty.
std::vector<int64_t> transpose_perm(const Attrs& attrs, int rank) {
  std::vector<int64_t> perm = attrs.get_ints("perm");
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return perm;
}

Expected<std::vector<TensorType>> infer_transpose(std::span<const TensorType> in,
                                                  const Attrs& attrs) {
  const int rank = in[0].shape.rank();
  const std::vector<int64_t> perm = transpose_perm(attrs, rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  bool valid = static_cast<int>(perm.size()) == rank;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    valid = perm[i] >= 0 && perm[i] < rank && !seen[static_cast<size_t>(perm[i])];
    if (valid) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!valid) {
    return Status::errorf(
        "attribute 'perm' must be a permutation of 0..{} for input 'x' ({}), got {}", rank - 1,
        in[0].to_string(), list_string(perm));
  }
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(in[0].shape.dim(static_cast<int>(p)));
  return single({in[0].dtype, Shape(std::move(dims))});
}

Expected<std::vector<Array>> eval_transpose(std::span<const Array> in, const Attrs& attrs,
                                            std::span<const TensorType> out) {
  const Array& x = in[0];
  const std::vector<int64_t> perm = transpose_perm(attrs, x.shape.rank());
  const std::vector<int64_t> x_strides = x.shape.strides();
  Array result(out[0].dtype, out[0].shape);
  int64_t next = 0;
  for_each_index(out[0].shape, [&](std::span<const int64_t> index) {
    int64_t offset = 0;
    for (size_t i = 0; i < perm.size(); ++i) {
      offset += index[i] * x_strides[static_cast<size_t>(perm[i])];
    }
    result[next++] = x[offset];
  });
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_broadcast_to(std::span<const TensorType> in,
                                                     const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(Shape target, shape_attr(attrs, "shape"));
  // Broadcasting must reach exactly `shape`: it may not grow the target (x [3] to [1]).
  Expected<Shape> joint = broadcast_shapes(in[0].shape, target);
  if (!joint || *joint != target) {
    return Status::errorf("input 'x' ({}) cannot be broadcast to attribute 'shape' {}",
                          in[0].to_string(), target.to_string());
  }
  return single({in[0].dtype, std::move(target)});
}

Expected<std::vector<Array>> eval_broadcast_to(std::span<const Array> in, const Attrs&,
                                               std::span<const TensorType> out) {
  Array result(out[0].dtype, out[0].shape);
  int64_t next = 0;
  for_each_index(out[0].shape, [&](std::span<const int64_t> index) {
    result[next++] = in[0][broadcast_offset(in[0].shape, index)];
  });
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---- slice ----------------------------------------------------------------------------------

// A resolved slice: output element i along axis a reads x at start[a] + i * step[a].
struct SlicePlan {
  std::vector<int64_t> start;
  std::vector<int64_t> step;
  Shape shape;
};

Expected<SlicePlan> plan_slice(const TensorType& x, const Attrs& attrs) {
  const std::vector<int64_t>& starts = attrs.get_ints("starts");
  const std::vector<int64_t>& ends = attrs.get_ints("ends");
  std::vector<int64_t> axes = attrs.get_ints("axes");
  std::vector<int64_t> steps = attrs.get_ints("steps");
  const size_t n = starts.size();
  if (ends.size() != n) {
    return Status::errorf("attributes 'starts' {} and 'ends' {} must have the same length",
                          list_string(starts), list_string(ends));
  }
  if (!axes.empty() && axes.size() != n) {
    return Status::errorf("attribute 'axes' {} must be empty or have {} entries like 'starts'",
                          list_string(axes), n);
  }
  if (!steps.empty() && steps.size() != n) {
    return Status::errorf("attribute 'steps' {} must be empty or have {} entries like 'starts'",
                          list_string(steps), n);
  }
  if (axes.empty()) {
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);

  const int rank = x.shape.rank();
  SlicePlan plan{std::vector<int64_t>(static_cast<size_t>(rank), 0),
                 std::vector<int64_t>(static_cast<size_t>(rank), 1), Shape()};
  std::vector<int64_t> dims = x.shape.dims();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < n; ++i) {
    Expected<int> normalized = normalize_axis(axes[i], rank);
    if (!normalized) return normalized.status().with_context("attribute 'axes'");
    const int axis = *normalized;
    const size_t a = static_cast<size_t>(axis);
    if (seen[a]) {
      return Status::errorf("attribute 'axes' {} names axis {} twice", list_string(axes), axis);
    }
    seen[a] = true;
    const int64_t step = steps[i];
    if (step == 0) {
      return Status::errorf("attribute 'steps' {} must not contain 0", list_string(steps));
    }
    // As ONNX Slice: negative bounds count from the end, then clamp so that a forward slice
    // stays in [0, dim] and a backward one in [-1, dim - 1] (-1: before the first element).
    // Adding dim to a negative bound cannot overflow; clamping keeps every later value within
    // [-1, dim].
    const int64_t dim = dims[a];
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t extent = 0;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      // ceil((end - start) / step), written so that a huge step cannot overflow.
      if (end > start) extent = (end - start - 1) / step + 1;
    } else {
      start = std::clamp<int64_t>(start, -1, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      // ceil((start - end) / -step) without negating step (which overflows for INT64_MIN):
      // end - start + 1 <= 0 and step < 0, so the truncating division is the floor.
      if (start > end) extent = (end - start + 1) / step + 1;
    }
    plan.start[a] = start;
    plan.step[a] = step;
    dims[a] = extent;
  }
  plan.shape = Shape(std::move(dims));
  return plan;
}

Expected<std::vector<TensorType>> infer_slice(std::span<const TensorType> in, const Attrs& attrs) {
  KILN_ASSIGN_OR_RETURN(SlicePlan plan, plan_slice(in[0], attrs));
  return single({in[0].dtype, std::move(plan.shape)});
}

Expected<std::vector<Array>> eval_slice(std::span<const Array> in, const Attrs& attrs,
                                        std::span<const TensorType> out) {
  const Array& x = in[0];
  KILN_ASSIGN_OR_RETURN(SlicePlan plan, plan_slice(x.type(), attrs));
  const std::vector<int64_t> x_strides = x.shape.strides();
  Array result(out[0].dtype, out[0].shape);
  int64_t next = 0;
  for_each_index(out[0].shape, [&](std::span<const int64_t> index) {
    int64_t offset = 0;
    for (size_t a = 0; a < index.size(); ++a) {
      offset += (plan.start[a] + index[a] * plan.step[a]) * x_strides[a];
    }
    result[next++] = x[offset];
  });
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---- concat, split, pad ---------------------------------------------------------------------

Expected<std::vector<TensorType>> infer_concat(std::span<const TensorType> in, const Attrs& attrs) {
  const TensorType& first = in[0];
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, "axis", first.shape.rank()));
  std::vector<int64_t> dims = first.shape.dims();
  for (size_t i = 1; i < in.size(); ++i) {
    const std::string name = fmt::format("inputs[{}]", i);
    KILN_RETURN_IF_ERROR(require_same_dtype(first, "inputs[0]", in[i], name));
    bool matches = in[i].shape.rank() == first.shape.rank();
    for (int d = 0; matches && d < first.shape.rank(); ++d) {
      matches = d == axis || in[i].shape.dim(d) == first.shape.dim(d);
    }
    if (!matches) {
      return Status::errorf(
          "input '{}' ({}) must match 'inputs[0]' ({}) in rank and in every dimension except "
          "axis {}",
          name, in[i].to_string(), first.to_string(), axis);
    }
    // Each extent is at most 2^48; stopping past that bound keeps the sum from overflowing.
    if (dims[static_cast<size_t>(axis)] > kMaxElements - in[i].shape.dim(axis)) {
      return Status::errorf("the inputs have more than 2^48 elements along axis {}", axis);
    }
    dims[static_cast<size_t>(axis)] += in[i].shape.dim(axis);
  }
  KILN_ASSIGN_OR_RETURN(Shape shape, Shape::make(std::move(dims)));
  return single({first.dtype, std::move(shape)});
}

Expected<std::vector<Array>> eval_concat(std::span<const Array> in, const Attrs& attrs,
                                         std::span<const TensorType> out) {
  const int axis = *normalize_axis(attrs.get_int("axis"), out[0].shape.rank());
  const AxisView out_view = view_around(out[0].shape, axis);
  Array result(out[0].dtype, out[0].shape);
  // Each input fills a block of `extent * inner` contiguous elements per outer index, placed
  // after the blocks of the inputs before it.
  int64_t offset = 0;
  for (const Array& x : in) {
    const AxisView view = view_around(x.shape, axis);
    const int64_t block = view.extent * view.inner;
    for (int64_t o = 0; o < view.outer; ++o) {
      for (int64_t j = 0; j < block; ++j) {
        result[(o * out_view.extent + offset) * out_view.inner + j] = x[o * block + j];
      }
    }
    offset += view.extent;
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_split(std::span<const TensorType> in, const Attrs& attrs) {
  const TensorType& x = in[0];
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, "axis", x.shape.rank()));
  const std::vector<int64_t>& sizes = attrs.get_ints("sizes");
  const int64_t extent = x.shape.dim(axis);
  if (sizes.empty()) return Status::error("attribute 'sizes' must have at least one entry");
  // `size <= extent - total` rather than `total + size <= extent`: sizes may be huge.
  int64_t total = 0;
  bool valid = true;
  for (size_t i = 0; valid && i < sizes.size(); ++i) {
    valid = sizes[i] >= 0 && sizes[i] <= extent - total;
    if (valid) total += sizes[i];
  }
  if (!valid || total != extent) {
    return Status::errorf(
        "attribute 'sizes' {} must be non-negative and sum to {}, the extent of axis {} of "
        "input 'x' ({})",
        list_string(sizes), extent, axis, x.to_string());
  }
  std::vector<TensorType> outputs;
  for (int64_t size : sizes) {
    std::vector<int64_t> dims = x.shape.dims();
    dims[static_cast<size_t>(axis)] = size;
    outputs.push_back({x.dtype, Shape(std::move(dims))});
  }
  return outputs;
}

Expected<std::vector<Array>> eval_split(std::span<const Array> in, const Attrs& attrs,
                                        std::span<const TensorType> out) {
  const Array& x = in[0];
  const int axis = *normalize_axis(attrs.get_int("axis"), x.shape.rank());
  const AxisView x_view = view_around(x.shape, axis);
  std::vector<Array> results;
  int64_t offset = 0;
  for (const TensorType& type : out) {
    Array part(type.dtype, type.shape);
    const AxisView view = view_around(type.shape, axis);
    const int64_t block = view.extent * view.inner;
    for (int64_t o = 0; o < view.outer; ++o) {
      for (int64_t j = 0; j < block; ++j) {
        part[o * block + j] = x[(o * x_view.extent + offset) * x_view.inner + j];
      }
    }
    offset += view.extent;
    part.round_to_dtype();
    results.push_back(std::move(part));
  }
  return results;
}

Expected<std::vector<TensorType>> infer_pad(std::span<const TensorType> in, const Attrs& attrs) {
  const TensorType& x = in[0];
  const std::vector<int64_t>& pads = attrs.get_ints("pads");
  const size_t rank = static_cast<size_t>(x.shape.rank());
  if (pads.size() != 2 * rank) {
    return Status::errorf("attribute 'pads' {} must have 2 * rank = {} entries for input 'x' ({})",
                          list_string(pads), 2 * rank, x.to_string());
  }
  // A pad beyond 2^48 in magnitude cannot give a valid extent except by cancelling against
  // the opposite side; rejecting it keeps every sum and index computation far from overflow.
  for (int64_t p : pads) {
    if (p > kMaxElements || p < -kMaxElements) {
      return Status::errorf("attribute 'pads' {} has an entry beyond 2^48 in magnitude",
                            list_string(pads));
    }
  }
  std::vector<int64_t> dims = x.shape.dims();
  for (size_t a = 0; a < rank; ++a) {
    dims[a] += pads[a] + pads[a + rank];
    if (dims[a] < 0) {
      return Status::errorf(
          "attribute 'pads' {} crops axis {} of input 'x' ({}) to a negative extent",
          list_string(pads), a, x.to_string());
    }
  }
  KILN_ASSIGN_OR_RETURN(Shape shape, Shape::make(std::move(dims)));
  return single({x.dtype, std::move(shape)});
}

Expected<std::vector<Array>> eval_pad(std::span<const Array> in, const Attrs& attrs,
                                      std::span<const TensorType> out) {
  const Array& x = in[0];
  const std::vector<int64_t>& pads = attrs.get_ints("pads");
  const Shape& out_shape = out[0].shape;
  Array result(out[0].dtype, out_shape);
  std::fill(result.data.begin(), result.data.end(), attrs.get_float("value"));
  // Input element `index` lands at index + begin pads, unless a negative pad cropped it.
  std::vector<int64_t> target(static_cast<size_t>(x.shape.rank()));
  for_each_index(x.shape, [&](std::span<const int64_t> index) {
    for (size_t a = 0; a < index.size(); ++a) {
      target[a] = index[a] + pads[a];
      if (target[a] < 0 || target[a] >= out_shape.dim(static_cast<int>(a))) return;
    }
    result[linear_offset(out_shape, target)] = x[linear_offset(x.shape, index)];
  });
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---- gather, scatter_add, one_hot -----------------------------------------------------------

// data.shape[:axis] + indices.shape + data.shape[axis+1:], the shape gather produces.
Expected<Shape> gathered_shape(const TensorType& data, const TensorType& indices, int axis) {
  const std::vector<int64_t>& d = data.shape.dims();
  const std::vector<int64_t>& idx = indices.shape.dims();
  std::vector<int64_t> dims(d.begin(), d.begin() + axis);
  dims.insert(dims.end(), idx.begin(), idx.end());
  dims.insert(dims.end(), d.begin() + axis + 1, d.end());
  return Shape::make(std::move(dims));
}

// Checks every index against [-extent, extent) and wraps negatives, as NumPy's take. Every
// index is checked, read or not (when data has a zero extent elsewhere), so that an error
// depends on the indices alone.
Expected<std::vector<int64_t>> resolve_indices(const Array& indices, const TensorType& data,
                                               int axis) {
  const int64_t extent = data.shape.dim(axis);
  std::vector<int64_t> resolved;
  resolved.reserve(static_cast<size_t>(indices.size()));
  // Compared as doubles, so that no value is converted to int64 before it is known to fit.
  const double limit = static_cast<double>(extent);
  for (double value : indices.data) {
    if (value < -limit || value >= limit) {
      return Status::errorf("index {} is out of range for axis {} of input 'data' ({})", value,
                            axis, data.to_string());
    }
    const int64_t index = static_cast<int64_t>(value);
    resolved.push_back(index < 0 ? index + extent : index);
  }
  return resolved;
}

Expected<std::vector<TensorType>> infer_gather(std::span<const TensorType> in, const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_integer(in[1], "indices"));
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, "axis", in[0].shape.rank()));
  KILN_ASSIGN_OR_RETURN(Shape shape, gathered_shape(in[0], in[1], axis));
  return single({in[0].dtype, std::move(shape)});
}

Expected<std::vector<Array>> eval_gather(std::span<const Array> in, const Attrs& attrs,
                                         std::span<const TensorType> out) {
  const Array& data = in[0];
  const int axis = *normalize_axis(attrs.get_int("axis"), data.shape.rank());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> indices, resolve_indices(in[1], data.type(), axis));
  const AxisView view = view_around(data.shape, axis);
  const int64_t n = static_cast<int64_t>(indices.size());
  Array result(out[0].dtype, out[0].shape);
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t source = (o * view.extent + indices[static_cast<size_t>(j)]) * view.inner;
      for (int64_t k = 0; k < view.inner; ++k) {
        result[(o * n + j) * view.inner + k] = data[source + k];
      }
    }
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_scatter_add(std::span<const TensorType> in,
                                                    const Attrs& attrs) {
  const TensorType& data = in[0];
  KILN_RETURN_IF_ERROR(require_integer(in[1], "indices"));
  KILN_RETURN_IF_ERROR(require_same_dtype(data, "data", in[2], "updates"));
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, "axis", data.shape.rank()));
  KILN_ASSIGN_OR_RETURN(Shape expected, gathered_shape(data, in[1], axis));
  if (in[2].shape != expected) {
    return Status::errorf(
        "input 'updates' ({}) must have shape {}, what gather of 'data' ({}) by 'indices' ({}) "
        "on axis {} produces",
        in[2].to_string(), expected.to_string(), data.to_string(), in[1].to_string(), axis);
  }
  return single(data);
}

// The transpose of gather: each update is added where gather would have read it from. Sums
// are formed in f64 and rounded once, so duplicate indices accumulate without intermediate
// rounding.
Expected<std::vector<Array>> eval_scatter_add(std::span<const Array> in, const Attrs& attrs,
                                              std::span<const TensorType> out) {
  const Array& data = in[0];
  const Array& updates = in[2];
  const int axis = *normalize_axis(attrs.get_int("axis"), data.shape.rank());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> indices, resolve_indices(in[1], data.type(), axis));
  const AxisView view = view_around(data.shape, axis);
  const int64_t n = static_cast<int64_t>(indices.size());
  Array result(out[0].dtype, out[0].shape);
  result.data = data.data;
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t target = (o * view.extent + indices[static_cast<size_t>(j)]) * view.inner;
      for (int64_t k = 0; k < view.inner; ++k) {
        result[target + k] += updates[(o * n + j) * view.inner + k];
      }
    }
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

Expected<std::vector<TensorType>> infer_one_hot(std::span<const TensorType> in,
                                                const Attrs& attrs) {
  KILN_RETURN_IF_ERROR(require_integer(in[0], "indices"));
  const int64_t depth = attrs.get_int("depth");
  if (depth <= 0) return Status::errorf("attribute 'depth' must be positive, got {}", depth);
  // The new axis is an axis of the output, whose rank is one more than the indices'.
  KILN_ASSIGN_OR_RETURN(const int axis, axis_attr(attrs, "axis", in[0].shape.rank() + 1));
  std::vector<int64_t> dims = in[0].shape.dims();
  dims.insert(dims.begin() + axis, depth);
  KILN_ASSIGN_OR_RETURN(Shape shape, Shape::make(std::move(dims)));
  return single({attrs.get_dtype("dtype"), std::move(shape)});
}

Expected<std::vector<Array>> eval_one_hot(std::span<const Array> in, const Attrs& attrs,
                                          std::span<const TensorType> out) {
  const Array& indices = in[0];
  const int64_t depth = attrs.get_int("depth");
  const int axis = *normalize_axis(attrs.get_int("axis"), out[0].shape.rank());
  // Around the new axis, the indices split into `outer` (before it) and `inner` (after it).
  const std::vector<int64_t>& dims = indices.shape.dims();
  const int64_t outer = product(dims, 0, static_cast<size_t>(axis));
  const int64_t inner = product(dims, static_cast<size_t>(axis), dims.size());
  Array result(out[0].dtype, out[0].shape);
  std::fill(result.data.begin(), result.data.end(), attrs.get_float("off_value"));
  const double on_value = attrs.get_float("on_value");
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < inner; ++k) {
      // As ONNX: negative indices wrap once; anything else out of range leaves the row off.
      // Compared as doubles, so that no value is converted to int64 before it is known to fit.
      double index = indices[o * inner + k];
      if (index < 0) index += static_cast<double>(depth);
      if (index < 0 || index >= static_cast<double>(depth)) continue;
      result[(o * depth + static_cast<int64_t>(index)) * inner + k] = on_value;
    }
  }
  result.round_to_dtype();
  return std::vector<Array>{std::move(result)};
}

// ---- gradient rules -------------------------------------------------------------------------

std::vector<Value*> gradient_of_transpose(GraphBuilder& b, const Node& node,
                                          std::span<Value* const> grads) {
  const std::vector<int64_t> perm = transpose_perm(node.attrs(), node.input(0)->rank());
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  }
  return {b.transpose(grads[0], std::move(inverse))};
}

// Puts dy back at the positions slice read, zeros elsewhere: one axis at a time, by padding
// where the step is 1 and by scatter_add at start + step * i otherwise.
std::vector<Value*> gradient_of_slice(GraphBuilder& b, const Node& node,
                                      std::span<Value* const> grads) {
  const TensorType& x = node.input(0)->type();
  const SlicePlan plan = *plan_slice(x, node.attrs());
  const int rank = x.shape.rank();
  Value* dx = grads[0];
  std::vector<int64_t> dims = plan.shape.dims();
  for (int axis = 0; axis < rank; ++axis) {
    const size_t a = static_cast<size_t>(axis);
    const int64_t start = plan.start[a];
    const int64_t step = plan.step[a];
    const int64_t extent = plan.shape.dim(axis);
    const int64_t full = x.shape.dim(axis);
    if (start == 0 && step == 1 && extent == full) continue;
    dims[a] = full;
    if (step == 1) {
      std::vector<int64_t> pads(2 * static_cast<size_t>(rank), 0);
      pads[a] = start;
      pads[a + static_cast<size_t>(rank)] = full - start - extent;
      dx = b.pad(dx, std::move(pads));
    } else {
      Value* stride = b.scalar(static_cast<double>(step), DType::i64);
      Value* first = b.scalar(static_cast<double>(start), DType::i64);
      Value* indices = b.add(b.mul(b.iota(Shape{extent}), stride), first);
      dx = b.scatter_add(b.fill(Shape(dims), 0, x.dtype), indices, dx, axis);
    }
  }
  return {dx};
}

std::vector<Value*> gradient_of_concat(GraphBuilder& b, const Node& node,
                                       std::span<Value* const> grads) {
  const int64_t axis = node.attrs().get_int("axis");
  const int normalized = *normalize_axis(axis, node.output(0)->rank());
  std::vector<int64_t> sizes;
  for (const Value* input : node.inputs()) sizes.push_back(input->shape().dim(normalized));
  return b.split(grads[0], axis, std::move(sizes));
}

// Outputs without a gradient contribute zeros to the concatenation.
std::vector<Value*> gradient_of_split(GraphBuilder& b, const Node& node,
                                      std::span<Value* const> grads) {
  std::vector<Value*> pieces;
  for (int i = 0; i < node.num_outputs(); ++i) {
    const TensorType& type = node.output(i)->type();
    Value* grad = grads[static_cast<size_t>(i)];
    pieces.push_back(grad != nullptr ? grad : b.fill(type.shape, 0, type.dtype));
  }
  return {b.concat(pieces, node.attrs().get_int("axis"))};
}

// Padding by the negated pads undoes pad: it crops what was added and adds zeros where pad
// cropped.
std::vector<Value*> gradient_of_pad(GraphBuilder& b, const Node& node,
                                    std::span<Value* const> grads) {
  std::vector<int64_t> pads = node.attrs().get_ints("pads");
  for (int64_t& p : pads) p = -p;
  return {b.pad(grads[0], std::move(pads))};
}

std::vector<Value*> gradient_of_gather(GraphBuilder& b, const Node& node,
                                       std::span<Value* const> grads) {
  const TensorType& data = node.input(0)->type();
  Value* zeros = b.fill(data.shape, 0, data.dtype);
  const int64_t axis = node.attrs().get_int("axis");
  return {b.scatter_add(zeros, node.input(1), grads[0], axis), nullptr};
}

std::vector<Value*> gradient_of_scatter_add(GraphBuilder& b, const Node& node,
                                            std::span<Value* const> grads) {
  const int64_t axis = node.attrs().get_int("axis");
  return {grads[0], nullptr, b.gather(grads[0], node.input(1), axis)};
}

// Fills the fields every layout op shares.
OpDef& define(OpTable& table, Op op, std::string summary, std::vector<std::string> inputs) {
  OpDef& def = table.define(op);
  def.summary = std::move(summary);
  def.fusion_kind = FusionKind::injective;
  def.min_inputs = def.max_inputs = static_cast<int>(inputs.size());
  def.input_names = std::move(inputs);
  def.cost = per_element_cost(0);
  return def;
}

}  // namespace

void register_layout_ops(OpTable& table) {
  OpDef& constant = define(table, Op::constant, "a tensor given as attribute `value`", {});
  constant.attrs = {{"value", AttrKind::tensor, std::nullopt, "the tensor produced"}};
  constant.infer = infer_constant;
  constant.eval = eval_constant;
  constant.non_differentiable = "has no inputs";

  OpDef& reshape = define(table, Op::reshape, "same elements in row-major order, new shape", {"x"});
  reshape.attrs = {{"shape", AttrKind::ints, std::nullopt,
                    "new shape; one entry may be -1 (inferred), 0 is a zero extent"}};
  reshape.infer = infer_reshape;
  reshape.eval = eval_reshape;
  reshape.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    return std::vector<Value*>{b.reshape(grads[0], node.input(0)->shape().dims())};
  };

  OpDef& transpose =
      define(table, Op::transpose, "permute axes: out.shape[i] = x.shape[perm[i]]", {"x"});
  transpose.attrs = {{"perm", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
                      "permutation of 0..rank-1; empty reverses the axes"}};
  transpose.infer = infer_transpose;
  transpose.eval = eval_transpose;
  transpose.gradient = gradient_of_transpose;

  OpDef& broadcast_to = define(table, Op::broadcast_to, "NumPy-broadcast x to `shape`", {"x"});
  broadcast_to.attrs = {{"shape", AttrKind::ints, std::nullopt, "target shape"}};
  broadcast_to.infer = infer_broadcast_to;
  broadcast_to.eval = eval_broadcast_to;
  broadcast_to.gradient = [](GraphBuilder& b, const Node& node, std::span<Value* const> grads) {
    return std::vector<Value*>{b.sum_to(grads[0], node.input(0)->shape())};
  };

  OpDef& slice = define(table, Op::slice, "strided slice along axes, as ONNX Slice", {"x"});
  slice.attrs = {
      {"starts", AttrKind::ints, std::nullopt, "first index per sliced axis; negative from end"},
      {"ends", AttrKind::ints, std::nullopt, "exclusive end per sliced axis; clamped"},
      {"axes", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "axes sliced; empty means 0..len(starts)-1"},
      {"steps", AttrKind::ints, AttrValue(std::vector<int64_t>{}),
       "non-zero stride per sliced axis; empty means all 1"}};
  slice.infer = infer_slice;
  slice.eval = eval_slice;
  slice.gradient = gradient_of_slice;

  OpDef& concat = define(table, Op::concat, "join inputs along `axis`", {"inputs"});
  concat.min_inputs = 1;
  concat.max_inputs = kVariadic;
  concat.attrs = {{"axis", AttrKind::integer, std::nullopt, "axis to join; negative from end"}};
  concat.infer = infer_concat;
  concat.eval = eval_concat;
  concat.gradient = gradient_of_concat;

  OpDef& split = define(table, Op::split, "cut x along `axis` into pieces of `sizes`", {"x"});
  split.attrs = {{"axis", AttrKind::integer, AttrValue(0), "axis to cut; negative from end"},
                 {"sizes", AttrKind::ints, std::nullopt,
                  "extent of each output along axis; they sum to x's extent"}};
  split.infer = infer_split;
  split.eval = eval_split;
  split.gradient = gradient_of_split;

  OpDef& pad = define(table, Op::pad, "constant padding; negative pads crop", {"x"});
  pad.attrs = {
      {"pads", AttrKind::ints, std::nullopt, "[begin_0..begin_{r-1}, end_0..end_{r-1}], as ONNX"},
      {"value", AttrKind::floating, AttrValue(0.0), "value of the padding"}};
  pad.infer = infer_pad;
  pad.eval = eval_pad;
  pad.gradient = gradient_of_pad;

  OpDef& gather =
      define(table, Op::gather, "take slices of data at indices along `axis`", {"data", "indices"});
  gather.attrs = {{"axis", AttrKind::integer, AttrValue(0), "axis indexed; negative from end"}};
  gather.infer = infer_gather;
  gather.eval = eval_gather;
  gather.gradient = gradient_of_gather;

  OpDef& scatter_add = define(table, Op::scatter_add,
                              "data + updates added at indices along `axis` (gather's transpose)",
                              {"data", "indices", "updates"});
  scatter_add.fusion_kind = FusionKind::opaque;
  scatter_add.attrs = {
      {"axis", AttrKind::integer, AttrValue(0), "axis indexed; negative from end"}};
  scatter_add.cost = per_element_cost(1);
  scatter_add.infer = infer_scatter_add;
  scatter_add.eval = eval_scatter_add;
  scatter_add.gradient = gradient_of_scatter_add;

  OpDef& one_hot =
      define(table, Op::one_hot, "on_value where the new axis equals the index", {"indices"});
  one_hot.attrs = {
      {"depth", AttrKind::integer, std::nullopt, "extent of the new axis; positive"},
      {"axis", AttrKind::integer, AttrValue(-1), "position of the new axis in the output"},
      {"dtype", AttrKind::dtype, AttrValue(DType::f32), "output dtype"},
      {"on_value", AttrKind::floating, AttrValue(1.0), "value at the index"},
      {"off_value", AttrKind::floating, AttrValue(0.0), "value elsewhere"}};
  one_hot.infer = infer_one_hot;
  one_hot.eval = eval_one_hot;
  one_hot.non_differentiable = "input is an integer index";

  OpDef& iota = define(table, Op::iota, "each element is its index along `axis`", {});
  iota.attrs = {{"shape", AttrKind::ints, std::nullopt, "output shape; rank at least 1"},
                {"axis", AttrKind::integer, AttrValue(0), "axis counted; negative from end"},
                {"dtype", AttrKind::dtype, AttrValue(DType::i64), "output dtype"}};
  iota.infer = infer_iota;
  iota.eval = eval_iota;
  iota.non_differentiable = "has no inputs";

  OpDef& fill = define(table, Op::fill, "every element equal to `value`", {});
  fill.attrs = {{"shape", AttrKind::ints, std::nullopt, "output shape"},
                {"value", AttrKind::floating, AttrValue(0.0), "the element value"},
                {"dtype", AttrKind::dtype, AttrValue(DType::f32), "output dtype"}};
  fill.infer = infer_fill;
  fill.eval = eval_fill;
  fill.non_differentiable = "has no inputs";
}

}  // namespace kiln::ops
