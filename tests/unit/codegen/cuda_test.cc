// The CUDA back end without a GPU: how loop/gpu_mapping.h maps kernels (launches, blocks,
// threads, block reductions, host loops around gemms), that the mapped kernel computes what
// the original does (both on the loop evaluator), the launches the CUDA emitter makes of it,
// and that NVRTC compiles the CUDA for sm_90 where the toolkit is present.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/cuda/emitter.h"
#include "codegen/cuda/nvrtc_compiler.h"
#include "loop/evaluator.h"
#include "loop/gpu_mapping.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cuda {
namespace {

using loop::Buffer;
using loop::Expr;
using loop::ForKind;
using loop::Kernel;
using loop::Stmt;
using loop::var;

struct LoopCounts {
  int blocks = 0, threads = 0, block_reductions = 0, gemms = 0;
};

LoopCounts count(const Stmt& stmt) {
  struct Counter : loop::IRVisitor {
    LoopCounts counts;
    void visit_for(const loop::For& node) override {
      if (node.for_kind == ForKind::gpu_block) ++counts.blocks;
      if (node.for_kind == ForKind::gpu_thread) ++counts.threads;
      IRVisitor::visit_for(node);
    }
    void visit_reduce(const loop::Reduce& node) override {
      if (node.vectorized) ++counts.block_reductions;
      IRVisitor::visit_reduce(node);
    }
    void visit_library_call(const loop::LibraryCall& node) override {
      if (node.op == loop::LibraryOp::gemm) ++counts.gemms;
      IRVisitor::visit_library_call(node);
    }
  } counter;
  counter.visit(stmt);
  return counter.counts;
}

// Runs `kernel` and its GPU mapping on the evaluator with the same random inputs and expects
// equal parameters (the mapping's scratch parameters aside); returns the mapping.
loop::GpuMapping expect_mapping_computes_the_same(const Kernel& kernel,
                                                  const loop::GpuMappingOptions& options = {}) {
  Expected<loop::GpuMapping> mapped = loop::map_to_gpu(kernel, options);
  EXPECT_TRUE(mapped) << mapped.status().message();
  if (!mapped) return {};
  std::vector<std::vector<double>> args = cpu::testing::random_args(kernel, 7);
  std::vector<std::vector<double>> mapped_args = args;
  for (size_t i = kernel.params.size(); i < mapped->kernel.params.size(); ++i) {
    mapped_args.emplace_back(static_cast<size_t>(mapped->kernel.params[i].flat_size()), 0.0);
  }
  EXPECT_TRUE(loop::run_kernel(kernel, args).is_ok());
  const Status ran = loop::run_kernel(mapped->kernel, mapped_args);
  EXPECT_TRUE(ran.is_ok()) << ran.message() << "\n" << loop::print(mapped->kernel);
  for (size_t p = 0; p < kernel.params.size(); ++p) {
    EXPECT_EQ(args[p], mapped_args[p]) << "parameter " << p << "\n" << loop::print(mapped->kernel);
  }
  return std::move(mapped).value();
}

CudaUnit expect_emits_and_compiles(const Kernel& mapped) {
  Expected<CudaUnit> unit = emit_cuda_unit({&mapped, 1});
  EXPECT_TRUE(unit) << unit.status().message();
  if (!unit) return {};
  if (nvrtc_available()) {
    const ::kiln::testing::TempDir cache;
    Expected<Cubin> cubin = compile_cuda(unit->source, {.cache_dir = cache.path()});
    EXPECT_TRUE(cubin) << cubin.status().message() << "\n" << unit->source;
    if (cubin) {
      EXPECT_FALSE(cubin->image.empty());
    }
  }
  return std::move(unit).value();
}

// out[i, j] = exp(x[i, j]) / sum_k exp(x[i, k]) over rows of 512: a row's worth of work per
// band point, so each row is a block; the row sum is a block reduction into shared memory and
// the division a thread loop.
Kernel softmax_rows() {
  const Buffer x = Buffer::param("in0", DType::f32, {4, 512});
  const Buffer out = Buffer::param("out0", DType::f32, {4, 512});
  const Buffer total = Buffer::local("t0", DType::f32, 1);
  const Expr i = var("i0"), j = var("i1"), k = var("k0");
  const Stmt row = loop::allocate(
      total, loop::block({loop::store(total, 0,
                                      loop::sum("k0", 0, 512,
                                                loop::call(loop::Intrinsic::exp,
                                                           {loop::load(x, {i, k})}))),
                          loop::for_loop("i1", 0, 512,
                                         loop::store(out, {i, j},
                                                     loop::call(loop::Intrinsic::exp,
                                                                {loop::load(x, {i, j})}) /
                                                         loop::load(total, 0)))}));
  return {"softmax", {x, out}, loop::for_loop("i0", 0, 4, row)};
}

TEST(GpuMapping, RowsOfWorkAreBlocksWithABlockReduction) {
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(softmax_rows());
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.blocks, 1) << loop::print(mapping.kernel);
  EXPECT_EQ(counts.threads, 1);
  EXPECT_EQ(counts.block_reductions, 1);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.size(), 1u);
  ASSERT_EQ(unit.launches[0].size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], 4);  // one block per row
  EXPECT_EQ(unit.launches[0][0].block[0], loop::kGpuThreadsPerBlock);
  EXPECT_NE(unit.source.find("__shared__ float"), std::string::npos);
  EXPECT_NE(unit.source.find("kiln_block_reduce(r"), std::string::npos);
}

TEST(GpuMapping, ElementwiseNestsAreOneThreadPerElement) {
  const Buffer x = Buffer::param("in0", DType::f32, {64, 130});
  const Buffer out = Buffer::param("out0", DType::f32, {64, 130});
  const Expr i = var("i0"), j = var("i1");
  const Kernel kernel{
      "exp", {x, out},
      loop::for_loop("i0", 0, 64,
                     loop::for_loop("i1", 0, 130,
                                    loop::store(out, {i, j},
                                                loop::call(loop::Intrinsic::exp,
                                                           {loop::load(x, {i, j})}))))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel);
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.blocks, 1);
  EXPECT_EQ(counts.block_reductions, 0);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], (64 * 130 + 255) / 256);  // the last block partly idle
}

TEST(GpuMapping, TheBandGoesThroughACheapLetBetweenItsLoops) {
  // A batch norm's scaling: a channel's scale is a let between the channel loop and the loops
  // over images and positions. Computed at each element, it leaves all 2 x 4 x 300 elements
  // one thread each, rather than one block per channel.
  const Buffer x = Buffer::param("in0", DType::f32, {2, 4, 300});
  const Buffer scale = Buffer::param("in1", DType::f32, {4});
  const Buffer out = Buffer::param("out0", DType::f32, {2, 4, 300});
  const Expr c = var("i0"), n = var("i1"), p = var("i2");
  const Stmt element =
      loop::store(out, {n, c, p}, loop::load(x, {n, c, p}) * var("f0", DType::f32));
  const Kernel kernel{
      "scale", {x, scale, out},
      loop::for_loop(
          "i0", 0, 4,
          loop::let_stmt("f0", loop::load(scale, c) * 2.0f,
                         loop::for_loop("i1", 0, 2, loop::for_loop("i2", 0, 300, element))))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], (2 * 4 * 300 + 255) / 256) << loop::print(mapping.kernel);
}

TEST(GpuMapping, AFewTermsAreSummedByEachThreadNotTheBlock) {
  // out[idx[u]] += x[u, 0] + x[u, 1] + x[u, 2] in order (a pooling window's gradient, without
  // atomics): one block, whose threads each sum the three terms rather than exchange them.
  const Buffer idx = Buffer::param("in0", DType::i64, {16});
  const Buffer x = Buffer::param("in1", DType::f64, {16, 3});
  const Buffer out = Buffer::param("out0", DType::f64, {51});
  const Expr u = var("i0");
  const Expr slot = loop::min(loop::max(loop::load(idx, u), 0), 50);
  const Kernel kernel{
      "window", {idx, x, out},
      loop::for_loop("i0", 0, 16,
                     loop::store(out, slot,
                                 loop::load(out, slot) +
                                     loop::sum("k0", 0, 3, loop::load(x, u * 3 + var("k0")))))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel, {.atomics = false});
  EXPECT_EQ(count(mapping.kernel.body).block_reductions, 0) << loop::print(mapping.kernel);
  expect_emits_and_compiles(mapping.kernel);
}

TEST(GpuMapping, ASumOfSmallReductionsIsTheBlocksSum) {
  // A sum over 600 rows of each row's largest of 7 (a loss's shape): the block sums the rows,
  // each thread computing the 7-term maxima of its rows.
  const Buffer x = Buffer::param("in0", DType::f64, {600, 7});
  const Buffer out = Buffer::param("out0", DType::f64, {1});
  const Expr row = var("k0"), column = var("k1");
  const Kernel kernel{
      "loss", {x, out},
      loop::store(out, 0,
                  loop::sum("k0", 0, 600,
                            loop::reduce(loop::ReduceOp::max, "k1", 0, 7,
                                         loop::load(x, row * 7 + column))))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel);
  struct Finder : loop::IRVisitor {
    std::vector<std::string> vectorized;
    void visit_reduce(const loop::Reduce& node) override {
      if (node.vectorized) vectorized.push_back(node.var);
      IRVisitor::visit_reduce(node);
    }
  } finder;
  finder.visit(mapping.kernel.body);
  EXPECT_EQ(finder.vectorized, std::vector<std::string>{"k0"}) << loop::print(mapping.kernel);
  expect_emits_and_compiles(mapping.kernel);
}

TEST(GpuMapping, AnAccumulatingLoopRunsInOrderInOneBlockWithoutAtomics) {
  // out[idx[u]] += x[u] in order: iterations may touch the same element, so no band.
  const Buffer idx = Buffer::param("in0", DType::i64, {16});
  const Buffer x = Buffer::param("in1", DType::f64, {16});
  const Buffer out = Buffer::param("out0", DType::f64, {51});
  const Expr u = var("i0");
  const Expr slot = loop::min(loop::max(loop::load(idx, u), 0), 50);
  const Kernel kernel{"scatter", {idx, x, out},
                      loop::for_loop("i0", 0, 16,
                                     loop::store(out, slot,
                                                 loop::load(out, slot) + loop::load(x, u)))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel, {.atomics = false});
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], 1);
  EXPECT_EQ(unit.source.find("atomicAdd"), std::string::npos);
}

// out[idx[u], :] += x[u, :] (an embedding's gradient): rows that may repeat.
Kernel scatter_rows() {
  const Buffer idx = Buffer::param("in0", DType::i64, {16});
  const Buffer x = Buffer::param("in1", DType::f64, {16, 300});
  const Buffer out = Buffer::param("out0", DType::f64, {7, 300});
  const Expr u = var("i0"), c = var("i1");
  const Expr row = loop::min(loop::max(loop::load(idx, u), 0), 6);
  return Kernel{"scatter_rows", {idx, x, out},
                loop::for_loop("i0", 0, 16,
                               loop::for_loop("i1", 0, 300,
                                              loop::store(out, row * 300 + c,
                                                          loop::load(out, row * 300 + c) +
                                                              loop::load(x, u * 300 + c))))};
}

TEST(GpuMapping, AnAccumulatingLoopOfRowsAddsAtomically) {
  // Every (row, column) a thread, adding into out atomically: 16 x 300 threads.
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(scatter_rows());
  struct Finder : loop::IRVisitor {
    int atomic = 0;
    void visit_store(const loop::Store& node) override {
      atomic += node.atomic ? 1 : 0;
      IRVisitor::visit_store(node);
    }
  } finder;
  finder.visit(mapping.kernel.body);
  EXPECT_EQ(finder.atomic, 1) << loop::print(mapping.kernel);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], (16 * 300 + 255) / 256);
  EXPECT_NE(unit.source.find("atomicAdd("), std::string::npos) << unit.source;
  // A loop that also reads what it adds into (out[idx[u]] *= 2 after the add) stays in order.
  const Buffer idx = Buffer::param("in0", DType::i64, {16});
  const Buffer x = Buffer::param("in1", DType::f64, {16});
  const Buffer out = Buffer::param("out0", DType::f64, {51});
  const Expr slot = loop::min(loop::max(loop::load(idx, var("i0")), 0), 50);
  const Kernel add_then_double{
      "add_then_double", {idx, x, out},
      loop::for_loop("i0", 0, 16,
                     loop::block({loop::store(out, slot,
                                              loop::load(out, slot) + loop::load(x, var("i0"))),
                                  loop::store(out, slot, loop::load(out, slot) * 2.0)}))};
  const CudaUnit in_order =
      expect_emits_and_compiles(expect_mapping_computes_the_same(add_then_double).kernel);
  EXPECT_EQ(in_order.source.find("atomicAdd"), std::string::npos);
}

TEST(GpuMapping, AnAccumulatingLoopInsideABlockSpreadsOverItsThreadsWithAtomicAdds) {
  // For each of 2 planes (a block each), 300 adds into 8 elements picked by data (as
  // max_pool_grad adds each window's gradient into its maximum's element): the adds spread
  // over the block's threads, atomically.
  const Buffer idx = Buffer::param("in0", DType::i64, {300});
  const Buffer x = Buffer::param("in1", DType::f32, {2, 300});
  const Buffer out = Buffer::param("out0", DType::f32, {2, 8});
  const Expr p = var("i0"), u = var("i1");
  const Expr slot = p * 8 + loop::min(loop::max(loop::load(idx, u), 0), 7);
  const Kernel kernel{
      "planes", {idx, x, out},
      loop::for_loop("i0", 0, 2,
                     loop::for_loop("i1", 0, 300,
                                    loop::store(out, slot,
                                                loop::load(out, slot) +
                                                    loop::load(x, p * 300 + u))))};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel);
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.blocks, 1) << loop::print(mapping.kernel);
  EXPECT_EQ(counts.threads, 1) << loop::print(mapping.kernel);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], 2);
  EXPECT_NE(unit.source.find("atomicAdd("), std::string::npos) << unit.source;
  // Without atomics each block adds in order, on one thread at a time.
  const CudaUnit in_order = expect_emits_and_compiles(
      expect_mapping_computes_the_same(kernel, {.atomics = false}).kernel);
  EXPECT_EQ(in_order.source.find("atomicAdd"), std::string::npos);
}

TEST(GpuMapping, AnAccumulatingLoopOfRowsSpreadsEachRowOverABlockWithoutAtomics) {
  // In order of u, the rows one after the other, each row's 300 columns over the block's
  // threads.
  const loop::GpuMapping mapping =
      expect_mapping_computes_the_same(scatter_rows(), {.atomics = false});
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.blocks, 1) << loop::print(mapping.kernel);
  EXPECT_EQ(counts.threads, 1) << loop::print(mapping.kernel);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  EXPECT_EQ(unit.launches[0][0].grid[0], 1);
  EXPECT_EQ(unit.launches[0][0].block[0], loop::kGpuThreadsPerBlock);
}

// for b in [0, 3): P = A[b] * B[b] into a local block buffer, then an epilogue reading P that
// stores into C[b] (independent iterations) or adds into one C (each iteration reads the last).
Kernel gemm_then_epilogue(bool accumulate_across_batches) {
  const Buffer a = Buffer::param("in0", DType::f32, {3, 4, 5});
  const Buffer b = Buffer::param("in1", DType::f32, {3, 5, 6});
  const Buffer c = Buffer::param("out0", DType::f32, {3, 4, 6});
  const Buffer product = Buffer::local("t0", DType::f32, 24);
  const Expr batch = var("i0"), i = var("i1");
  const Stmt epilogue =
      accumulate_across_batches
          ? loop::store(c, i,
                        loop::load(c, i) + loop::load(product, i) + loop::load(a, batch * 20))
          : loop::store(c, batch * 24 + i, loop::load(product, i) + 1.0f);
  const Stmt body = loop::allocate(
      product, loop::block({loop::gemm({.a = {a, batch * 20, 5}, .b = {b, batch * 30, 6},
                                        .c = {product, 0, 6}, .m = 4, .n = 6, .k = 5}),
                            loop::for_loop("i1", 0, 24, epilogue)}));
  return {"batched", {a, b, c}, loop::for_loop("i0", 0, 3, body)};
}

TEST(GpuMapping, IndependentLoopsAroundAGemmAreDistributedIntoOneLaunchPerStatement) {
  // The block buffer gets a slice per batch; the three gemms are one strided-batch launch and
  // the three epilogues one launch whose band includes the batch.
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(gemm_then_epilogue(false));
  ASSERT_EQ(mapping.scratch_bytes, std::vector<int64_t>{3 * 24 * 4});
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.gemms, 3);
  EXPECT_EQ(counts.blocks, 1);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 2u);
  ASSERT_TRUE(unit.launches[0][0].gemm.has_value());
  EXPECT_EQ(unit.launches[0][0].gemm->batch, 3);
  EXPECT_EQ(unit.launches[0][0].gemm->stride_c, 24);
  EXPECT_EQ(unit.launches[0][1].grid[0], 1) << "72 elements: one block of threads";
}

TEST(GpuMapping, LoopsAroundAGemmWhoseIterationsDependRunOnTheHost) {
  // Each epilogue adds into the C the last one wrote: gemm, epilogue, gemm, ... in order.
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(gemm_then_epilogue(true));
  ASSERT_EQ(mapping.scratch_bytes, std::vector<int64_t>{24 * 4});  // the block buffer
  const LoopCounts counts = count(mapping.kernel.body);
  EXPECT_EQ(counts.gemms, 3);
  EXPECT_EQ(counts.blocks, 3);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 6u);
  EXPECT_EQ(unit.launches[0][2].function, "kiln_gemm_f32");
  EXPECT_EQ(unit.launches[0][2].args[0].byte_offset, 20 * 4);  // A of batch 1
  // The three epilogues share one function; the batch is its host argument.
  EXPECT_EQ(unit.launches[0][1].function, unit.launches[0][5].function);
  EXPECT_EQ(unit.launches[0][5].args.back().value, 2);
}

TEST(GpuMapping, ABf16GemmIsACublasLtGemmOfBf16AccumulatingInF32) {
  // Mixed precision's gemm: its launch names the bf16 template, cuBLASLt's type, and offsets
  // in 2-byte elements.
  const Buffer a = Buffer::param("in0", DType::bf16, {8, 5});
  const Buffer b = Buffer::param("in1", DType::bf16, {5, 6});
  const Buffer c = Buffer::param("out0", DType::bf16, {4, 6});
  const Kernel kernel{"bf16_gemm", {a, b, c},
                      loop::gemm({.a = {a, 20, 5}, .b = {b, 0, 6}, .c = {c, 0, 6}, .m = 4, .n = 6,
                                  .k = 5})};
  const loop::GpuMapping mapping = expect_mapping_computes_the_same(kernel);
  const CudaUnit unit = expect_emits_and_compiles(mapping.kernel);
  ASSERT_EQ(unit.launches.at(0).size(), 1u);
  const runtime::CudaLaunch& launch = unit.launches[0][0];
  EXPECT_EQ(launch.function, "kiln_gemm_bf16");
  ASSERT_TRUE(launch.gemm.has_value());
  EXPECT_EQ(launch.gemm->type, runtime::CudaGemm::Type::bf16);
  EXPECT_EQ(launch.args[0].byte_offset, 20 * 2);
  // The launch list keeps the type through its byte form.
  Expected<runtime::CudaKernelLaunches> read =
      runtime::deserialize_launches(runtime::serialize_launches(unit.launches));
  ASSERT_TRUE(read) << read.status().message();
  EXPECT_EQ(read->at(0).at(0).gemm->type, runtime::CudaGemm::Type::bf16);
}

TEST(GpuMapping, NamesFromTheModelNeverReachTheSource) {
  Expected<loop::GpuMapping> mapped = loop::map_to_gpu(cpu::testing::hostile_kernel());
  ASSERT_TRUE(mapped) << mapped.status().message();
  const CudaUnit unit = expect_emits_and_compiles(mapped->kernel);
  for (const std::string& name : cpu::testing::kHostileNames) {
    EXPECT_EQ(unit.source.find(name), std::string::npos) << name;
  }
}

TEST(GpuMapping, TheVerifierKeepsGpuLoopsNested) {
  const Buffer out = Buffer::param("out0", DType::f32, {4});
  const Stmt thread_alone =
      loop::for_loop("t", 0, 4, ForKind::gpu_thread, loop::store(out, var("t"), loop::make_float(1.0)));
  EXPECT_FALSE(loop::verify(Kernel{"k", {out}, thread_alone}).is_ok());
  const Stmt nested_blocks = loop::for_loop(
      "b", 0, 1, ForKind::gpu_block,
      loop::for_loop("c", 0, 4, ForKind::gpu_block, loop::store(out, var("c"), loop::make_float(1.0))));
  EXPECT_FALSE(loop::verify(Kernel{"k", {out}, nested_blocks}).is_ok());
  const Stmt fine = loop::for_loop("b", 0, 1, ForKind::gpu_block, thread_alone);
  EXPECT_TRUE(loop::verify(Kernel{"k", {out}, fine}).is_ok());
}

}  // namespace
}  // namespace kiln::codegen::cuda
