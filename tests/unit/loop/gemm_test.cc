// The gemm statement (loop/stmt.h): its text form, the verifier's rules, the evaluator's
// values against products computed by hand, the simplifier, substitution and visitors; and
// lower_group's matmul lowering to gemm statements (batch and row-block loops, broadcast
// batch dims, transposes, epilogues computed per block, a small batch's matrices in
// parallel) against the graph interpreter.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "loop/default_schedule.h"
#include "loop/evaluator.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/verifier.h"
#include "unit/loop/fused_graphs.h"
#include "unit/loop/lowering_check.h"

namespace kiln::loop {
namespace {

using testing::bias_relu_graph;
using testing::matches_interpreter;
using testing::matmul_cases;
using testing::matmul_graph;
using testing::MatmulCase;
using testing::random_inputs;

// a [2, 3], b [3, 2], c [2, 2], all f32: the product of the whole matrices.
struct SmallGemm {
  Buffer a = Buffer::param("a", DType::f32, {2, 3});
  Buffer b = Buffer::param("b", DType::f32, {3, 2});
  Buffer c = Buffer::param("c", DType::f32, {2, 2});

  Kernel kernel(GemmArgs args) const { return Kernel{"g", {a, b, c}, gemm(std::move(args))}; }
  GemmArgs args() const {
    return {.a = {a, 0, 3}, .b = {b, 0, 2}, .c = {c, 0, 2}, .m = 2, .n = 2, .k = 3};
  }
};

std::vector<std::vector<double>> run(const Kernel& kernel, std::vector<std::vector<double>> args) {
  Status status = run_kernel(kernel, args);
  EXPECT_TRUE(status.is_ok()) << status.message() << "\n" << print(kernel);
  return args;
}

// Counts gemm statements.
class GemmCounter : public IRVisitor {
 public:
  int gemms = 0, stores = 0, allocations = 0;

 protected:
  void visit_library_call(const LibraryCall& node) override {
    if (node.op == LibraryOp::gemm) ++gemms;
    IRVisitor::visit_library_call(node);
  }
  void visit_store(const Store& node) override {
    ++stores;
    IRVisitor::visit_store(node);
  }
  void visit_allocate(const Allocate& node) override {
    ++allocations;
    IRVisitor::visit_allocate(node);
  }
};

GemmCounter count(const Kernel& kernel) {
  GemmCounter counter;
  counter.visit(kernel.body);
  return counter;
}

TEST(GemmStmt, PrintsOnOneLine) {
  const SmallGemm g;
  GemmArgs args = g.args();
  args.transpose_b = true;
  args.accumulate = true;
  args.a.offset = var("i") * 3;
  args.b.leading_dim = 3;
  EXPECT_EQ(print(gemm(args)), "gemm(2, 2, 3) c[0, ld 2] += a[i*3, ld 3] * b[0, ld 3]^T\n");
}

TEST(GemmStmt, EvaluatorComputesTheProduct) {
  const SmallGemm g;
  // [1 2 3; 4 5 6] * [7 8; 9 10; 11 12] = [58 64; 139 154]
  const std::vector<std::vector<double>> in = {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}, {}};
  std::vector<std::vector<double>> args = in;
  args[2] = {-1, -1, -1, -1};
  EXPECT_EQ(run(g.kernel(g.args()), args)[2], (std::vector<double>{58, 64, 139, 154}));

  GemmArgs accumulate = g.args();
  accumulate.accumulate = true;
  args[2] = {1, 2, 3, 4};
  EXPECT_EQ(run(g.kernel(accumulate), args)[2], (std::vector<double>{59, 66, 142, 158}));
}

TEST(GemmStmt, EvaluatorReadsTransposedOperandsAndSubmatrices) {
  // A stored transposed (3 x 2) and B (2 x 3) transposed: A^T * B^T for
  // A^T = [1 3 5; 2 4 6], B^T = [1 0; 0 1; 1 1]: [6 8; 8 10].
  Buffer a = Buffer::param("a", DType::f64, {3, 2});
  Buffer b = Buffer::param("b", DType::f64, {2, 3});
  Buffer c = Buffer::param("c", DType::f64, {2, 2});
  Kernel kernel{"t", {a, b, c},
                gemm({.a = {a, 0, 2}, .b = {b, 0, 3}, .c = {c, 0, 2}, .transpose_a = true,
                      .transpose_b = true, .m = 2, .n = 2, .k = 3})};
  EXPECT_EQ(run(kernel, {{1, 2, 3, 4, 5, 6}, {1, 0, 1, 0, 1, 1}, {0, 0, 0, 0}})[2],
            (std::vector<double>{6, 8, 8, 10}));

  // The 2 x 2 block at row 1, column 1 of a 3 x 4 matrix times a 2 x 1 column, into element
  // 1 of c: offsets and leading dimensions address regions inside larger buffers.
  Buffer big = Buffer::param("big", DType::f32, {3, 4});
  Buffer col = Buffer::param("col", DType::f32, {2, 1});
  Buffer out = Buffer::param("out", DType::f32, {3, 1});
  Kernel sub{"sub", {big, col, out},
             gemm({.a = {big, 5, 4}, .b = {col, 0, 1}, .c = {out, 1, 1}, .m = 2, .n = 1, .k = 2})};
  // rows [5 6] and [9 10] of 0..11 times [1; 2]: 17 and 29.
  EXPECT_EQ(run(sub, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {1, 2}, {-1, -1, -1}})[2],
            (std::vector<double>{-1, 17, 29}));
}

TEST(GemmStmt, EvaluatorRoundsEveryOperationInF32) {
  // 1 + 2^-24 - 1 in f32 order: (1 * 1 + 2^-24 * 1) rounds to 1, then - 1 gives 0; in f64 the
  // sum would be 2^-24.
  Buffer a = Buffer::param("a", DType::f32, {1, 3});
  Buffer b = Buffer::param("b", DType::f32, {3, 1});
  Buffer c = Buffer::param("c", DType::f32, {1, 1});
  Kernel kernel{"r", {a, b, c},
                gemm({.a = {a, 0, 3}, .b = {b, 0, 1}, .c = {c, 0, 1}, .m = 1, .n = 1, .k = 3})};
  EXPECT_EQ(run(kernel, {{1, std::ldexp(1.0, -24), -1}, {1, 1, 1}, {7}})[2][0], 0.0);
}

TEST(GemmStmt, EmptySumStoresZeros) {
  const SmallGemm g;
  GemmArgs args = g.args();
  args.k = 0;
  EXPECT_EQ(run(g.kernel(args), {{1, 2, 3, 4, 5, 6}, {1, 1, 1, 1, 1, 1}, {5, 5, 5, 5}})[2],
            (std::vector<double>{0, 0, 0, 0}));
}

TEST(GemmStmt, VerifierRejectsIllFormedGemms) {
  const SmallGemm g;
  EXPECT_TRUE(verify(g.kernel(g.args())).is_ok());
  const auto error = [&](GemmArgs args, std::vector<Buffer> params = {}) {
    if (params.empty()) params = {g.a, g.b, g.c};
    Status status = verify(Kernel{"g", params, gemm(std::move(args))});
    return status.is_ok() ? std::string("ok") : status.message();
  };
  GemmArgs past_end = g.args();
  past_end.a.offset = 1;
  EXPECT_NE(error(past_end).find("past its 6 elements"), std::string::npos) << error(past_end);
  GemmArgs narrow = g.args();
  narrow.b.leading_dim = 1;
  EXPECT_NE(error(narrow).find("leading dimension 1 < its 2 columns"), std::string::npos);
  GemmArgs negative = g.args();
  negative.c.offset = -1;
  EXPECT_NE(error(negative).find("starts at offset -1"), std::string::npos);
  GemmArgs aliased = g.args();
  aliased.c = {g.a, 0, 2};
  EXPECT_NE(error(aliased).find("which it also reads"), std::string::npos);
  GemmArgs i32_extent = g.args();
  i32_extent.m = make_int(2, DType::i32);
  EXPECT_NE(error(i32_extent).find("extent is not i64"), std::string::npos);
  GemmArgs unbound = g.args();
  unbound.a.offset = var("row");
  EXPECT_NE(error(unbound).find("'row' is not bound"), std::string::npos);

  Buffer a64 = Buffer::param("a", DType::f64, {2, 3});
  EXPECT_NE(error(g.args(), {a64, g.b, g.c}).find("is declared as"), std::string::npos);
  GemmArgs mixed = g.args();
  mixed.a.buffer = a64;
  EXPECT_NE(error(mixed, {a64, g.b, g.c}).find("gemm operands hold f64 and f32"),
            std::string::npos);
  Buffer ai = Buffer::param("a", DType::i32, {2, 3}), bi = Buffer::param("b", DType::i32, {3, 2});
  Buffer ci = Buffer::param("c", DType::i32, {2, 2});
  const GemmArgs ints = {.a = {ai, 0, 3}, .b = {bi, 0, 2}, .c = {ci, 0, 2}, .m = 2, .n = 2,
                         .k = 3};
  EXPECT_NE(error(ints, {ai, bi, ci}).find("a gemm of i32"), std::string::npos);
}

TEST(GemmStmt, SimplifierSimplifiesOffsetsAndDropsEmptyGemms) {
  const SmallGemm g;
  GemmArgs args = g.args();
  args.a.offset = var("i") * 3 + 0;
  args.m = min(Expr(2), Expr(8) - var("i") * 4);  // i in [0, 1]: 2
  Stmt loop = for_loop("i", 0, 2, gemm(args));
  const Stmt simplified = simplify(loop);
  EXPECT_EQ(print(simplified), "for (i, 0, 2) {\n  gemm(2, 2, 3) c[0, ld 2] = a[i*3, ld 3] * "
                               "b[0, ld 2]\n}\n");

  GemmArgs empty = g.args();
  empty.n = 0;
  EXPECT_TRUE(is_no_op(simplify(gemm(empty))));
  GemmArgs keeps_c = g.args();
  keeps_c.accumulate = true;
  keeps_c.k = 0;
  EXPECT_TRUE(is_no_op(simplify(gemm(keeps_c))));
  GemmArgs zeros = g.args();
  zeros.k = 0;  // stores zeros: not removable
  EXPECT_FALSE(is_no_op(simplify(gemm(zeros))));

  // An allocation a gemm writes is used, and kept.
  Buffer local = Buffer::local("t", DType::f32, 4);
  GemmArgs into_local = g.args();
  into_local.c = {local, 0, 2};
  const Stmt kept = simplify(allocate(local, gemm(into_local)));
  EXPECT_EQ(kept.kind(), StmtKind::allocate);
  EXPECT_TRUE(uses_buffer(kept, "a"));
}

TEST(GemmStmt, SubstitutionAndMutatorsReachItsExpressions) {
  const SmallGemm g;
  GemmArgs args = g.args();
  args.c.offset = var("j");
  args.k = var("j") + 1;
  const Stmt s = substitute(gemm(args), "j", Expr(2));
  const LibraryCall& result = *s.as<LibraryCall>();
  EXPECT_EQ(print(result.c().offset), "2");
  EXPECT_EQ(print(result.gemm().k), "2 + 1");
  EXPECT_TRUE(uses_var(gemm(args), "j"));
  EXPECT_FALSE(uses_var(s, "j"));
  // An unchanged gemm is shared, not rebuilt.
  const Stmt unchanged = gemm(g.args());
  EXPECT_TRUE(substitute(unchanged, "j", Expr(2)).same_as(unchanged));
}

// --- Lowering matmul to gemm -------------------------------------------------------------

TEST(LowerMatmul, F32AndF64LowerToGemmsThatMatchTheInterpreter) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const MatmulCase& c : matmul_cases()) {
      const Graph graph = matmul_graph(dtype, c);
      SCOPED_TRACE(fmt::format("{} {} x {}", dtype_name(dtype), Shape(c.a).to_string(),
                               Shape(c.b).to_string()));
      Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
      ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
      const GemmCounter counts = count(lowered->kernel);
      EXPECT_EQ(counts.gemms, 1) << print(lowered->kernel);
      EXPECT_EQ(counts.stores, 0) << print(lowered->kernel);
      EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
    }
  }
}

TEST(LowerMatmul, BroadcastBatchDimsReadBatchZero) {
  const Graph graph = matmul_graph(DType::f32, {{3, 1, 4, 5}, {2, 5, 6}});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  // Output [3, 2, 4, 6]: A's batch (i0, 0) and B's batch i1; C's matrix (i0, i1).
  EXPECT_NE(print(lowered->kernel).find("gemm(4, 6, 5) out0[i0*48 + i1*24, ld 6] = "
                                        "in0[i0*20, ld 5] * in1[i1*30, ld 6]"),
            std::string::npos)
      << print(lowered->kernel);
}

TEST(LowerMatmul, OperandsComputedInTheGroupAreStoredForTheGemm) {
  // relu(x) would be inlined into an elementwise consumer; a gemm needs it in memory. The
  // one-element constant would be a literal; here it is a [1, 1] matrix operand.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.relu(b.input("x", DType::f32, {3, 2}));
  Value* y = b.matmul(x, b.input("w", DType::f32, {2, 1}));
  graph.set_outputs({b.matmul(y, b.constant(Array(DType::f32, Shape{1, 1}, {1.5})))});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const GemmCounter counts = count(lowered->kernel);
  EXPECT_EQ(counts.gemms, 2) << print(lowered->kernel);
  EXPECT_EQ(counts.stores, 2) << print(lowered->kernel);  // relu(x) and the constant
  EXPECT_EQ(counts.allocations, 3) << print(lowered->kernel);  // and y
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
}

TEST(LowerMatmul, IntegerMatmulsKeepTheReduceDefinition) {
  for (DType dtype : {DType::i32, DType::i64}) {
    const Graph graph = matmul_graph(dtype, {{3, 4}, {4, 2}});
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    EXPECT_EQ(count(lowered->kernel).gemms, 0) << dtype_name(dtype);
    EXPECT_EQ(count(lowered->kernel).stores, 1) << dtype_name(dtype);
  }
}

TEST(LowerMatmul, F16AndBf16MatmulsAreGemmsAccumulatingInF32) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Graph graph = matmul_graph(dtype, {{3, 40}, {40, 2}});
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    EXPECT_EQ(count(lowered->kernel).gemms, 1) << dtype_name(dtype);
    EXPECT_NE(print(lowered->kernel).find("gemm("), std::string::npos);
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8)) << dtype_name(dtype);
  }
}

TEST(LowerMatmul, ElementwiseConsumersRunOnEachBlockAfterItsGemm) {
  const Graph graph = bias_relu_graph(DType::f32, 7, 5, 3);
  for (int64_t rows : {0, 1, 3, 7}) {
    SCOPED_TRACE(rows);
    const LowerGroupOptions options{.gemm_block_rows = rows};
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes(), options);
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    const GemmCounter counts = count(lowered->kernel);
    // One gemm per block into the relu's own buffer, one store of the relu that reads the
    // product back at its own element: no intermediate, no scratch, no second pass.
    EXPECT_EQ(counts.gemms, 1) << print(lowered->kernel);
    EXPECT_EQ(counts.stores, 1) << print(lowered->kernel);
    EXPECT_EQ(counts.allocations, 0) << print(lowered->kernel);
    const std::string text = print(lowered->kernel);
    EXPECT_NE(text.find(", 3, 5) out0["), std::string::npos) << text;  // the gemm's C
    // The relu's store sits inside the loop that holds the gemm (after the tail's rows).
    EXPECT_LT(text.find("gemm("), text.find("out0[i"));
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
  }
}

TEST(LowerMatmul, AProductWhoseLastEpilogueHasAnotherTypeStaysInABlock) {
  // (x*w + bias > 0) is a bool mask: the product cannot live in its buffer, so each block of
  // it is a local the mask reads back.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {7, 5}), b.input("w", DType::f32, {5, 3}));
  Value* z = b.add(y, b.input("bias", DType::f32, {3}));
  graph.set_outputs({b.greater(z, b.input("zero", DType::f32, {1}))});
  Expected<LoweredGroup> lowered =
      lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = 3});
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(count(lowered->kernel).allocations, 1) << print(lowered->kernel);
  EXPECT_NE(print(lowered->kernel).find(": f32[9] in local"), std::string::npos)
      << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
}

TEST(LowerMatmul, EpilogueValuesThatAreOutputsAreStoredOnTheBlockToo) {
  // y = x*w is an output too; z = y + bias and r = relu(z) both outputs; r reads z back.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f64, {2, 5, 4}), b.input("w", DType::f64, {4, 6}));
  Value* z = b.add(y, b.input("bias", DType::f64, {6}));
  Value* r = b.relu(z);
  graph.set_outputs({y, z, r});
  Expected<LoweredGroup> lowered =
      lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = 2});
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const GemmCounter counts = count(lowered->kernel);
  EXPECT_EQ(counts.gemms, 1) << print(lowered->kernel);
  EXPECT_EQ(counts.stores, 2) << print(lowered->kernel);
  EXPECT_EQ(counts.allocations, 0) << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
}

TEST(LowerMatmul, MatricesSharingOneRightOperandAreRowsOfOneGemm) {
  // x [3, 5, 4] times one w [4, 6]: the 15 rows of x are one gemm's rows (w packed once), cut
  // into blocks of 4 that straddle matrices; the bias + relu epilogue reads each block back.
  // A batched w, or a transposed x, keeps the loop over matrices.
  for (int64_t rows : {0, 4}) {
    SCOPED_TRACE(rows);
    Graph graph;
    GraphBuilder b(graph);
    Value* y = b.matmul(b.input("x", DType::f32, {3, 5, 4}), b.input("w", DType::f32, {1, 4, 6}));
    graph.set_outputs({b.relu(b.add(y, b.input("bias", DType::f32, {6})))});
    Expected<LoweredGroup> lowered =
        lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = rows});
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    const std::string text = print(lowered->kernel);
    EXPECT_NE(text.find(rows == 0 ? "gemm(15, 6, 4)" : "gemm(min(15 - i0*4, 4), 6, 4)"),
              std::string::npos)
        << text;
    EXPECT_EQ(count(lowered->kernel).allocations, 0) << text;  // blocks of the output
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
  }
  for (bool batched_w : {false, true}) {
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, batched_w ? Shape{3, 5, 4} : Shape{3, 4, 5});
    Value* w = b.input("w", DType::f32, batched_w ? Shape{3, 4, 6} : Shape{4, 6});
    graph.set_outputs({b.matmul(x, w, /*transpose_a=*/!batched_w)});
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    EXPECT_NE(print(lowered->kernel).find("gemm(5, 6, 4)"), std::string::npos)
        << print(lowered->kernel);
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
  }
}

TEST(LowerMatmul, ConsumersThatReadOtherElementsFallBackToAFullBuffer) {
  // transpose(y) reads y at another index, and sum(y) over its rows reads other rows: neither
  // runs on the block, so y is materialised in full; the add still runs on the block.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {4, 3}), b.input("w", DType::f32, {3, 4}));
  Value* added = b.add(y, b.input("bias", DType::f32, {4}));
  Value* flipped = b.transpose(y, {1, 0});
  Value* total = b.sum(y, {0});
  graph.set_outputs({added, flipped, total});
  Expected<LoweredGroup> lowered =
      lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = 3});
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const GemmCounter counts = count(lowered->kernel);
  EXPECT_EQ(counts.gemms, 1) << print(lowered->kernel);
  EXPECT_EQ(counts.allocations, 1) << print(lowered->kernel);
  EXPECT_NE(print(lowered->kernel).find("t0: f32[16] in local"), std::string::npos)
      << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
}

TEST(LowerMatmul, EpiloguesReadingALaterValueFallBack) {
  // out = (x*w) + exp(sum(v)) where the sum is computed after the matmul: not an epilogue.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {3, 2}), b.input("w", DType::f32, {2, 4}));
  Value* s = b.sum(b.input("v", DType::f32, {3, 4}), {1}, /*keepdims=*/true);
  graph.set_outputs({b.add(y, b.exp(s))});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const GemmCounter counts = count(lowered->kernel);
  EXPECT_EQ(counts.gemms, 1);
  EXPECT_EQ(counts.stores, 2) << print(lowered->kernel);  // the sum, then the add
  EXPECT_EQ(counts.allocations, 2) << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
}

// Counts the statements at the top of a kernel's body (its nests).
size_t top_level_statements(const Kernel& kernel) {
  Stmt body = kernel.body;
  while (const Allocate* allocation = body.as<Allocate>()) body = allocation->body;
  const Block* statements = body.as<Block>();
  return statements == nullptr ? 1 : statements->stmts.size();
}

// Lowers `graph` whole in blocks of `block_rows`, expects `nests` statements at the top of the
// kernel (1: every value in the gemm's block loop) and the interpreter's values.
void expect_nests_matching_the_interpreter(const Graph& graph, int64_t block_rows, size_t nests) {
  Expected<LoweredGroup> lowered =
      lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = block_rows});
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(top_level_statements(lowered->kernel), nests) << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
}

TEST(LowerMatmul, RowReductionsRunOnEachBlockAfterItsGemm) {
  // softmax(x w * 0.5): the softmax reads its row's maximum and sum, so it runs row by row
  // on each block right after its gemm, and the product lives in a block-sized local. Blocks
  // of 3 rows over 7 (a tail block); a batch folded into the rows of one gemm; and a batch
  // of matrices, one gemm each.
  for (const MatmulCase& c : testing::softmax_epilogue_cases()) {
    const Graph graph = testing::softmax_epilogue_graph(c);
    Expected<LoweredGroup> lowered =
        lower_group(graph, graph.nodes(), LowerGroupOptions{.gemm_block_rows = 3});
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    const std::string text = print(lowered->kernel);
    EXPECT_EQ(top_level_statements(lowered->kernel), 1u) << text;  // the gemm's block loop
    EXPECT_EQ(count(lowered->kernel).allocations, 1) << text;      // the block
    EXPECT_NE(text.find("blk"), std::string::npos) << text;
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
  }
}

// Attention's pattern, softmax(q k^T) over [2, 3] heads of small matrices: one parallel loop
// over the six matrices, its block allocated first in its body (once per thread, in generated
// code) and each binding its batch indices once, its gemm and softmax on one thread; the schedule
// leaves the softmax's nest serial inside it. A batch of larger matrices keeps the serial batch
// loops, the library's threads in each gemm.
TEST(LowerMatmul, ASmallBatchRunsItsMatricesInParallel) {
  Graph graph;
  GraphBuilder b(graph);
  Value* scores = b.matmul(b.input("q", DType::f32, {2, 3, 5, 4}),
                           b.input("k", DType::f32, {2, 3, 6, 4}), /*transpose_a=*/false,
                           /*transpose_b=*/true);
  graph.set_outputs({b.softmax(scores, -1)});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const std::string text = print(lowered->kernel);
  EXPECT_NE(text.find("parallel for (i2, 0, 6) {\n    allocate blk"), std::string::npos) << text;
  EXPECT_NE(text.find("      let i0 = i2/3\n      let i1 = i2 % 3\n"), std::string::npos) << text;
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8, graph.nodes()));
  const std::string schedule = print(default_schedule(lowered->kernel, {2, 32}));
  EXPECT_EQ(schedule.find("parallel"), std::string::npos) << schedule;

  Graph large;
  GraphBuilder l(large);
  large.set_outputs(
      {l.matmul(l.input("q", DType::f32, {2, 256, 128}), l.input("k", DType::f32, {2, 128, 256}))});
  Expected<LoweredGroup> serial = lower_group(large, large.nodes());
  ASSERT_TRUE(serial.has_value()) << serial.status().message();
  EXPECT_EQ(print(serial->kernel).find("parallel"), std::string::npos) << print(serial->kernel);
}

TEST(LowerMatmul, RowStatisticsAndTheirReadersRunRowByRow) {
  // A layer norm of x w written as primitives, and a row sum with keepdims: the means are
  // stored at each row of the block, then the values of the product's shape that read them
  // over the row's columns; the graph's outputs of the row's shape are stored on the block
  // too.
  expect_nests_matching_the_interpreter(testing::row_statistics_epilogue_graph(), 4, 1);
}

TEST(LowerMatmul, ARowEpilogueReadsAnEarlierEpilogueOnlyOnceItsRowIsStored) {
  // layer_norm(gelu(x w + b)): the gelu is stored (the layer norm reads it three times per
  // element and it calls erf), an elementwise epilogue; the layer norm reads it across the
  // row, so it runs in a loop over the row's columns after the gelu's, not beside it.
  expect_nests_matching_the_interpreter(testing::layer_norm_of_gelu_epilogue_graph(), 4, 1);
}

TEST(LowerMatmul, AReductionReadingAnotherRowIsNotARowEpilogue) {
  // The sum of a row and the row after it (a slice of the product shifted by one row) reads
  // outside the block's row: it is stored after the gemm, from the product in full.
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {4, 3}), b.input("w", DType::f32, {3, 5}));
  Value* next = b.slice(y, {1}, {4}, {0});
  Value* head = b.slice(y, {0}, {3}, {0});
  graph.set_outputs({b.sum(b.add(head, next), {1})});
  expect_nests_matching_the_interpreter(graph, 2, 2);
}

TEST(LowerMatmul, AnEpilogueFeedingAnotherMatmulIsStoredInALocal) {
  // relu(x w1 + b) w2: the epilogue's value is internal, kept in a local buffer that the
  // second gemm reads.
  Graph graph;
  GraphBuilder b(graph);
  Value* h = b.relu(b.add(b.matmul(b.input("x", DType::f32, {5, 4}), b.input("w1", DType::f32, {4, 6})),
                          b.input("b", DType::f32, {6})));
  graph.set_outputs({b.matmul(h, b.input("w2", DType::f32, {6, 3}))});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(count(lowered->kernel).gemms, 2) << print(lowered->kernel);
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
}

}  // namespace
}  // namespace kiln::loop
