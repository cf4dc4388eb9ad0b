// f32 matmul, 1024 x 1024 x 1024: OpenBLAS's cblas_sgemm called directly against the kernel
// Kiln compiles for a one-node matmul graph (lower_group -> compile_kernels -> the kernel
// function), which should reach at least 90% of the library's rate (issue #5). A third case,
// matmul -> add bias -> relu in one kernel, shows what the row-blocked epilogue costs over
// the bare product. Kernels get the default schedule, as the compiler gives them.
//
// A ResNet convolution (3x3, 64 -> 64 channels, 56x56, batch 1, padding 1) is compared with
// cblas_sgemm of the product it becomes ([64, 576] x [576, 3136]): the difference is the
// im2col pass that builds the column matrix.
//
// Each case reports GFLOP/s (the counter "GFLOP": 2 * M * N * K per call, as a rate) and runs
// 10 repetitions after a warm-up; read the median row. Both sides use the same OpenBLAS (the
// OpenMP build) with its default thread count, so the ratio is measured side by side in one run.
//
//   build-*/bench/kiln_matmul_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <vector>


#include "codegen/cpu/kernel_compiler.h"
#include "ir/builder.h"
#include "loop/default_schedule.h"
#include "loop/lower_group.h"

namespace kiln {
namespace {

constexpr int64_t kSize = 1024;
constexpr double kMatmulGflop = 2.0 * kSize * kSize * kSize / 1e9;

// The conv case: channels, image side, kernel side; its gemm is [C, C*K*K] x [C*K*K, S*S].
constexpr int64_t kChannels = 64, kSide = 56, kKernel = 3;
constexpr int64_t kConvM = kChannels, kConvK = kChannels * kKernel * kKernel,
                  kConvN = kSide * kSide;
constexpr double kConvGflop = 2.0 * kConvM * kConvN * kConvK / 1e9;

std::vector<float> random_matrix(int64_t elements, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(static_cast<size_t>(elements));
  for (float& v : values) v = uniform(rng);
  return values;
}

void report(benchmark::State& state, double gflop_per_call) {
  state.counters["GFLOP"] =
      benchmark::Counter(gflop_per_call, benchmark::Counter::kIsIterationInvariantRate);
}

// cblas_sgemm of row-major [m, k] x [k, n].
void time_sgemm(benchmark::State& state, int64_t m, int64_t n, int64_t k) {
  const std::vector<float> a = random_matrix(m * k, 1), b = random_matrix(k * n, 2);
  std::vector<float> c(static_cast<size_t>(m * n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k),
                b.data(), static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
    benchmark::ClobberMemory();
  }
  report(state, 2.0 * static_cast<double>(m * n * k) / 1e9);
}

void BM_CblasSgemm(benchmark::State& state) { time_sgemm(state, kSize, kSize, kSize); }

// Lowers every node of `graph` as one kernel, applies the default schedule, compiles it, then
// times it on random inputs.
void time_kiln_kernel(benchmark::State& state, const Graph& graph, double gflop_per_call) {
  Expected<loop::LoweredGroup> lowered = loop::lower_group(graph, graph.nodes());
  if (!lowered) {
    state.SkipWithError(lowered.status().message().c_str());
    return;
  }
  const loop::Schedule schedule = loop::default_schedule(lowered->kernel, loop::host_target());
  Expected<loop::Kernel> scheduled = loop::apply_schedule(lowered->kernel, schedule);
  if (!scheduled) {
    state.SkipWithError(scheduled.status().message().c_str());
    return;
  }
  const std::vector<loop::Kernel> kernels = {*scheduled};
  Expected<codegen::cpu::CompiledKernels> compiled = codegen::cpu::compile_kernels(kernels);
  if (!compiled) {
    state.SkipWithError(compiled.status().message().c_str());
    return;
  }
  std::vector<std::vector<float>> storage;
  std::vector<void*> buffers;
  for (size_t p = 0; p < lowered->kernel.params.size(); ++p) {
    storage.push_back(random_matrix(lowered->kernel.params[p].flat_size(), 10 + p));
  }
  for (std::vector<float>& buffer : storage) buffers.push_back(buffer.data());
  const codegen::cpu::KernelFunction kernel = compiled->function(0);
  for (auto _ : state) {
    kernel(buffers.data());
    benchmark::ClobberMemory();
  }
  report(state, gflop_per_call);
}

void BM_KilnMatmul(benchmark::State& state) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.matmul(b.input("a", DType::f32, {kSize, kSize}),
                              b.input("b", DType::f32, {kSize, kSize}))});
  time_kiln_kernel(state, graph, kMatmulGflop);
}

void BM_KilnMatmulBiasRelu(benchmark::State& state) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("a", DType::f32, {kSize, kSize}),
                      b.input("b", DType::f32, {kSize, kSize}));
  graph.set_outputs({b.relu(b.add(y, b.input("bias", DType::f32, {kSize})))});
  time_kiln_kernel(state, graph, kMatmulGflop);
}

void BM_CblasSgemmConvShape(benchmark::State& state) {
  time_sgemm(state, kConvM, kConvN, kConvK);
}

void BM_KilnConv3x3(benchmark::State& state) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.apply1(Op::conv,
                              {b.input("x", DType::f32, {1, kChannels, kSide, kSide}),
                               b.input("w", DType::f32, {kChannels, kChannels, kKernel, kKernel})},
                              {{"pads", {1, 1, 1, 1}}})});
  time_kiln_kernel(state, graph, kConvGflop);
}

void configure(benchmark::internal::Benchmark* bench) {
  bench->Unit(benchmark::kMillisecond)
      ->MinWarmUpTime(1.0)
      ->Repetitions(10)
      ->ReportAggregatesOnly(true)
      ->UseRealTime();
}

BENCHMARK(BM_CblasSgemm)->Apply(configure);
BENCHMARK(BM_KilnMatmul)->Apply(configure);
BENCHMARK(BM_KilnMatmulBiasRelu)->Apply(configure);
BENCHMARK(BM_CblasSgemmConvShape)->Apply(configure);
BENCHMARK(BM_KilnConv3x3)->Apply(configure);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
