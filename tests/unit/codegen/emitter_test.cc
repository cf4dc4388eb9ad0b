// The emitter's source text: what it must never contain (names from the kernel) and the
// loop-kind pragmas. What the code computes is tested by compiling it (kernels_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "codegen/cpu/emitter.h"
#include "unit/codegen/codegen_test_util.h"
#include "unit/test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;
using testing::hostile_kernel;
using testing::kHostileNames;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(CpuEmitter, NeverCopiesNamesIntoTheSource) {
  const Kernel kernel = hostile_kernel();
  Expected<std::string> source = emit_translation_unit({&kernel, 1});
  ASSERT_TRUE(source.has_value()) << source.status().message();
  for (const std::string& name : kHostileNames) {
    EXPECT_EQ(source->find(name), std::string::npos) << name;
  }
  for (const char* fragment : {"system", "rm -rf", "passwd", "*/", "evil", "\\"}) {
    EXPECT_EQ(source->find(fragment), std::string::npos) << fragment << "\n" << *source;
  }
  EXPECT_TRUE(std::all_of(source->begin(), source->end(),
                          [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  EXPECT_NE(source->find("extern \"C\" void kiln_kernel_0(void* const* buffers)"),
            std::string::npos);
}

TEST(CpuEmitter, OpensOneParallelRegionAndMarksSimdAndUnrolledLoops) {
  Buffer out = Buffer::param("out", DType::f32, {4, 4, 4});
  Expr i = var("i"), j = var("j"), k = var("k");
  Stmt body = for_loop(
      "i", 0, 4, ForKind::parallel,
      for_loop("j", 0, 4, ForKind::parallel,
               block({for_loop("k", 0, 4, ForKind::vectorized,
                               store(out, {i, j, k}, make_float(1.0))),
                      for_loop("k", 0, 4, ForKind::unrolled,
                               store(out, {i, j, k}, make_float(2.0)))})));
  const Kernel kernel{.name = "loops", .params = {out}, .body = body};
  Expected<std::string> source = emit_translation_unit({&kernel, 1});
  ASSERT_TRUE(source.has_value()) << source.status().message();
  EXPECT_EQ(count(*source, "#pragma omp parallel for"), 1u) << *source;
  EXPECT_EQ(count(*source, "#pragma omp simd"), 1u) << *source;
  EXPECT_EQ(count(*source, "#pragma GCC unroll 4"), 1u) << *source;
}

// Inside a parallel region GCC no longer sees the buffers as __restrict and would reload
// scale[0] every iteration, which kept such loops scalar; the emitter reads it, and the row's
// side[i] under a select (whose branches are both evaluated), once before the loop. Not so a
// load from a buffer the loop writes, nor one in a reduction's body (it may not run).
TEST(CpuEmitter, ReadsAVectorLoopsInvariantLoadsBeforeIt) {
  Buffer x = Buffer::param("x", DType::f32, {4, 8}), scale = Buffer::param("scale", DType::f32, {1});
  Buffer side = Buffer::param("side", DType::f32, {4}), out = Buffer::param("out", DType::f32, {4, 8});
  Expr i = var("i"), j = var("j");
  Expr value = load(x, {i, j}) * load(scale, make_int(0)) * load(scale, make_int(0)) +
               load(out, {i, make_int(0)}) +
               select(j < 2, load(side, i), make_float(0.0, DType::f32)) +
               sum("k", 0, i, load(side, make_int(0)));
  Stmt body = for_loop("i", 0, 4, ForKind::parallel,
                       for_loop("j", 0, 8, ForKind::vectorized, store(out, {i, j}, value)));
  const Kernel kernel{.name = "invariant", .params = {x, scale, side, out}, .body = body};
  Expected<std::string> source = emit_translation_unit({&kernel, 1});
  ASSERT_TRUE(source.has_value()) << source.status().message();
  // b1 is scale, b2 side, b3 out: scale is read once, into a constant the loop uses twice;
  // side[i] once; side[0] inside the sum's lambda; out[i, 0] and out[i, j] in the loop.
  EXPECT_EQ(count(*source, "= b1[0L];"), 1u) << *source;
  EXPECT_EQ(count(*source, "b1["), 1u) << *source;
  EXPECT_EQ(count(*source, "= b2[v"), 1u) << *source;
  EXPECT_EQ(count(*source, "b2[0L]"), 1u) << *source;
  EXPECT_EQ(count(*source, "= b2[0L];"), 0u) << *source;
  EXPECT_EQ(count(*source, "b3["), 2u) << *source;
  EXPECT_LT(source->find("= b1[0L];"), source->find("#pragma omp simd")) << *source;
  EXPECT_LT(source->find("= b2[v"), source->find("#pragma omp simd")) << *source;
}

// An f32 exp in a vectorized loop is the prelude's kiln_exp_vector, which keeps lanes past
// libmvec's range in its vector code (vector_exp_test.cc); a serial loop's, and f64's, call
// std::exp.
TEST(CpuEmitter, SpellsExpInVectorCodeAsTheWideRangeForm) {
  Buffer x = Buffer::param("x", DType::f32, {8}), d = Buffer::param("d", DType::f64, {8});
  Buffer out = Buffer::param("out", DType::f32, {2, 8}),
         wide = Buffer::param("wide", DType::f64, {8});
  Expr j = var("j");
  Stmt body = block({
      for_loop("j", 0, 8, ForKind::vectorized,
               block({store(out, {make_int(0), j}, call(Intrinsic::exp, {load(x, j)})),
                      store(wide, j, call(Intrinsic::exp, {load(d, j)}))})),
      for_loop("j", 0, 8, store(out, {make_int(1), j}, call(Intrinsic::exp, {load(x, j)}))),
  });
  const Kernel kernel{.name = "exps", .params = {x, d, out, wide}, .body = body};
  Expected<std::string> source = emit_translation_unit({&kernel, 1});
  ASSERT_TRUE(source.has_value()) << source.status().message();
  const std::string code = source->substr(source->find("extern \"C\" void kiln_kernel_0"));
  EXPECT_EQ(count(code, "kiln_exp_vector("), 1u) << code;
  EXPECT_EQ(count(code, "std::exp("), 2u) << code;
}

TEST(CpuEmitter, RejectsAKernelThatDoesNotVerify) {
  Buffer out = Buffer::param("out", DType::i64, {4});
  const Kernel good{.name = "good", .params = {out}, .body = store(out, 0, make_int(1))};
  const Kernel bad{.name = "bad", .params = {out}, .body = store(out, var("unbound"), 1)};
  const Kernel kernels[] = {good, bad};
  Expected<std::string> source = emit_translation_unit(kernels);
  EXPECT_TRUE(kiln::testing::is_error_with(source.status(), {"kernel 1", "unbound"}));
}

TEST(CpuEmitter, LargeLocalBuffersGoOnTheHeap) {
  Buffer out = Buffer::param("out", DType::f32, {1});
  Buffer small = Buffer::local("small", DType::f32, 16);
  Buffer large = Buffer::local("large", DType::f32, kMaxStackAllocationBytes);
  Stmt body = allocate(
      small, allocate(large, block({store(small, 0, make_float(1.0)),
                                    store(large, 0, load(small, 0)),
                                    store(out, 0, load(large, 0))})));
  const Kernel kernel{.name = "allocations", .params = {out}, .body = body};
  Expected<std::string> source = emit_translation_unit({&kernel, 1});
  ASSERT_TRUE(source.has_value()) << source.status().message();
  EXPECT_EQ(count(*source, "alignas(64) float"), 1u) << *source;
  EXPECT_EQ(count(*source, "std::unique_ptr<float[]>"), 1u) << *source;
}

}  // namespace
}  // namespace kiln::codegen::cpu
