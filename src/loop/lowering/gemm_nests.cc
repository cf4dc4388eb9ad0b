// The gemm store nests (loop/lowering/gemm.h): a matmul's block loop with its epilogues, and
// a convolution's im2col and gemm statements with its epilogues on each image's block.
#include <algorithm>

#include "loop/lower_conv.h"
#include "loop/lowering/gemm.h"
#include "loop/tuning.h"
#include "support/check.h"

namespace kiln::loop {

bool lowers_matmul_to_gemm(const Node& node) {
  const DType dtype = node.output(0)->dtype();
  return node.op() == Op::matmul &&
         (dtype == DType::f32 || dtype == DType::f64 || is_low_precision(dtype));
}

bool lowers_conv_to_library(const Node& node) {
  const DType dtype = node.output(0)->dtype();
  return node.op() == Op::conv_channels_last &&
         (dtype == DType::f32 || is_low_precision(dtype));
}

bool conv_takes_epilogue(const Node& node) {
  return (lowers_conv_to_gemm(node) && node.op() != Op::conv_grad_weight) ||
         lowers_conv_to_library(node);
}

namespace lowering {
namespace {

// The index of row `row` of C's folded rows: its batch indices and its row in the matrix.
std::vector<Expr> unfold_row(const Expr& row, const Shape& product) {
  const int leading = product.rank() - 1;
  std::vector<Expr> index(static_cast<size_t>(leading));
  int64_t stride = 1;
  for (int d = leading - 1; d >= 0; --d) {
    const Expr quotient = stride == 1 ? row : row / Expr(stride);
    index[static_cast<size_t>(d)] = d == 0 ? quotient : quotient % Expr(product.dim(d));
    stride *= product.dim(d);
  }
  return index;
}

// One loop nest over the block's rows and columns storing every epilogue value, in order
// (a later epilogue may load an earlier one's element, stored just before). With row
// epilogues (GemmPlan::row_epilogues), each row of the block stores its epilogues in
// order: a value of the row's shape at the row, and values of the product's shape in loops
// over the row's columns, a row epilogue starting a loop of its own (it may read an earlier
// value at columns a shared loop would not have stored yet), an elementwise one joining
// the loop before it:
//
//   for (r, 0, block rows) { s[r] = sum over c of ...; for (c, 0, N) { y[r, c] = ... } }
Expected<Stmt> epilogue_nest(const Value& product, const GemmPlan& plan,
                             const std::vector<Expr>& batch, const Expr& row0, const Expr& block_m,
                             int64_t n, GroupContext& group) {
  const std::string row_var = group.names().fresh("i"), col_var = group.names().fresh("i");
  std::vector<Expr> row = batch;
  if (plan.fold_batch) {
    row = unfold_row(row0 + var(row_var), product.shape());
  } else {
    row.push_back(row0 + var(row_var));
  }
  std::vector<Expr> index = row;
  index.push_back(var(col_var));
  if (plan.row_epilogues.empty()) {
    KILN_ASSIGN_OR_RETURN(Stmt stores, group.store_definitions(plan.epilogues, index));
    return for_loop(row_var, 0, block_m, for_loop(col_var, 0, n, std::move(stores)));
  }
  std::vector<Stmt> per_row;
  std::vector<const Value*> columns;  // consecutive values of the product's shape
  const auto flush_columns = [&]() -> Status {
    if (columns.empty()) return Status::ok();
    KILN_ASSIGN_OR_RETURN(Stmt stores, group.store_definitions(columns, index));
    per_row.push_back(for_loop(col_var, 0, n, std::move(stores)));
    columns.clear();
    return Status::ok();
  };
  for (const Value* value : plan.epilogues) {
    if (value->shape() == product.shape()) {
      if (plan.row_epilogues.contains(value)) KILN_RETURN_IF_ERROR(flush_columns());
      columns.push_back(value);
      continue;
    }
    KILN_RETURN_IF_ERROR(flush_columns());
    std::vector<Expr> at = row;
    if (value->rank() == product.rank()) at.push_back(0);  // the row's shape with a last dim of 1
    KILN_ASSIGN_OR_RETURN(Stmt store, group.store_definitions({value}, at));
    per_row.push_back(std::move(store));
  }
  KILN_RETURN_IF_ERROR(flush_columns());
  return for_loop(row_var, 0, block_m, block(std::move(per_row)));
}

// Loads of a block-local product while its epilogues are built: element [.., row, column]
// is `block`[(row - row0) * N + column], where a folded batch (GemmPlan::fold_batch) counts
// rows across matrices.
ElementAt block_element(const Value& product, const GemmPlan& plan, const Buffer& block,
                        const Expr& row0) {
  return [&product, &plan, block, row0](const std::vector<Expr>& index) {
    const std::vector<Expr> leading(index.begin(), index.end() - 1);
    const Expr row =
        plan.fold_batch
            ? row_major_offset(leading,
                               Shape(std::vector<int64_t>(product.shape().dims().begin(),
                                                          product.shape().dims().end() - 1)))
            : leading.back();
    return load(block, (row - row0) * product.shape().dims().back() + index.back());
  };
}

}  // namespace

// The matmul `product` as gemm statements:
//
//   for (batch...) for (rb, 0, ceil(M / R)) [allocate blk[R*N] in local] {
//     gemm(min(R, M - rb*R), N, K) c[...] = a[...] * b[...]
//     for (r, 0, min(R, M - rb*R)) for (c, 0, N) { epilogue stores at [batch, rb*R + r, c] }
//   }
//
// or, for a batch of small matrices (loop/lowering/gemm.h), the batch dims as one parallel
// loop over every matrix: parallel for (ib, 0, product of batch dims) for (rb, ...) {...}.
//
// Broadcast batch dims of A and B read batch index 0 (NumPy broadcasting, as the reduce
// definition reads them); a transposed A's row block starts at column rb*R of the stored A.
Expected<Stmt> matmul_gemm_nest(const Value& product, GroupContext& group) {
  const GemmPlan* found = group.gemm_plan(product);
  KILN_CHECK(found != nullptr, "a matmul stored by gemm has a plan");
  const GemmPlan& plan = *found;
  const Node& node = *product.producer();
  const Shape& a = node.input(0)->shape();
  const Shape& b = node.input(1)->shape();
  const bool ta = node.attrs().get_bool("transpose_a");
  const bool tb = node.attrs().get_bool("transpose_b");
  const int rank = product.rank();
  const int64_t m = gemm_rows(product.shape(), plan), n = product.shape().dim(rank - 1);
  const int64_t k = gemm_depth(node);
  const int64_t rows = plan.block_rows;
  const bool block_local = plan.storage == ProductStorage::block_buffer;

  std::vector<std::string> batch_vars;
  std::vector<Expr> batch;  // empty when folded: matrix 0 holds every row
  const int batch_dims = plan.fold_batch ? 0 : rank - 2;
  int64_t matrices = 1;
  for (int d = 0; d < batch_dims; ++d) matrices *= product.shape().dim(d);
  const bool parallel_batch = matrices > 1 && m * n * k <= kParallelBatchMaxGemmWork;
  for (int d = 0; d < batch_dims; ++d) {
    batch_vars.push_back(group.names().fresh("i"));
    batch.push_back(var(batch_vars.back()));
  }
  // With a parallel batch, one loop over every matrix (the batch dim's own loop when there is
  // one), whose body binds each batch index to its digit in the batch dims' extents once (a
  // division in an index would be computed at every element, and keeps GCC from vectorizing
  // the epilogue's loops).
  const std::string matrix_var = !parallel_batch   ? std::string()
                                 : batch_dims == 1 ? batch_vars[0]
                                                   : group.names().fresh("i");
  const std::string block_var = group.names().fresh("i");
  const Expr row0 = var(block_var) * rows;
  const Expr block_m = min(Expr(rows), Expr(m) - row0);
  // Offset of matrix (batch index) in a row-major operand of `shape` (matrix 0 when folded).
  const auto matrix_base = [&](const Shape& shape) {
    if (plan.fold_batch) return Expr(0);
    std::vector<Expr> index = broadcast_index(
        batch, Shape(std::vector<int64_t>(shape.dims().begin(), shape.dims().end() - 2)));
    index.push_back(0);
    index.push_back(0);
    return row_major_offset(index, shape);
  };
  // BLAS wants leading dimensions of at least 1, even for an operand with no columns (k or
  // n = 0), whose elements are never read.
  const int64_t lda = std::max<int64_t>(a.dims().back(), 1);
  const MatrixRegion a_region{group.buffer_of(*node.input(0)),
                              matrix_base(a) + (ta ? row0 : row0 * lda), lda};
  const MatrixRegion b_region{group.buffer_of(*node.input(1)), matrix_base(b),
                              std::max<int64_t>(b.dims().back(), 1)};
  Buffer block_buffer;
  MatrixRegion c_region;
  if (block_local) {
    block_buffer =
        Buffer::local(group.names().fresh("blk"), product.dtype(), std::max<int64_t>(rows * n, 1));
    c_region = {block_buffer, 0, std::max<int64_t>(n, 1)};
  } else {
    c_region = {group.buffer_of(product), matrix_base(product.shape()) + row0 * n,
                std::max<int64_t>(n, 1)};
  }
  Stmt body = gemm({.a = a_region,
                    .b = b_region,
                    .c = c_region,
                    .transpose_a = ta,
                    .transpose_b = tb,
                    .m = block_m,
                    .n = n,
                    .k = k,
                    .accumulate = false});
  if (!plan.epilogues.empty()) {
    const auto epilogue = [&] {
      return epilogue_nest(product, plan, batch, row0, block_m, n, group);
    };
    KILN_ASSIGN_OR_RETURN(
        Stmt stores, block_local
                         ? group.with_reads_of(
                               product, block_element(product, plan, block_buffer, row0), epilogue)
                         : epilogue());
    body = block({body, std::move(stores)});
  }
  if (block_local && !parallel_batch) body = allocate(block_buffer, body);
  body = for_loop(block_var, 0, (m + rows - 1) / rows, body);
  if (parallel_batch) {
    int64_t stride = 1;
    for (int d = batch_dims - 1; d >= 0 && matrix_var != batch_vars[0]; --d) {
      const int64_t extent = product.shape().dim(d);
      const Expr quotient = stride == 1 ? var(matrix_var) : var(matrix_var) / Expr(stride);
      body = let_stmt(batch_vars[static_cast<size_t>(d)],
                      d == 0 ? quotient : quotient % Expr(extent), body);
      stride *= extent;
    }
    // The block first in the loop's body, where the code generator makes it once per thread.
    if (block_local) body = allocate(block_buffer, body);
    return for_loop(matrix_var, 0, matrices, ForKind::parallel, body);
  }
  for (int d = static_cast<int>(batch_vars.size()) - 1; d >= 0; --d) {
    body = for_loop(batch_vars[static_cast<size_t>(d)], 0, product.shape().dim(d), body);
  }
  return body;
}

// A convolution as im2col and gemm statements (loop/lower_conv.h), with its epilogues on
// each image's block of the output:
//
//   for (n, g) { im2col; gemm; for (o, 0, C/groups) for (p...) epilogue stores at
//                                                                  [n, g*C/groups + o, p...] }
Expected<Stmt> conv_gemm_nest(const Value& product, GroupContext& group) {
  const Node& node = *product.producer();
  AccessErrors errors;  // of the epilogue's stores, which ConvEpilogue cannot return
  ConvEpilogue epilogue;
  const GemmPlan* plan = group.gemm_plan(product);
  if (plan != nullptr && !plan->epilogues.empty()) {
    const int64_t groups = conv_params(node.attrs(), product.rank() - 2).groups;
    const int64_t channels = product.shape().dim(1) / groups;
    std::vector<int64_t> extents = {channels};
    extents.insert(extents.end(), product.shape().dims().begin() + 2, product.shape().dims().end());
    epilogue = [&, channels, extents](const Expr& n, const Expr& g) {
      std::vector<std::string> vars;
      std::vector<Expr> index = group.fresh_index(extents, vars);
      index.front() = g * channels + index.front();
      index.insert(index.begin(), n);
      Expected<Stmt> stores = group.store_definitions(plan->epilogues, index);
      if (!stores) {
        errors.record(stores.status());
        return no_op();
      }
      return loop_nest(vars, extents, std::move(stores).value());
    };
  }
  return errors.result(conv_as_gemm(node, group.buffer_of(*node.input(0)),
                                    group.buffer_of(*node.input(1)), group.buffer_of(product),
                                    group.names(), epilogue));
}

// conv(images N, ...) y = x * w, then the epilogues over y's whole shape [N, Y..., O].
Expected<Stmt> library_conv_nest(const Value& product, GroupContext& group) {
  const Node& node = *product.producer();
  const Shape& x = node.input(0)->shape();
  const Shape& w = node.input(1)->shape();
  const int spatial = x.rank() - 2;
  const ConvParams p = conv_params(node.attrs(), spatial);
  ConvGeometry geometry;
  geometry.images = x.dim(0);
  geometry.channels = x.dim(x.rank() - 1);
  geometry.out_channels = w.dim(0);
  geometry.groups = p.groups;
  geometry.strides = p.strides;
  geometry.pads_begin = p.pads_begin;
  geometry.dilations = p.dilations;
  for (int d = 0; d < spatial; ++d) {
    geometry.in_spatial.push_back(x.dim(d + 1));
    geometry.out_spatial.push_back(product.shape().dim(d + 1));
    geometry.kernel.push_back(w.dim(d + 2));
  }
  std::vector<Stmt> statements = {
      conv({.x = group.buffer_of(*node.input(0)),
            .x_offset = 0,
            .w = group.buffer_of(*node.input(1)),
            .bias = node.num_inputs() == 3 ? group.buffer_of(*node.input(2)) : Buffer(),
            .y = group.buffer_of(product),
            .y_offset = 0,
            .geometry = std::move(geometry),
            .relu = node.attrs().get_bool("relu"),
            .winograd = node.attrs().get_bool("winograd"),
            .packed_w = {}})};
  const GemmPlan* plan = group.gemm_plan(product);
  if (plan != nullptr && !plan->epilogues.empty()) {
    std::vector<std::string> vars;
    const std::vector<Expr> index = group.fresh_index(product.shape().dims(), vars);
    KILN_ASSIGN_OR_RETURN(Stmt stores, group.store_definitions(plan->epilogues, index));
    statements.push_back(loop_nest(vars, product.shape().dims(), std::move(stores)));
  }
  return block(std::move(statements));
}

}  // namespace lowering
}  // namespace kiln::loop
