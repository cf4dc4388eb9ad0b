// Lowerings of the reductions (ir/ops/reduction.cc): a nest of reduce expressions over the
// reduced axes, the kept axes read from the output index.
//
//   sum (x [2, 3, 4], axes [0, 2]):  out[i0] = sum(k0, 0, 2, sum(k1, 0, 4, x[k0, i0, k1]))
//
// mean divides the sum by the element count. argmax and argmin are two reductions: the
// extremum m, then the first (or, with select_last_index, the last) index whose element equals
// m, or is NaN: m is NaN exactly when some element is, and the interpreter returns the first
// NaN then.
#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

// The input index for output index `out` and reduction variables `k` (one per reduced axis).
std::vector<Expr> input_index(const std::vector<bool>& reduced, bool keepdims,
                              const std::vector<Expr>& out, const std::vector<Expr>& k) {
  std::vector<Expr> index;
  size_t next_out = 0, next_k = 0;
  for (bool r : reduced) {
    if (r) {
      index.push_back(k[next_k++]);
      if (keepdims) ++next_out;
    } else {
      index.push_back(out[next_out++]);
    }
  }
  return index;
}

void define_reduce(LoweringTable& table, Op op, ReduceOp reduce_op, bool mean) {
  table.define(op, [reduce_op, mean](const ComputeArgs& args) -> Expected<Expr> {
    const TensorType& x = args.inputs[0];
    // The graph is verified: the axes are valid.
    const std::vector<bool> reduced = *reduced_axes(x, args.attrs.get_ints("axes"));
    const bool keepdims = args.attrs.get_bool("keepdims");
    std::vector<int64_t> extents;
    for (int axis = 0; axis < x.shape.rank(); ++axis) {
      if (reduced[static_cast<size_t>(axis)]) extents.push_back(x.shape.dim(axis));
    }
    // A mean divides the f32 total of f16 or bf16 terms before rounding it.
    Expr total = reduce_nest(reduce_op, extents, args.names, [&](const std::vector<Expr>& k) {
      const Expr term = args.input(0, input_index(reduced, keepdims, args.index, k));
      return mean ? widen_for_accumulation(term) : term;
    });
    if (!mean) return total;
    int64_t count = 1;
    for (int64_t extent : extents) count *= extent;
    return narrow_to(x.dtype, total / constant_of(total.type(), static_cast<double>(count)));
  });
}

void define_arg_reduce(LoweringTable& table, Op op, bool is_max) {
  table.define(op, [is_max](const ComputeArgs& args) -> Expected<Expr> {
    const TensorType& x = args.inputs[0];
    const int axis = axis_of(args.attrs.get_int("axis"), x.shape.rank());
    const bool keepdims = args.attrs.get_bool("keepdims");
    const bool last = args.attrs.get_bool("select_last_index");
    const int64_t extent = x.shape.dim(axis);
    std::vector<bool> reduced(static_cast<size_t>(x.shape.rank()), false);
    reduced[static_cast<size_t>(axis)] = true;
    auto element = [&](const Expr& k) {
      return args.input(0, input_index(reduced, keepdims, args.index, {k}));
    };
    const std::string m = args.names.fresh("m");
    const Expr extremum = reduce_nest(is_max ? ReduceOp::max : ReduceOp::min, {extent},
                                      args.names,
                                      [&](const std::vector<Expr>& k) { return element(k[0]); });
    const Expr best = var(m, x.dtype);
    const Expr position =
        reduce_nest(last ? ReduceOp::max : ReduceOp::min, {extent}, args.names,
                    [&](const std::vector<Expr>& k) {
                      return bind(args.names, element(k[0]), [&](const Expr& v) {
                        const Expr hit = is_floating(v.type()) ? (v == best || v != v) : v == best;
                        return select(hit, k[0], last ? Expr(-1) : Expr(extent));
                      });
                    });
    return let(m, extremum, position);
  });
}

}  // namespace

void register_reduction_lowerings(LoweringTable& table) {
  define_reduce(table, Op::reduce_sum, ReduceOp::sum, /*mean=*/false);
  define_reduce(table, Op::reduce_mean, ReduceOp::sum, /*mean=*/true);
  define_reduce(table, Op::reduce_max, ReduceOp::max, /*mean=*/false);
  define_reduce(table, Op::reduce_min, ReduceOp::min, /*mean=*/false);
  define_reduce(table, Op::reduce_prod, ReduceOp::prod, /*mean=*/false);
  define_arg_reduce(table, Op::argmax, /*is_max=*/true);
  define_arg_reduce(table, Op::argmin, /*is_max=*/false);
}

}  // namespace kiln::loop::lowering
