// ONNX layout and shape ops: Reshape, Flatten, (Un)Squeeze, Transpose, Expand, Tile, Slice,
// Concat, Split, Pad, Gather, ScatterND, OneHot, DepthToSpace/SpaceToDepth, and the
// shape-computing ops (Shape, Size, ConstantOfShape, Range) that become constants because shapes
// are static.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/ranges.h>

#include "frontend/onnx_converter.h"

namespace kiln::onnx_import {
namespace {

Array i64_vector(const std::vector<int64_t>& values) {
  return Array(DType::i64, Shape{static_cast<int64_t>(values.size())},
               std::vector<double>(values.begin(), values.end()));
}

Expected<Operand> reshape(NodeContext& ctx, const Operand& x, std::vector<int64_t> dims) {
  return ctx.emit(Op::reshape, {x}, {{"shape", std::move(dims)}});
}

int64_t product(std::span<const int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// Axes from an attribute (before `input_opset`) or from input 1 (from it on), as the opset
// history of Squeeze, Unsqueeze, Reduce* and Split goes. Empty when neither is given.
Expected<std::vector<int64_t>> axes_attr_or_input(NodeContext& ctx, int input_opset,
                                                  std::string_view what, int input = 1) {
  if (ctx.opset() < input_opset) return ctx.attr_ints("axes", std::vector<int64_t>{});
  if (!ctx.has_input(input)) return std::vector<int64_t>{};
  return ctx.ints_input(input, what);
}

// Resolves each axis against `rank`; duplicates are an error.
Expected<std::vector<int>> normalize_axes(const std::vector<int64_t>& axes, int rank) {
  std::vector<int> result;
  for (int64_t axis : axes) {
    KILN_ASSIGN_OR_RETURN(int resolved, normalize_axis(axis, rank));
    if (std::find(result.begin(), result.end(), resolved) != result.end()) {
      return Status::errorf("axis {} is repeated in {}", axis, fmt::join(axes, ", "));
    }
    result.push_back(resolved);
  }
  return result;
}

Status convert_reshape(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  std::vector<int64_t> dims;
  if (ctx.opset() < 5) {
    KILN_ASSIGN_OR_RETURN(dims, ctx.attr_ints("shape"));
  } else {
    KILN_ASSIGN_OR_RETURN(dims, ctx.ints_input(1, "the target shape"));
  }
  KILN_ASSIGN_OR_RETURN(int64_t allow_zero, ctx.attr_int("allowzero", 0));
  if (allow_zero == 0) {
    // A 0 copies the input's extent at the same position.
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != 0) continue;
      if (static_cast<int>(i) >= x.rank()) {
        return Status::errorf("shape entry {} is 0 but the input has rank {}", i, x.rank());
      }
      dims[i] = x.shape().dim(static_cast<int>(i));
    }
  }
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, x, std::move(dims)));
  return ctx.set_output(0, y);
}

Status convert_flatten(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 1));
  // Flatten's axis may equal the rank (everything in the outer dimension); negative counts from
  // the end as for any axis.
  const int64_t axis = axis_attr < 0 ? axis_attr + x.rank() : axis_attr;
  if (axis < 0 || axis > x.rank()) {
    return Status::errorf("axis {} is out of range for rank {}", axis_attr, x.rank());
  }
  const std::span<const int64_t> dims = x.shape().dims();
  const int64_t outer = product(dims.subspan(0, static_cast<size_t>(axis)));
  const int64_t inner = product(dims.subspan(static_cast<size_t>(axis)));
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, x, {outer, inner}));
  return ctx.set_output(0, y);
}

Status convert_unsqueeze(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_attr_or_input(ctx, 13, "axes"));
  if (axes.empty()) return Status::error("Unsqueeze needs at least one axis");
  const int out_rank = x.rank() + static_cast<int>(axes.size());
  KILN_ASSIGN_OR_RETURN(std::vector<int> resolved, normalize_axes(axes, out_rank));
  std::vector<int64_t> dims;
  size_t next = 0;
  for (int i = 0; i < out_rank; ++i) {
    const bool inserted = std::find(resolved.begin(), resolved.end(), i) != resolved.end();
    dims.push_back(inserted ? 1 : x.shape().dim(static_cast<int>(next++)));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, x, std::move(dims)));
  return ctx.set_output(0, y);
}

Status convert_squeeze(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_attr_or_input(ctx, 13, "axes"));
  KILN_ASSIGN_OR_RETURN(std::vector<int> resolved, normalize_axes(axes, x.rank()));
  std::vector<int64_t> dims;
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t dim = x.shape().dim(i);
    const bool listed = std::find(resolved.begin(), resolved.end(), i) != resolved.end();
    if (listed && dim != 1) {
      return Status::errorf("cannot squeeze axis {} of extent {}", i, dim);
    }
    if (listed || (resolved.empty() && dim == 1)) continue;
    dims.push_back(dim);
  }
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, x, std::move(dims)));
  return ctx.set_output(0, y);
}

Status convert_transpose(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ctx.attr_ints("perm", std::vector<int64_t>{}));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::transpose, {x}, {{"perm", std::move(perm)}}));
  return ctx.set_output(0, y);
}

Status convert_expand(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ctx.ints_input(1, "the target shape"));
  KILN_ASSIGN_OR_RETURN(Shape target, Shape::make(std::move(dims)));
  // Expand broadcasts both ways: a 1 in `shape` keeps the input's extent.
  KILN_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(x.shape(), target));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::broadcast_to, {x}, {{"shape", out.dims()}}));
  return ctx.set_output(0, y);
}

// Tile: x [d0, d1, ...] is viewed as [1, d0, 1, d1, ...], broadcast to [r0, d0, r1, d1, ...] and
// merged back to [r0*d0, r1*d1, ...], so that out[i] = x[i mod d] on every axis.
Status convert_tile(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ctx.ints_input(1, "repeats"));
  if (static_cast<int>(repeats.size()) != x.rank()) {
    return Status::errorf("repeats has {} entries for an input of rank {}", repeats.size(),
                          x.rank());
  }
  std::vector<int64_t> interleaved_ones, interleaved, merged;
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t repeat = repeats[static_cast<size_t>(i)];
    if (repeat < 0) return Status::errorf("repeats has a negative entry {}", repeat);
    const int64_t dim = x.shape().dim(i);
    if (dim != 0 && repeat > kMaxElements / dim) {
      return Status::errorf("repeats entry {} makes axis {} longer than 2^48", repeat, i);
    }
    interleaved_ones.insert(interleaved_ones.end(), {1, dim});
    interleaved.insert(interleaved.end(), {repeat, dim});
    merged.push_back(repeat * dim);
  }
  KILN_ASSIGN_OR_RETURN(Operand spread, reshape(ctx, x, interleaved_ones));
  KILN_ASSIGN_OR_RETURN(Operand broadcast,
                        ctx.emit(Op::broadcast_to, {spread}, {{"shape", interleaved}}));
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, broadcast, merged));
  return ctx.set_output(0, y);
}

Status convert_slice(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10) {
    KILN_ASSIGN_OR_RETURN(starts, ctx.attr_ints("starts"));
    KILN_ASSIGN_OR_RETURN(ends, ctx.attr_ints("ends"));
    KILN_ASSIGN_OR_RETURN(axes, ctx.attr_ints("axes", std::vector<int64_t>{}));
  } else {
    KILN_ASSIGN_OR_RETURN(starts, ctx.ints_input(1, "starts"));
    KILN_ASSIGN_OR_RETURN(ends, ctx.ints_input(2, "ends"));
    if (ctx.has_input(3)) {
      KILN_ASSIGN_OR_RETURN(axes, ctx.ints_input(3, "axes"));
    }
    if (ctx.has_input(4)) {
      KILN_ASSIGN_OR_RETURN(steps, ctx.ints_input(4, "steps"));
    }
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::slice, {x}, {{"starts", std::move(starts)},
                                                            {"ends", std::move(ends)},
                                                            {"axes", std::move(axes)},
                                                            {"steps", std::move(steps)}}));
  return ctx.set_output(0, y);
}

Status convert_concat(NodeContext& ctx) {
  // Before opset 4 the axis defaulted to 1; from 4 on it is required.
  if (ctx.opset() < 4) return ctx.unsupported("Concat before opset 4");
  KILN_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis"));
  std::vector<Operand> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(Operand input, ctx.input(i));
    inputs.push_back(input);
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::concat, inputs, {{"axis", axis}}));
  return ctx.set_output(0, y);
}

Status convert_split(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t axis_attr, ctx.attr_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(axis_attr, x.rank()));
  const int64_t extent = x.shape().dim(axis);
  std::vector<int64_t> sizes;
  if (ctx.opset() < 13) {
    KILN_ASSIGN_OR_RETURN(sizes, ctx.attr_ints("split", std::vector<int64_t>{}));
  } else if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(sizes, ctx.ints_input(1, "split"));
  }
  if (sizes.empty()) {
    int64_t pieces = ctx.num_outputs();
    if (ctx.opset() >= 18 && ctx.has_attr("num_outputs")) {
      KILN_ASSIGN_OR_RETURN(pieces, ctx.attr_int("num_outputs"));
    }
    if (pieces <= 0) return Status::errorf("cannot split into {} pieces", pieces);
    if (pieces != ctx.num_outputs()) {
      return Status::errorf("num_outputs is {}, but the node has {} outputs", pieces,
                            ctx.num_outputs());
    }
    if (ctx.opset() < 18 && extent % pieces != 0) {
      return Status::errorf("axis {} of extent {} does not split evenly into {} pieces", axis,
                            extent, pieces);
    }
    // Opset 18: every piece has ceil(extent / pieces) elements but the last, which is smaller.
    const int64_t piece = (extent + pieces - 1) / pieces;
    for (int64_t i = 0; i < pieces; ++i) {
      sizes.push_back(std::max<int64_t>(0, std::min(piece, extent - i * piece)));
    }
  }
  if (static_cast<int>(sizes.size()) != ctx.num_outputs()) {
    return Status::errorf("split gives {} sizes for {} outputs", sizes.size(), ctx.num_outputs());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Operand> pieces,
                        ctx.emit_all(Op::split, {x}, {{"axis", axis_attr}, {"sizes", sizes}}));
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    KILN_RETURN_IF_ERROR(ctx.set_output(i, pieces[static_cast<size_t>(i)]));
  }
  return Status::ok();
}

// Pad's edge and reflect modes, one axis at a time: the pieces before and after are slices of
// x (its first or last element repeated, or the elements next to the border mirrored), joined
// to x with concat.
Expected<Operand> pad_from_edges(NodeContext& ctx, Operand x, const std::vector<int64_t>& pads,
                                 bool reflect) {
  const int rank = x.rank();
  if (pads.size() != 2 * static_cast<size_t>(rank)) {
    return Status::errorf("pads has {} entries for rank {}", pads.size(), rank);
  }
  constexpr int64_t kBeforeStart = std::numeric_limits<int64_t>::min();
  for (int axis = 0; axis < rank; ++axis) {
    const int64_t before = pads[static_cast<size_t>(axis)];
    const int64_t after = pads[static_cast<size_t>(axis + rank)];
    const int64_t dim = x.shape().dim(axis);
    if (before < 0 || after < 0) return ctx.unsupported("negative pads with edge or reflect");
    if (before == 0 && after == 0) continue;
    if (dim == 0 || (reflect && (before >= dim || after >= dim))) {
      return Status::errorf("axis {} of extent {} cannot be padded by {} and {} in this mode",
                            axis, dim, before, after);
    }
    std::vector<Operand> pieces;
    for (int side = 0; side < 2; ++side) {
      const int64_t count = side == 0 ? before : after;
      if (count == 0) {
        if (side == 0) pieces.push_back(x);
        continue;
      }
      Attrs slice;
      if (reflect) {  // x[count], ..., x[1] before; x[dim-2], ..., x[dim-1-count] after
        const int64_t start = side == 0 ? count : dim - 2;
        const int64_t end = side == 0 ? 0 : (dim - 2 - count >= 0 ? dim - 2 - count : kBeforeStart);
        slice = {{"starts", {start}}, {"ends", {end}}, {"axes", {axis}}, {"steps", {-1}}};
      } else {  // x[0] or x[dim-1], repeated
        const int64_t start = side == 0 ? 0 : dim - 1;
        slice = {{"starts", {start}}, {"ends", {start + 1}}, {"axes", {axis}}};
      }
      KILN_ASSIGN_OR_RETURN(Operand piece, ctx.emit(Op::slice, {x}, slice));
      if (!reflect) {
        std::vector<int64_t> dims = x.shape().dims();
        dims[static_cast<size_t>(axis)] = count;
        KILN_ASSIGN_OR_RETURN(piece, ctx.emit(Op::broadcast_to, {piece}, {{"shape", dims}}));
      }
      pieces.push_back(piece);
      if (side == 0) pieces.push_back(x);
    }
    KILN_ASSIGN_OR_RETURN(x, ctx.emit(Op::concat, pieces, {{"axis", axis}}));
  }
  return x;
}

Status convert_pad(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "constant"));
  if (mode != "constant" && mode != "edge" && mode != "reflect") {
    return ctx.unsupported(fmt::format("Pad mode '{}'", mode));
  }
  std::vector<int64_t> pads;
  double value = 0;
  if (ctx.opset() < 11) {
    KILN_ASSIGN_OR_RETURN(pads, ctx.attr_ints(ctx.opset() < 2 ? "paddings" : "pads"));
    KILN_ASSIGN_OR_RETURN(value, ctx.attr_float("value", 0.0));
  } else {
    KILN_ASSIGN_OR_RETURN(pads, ctx.ints_input(1, "pads"));
    if (ctx.has_input(2)) {
      KILN_ASSIGN_OR_RETURN(Array constant, ctx.constant_input(2, "constant_value"));
      if (constant.size() != 1) return Status::error("constant_value must hold one element");
      value = constant[0];
    }
  }
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    // Pads given for some axes only: spread them over all axes.
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.ints_input(3, "axes"));
    KILN_ASSIGN_OR_RETURN(std::vector<int> resolved, normalize_axes(axes, x.rank()));
    if (pads.size() != 2 * axes.size()) {
      return Status::errorf("pads has {} entries for {} axes", pads.size(), axes.size());
    }
    std::vector<int64_t> full(2 * static_cast<size_t>(x.rank()), 0);
    for (size_t i = 0; i < resolved.size(); ++i) {
      full[static_cast<size_t>(resolved[i])] = pads[i];
      full[static_cast<size_t>(resolved[i] + x.rank())] = pads[i + axes.size()];
    }
    pads = std::move(full);
  }
  if (mode != "constant") {
    KILN_ASSIGN_OR_RETURN(Operand y, pad_from_edges(ctx, x, pads, mode == "reflect"));
    return ctx.set_output(0, y);
  }
  KILN_ASSIGN_OR_RETURN(Operand y,
                        ctx.emit(Op::pad, {x}, {{"pads", std::move(pads)}, {"value", value}}));
  return ctx.set_output(0, y);
}

Status convert_gather(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand data, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Operand indices, ctx.input(1));
  KILN_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::gather, {data, indices}, {{"axis", axis}}));
  return ctx.set_output(0, y);
}

// ScatterND with indices known at import, as exporters emit it for slice assignment
// (x[a:b, c:d] = v, whose indices come from static shapes). The first k dimensions of data
// become one axis and each index tuple one position on it. The updates are applied in rounds,
// each holding at most one update per position (the first occurrence of each position, then the
// second, ...): a round scatter_adds its updates into zeros and combines them with the result
// so far where its positions are. So duplicate indices act in order, as the ONNX reference
// applies them (for "none", which ONNX leaves undefined with duplicates, the last one wins).
// "add" is one scatter_add into data, which sums duplicates itself.
Status convert_scatter_nd(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand data, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Array indices, ctx.constant_input(1, "indices"));
  KILN_ASSIGN_OR_RETURN(Operand updates, ctx.input(2));
  std::string reduction = "none";
  if (ctx.opset() >= 16) {
    KILN_ASSIGN_OR_RETURN(reduction, ctx.attr_string("reduction", "none"));
  }
  const std::map<std::string, std::optional<Op>> combine = {
      {"none", std::nullopt}, {"add", Op::add}, {"mul", Op::mul}, {"max", Op::max},
      {"min", Op::min}};
  if (!combine.contains(reduction)) {
    return ctx.unsupported(fmt::format("reduction '{}'", reduction));
  }
  const std::vector<int64_t>& d = data.shape().dims();
  const std::vector<int64_t>& q = indices.shape.dims();
  if (!is_integer(indices.dtype) || q.empty() || q.back() < 1 || q.back() > data.rank()) {
    return Status::errorf("indices ({}) must be integers whose last dimension is 1 to the rank "
                          "of data ({})",
                          indices.type().to_string(), data.type().to_string());
  }
  const auto k = static_cast<size_t>(q.back());
  const std::vector<int64_t> rest(d.begin() + static_cast<ptrdiff_t>(k), d.end());
  std::vector<int64_t> update_dims(q.begin(), q.end() - 1);
  const int64_t n = product(update_dims);
  update_dims.insert(update_dims.end(), rest.begin(), rest.end());
  if (updates.dtype() != data.dtype() || updates.shape().dims() != update_dims) {
    return Status::errorf("updates ({}) must be {}{}", updates.type().to_string(),
                          dtype_name(data.dtype()), Shape(update_dims).to_string());
  }
  // Row-major positions on the flattened axis (negative indices count from the end), sorted
  // into rounds: round r holds each position's r-th update, as (update row, position).
  const int64_t outer = product(std::span(d).first(k));
  if (outer > kMaxFoldElements) {
    return ctx.unsupported(fmt::format("ScatterND into more than {} index positions",
                                       kMaxFoldElements));
  }
  constexpr size_t kMaxRounds = 64;
  std::vector<size_t> occurrences(static_cast<size_t>(outer), 0);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rounds;
  for (int64_t i = 0; i < n; ++i) {
    int64_t position = 0;
    for (size_t j = 0; j < k; ++j) {
      const double index = indices[i * static_cast<int64_t>(k) + static_cast<int64_t>(j)];
      const auto extent = static_cast<double>(d[j]);
      if (index < -extent || index >= extent) {
        return Status::errorf("index {} is out of range for dimension {} of data ({})", index, j,
                              data.type().to_string());
      }
      position = position * d[j] + static_cast<int64_t>(index < 0 ? index + extent : index);
    }
    const size_t round = reduction == "add" ? 0 : occurrences[static_cast<size_t>(position)]++;
    if (round == kMaxRounds) {
      return ctx.unsupported(fmt::format("ScatterND updating one position more than {} times",
                                         kMaxRounds));
    }
    if (round == rounds.size()) rounds.emplace_back();
    rounds[round].emplace_back(i, position);
  }
  std::vector<int64_t> flat_dims = {outer};
  flat_dims.insert(flat_dims.end(), rest.begin(), rest.end());
  std::vector<int64_t> flat_update_dims = {n};
  flat_update_dims.insert(flat_update_dims.end(), rest.begin(), rest.end());
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, data, flat_dims));
  KILN_ASSIGN_OR_RETURN(Operand flat_updates, reshape(ctx, updates, flat_update_dims));
  if (reduction == "add") {
    std::vector<double> positions;  // all in the one round, in update order
    for (const auto& round : rounds) {
      for (const auto& entry : round) positions.push_back(static_cast<double>(entry.second));
    }
    const Operand where = Operand::of(Array(DType::i64, Shape{n}, std::move(positions)));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::scatter_add, {y, where, flat_updates},
                                      {{"axis", int64_t{0}}}));
    KILN_ASSIGN_OR_RETURN(y, reshape(ctx, y, d));
    return ctx.set_output(0, y);
  }
  KILN_ASSIGN_OR_RETURN(Operand zeros, ctx.emit(Op::fill, {}, {{"shape", flat_dims},
                                                               {"value", 0.0},
                                                               {"dtype", data.dtype()}}));
  std::vector<int64_t> mask_dims(flat_dims.size(), 1);
  mask_dims[0] = outer;
  for (const auto& round : rounds) {
    const auto m = static_cast<int64_t>(round.size());
    std::vector<double> rows, positions;
    std::vector<double> hit(static_cast<size_t>(outer), 0.0);
    for (const auto& [row, position] : round) {
      rows.push_back(static_cast<double>(row));
      positions.push_back(static_cast<double>(position));
      hit[static_cast<size_t>(position)] = 1;
    }
    Operand round_updates = flat_updates;
    if (m != n) {  // only some rows: gather them
      KILN_ASSIGN_OR_RETURN(
          round_updates,
          ctx.emit(Op::gather, {flat_updates, Operand::of(Array(DType::i64, Shape{m}, rows))},
                   {{"axis", int64_t{0}}}));
    }
    const Operand where = Operand::of(Array(DType::i64, Shape{m}, std::move(positions)));
    KILN_ASSIGN_OR_RETURN(Operand placed, ctx.emit(Op::scatter_add, {zeros, where, round_updates},
                                                   {{"axis", int64_t{0}}}));
    if (const std::optional<Op> op = combine.at(reduction)) {
      KILN_ASSIGN_OR_RETURN(placed, ctx.emit(*op, {y, placed}));
    }
    const Operand mask = Operand::of(Array(DType::boolean, Shape(mask_dims), std::move(hit)));
    KILN_ASSIGN_OR_RETURN(y, ctx.emit(Op::where, {mask, placed, y}));
  }
  KILN_ASSIGN_OR_RETURN(y, reshape(ctx, y, d));
  return ctx.set_output(0, y);
}

Status convert_one_hot(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand indices, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(Array depth, ctx.constant_input(1, "depth"));
  KILN_ASSIGN_OR_RETURN(Array values, ctx.constant_input(2, "values"));
  KILN_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", -1));
  if (depth.size() != 1 || !(std::abs(depth[0]) <= static_cast<double>(kMaxElements))) {
    return Status::error("depth must hold one element of magnitude at most 2^48");
  }
  if (values.size() != 2) return Status::error("values must hold [off_value, on_value]");
  // ONNX allows a fractional depth and truncates it.
  const auto depth_value = static_cast<int64_t>(std::trunc(depth[0]));
  if (is_floating(indices.dtype())) {
    // Fractional indices truncate toward zero, as the ONNX reference casts them to int64.
    KILN_ASSIGN_OR_RETURN(indices, ctx.emit(Op::cast, {indices}, {{"to", DType::i64}}));
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::one_hot, {indices},
                                            {{"depth", depth_value},
                                             {"axis", axis},
                                             {"dtype", values.dtype},
                                             {"on_value", values[1]},
                                             {"off_value", values[0]}}));
  return ctx.set_output(0, y);
}

// DepthToSpace and SpaceToDepth on [N, C, H, W] with block size b, as reshape-transpose-reshape.
Status convert_depth_to_space(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize"));
  KILN_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "DCR"));
  if (x.rank() != 4) return Status::errorf("input must be 4-d, got {}", x.type().to_string());
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  if (b <= 0 || b > c / b || c % (b * b) != 0) {
    return Status::errorf("channels {} are not divisible by the square of blocksize {}", c, b);
  }
  const int64_t oc = c / (b * b);
  std::vector<int64_t> split_dims, perm;
  if (mode == "DCR") {
    split_dims = {n, b, b, oc, h, w};
    perm = {0, 3, 4, 1, 5, 2};
  } else if (mode == "CRD") {
    split_dims = {n, oc, b, b, h, w};
    perm = {0, 1, 4, 2, 5, 3};
  } else {
    return ctx.unsupported(fmt::format("DepthToSpace mode '{}'", mode));
  }
  KILN_ASSIGN_OR_RETURN(Operand split, reshape(ctx, x, split_dims));
  KILN_ASSIGN_OR_RETURN(Operand moved, ctx.emit(Op::transpose, {split}, {{"perm", perm}}));
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, moved, {n, oc, h * b, w * b}));
  return ctx.set_output(0, y);
}

Status convert_space_to_depth(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  KILN_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize"));
  if (x.rank() != 4) return Status::errorf("input must be 4-d, got {}", x.type().to_string());
  const int64_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
  if (b <= 0 || h % b != 0 || w % b != 0 || c > kMaxElements / b / b) {
    return Status::errorf("spatial extents {}x{} are not divisible by blocksize {}, or {} "
                          "channels times its square exceed 2^48", h, w, b, c);
  }
  KILN_ASSIGN_OR_RETURN(Operand split, reshape(ctx, x, {n, c, h / b, b, w / b, b}));
  KILN_ASSIGN_OR_RETURN(Operand moved,
                        ctx.emit(Op::transpose, {split}, {{"perm", {0, 3, 5, 1, 2, 4}}}));
  KILN_ASSIGN_OR_RETURN(Operand y, reshape(ctx, moved, {n, c * b * b, h / b, w / b}));
  return ctx.set_output(0, y);
}

// ---- shape computations: constants, because shapes are static --------------------------------

Status convert_shape(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  const int rank = x.rank();
  KILN_ASSIGN_OR_RETURN(int64_t start, ctx.attr_int("start", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end, ctx.attr_int("end", rank));
  // As ONNX: negative values count from the end, then both clamp to [0, rank].
  const auto clamp = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  start = clamp(start);
  end = clamp(end);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x.shape().dim(static_cast<int>(i)));
  return ctx.set_output(0, Operand::of(i64_vector(dims)));
}

Status convert_size(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Operand x, ctx.input(0));
  return ctx.set_output(
      0, scalar(DType::i64, static_cast<double>(x.shape().num_elements())));
}

Status convert_constant_of_shape(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ctx.ints_input(0, "the shape"));
  Array value = Array::scalar(DType::f32, 0.0);
  if (ctx.has_attr("value")) {
    KILN_ASSIGN_OR_RETURN(value, ctx.attr_tensor("value"));
    if (value.size() != 1) return Status::error("attribute 'value' must hold one element");
  }
  KILN_ASSIGN_OR_RETURN(Operand y, ctx.emit(Op::fill, {}, {{"shape", std::move(dims)},
                                                          {"value", value[0]},
                                                          {"dtype", value.dtype}}));
  return ctx.set_output(0, y);
}

Status convert_range(NodeContext& ctx) {
  KILN_ASSIGN_OR_RETURN(Array start, ctx.constant_input(0, "start"));
  KILN_ASSIGN_OR_RETURN(Array limit, ctx.constant_input(1, "limit"));
  KILN_ASSIGN_OR_RETURN(Array delta, ctx.constant_input(2, "delta"));
  if (start.size() != 1 || limit.size() != 1 || delta.size() != 1) {
    return Status::error("start, limit and delta must be scalars");
  }
  if (delta[0] == 0) return Status::error("delta must not be zero");
  const double count = std::max(std::ceil((limit[0] - start[0]) / delta[0]), 0.0);
  if (!(count <= static_cast<double>(kMaxFoldElements))) {
    return Status::errorf("Range would have {} elements, more than the {} it may have", count,
                          kMaxFoldElements);
  }
  const auto n = static_cast<int64_t>(count);
  // Elements are start + i * delta, as the ONNX reference computes them.
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = start[0] + i * delta[0];
  return ctx.set_output(0, Operand::of(Array(start.dtype, Shape{n}, std::move(values))));
}

}  // namespace

std::vector<ConverterEntry> layout_converters() {
  return {
      {"Reshape", &convert_reshape},
      {"Flatten", &convert_flatten},
      {"Unsqueeze", &convert_unsqueeze},
      {"Squeeze", &convert_squeeze},
      {"Transpose", &convert_transpose},
      {"Expand", &convert_expand},
      {"Tile", &convert_tile},
      {"Slice", &convert_slice},
      {"Concat", &convert_concat},
      {"Split", &convert_split},
      {"Pad", &convert_pad},
      {"Gather", &convert_gather},
      {"ScatterND", &convert_scatter_nd},
      {"OneHot", &convert_one_hot},
      {"DepthToSpace", &convert_depth_to_space},
      {"SpaceToDepth", &convert_space_to_depth},
      {"Shape", &convert_shape},
      {"Size", &convert_size},
      {"ConstantOfShape", &convert_constant_of_shape},
      {"Range", &convert_range},
  };
}

}  // namespace kiln::onnx_import
