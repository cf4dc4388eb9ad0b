// f32 matmul, 1024 x 1024 x 1024: OpenBLAS's cblas_sgemm called directly against the kernel
// Kiln compiles for a one-node matmul graph (lower_group -> compile_kernels -> the kernel
// function), which should reach at least 90% of the library's rate (issue #5). A third case,
// matmul -> add bias -> relu in one kernel, shows what the row-blocked epilogue costs over
// the bare product.
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
#include "loop/lower_group.h"

namespace kiln {
namespace {

constexpr int64_t kSize = 1024;
constexpr double kGflopPerCall = 2.0 * kSize * kSize * kSize / 1e9;

std::vector<float> random_matrix(int64_t elements, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> values(static_cast<size_t>(elements));
  for (float& v : values) v = uniform(rng);
  return values;
}

void report(benchmark::State& state) {
  state.counters["GFLOP"] =
      benchmark::Counter(kGflopPerCall, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CblasSgemm(benchmark::State& state) {
  const std::vector<float> a = random_matrix(kSize * kSize, 1), b = random_matrix(kSize * kSize, 2);
  std::vector<float> c(static_cast<size_t>(kSize * kSize));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kSize, kSize, kSize, 1.0f, a.data(),
                kSize, b.data(), kSize, 0.0f, c.data(), kSize);
    benchmark::ClobberMemory();
  }
  report(state);
}

// Lowers and compiles every node of `graph` as one kernel, then times it on random inputs.
void time_kiln_kernel(benchmark::State& state, const Graph& graph) {
  Expected<loop::LoweredGroup> lowered = loop::lower_group(graph, graph.nodes());
  if (!lowered) {
    state.SkipWithError(lowered.status().message().c_str());
    return;
  }
  const std::vector<loop::Kernel> kernels = {lowered->kernel};
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
  report(state);
}

void BM_KilnMatmul(benchmark::State& state) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.matmul(b.input("a", DType::f32, {kSize, kSize}),
                              b.input("b", DType::f32, {kSize, kSize}))});
  time_kiln_kernel(state, graph);
}

void BM_KilnMatmulBiasRelu(benchmark::State& state) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("a", DType::f32, {kSize, kSize}),
                      b.input("b", DType::f32, {kSize, kSize}));
  graph.set_outputs({b.relu(b.add(y, b.input("bias", DType::f32, {kSize})))});
  time_kiln_kernel(state, graph);
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

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
