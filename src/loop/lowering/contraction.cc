// Lowerings of the contractions (ir/ops/contraction.cc) as naive reductions: the correct
// fallback and test oracle. lower_group (loop/lower_group.h) stores matmuls (of f32, f64, f16
// and bf16) and convolutions (of f32 and f64) through their store nests instead, as gemm
// statements (a library's) with their consumers as per-block epilogues (loop/lowering/gemm.h);
// the other dtypes use these definitions, and so does spmm unless transposed (OpenBLAS has no
// sparse routine).
//
//   matmul (a [M, K], b [K, N]):  out[i0, i1] = sum(k0, 0, K, a[i0, k0] * b[k0, i1])
//
// Products of f16 and bf16 operands are formed and summed in f32 (exact products: 11 + 11
// significand bits fit f32's 24) and rounded once to the output dtype, as the libraries'
// low-precision contractions and the reference do.
//
// conv reads x through a guard (as does conv_channels_last, whose f32 nodes lower_group stores
// as one conv statement instead: oneDNN's direct convolution): taps that fall in the padding
// contribute 0, their load clamped into range. conv_grad_data sums, for each input element, over
// the taps whose output position (x + pad - tap * dilation) / stride is integral and in range. spmm
// reduces over the CSR row range [row_ptr[r], row_ptr[r + 1]) with data-dependent bounds;
// transposed, each output row sums over every non-zero of A and keeps those in its column: nnz x N
// x K work, so lower_group stores a transposed spmm by its store nest instead (spmm_scatter_nest),
// one pass over the non-zeros.
#include "loop/lower_conv.h"
#include "loop/lower_group.h"
#include "loop/lowering/gemm.h"
#include "loop/lowering/group_context.h"
#include "loop/lowering/lowering_family.h"

namespace kiln::loop::lowering {
namespace {

// a * b in the operands' accumulation dtype (lowering_family.h).
Expr product(const Expr& a, const Expr& b) {
  return widen_for_accumulation(a) * widen_for_accumulation(b);
}

Expected<Expr> lower_matmul(const ComputeArgs& args) {
  const Shape& a = args.inputs[0].shape;
  const Shape& b = args.inputs[1].shape;
  const bool ta = args.attrs.get_bool("transpose_a");
  const bool tb = args.attrs.get_bool("transpose_b");
  const int64_t k = ta ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
  const size_t out_rank = args.index.size();
  const std::vector<Expr> batch(args.index.begin(), args.index.end() - 2);
  const Expr i = args.index[out_rank - 2];
  const Expr j = args.index[out_rank - 1];
  auto operand_index = [&](const Shape& shape, Expr row, Expr col, bool transposed) {
    const Shape batch_shape(std::vector<int64_t>(shape.dims().begin(), shape.dims().end() - 2));
    std::vector<Expr> index = broadcast_index(batch, batch_shape);
    index.push_back(transposed ? col : row);
    index.push_back(transposed ? row : col);
    return index;
  };
  return narrow_to(args.outputs[0].dtype,
                   reduce_nest(ReduceOp::sum, {k}, args.names, [&](const std::vector<Expr>& p) {
                     return product(args.input(0, operand_index(a, i, p[0], ta)),
                                    args.input(1, operand_index(b, p[0], j, tb)));
                   }));
}

// x[n, channel, positions] (x[n, positions, channel] with `channels_last`) where every
// position is in range, else 0 (a padding tap).
Expr guarded_read(const ComputeArgs& args, int input, const Shape& shape, const Expr& n,
                  const Expr& channel, const std::vector<Expr>& positions,
                  bool channels_last = false) {
  const int first_position = channels_last ? 1 : 2;
  Expr inside = make_bool(true);
  std::vector<Expr> index = {n};
  if (!channels_last) index.push_back(channel);
  for (size_t d = 0; d < positions.size(); ++d) {
    const int64_t extent = shape.dim(static_cast<int>(d) + first_position);
    inside = inside && positions[d] >= 0 && positions[d] < extent;
    index.push_back(clamp_index(positions[d], extent));
  }
  if (channels_last) index.push_back(channel);
  return select(inside, args.input(input, index), make_zero(args.outputs[0].dtype));
}

// y[n, oc, out...] = sum over ic < C/groups and taps of x[n, g*C/groups + ic, pos] * w[oc, ic, tap]
// (x[n, pos, channel] into y[n, out..., oc] with `channels_last`).
Expr conv_sum(const ComputeArgs& args, bool channels_last) {
  const Shape& x = args.inputs[0].shape;
  const Shape& w = args.inputs[1].shape;
  const int spatial = x.rank() - 2;
  const int first_position = channels_last ? 1 : 2;
  const ConvParams p = conv_params(args.attrs, spatial);
  const int64_t group_in = w.dim(1);
  const int64_t group_out = w.dim(0) / p.groups;
  std::vector<int64_t> extents = {group_in};
  for (int d = 0; d < spatial; ++d) extents.push_back(w.dim(d + 2));
  const Expr n = args.index[0], oc = channels_last ? args.index.back() : args.index[1];
  const Expr total =
      reduce_nest(ReduceOp::sum, extents, args.names, [&](const std::vector<Expr>& k) {
        std::vector<Expr> positions;
        std::vector<Expr> w_index = {oc, k[0]};
        for (size_t d = 0; d < static_cast<size_t>(spatial); ++d) {
          positions.push_back(tap_position(p, d, args.index[d + first_position], k[d + 1]));
          w_index.push_back(k[d + 1]);
        }
        const Expr channel = oc / group_out * group_in + k[0];
        return product(guarded_read(args, 0, x, n, channel, positions, channels_last),
                       args.input(1, w_index));
      });
  return narrow_to(args.outputs[0].dtype, total);
}

Expected<Expr> lower_conv(const ComputeArgs& args) { return conv_sum(args, false); }

// conv with channels last, plus bias[oc], then relu's select.
Expected<Expr> lower_conv_channels_last(const ComputeArgs& args) {
  Expr sum = conv_sum(args, true);
  if (args.inputs.size() == 3) sum = sum + args.input(2, {args.index.back()});
  if (!args.attrs.get_bool("relu")) return sum;
  return bind(args.names, sum, [](const Expr& v) {
    return select(v > make_zero(v.type()), v, make_zero(v.type()));
  });
}

// dx[n, c, pos...] = sum over the output channels of c's group and the taps whose output
// position q = (pos + pad - tap * dilation) / stride is integral and in range, of
// grad_out[n, oc, q] * w[oc, c % (C/groups), tap].
Expected<Expr> lower_conv_grad_data(const ComputeArgs& args) {
  const Shape& grad_out = args.inputs[0].shape;
  const Shape& w = args.inputs[1].shape;
  const int spatial = grad_out.rank() - 2;
  const ConvParams p = conv_params(args.attrs, spatial);
  const int64_t group_in = w.dim(1);
  const int64_t group_out = w.dim(0) / p.groups;
  std::vector<int64_t> extents = {group_out};
  for (int d = 0; d < spatial; ++d) extents.push_back(w.dim(d + 2));
  const Expr n = args.index[0], c = args.index[1];
  const DType out = args.outputs[0].dtype;
  const Expr total =
      reduce_nest(ReduceOp::sum, extents, args.names, [&](const std::vector<Expr>& k) {
        const Expr oc = c / group_in * group_out + k[0];
        Expr inside = make_bool(true);
        std::vector<Expr> y_index = {n, oc};
        std::vector<Expr> w_index = {oc, c % group_in};
        for (size_t d = 0; d < static_cast<size_t>(spatial); ++d) {
          const Expr shifted = args.index[d + 2] + p.pads_begin[d] - k[d + 1] * p.dilations[d];
          const int64_t extent = grad_out.dim(static_cast<int>(d) + 2);
          const Expr q = shifted / p.strides[d];
          inside = inside && shifted % p.strides[d] == 0 && q >= 0 && q < extent;
          y_index.push_back(clamp_index(q, extent));
          w_index.push_back(k[d + 1]);
        }
        return select(inside, product(args.input(0, y_index), args.input(1, w_index)),
                      make_zero(accumulation_dtype(out)));
      });
  return narrow_to(out, total);
}

// dw[oc, ic, tap...] = sum over n and output positions of x[n, channel, pos] * grad_out[n, oc, out].
Expected<Expr> lower_conv_grad_weight(const ComputeArgs& args) {
  const Shape& x = args.inputs[0].shape;
  const Shape& grad_out = args.inputs[1].shape;
  const int spatial = x.rank() - 2;
  const ConvParams p = conv_params(args.attrs, spatial);
  const int64_t group_in = args.outputs[0].shape.dim(1);
  const int64_t group_out = args.outputs[0].shape.dim(0) / p.groups;
  std::vector<int64_t> extents = {grad_out.dim(0)};
  for (int d = 0; d < spatial; ++d) extents.push_back(grad_out.dim(d + 2));
  const Expr oc = args.index[0], ic = args.index[1];
  const Expr total =
      reduce_nest(ReduceOp::sum, extents, args.names, [&](const std::vector<Expr>& k) {
        std::vector<Expr> positions;
        std::vector<Expr> y_index = {k[0], oc};
        for (size_t d = 0; d < static_cast<size_t>(spatial); ++d) {
          positions.push_back(tap_position(p, d, k[d + 1], args.index[d + 2]));
          y_index.push_back(k[d + 1]);
        }
        const Expr channel = oc / group_out * group_in + ic;
        return product(guarded_read(args, 0, x, k[0], channel, positions), args.input(1, y_index));
      });
  return narrow_to(args.outputs[0].dtype, total);
}

Expected<Expr> lower_spmm(const ComputeArgs& args) {
  const int64_t rows = args.inputs[0].shape.dim(0) - 1;
  const int64_t nnz = args.inputs[2].shape.dim(0);
  const Expr j = args.index[1];
  const DType out = args.outputs[0].dtype;
  auto row_start = [&](const Expr& r) { return cast(DType::i64, args.input(0, {r})); };
  auto column = [&](const Expr& i) { return cast(DType::i64, args.input(1, {i})); };
  // values[i] * dense[row, j], with i clamped in case row_ptr is malformed.
  auto term = [&](const Expr& i, const Expr& dense_row) {
    const Expr safe = clamp_index(i, nnz);
    return product(args.input(2, {safe}), args.input(3, {dense_row, j}));
  };
  if (!args.attrs.get_bool("transpose")) {
    const Expr r = args.index[0];
    const std::string i = args.names.fresh("k");
    const Expr start = row_start(r);
    const Expr body = term(var(i), clamp_index(column(clamp_index(var(i), nnz)),
                                               args.inputs[3].shape.dim(0)));
    return narrow_to(out, reduce(ReduceOp::sum, i, start, row_start(r + 1) - start, body));
  }
  const Expr c = args.index[0];
  const std::string r = args.names.fresh("k");
  const std::string i = args.names.fresh("k");
  const Expr start = row_start(var(r));
  const Expr in_column = column(clamp_index(var(i), nnz)) == c;
  const Expr body =
      select(in_column, term(var(i), var(r)), make_zero(accumulation_dtype(out)));
  return narrow_to(out, reduce(ReduceOp::sum, r, 0, rows,
                               reduce(ReduceOp::sum, i, start, row_start(var(r) + 1) - start,
                                      body)));
}

bool is_transposed(const Node& spmm) { return spmm.attrs().get_bool("transpose"); }

// spmm with the sparse matrix A [M, K] transposed, out [K, N] = A^T dense, as one pass over
// the non-zeros in CSR order (the interpreter's order, so every output element sums its
// terms in the same order):
//
//   for (c, j) out[c, j] = 0
//   for (r, 0, M) for (i, row_ptr[r], row_ptr[r + 1] - row_ptr[r])
//     let col = clamp(col_indices[i]) in for (j, 0, N) out[col, j] += values[i] * dense[r, j]
//
// The loop over non-zeros stays serial (two may name the same column); the loop over N, a
// row of dense and of out, vectorizes. Indices are clamped as the gather definition clamps
// them, so a malformed CSR structure reads and writes inside the buffers.
Expected<Stmt> spmm_scatter_nest(const Value& value, GroupContext& group) {
  const Node& node = *value.producer();
  AccessErrors errors;
  const InputAccessor input = group.inputs(node, errors);
  const int64_t rows = node.input(0)->shape().dim(0) - 1;
  const int64_t nnz = node.input(2)->shape().dim(0);
  const int64_t cols = value.shape().dim(0), n = value.shape().dim(1);

  std::vector<std::string> zero_vars;
  const std::vector<Expr> zero_index = group.fresh_index(value.shape().dims(), zero_vars);
  const Stmt zero = loop_nest(zero_vars, value.shape().dims(),
                              group.store_element(value, zero_index, make_zero(value.dtype())));

  NameGenerator& names = group.names();
  const std::string r = names.fresh("i"), i = names.fresh("i"), j = names.fresh("i");
  const std::string safe = names.fresh("s"), col = names.fresh("c");
  const auto row_start = [&](const Expr& row) { return cast(DType::i64, input(0, {row})); };
  const std::vector<Expr> target = {var(col), var(j)};
  const Stmt add = group.store_element(
      value, target,
      group.load_from(value, target) + input(2, {var(safe)}) * input(3, {var(r), var(j)}));
  const Expr column = clamp_index(cast(DType::i64, input(1, {var(safe)})), cols);
  const Stmt per_nonzero =
      let_stmt(safe, clamp_index(var(i), nnz), let_stmt(col, column, for_loop(j, 0, n, add)));
  const Stmt scatter = for_loop(
      r, 0, rows,
      for_loop(i, row_start(var(r)), row_start(var(r) + 1) - row_start(var(r)), per_nonzero));
  return errors.result(block({zero, scatter}));
}

}  // namespace

void register_contraction_lowerings(LoweringTable& table) {
  table.define(Op::matmul, &lower_matmul);
  table.define(Op::conv, &lower_conv);
  table.define(Op::conv_grad_data, &lower_conv_grad_data);
  table.define(Op::conv_grad_weight, &lower_conv_grad_weight);
  table.define(Op::conv_channels_last, &lower_conv_channels_last);
  table.define(Op::spmm, &lower_spmm);
  table.store_with(Op::matmul, {.applies = &lowers_matmul_to_gemm,
                                .build = &matmul_gemm_nest,
                                .reads_input_buffers = true,
                                .plan_epilogues = &plan_matmul_epilogues});
  StoreNest conv_nest{.applies = &lowers_conv_to_gemm,
                      .build = &conv_gemm_nest,
                      .reads_input_buffers = true,
                      .plan_epilogues = &plan_conv_epilogues};
  table.store_with(Op::conv, conv_nest);
  table.store_with(Op::conv_grad_data, conv_nest);
  // conv_grad_weight sums over every image into one output: no block of it is complete
  // before the end, so it takes no epilogues.
  conv_nest.plan_epilogues = nullptr;
  table.store_with(Op::conv_grad_weight, conv_nest);
  table.store_with(Op::conv_channels_last, {.applies = &lowers_conv_to_library,
                                            .build = &library_conv_nest,
                                            .reads_input_buffers = true,
                                            .plan_epilogues = &plan_conv_epilogues});
  table.store_with(Op::spmm, {.applies = &is_transposed, .build = &spmm_scatter_nest});
}

}  // namespace kiln::loop::lowering
