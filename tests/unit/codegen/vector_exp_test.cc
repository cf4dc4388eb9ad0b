// f32 exp in vector code (the prelude's kiln_exp_vector) against exp in double: every f32
// from -104 (whose exp is 0) to -86, where it computes exp(x / 2)^2 below -87, subnormal
// results counted in their own units, and every one from 86 to 89 (libmvec's own path);
// a few ordinary values; infinities, NaN and an attention mask's -10000 exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "codegen/cpu/kernel_compiler.h"
#include "loop/stmt.h"
#include "unit/codegen/codegen_test_util.h"

namespace kiln::codegen::cpu {
namespace {

using namespace loop;

// Units in the last place between two finite f32 values of one sign (subnormals included).
int64_t f32_ulps(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return std::abs(int64_t{x} - int64_t{y});
}

// Every f32 in [lo, hi].
void append_every_float(float lo, float hi, std::vector<double>& out) {
  for (float v = lo; v <= hi; v = std::nextafter(v, std::numeric_limits<float>::infinity())) {
    out.push_back(v);
  }
}

TEST(VectorExp, StaysWithinThreeUlpsBelowLibmvecsRange) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<double> xs;
  append_every_float(-104.0f, -86.0f, xs);  // below -103.98 the result is 0
  append_every_float(86.0f, 89.0f, xs);     // above 88.73 it is infinite
  for (double v : {-10000.0, -1e30, 1e30, 0.0, -0.5, 3.0}) xs.push_back(v);
  xs.push_back(-kInf);
  xs.push_back(kInf);
  xs.push_back(std::numeric_limits<double>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(xs.size());

  const Buffer x = Buffer::param("x", DType::f32, {n}), out = Buffer::param("out", DType::f32, {n});
  const Kernel kernel{
      .name = "exp",
      .params = {x, out},
      .body = for_loop("i", 0, n, ForKind::vectorized,
                       store(out, var("i"), call(Intrinsic::exp, {load(x, var("i"))})))};
  testing::TempDir cache;
  CpuCompileOptions options;
  options.cache_dir = cache.path();
  Expected<CompiledKernels> compiled = compile_kernels({&kernel, 1}, options);
  ASSERT_TRUE(compiled.has_value()) << compiled.status().message();
  const std::vector<std::vector<double>> got =
      testing::run_compiled(compiled->function(0), kernel, {xs, std::vector<double>(xs.size())});

  int64_t worst = 0;
  double worst_at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(std::exp(xs[i])), have = static_cast<float>(got[1][i]);
    if (std::isnan(want) || std::isinf(want) || want == 0.0f) {
      EXPECT_TRUE(std::isnan(want) ? std::isnan(have) : have == want)
          << "exp(" << xs[i] << "): " << have << ", want " << want;
      continue;
    }
    const int64_t ulps = f32_ulps(have, want);
    if (ulps > worst) worst = ulps, worst_at = xs[i];
  }
  EXPECT_LE(worst, 3) << "at exp(" << worst_at << ")";
}

}  // namespace
}  // namespace kiln::codegen::cpu
