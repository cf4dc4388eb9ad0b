// Matmuls and convolutions as gemm statements, with their epilogues: the store nests of the
// contraction family (loop/lowering/contraction.cc registers them). Internal to src/loop.
//
// A matmul of f32, f64, f16 or bf16 (the last two accumulating in f32) is not stored through
// its reduce definition but as gemm statements (loop/stmt.h; a library in generated code): a
// loop over its batch dims and blocks of output rows, one gemm per block. Group outputs
// computed elementwise from it (a bias add, an activation, a residual add) are its *epilogue*:
// stored in the same block loop right after each gemm, while the block is in cache, instead of
// in a separate pass over memory; an intermediate matmul read only by epilogues then lives in
// a block-sized local buffer.
//
//   matmul -> add bias -> relu over a [M, K], w [K, N]:
//     for (i0, 0, M / R) allocate blk[R*N] {
//       gemm(R, N, K) blk[0, ld N] = in0[i0*R*K, ld K] * in1[0, ld N]
//       for i1, i2: out0[i0*R + i1, i2] = max(blk[i1*N + i2] + in2[i2], 0.0f) }
//
// A batched matmul of small matrices (at most kParallelBatchMaxGemmWork multiply-adds each,
// loop/tuning.h: attention's scores and weighted values) runs its matrices in parallel instead,
// its batch dims one parallel loop and each matrix's gemm and epilogues on one thread, with its
// block buffer its own: the matrices are independent, and a product so small leaves the
// library's threads idle.
//
// Consumers that read the product or an earlier epilogue only within their own row, at any
// column (softmax, a layer norm, their gradients, a row sum), are *row epilogues*: run row by
// row on each block after its gemm. Consumers that do not fit (a transpose of the product, a
// reduction across rows) read the matmul from a full buffer. A gemm reads its operands from
// memory, so an operand computed in the group is stored in a local buffer even where it
// would otherwise be inlined (StoreNest::reads_input_buffers).
//
// Convolutions and their gradients of f32 and f64 are im2col and gemm statements per image
// and group (loop/lower_conv.h). A conv's or conv_grad_data's elementwise consumers are its
// epilogue in the same way, run on each image's block as soon as it is complete; a product
// read only by them is written into the last epilogue's buffer, so it needs no buffer of its
// own. Convolutions of other dtypes (f16, bf16, integers) keep the reduce definitions.
//
// A conv_channels_last of f32 is one conv statement over every image (loop/stmt.h; oneDNN in
// generated code), followed by its elementwise consumers in one nest over the product.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "ir/graph.h"
#include "loop/lowering/group_context.h"

namespace kiln::loop::lowering {

// Where a product computed by gemms lives.
enum class ProductStorage {
  own_buffer,     // a buffer of its own: a kernel output, or read by more than its epilogues
  block_buffer,   // a matmul's, one block at a time in a block-sized local buffer
  last_epilogue,  // written into its last epilogue's buffer, which the epilogues overwrite
};

// How a matmul or convolution lowered to gemm statements is stored and which values ride on
// its blocks (a matmul's row blocks, a convolution's images).
struct GemmPlan {
  std::vector<const Value*> epilogues;  // stored in the block loop right after each gemm
  // The epilogues that read other columns of their row (a row reduction: softmax's maximum
  // and sum, a layer norm's statistics) or are a value of the row's shape. With any, the
  // epilogues run row by row, not element by element.
  std::set<const Value*> row_epilogues;
  ProductStorage storage = ProductStorage::own_buffer;
  // Matmuls only: rows of C per gemm call, and whether the batch dims are rows of one gemm
  // (A's matrices are consecutive rows and B is shared), so B is packed once, not once per
  // matrix.
  int64_t block_rows = 0;
  bool fold_batch = false;
};

// The plans of a stored matmul's or convolution's product (StoreNest::plan_epilogues): its
// epilogues among the stored values after it that no earlier plan claimed, and its storage.
GemmPlan plan_matmul_epilogues(const Value& product, const GroupContext& group);
GemmPlan plan_conv_epilogues(const Value& product, const GroupContext& group);

// The store nests (StoreNest::build) of a matmul and of a convolution or its gradients.
Expected<Stmt> matmul_gemm_nest(const Value& product, GroupContext& group);
Expected<Stmt> conv_gemm_nest(const Value& product, GroupContext& group);
Expected<Stmt> library_conv_nest(const Value& product, GroupContext& group);

// K: the length of the dot product behind each element of a matmul.
int64_t gemm_depth(const Node& matmul);

// Whether a matmul's batch dims can become rows of one gemm: A untransposed and not
// broadcast (its matrices follow each other row after row, as C's do) and every matrix
// multiplied by the same B.
bool can_fold_batch(const Node& matmul);

// Rows of C one gemm nest covers: a matrix's, or every matrix's when the batch is folded.
int64_t gemm_rows(const Shape& product, const GemmPlan& plan);

}  // namespace kiln::loop::lowering
