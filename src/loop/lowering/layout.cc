// Lowerings of the layout and data-movement ops (ir/ops/layout.cc): each output element reads
// one input element at an index computed from the output index.
//
//   transpose (perm [1, 0]):   out[i0, i1] = x[i1, i0]
//   reshape ([2, 3] to [3, 2]): out[i0, i1] = x[(i0*2 + i1) / 3, (i0*2 + i1) % 3]
//   concat (axis 0, a [2], b [3]): out[i0] = i0 < 2 ? a[min(i0, 1)] : b[clamp(i0 - 2)]
//
// Both branches of a select are evaluated, so reads a select discards are clamped into range.
// gather wraps negative indices once, as the interpreter; an index still out of range (an
// error there) is clamped here. constant is a literal when it holds one element; larger
// constants are kernel parameters, which lower_group binds to the constant node's value.
// scatter_add is written in gather form: each output element is its data element plus the sum,
// over every position k of the indices, of updates[.., k, ..] where indices[k] (wrapped and
// clamped as gather's) names this element's position along the axis. That is O(number of
// indices) per output element, quadratic for an embedding gradient (vocabulary x tokens), so
// lower_group stores scatter_add of f32, f64, i32 and i64 in one pass instead (its store
// nest, scatter_nest: an accumulating store per update, linear in the updates); this
// definition is the oracle and serves bool, f16 and bf16 (a bool sum is an integer sum
// converted back; 16-bit floats would round after every partial sum).
#include <algorithm>

#include "loop/lowering/group_context.h"
#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

std::vector<Expr> flat_to_index(const Expr& flat, const Shape& shape) {
  std::vector<Expr> index;
  const std::vector<int64_t> strides = shape.strides();
  for (int d = 0; d < shape.rank(); ++d) {
    index.push_back(flat / strides[static_cast<size_t>(d)] % shape.dim(d));
  }
  return index;
}

Expr flat_offset(const std::vector<Expr>& index, const Shape& shape) {
  const std::vector<int64_t> strides = shape.strides();
  Expr flat = 0;
  for (size_t d = 0; d < index.size(); ++d) flat = flat + index[d] * strides[d];
  return flat;
}

Expected<Expr> lower_reshape(const ComputeArgs& args) {
  const Expr flat = flat_offset(args.index, args.outputs[0].shape);
  return args.input(0, flat_to_index(flat, args.inputs[0].shape));
}

Expected<Expr> lower_transpose(const ComputeArgs& args) {
  const int rank = args.inputs[0].shape.rank();
  std::vector<int64_t> perm = args.attrs.get_ints("perm");
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  std::vector<Expr> index(static_cast<size_t>(rank));
  for (size_t i = 0; i < perm.size(); ++i) index[static_cast<size_t>(perm[i])] = args.index[i];
  return args.input(0, index);
}

Expected<Expr> lower_broadcast_to(const ComputeArgs& args) {
  return args.input(0, broadcast_index(args.index, args.inputs[0].shape));
}

// The first index and step of each axis of a slice (ONNX Slice's clamping), as
// ir/ops/layout.cc plans it; the ends only set the output extents, which type inference
// computed.
struct SlicePlan {
  std::vector<int64_t> start;
  std::vector<int64_t> step;
};

SlicePlan plan_slice(const Shape& x, const Attrs& attrs) {
  const std::vector<int64_t>& starts = attrs.get_ints("starts");
  const std::vector<int64_t>& axes = attrs.get_ints("axes");
  const std::vector<int64_t>& steps = attrs.get_ints("steps");
  SlicePlan plan{std::vector<int64_t>(static_cast<size_t>(x.rank()), 0),
                 std::vector<int64_t>(static_cast<size_t>(x.rank()), 1)};
  for (size_t i = 0; i < starts.size(); ++i) {
    const auto a = static_cast<size_t>(
        axis_of(axes.empty() ? static_cast<int64_t>(i) : axes[i], x.rank()));
    const int64_t step = steps.empty() ? 1 : steps[i];
    const int64_t dim = x.dim(static_cast<int>(a));
    const int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    plan.start[a] = step > 0 ? std::clamp<int64_t>(start, 0, dim)
                             : std::clamp<int64_t>(start, -1, dim - 1);
    plan.step[a] = step;
  }
  return plan;
}

Expected<Expr> lower_slice(const ComputeArgs& args) {
  const SlicePlan plan = plan_slice(args.inputs[0].shape, args.attrs);
  std::vector<Expr> index;
  for (size_t a = 0; a < args.index.size(); ++a) {
    index.push_back(args.index[a] * plan.step[a] + plan.start[a]);
  }
  return args.input(0, index);
}

Expected<Expr> lower_concat(const ComputeArgs& args) {
  const int rank = args.outputs[0].shape.rank();
  const auto axis = static_cast<size_t>(axis_of(args.attrs.get_int("axis"), rank));
  // The last non-empty input is the fallback; earlier ones are selected by position.
  Expr result;
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const TensorType& in : args.inputs) {
    offsets.push_back(offset);
    offset += in.shape.dim(static_cast<int>(axis));
  }
  for (size_t i = args.inputs.size(); i-- > 0;) {
    const int64_t extent = args.inputs[i].shape.dim(static_cast<int>(axis));
    if (extent == 0) continue;
    std::vector<Expr> index = args.index;
    index[axis] = clamp_index(args.index[axis] - offsets[i], extent);
    const Expr element = args.input(static_cast<int>(i), index);
    result = result.defined() ? select(args.index[axis] < offsets[i] + extent, element, result)
                              : element;
  }
  return result;
}

Expected<Expr> lower_split(const ComputeArgs& args) {
  const int rank = args.inputs[0].shape.rank();
  const auto axis = static_cast<size_t>(axis_of(args.attrs.get_int("axis"), rank));
  int64_t offset = 0;
  for (int i = 0; i < args.output; ++i) offset += args.outputs[i].shape.dim(static_cast<int>(axis));
  std::vector<Expr> index = args.index;
  index[axis] = index[axis] + offset;
  return args.input(0, index);
}

Expected<Expr> lower_pad(const ComputeArgs& args) {
  const Shape& x = args.inputs[0].shape;
  const DType dtype = args.outputs[0].dtype;
  const Expr value = constant_of(dtype, args.attrs.get_float("value"));
  if (x.num_elements() == 0) return value;
  const std::vector<int64_t>& pads = args.attrs.get_ints("pads");
  Expr inside = make_bool(true);
  std::vector<Expr> index;
  for (int d = 0; d < x.rank(); ++d) {
    const Expr source = args.index[static_cast<size_t>(d)] - pads[static_cast<size_t>(d)];
    inside = inside && source >= 0 && source < x.dim(d);
    index.push_back(clamp_index(source, x.dim(d)));
  }
  return select(inside, args.input(0, index), value);
}

Expected<Expr> lower_gather(const ComputeArgs& args) {
  const Shape& data = args.inputs[0].shape;
  const int indices_rank = args.inputs[1].shape.rank();
  const int axis = axis_of(args.attrs.get_int("axis"), data.rank());
  const int64_t extent = data.dim(axis);
  const auto first = args.index.begin() + axis;
  const std::vector<Expr> position(first, first + indices_rank);
  const Expr raw = cast(DType::i64, args.input(1, position));
  return bind(args.names, raw, [&](const Expr& j) {
    std::vector<Expr> index(args.index.begin(), first);
    index.push_back(clamp_index(select(j < 0, j + extent, j), extent));
    index.insert(index.end(), first + indices_rank, args.index.end());
    return args.input(0, index);
  });
}

// out[.., i, ..] = data[.., i, ..] + sum over k of
// select(clamp(wrap(indices[k])) == i, updates[.., k, ..], 0), the updates indexed as gather's
// output: data's leading dims, the indices' dims, data's trailing dims. An index out of range
// (an error in the interpreter) is clamped, so that scatter_add stays gather's transpose. bool
// sums in i32 and converts back (x != 0), as the interpreter rounds its sum to bool: any true.
Expected<Expr> lower_scatter_add(const ComputeArgs& args) {
  const Shape& data = args.inputs[0].shape;
  const Shape& indices = args.inputs[1].shape;
  const int axis = axis_of(args.attrs.get_int("axis"), data.rank());
  const int64_t extent = data.dim(axis);
  const auto first = args.index.begin() + axis;
  const DType dtype = args.outputs[0].dtype;
  const DType sum_type = dtype == DType::boolean ? DType::i32 : dtype;
  auto summand = [&](const Expr& e) { return sum_type == dtype ? e : cast(sum_type, e); };
  const Expr zero = make_zero(sum_type);
  const Expr updates =
      reduce_nest(ReduceOp::sum, indices.dims(), args.names, [&](const std::vector<Expr>& k) {
        const Expr raw = cast(DType::i64, args.input(1, k));
        return bind(args.names, raw, [&](const Expr& j) {
          std::vector<Expr> index(args.index.begin(), first);
          index.insert(index.end(), k.begin(), k.end());
          index.insert(index.end(), first + 1, args.index.end());
          const Expr target = clamp_index(select(j < 0, j + extent, j), extent);
          return select(target == *first, summand(args.input(2, index)), zero);
        });
      });
  const Expr total = summand(args.input(0, args.index)) + updates;
  return sum_type == dtype ? total : cast(dtype, total);
}

// The dtypes whose scatter_add is stored by scatter_nest.
bool scatters_in_one_pass(const Node& node) {
  const DType dtype = node.output(0)->dtype();
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::i32 || dtype == DType::i64;
}

// scatter_add in one pass: the output starts as a copy of data, then each update is added
// where its index points, in the order of the indices (duplicates accumulate, so the loop
// over the indices is serial; the trailing dims, contiguous, can be vectorized):
//
//   for (i...) out[i...] = data[i...]
//   for (lead...) for (k...) let j = clamp(wrap(indices[k...])) in
//     for (trail...) out[lead, j, trail] = out[lead, j, trail] + updates[lead, k, trail]
//
// An index out of range (an error in the interpreter) is clamped, as gather's.
Expected<Stmt> scatter_nest(const Value& value, GroupContext& group) {
  const Node& node = *value.producer();
  const Shape& data = node.input(0)->shape();
  const Shape& indices = node.input(1)->shape();
  const int axis = axis_of(node.attrs().get_int("axis"), data.rank());
  AccessErrors errors;
  const InputAccessor input = group.inputs(node, errors);
  // The copy of data.
  std::vector<std::string> copy_vars;
  const std::vector<Expr> copy_index = group.fresh_index(data.dims(), copy_vars);
  const Stmt copy = loop_nest(copy_vars, data.dims(),
                              group.store_element(value, copy_index, input(0, copy_index)));
  // The updates.
  const std::vector<int64_t> lead(data.dims().begin(), data.dims().begin() + axis);
  const std::vector<int64_t> trail(data.dims().begin() + axis + 1, data.dims().end());
  std::vector<std::string> lead_vars, k_vars, trail_vars;
  const std::vector<Expr> a = group.fresh_index(lead, lead_vars);
  const std::vector<Expr> k = group.fresh_index(indices.dims(), k_vars);
  const std::vector<Expr> t = group.fresh_index(trail, trail_vars);
  const std::string j = group.names().fresh("j");
  std::vector<Expr> target = a, source = a;
  target.push_back(var(j));
  source.insert(source.end(), k.begin(), k.end());
  target.insert(target.end(), t.begin(), t.end());
  source.insert(source.end(), t.begin(), t.end());
  const Stmt add =
      group.store_element(value, target, group.load_from(value, target) + input(2, source));
  const int64_t extent = data.dim(axis);
  const Expr raw = cast(DType::i64, input(1, k));
  const Expr wrapped = clamp_index(select(raw < 0, raw + extent, raw), extent);
  const Stmt updates = loop_nest(
      lead_vars, lead,
      loop_nest(k_vars, indices.dims(), let_stmt(j, wrapped, loop_nest(trail_vars, trail, add))));
  return errors.result(block({copy, updates}));
}

Expected<Expr> lower_one_hot(const ComputeArgs& args) {
  const int axis = axis_of(args.attrs.get_int("axis"), args.outputs[0].shape.rank());
  const int64_t depth = args.attrs.get_int("depth");
  const DType dtype = args.outputs[0].dtype;
  std::vector<Expr> position = args.index;
  position.erase(position.begin() + axis);
  const Expr raw = cast(DType::i64, args.input(0, position));
  return bind(args.names, raw, [&](const Expr& j) {
    return select(select(j < 0, j + depth, j) == args.index[static_cast<size_t>(axis)],
                  constant_of(dtype, args.attrs.get_float("on_value")),
                  constant_of(dtype, args.attrs.get_float("off_value")));
  });
}

Expected<Expr> lower_iota(const ComputeArgs& args) {
  const int axis = axis_of(args.attrs.get_int("axis"), args.outputs[0].shape.rank());
  return cast(args.outputs[0].dtype, args.index[static_cast<size_t>(axis)]);
}

Expected<Expr> lower_fill(const ComputeArgs& args) {
  return constant_of(args.outputs[0].dtype, args.attrs.get_float("value"));
}

Expected<Expr> lower_constant(const ComputeArgs& args) {
  const Array& value = args.attrs.get_tensor("value");
  if (value.size() != 1) {
    return Status::errorf(
        "a constant of {} elements has no element-wise definition: it is a kernel parameter",
        value.size());
  }
  return constant_of(args.outputs[0].dtype, value[0]);
}

}  // namespace

void register_layout_lowerings(LoweringTable& table) {
  table.define(Op::constant, &lower_constant);
  table.define(Op::reshape, &lower_reshape);
  table.define(Op::transpose, &lower_transpose);
  table.define(Op::broadcast_to, &lower_broadcast_to);
  table.define(Op::slice, &lower_slice);
  table.define(Op::concat, &lower_concat);
  table.define(Op::split, &lower_split);
  table.define(Op::pad, &lower_pad);
  table.define(Op::gather, &lower_gather);
  table.define(Op::scatter_add, &lower_scatter_add);
  table.store_with(Op::scatter_add, {.applies = &scatters_in_one_pass, .build = &scatter_nest});
  table.define(Op::one_hot, &lower_one_hot);
  table.define(Op::iota, &lower_iota);
  table.define(Op::fill, &lower_fill);
  // Collectives have no element: each runs as a program step of its own (ir/op.h: collective).
  for (const Op collective : {Op::all_reduce, Op::broadcast}) {
    table.define(collective, [](const ComputeArgs&) -> Expected<Expr> {
      return Status::error(ErrorCode::unsupported,
                           "a collective runs as a program step of its own, not in a kernel");
    });
  }
}

}  // namespace kiln::loop::lowering
