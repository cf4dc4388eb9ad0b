// The dropout_bits intrinsic compiled to C++ gives support/counter_rng.h's bits exactly, for
// seeds and offsets across the whole uint64 range, including an offset + index that wraps.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "loop/evaluator.h"
#include "support/counter_rng.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using testing::TempDir;

TEST(DropoutBits, CompiledMatchesTheReferenceFormulaBitForBit) {
  constexpr int64_t kCount = 512;
  const int64_t seeds[] = {0, 42, -7, std::numeric_limits<int64_t>::min()};
  // The last offset makes offset + index pass 2^63 (and wrap as uint64) inside the range.
  const int64_t offsets[] = {0, 1000, std::numeric_limits<int64_t>::max() - 100};
  std::vector<loop::Kernel> kernels;
  for (int64_t seed : seeds) {
    for (int64_t offset : offsets) {
      const loop::Buffer out = loop::Buffer::param("out", DType::i64, {kCount});
      const loop::Expr i = loop::var("i");
      kernels.push_back(
          {.name = "bits",
           .params = {out},
           .body = loop::for_loop("i", 0, kCount,
                                  loop::store(out, i,
                                              loop::call(loop::Intrinsic::dropout_bits,
                                                         {loop::Expr(seed), loop::Expr(offset),
                                                          i})))});
    }
  }
  const TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  Expected<CompiledKernels> compiled = compile_kernels(kernels, options);
  ASSERT_TRUE(compiled) << compiled.status().message();
  size_t k = 0;
  for (int64_t seed : seeds) {
    for (int64_t offset : offsets) {
      std::vector<int64_t> bits(kCount, -1);
      void* buffers[] = {bits.data()};
      compiled->function(k)(buffers);
      std::vector<std::vector<double>> evaluated = {std::vector<double>(kCount)};
      ASSERT_TRUE(loop::run_kernel(kernels[k], evaluated));
      for (int64_t index = 0; index < kCount; ++index) {
        const int64_t want = dropout_bits(static_cast<uint64_t>(seed),
                                          static_cast<uint64_t>(offset),
                                          static_cast<uint64_t>(index));
        ASSERT_EQ(bits[static_cast<size_t>(index)], want) << seed << " " << offset << " " << index;
        ASSERT_EQ(evaluated[0][static_cast<size_t>(index)], static_cast<double>(want));
      }
      ++k;
    }
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
