// The store nests of the pooling family (loop/lowering/pooling.h): a separable max_pool in
// two steps per row of windows, and max_pool_grad as a scatter.
#include <functional>

#include "loop/lowering/pooling.h"

namespace kiln::loop::lowering {
namespace {

// A loop over the positions w of x's last dim storing into `buffer`[w] the value `element`
// gives at the partial index [n, c, leading pooled indices of `window`, w], with `node`'s
// args at that index. `node` is a max_pool or a max_pool_grad: both read x as input 0.
using RowElement =
    std::function<Expr(const ComputeArgs& args, const std::vector<Expr>& partial, const Expr& w)>;
Stmt fill_row(const Node& node, const std::vector<Expr>& window, const Buffer& buffer,
              const RowElement& element, GroupContext& group, AccessErrors& errors) {
  const std::vector<TensorType> input_types = node.input_types();
  const std::vector<TensorType> output_types = node.output_types();
  const InputAccessor input = group.inputs(node, errors);
  const std::string w = group.names().fresh("i");
  std::vector<Expr> partial(window.begin(), window.end() - 1);
  partial.push_back(var(w));
  const ComputeArgs args{node.attrs(), input_types, output_types, 0, partial, input, group.names()};
  return for_loop(w, 0, node.input(0)->shape().dims().back(),
                  store(buffer, var(w), element(args, partial, var(w))));
}

// The first step of a separable max pool for the row of windows of `window` ([n, c,
// *pooled]) without its last index: a local row of x's width, the fill that stores the
// maximum over the leading dims' taps at each position of it (contiguous in x, so it
// vectorizes), and the maximum of window `window` read from that row.
struct PoolRow {
  Buffer buffer;
  Stmt fill;
  Expr window_max;
};
PoolRow pool_row(const Node& node, const std::vector<Expr>& window, GroupContext& group,
                 AccessErrors& errors) {
  PoolRow row;
  row.buffer = Buffer::local(group.names().fresh("row"), node.input(0)->dtype(),
                             node.input(0)->shape().dims().back());
  row.fill = fill_row(
      node, window, row.buffer,
      [](const ComputeArgs& args, const std::vector<Expr>& partial, const Expr&) {
        return max_pool_leading_max(args, partial);
      },
      group, errors);
  const std::vector<TensorType> input_types = node.input_types();
  const std::vector<TensorType> output_types = node.output_types();
  const InputAccessor input = group.inputs(node, errors);
  const ComputeArgs args{node.attrs(), input_types, output_types, 0, window, input, group.names()};
  row.window_max = max_pool_last_max(
      args, [&](const std::vector<Expr>& at) { return load(row.buffer, at.back()); });
  return row;
}

// The scatter of a separable pool's gradient over one row of windows (see max_pool_grad_nest).
Stmt separable_scatter(const Node& node, const std::vector<Expr>& window,
                       const std::vector<std::string>& window_vars, const ComputeArgs& args,
                       const std::string& tap, const Stmt& add, GroupContext& group,
                       AccessErrors& errors) {
  const Shape& windows = node.input(1)->shape();
  const PoolRow row = pool_row(node, window, group, errors);
  const Buffer first =
      Buffer::local(group.names().fresh("first"), DType::i64, node.input(0)->shape().dims().back());
  const Stmt first_fill = fill_row(
      node, window, first,
      [&](const ComputeArgs& row_args, const std::vector<Expr>& partial, const Expr& w) {
        return max_pool_leading_argmax(row_args, partial, load(row.buffer, w));
      },
      group, errors);
  const std::string max = group.names().fresh("m");
  const Expr argmax = max_pool_last_argmax(
      args, var(max, node.output(0)->dtype()),
      [&](const std::vector<Expr>& at) { return load(row.buffer, at.back()); },
      [&](const std::vector<Expr>& at) { return load(first, at.back()); });
  const Stmt per_window = for_loop(window_vars.back(), 0, windows.dims().back(),
                                   let_stmt(max, row.window_max, let_stmt(tap, argmax, add)));
  const std::vector<std::string> row_vars(window_vars.begin(), window_vars.end() - 1);
  const std::vector<int64_t> rows(windows.dims().begin() + 2, windows.dims().end() - 1);
  const Stmt steps = block({row.fill, first_fill, per_window});
  return loop_nest(row_vars, rows, allocate(row.buffer, allocate(first, steps)));
}

}  // namespace

// max_pool in two steps per output row, the first into a local row the length of x's last
// dim, private to each iteration of the loops around it:
//
//   for (n, c, q0 ... q[s-2]) allocate row[W] {
//     for (w) row[w] = max over the leading dims' taps of x[n, c, ..., w]
//     for (q[s-1]) y[n, c, q...] = max over the last dim's taps of row[...] }
Expected<Stmt> max_pool_nest(const Value& value, GroupContext& group) {
  AccessErrors errors;
  const std::vector<int64_t>& out_dims = value.shape().dims();
  std::vector<std::string> vars;
  const std::vector<Expr> index = group.fresh_index(out_dims, vars);
  const PoolRow row = pool_row(*value.producer(), index, group, errors);
  const Stmt reduce =
      for_loop(vars.back(), 0, out_dims.back(), group.store_element(value, index, row.window_max));
  const std::vector<std::string> outer_vars(vars.begin(), vars.end() - 1);
  const std::vector<int64_t> outer_dims(out_dims.begin(), out_dims.end() - 1);
  return errors.result(
      loop_nest(outer_vars, outer_dims, allocate(row.buffer, block({row.fill, reduce}))));
}

// max_pool_grad as the interpreter computes it, a scatter: per image and channel, dx is
// zeroed, then each window of x, in order, adds its dy element at its first maximum:
//
//   for (n, c) { for (p...) dx[n, c, p] = 0
//                for (q...) let a = argmax(window q of x[n, c]) in
//                  dx[n, c, position of tap a] = dx[n, c, position of tap a] + dy[n, c, q] }
//
// Windows overlap (3x3 at stride 2), so the loop over them stays serial; images and channels
// are independent. The gather definition found, for every dx element, each window that might
// route to it (4 per element for ResNet's pool, each a guarded argmax lookup). When the pool
// is separable (max_pool_is_separable), each window's maximum is found in two steps as
// max_pool's is, per row of windows, the first into a row of x's width that loads x
// contiguously and vectorizes; so is the argmax, the first leading tap equal to that row's
// maximum, into a second row; each window's argmax then reads the K columns of both rows
// (max_pool_last_argmax) instead of the whole window of x:
//
//   for (n, c, q0 ... q[s-2]) allocate row[W], first[W] {
//     for (w) row[w] = max over the leading dims' taps of x[n, c, ..., w]
//     for (w) first[w] = first leading tap of x[n, c, ..., w] equal to row[w] (or NaN)
//     for (q[s-1]) let m = max over the last dim's taps of row[...] in
//                  let a = least first[col] * K + k over the columns col (tap k) of
//                          window q where row[col] equals m (or is NaN) in
//                  dx[...] += dy[n, c, q] }
Expected<Stmt> max_pool_grad_nest(const Value& value, GroupContext& group) {
  const Node& node = *value.producer();
  const std::vector<TensorType> input_types = node.input_types();
  const std::vector<TensorType> output_types = node.output_types();
  const Shape& windows = node.input(1)->shape();
  AccessErrors errors;
  const InputAccessor input = group.inputs(node, errors);

  std::vector<std::string> plane_vars;
  const std::vector<int64_t> planes(value.shape().dims().begin(), value.shape().dims().begin() + 2);
  const std::vector<Expr> plane = group.fresh_index(planes, plane_vars);
  const auto spatial = [](const Shape& shape) {
    return std::vector<int64_t>(shape.dims().begin() + 2, shape.dims().end());
  };

  std::vector<std::string> zero_vars;
  std::vector<Expr> zero_index = plane;
  for (const Expr& e : group.fresh_index(spatial(value.shape()), zero_vars)) {
    zero_index.push_back(e);
  }
  const Stmt zero = loop_nest(zero_vars, spatial(value.shape()),
                              group.store_element(value, zero_index, make_zero(value.dtype())));

  std::vector<std::string> window_vars;
  std::vector<Expr> window = plane;
  for (const Expr& e : group.fresh_index(spatial(windows), window_vars)) window.push_back(e);
  const ComputeArgs args{node.attrs(), input_types, output_types, 0, window, input, group.names()};
  const std::string tap = group.names().fresh("a");
  const std::vector<Expr> target = max_pool_tap_position(args, window, var(tap));
  const Stmt add =
      group.store_element(value, target, group.load_from(value, target) + input(1, window));
  const Stmt scatter =
      max_pool_is_separable(node.attrs())
          ? separable_scatter(node, window, window_vars, args, tap, add, group, errors)
          : loop_nest(window_vars, spatial(windows),
                      let_stmt(tap, max_pool_window_argmax(args, window), add));
  return errors.result(loop_nest(plane_vars, planes, block({zero, scatter})));
}

}  // namespace kiln::loop::lowering
