#include "loop/lowering/lowering_family.h"

#include "support/check.h"

namespace kiln::loop::lowering {

void LoweringTable::define(Op op, ComputeFn compute) {
  entries_[static_cast<size_t>(op)].compute = std::move(compute);
}

void LoweringTable::store_with(Op op, StoreNest nest) {
  entries_[static_cast<size_t>(op)].store_nest = std::move(nest);
}

Expr constant_of(DType dtype, double value) {
  return make_const(dtype, round_to_dtype(value, dtype));
}

std::vector<Expr> broadcast_index(const std::vector<Expr>& index, const Shape& shape) {
  const size_t skipped = index.size() - static_cast<size_t>(shape.rank());
  std::vector<Expr> result;
  for (int d = 0; d < shape.rank(); ++d) {
    result.push_back(shape.dim(d) == 1 ? Expr(0) : index[skipped + static_cast<size_t>(d)]);
  }
  return result;
}

Expr clamp_index(const Expr& index, int64_t extent) {
  return min(max(index, 0), std::max<int64_t>(extent - 1, 0));
}

Expr bind(NameGenerator& names, const Expr& value, const std::function<Expr(const Expr&)>& body) {
  if (is_const(value) || value.as<Variable>() != nullptr) return body(value);
  const std::string name = names.fresh("v");
  return let(name, value, body(var(name, value.type())));
}

Expr widen_for_accumulation(const Expr& value) {
  return narrow_to(accumulation_dtype(value.type()), value);
}

Expr narrow_to(DType dtype, const Expr& value) {
  return value.type() == dtype ? value : cast(dtype, value);
}

Expr reduce_nest(ReduceOp op, const std::vector<int64_t>& extents, NameGenerator& names,
                 const std::function<Expr(const std::vector<Expr>&)>& body) {
  std::vector<std::string> vars;
  std::vector<Expr> k;
  for (size_t i = 0; i < extents.size(); ++i) {
    vars.push_back(names.fresh("k"));
    k.push_back(var(vars.back()));
  }
  Expr result = body(k);
  if (extents.empty()) return result;
  const DType term_dtype = result.type();
  const bool accumulates = op == ReduceOp::sum || op == ReduceOp::prod;
  if (accumulates) result = widen_for_accumulation(result);
  for (size_t i = extents.size(); i-- > 0;) {
    result = reduce(op, vars[i], 0, extents[i], result);
  }
  return narrow_to(term_dtype, result);
}

Expr row_major_offset(const std::vector<Expr>& index, const Shape& shape) {
  const std::vector<int64_t> strides = shape.strides();
  Expr offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset = offset + index[d] * strides[d];
  return offset;
}

std::vector<Expr> symbolic_index(int rank, NameGenerator& names) {
  std::vector<Expr> index;
  for (int d = 0; d < rank; ++d) index.push_back(var(names.fresh("i")));
  return index;
}

int64_t dims_product(const Shape& shape, int begin, int end) {
  int64_t product = 1;
  for (int axis = begin; axis < end; ++axis) product *= shape.dim(axis);
  return product;
}

int axis_of(int64_t axis, int rank) {
  Expected<int> normalized = normalize_axis(axis, rank);
  KILN_CHECK(normalized.has_value(), "axis {} of rank {} passed type inference", axis, rank);
  return *normalized;
}

namespace {

std::vector<int64_t> per_dim(const Attrs& attrs, std::string_view name, size_t count,
                             int64_t fill) {
  std::vector<int64_t> values = attrs.get_ints(name);
  if (values.empty()) values.assign(count, fill);
  return values;
}

}  // namespace

ConvParams conv_params(const Attrs& attrs, int spatial) {
  const auto s = static_cast<size_t>(spatial);
  const std::vector<int64_t> pads = per_dim(attrs, "pads", 2 * s, 0);
  return {per_dim(attrs, "strides", s, 1),
          std::vector<int64_t>(pads.begin(), pads.begin() + spatial),
          per_dim(attrs, "dilations", s, 1), attrs.get_int("groups")};
}

Expr tap_position(const ConvParams& p, size_t d, const Expr& out, const Expr& tap) {
  return out * p.strides[d] - p.pads_begin[d] + tap * p.dilations[d];
}

}  // namespace kiln::loop::lowering
