// Elementwise kernels against the machine's copy bandwidth.
//
// The ceiling is measured, not assumed: an OpenMP copy loop over the same number of bytes
// (each thread streaming its own contiguous slice, as a compiled elementwise kernel does).
// Kiln's kernels are compiled by kiln::Compiler from one-node graphs and called with
// CompiledModel::run_raw on buffers the benchmark owns, so the timing holds the kernel and the
// executor's per-call work only. Each figure is the median of `kRuns` timed runs after two
// warm-up runs; bandwidth counts the bytes the kernel must move (inputs read once, output
// written once).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "kiln/kiln.h"

namespace {

constexpr int64_t kElements = int64_t{1} << 25;  // 128 MiB per f32 tensor: far beyond cache
constexpr int kRuns = 15;

double median_seconds(const std::function<void()>& body) {
  body();
  body();
  std::vector<double> times;
  for (int r = 0; r < kRuns; ++r) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double copy_bandwidth(std::vector<float>& from, std::vector<float>& to) {
  const double seconds = median_seconds([&] {
    const float* source = from.data();
    float* destination = to.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < kElements; ++i) destination[i] = source[i];
  });
  return 2.0 * kElements * sizeof(float) / seconds;
}

struct Case {
  std::string name;
  kiln::Op op;
  int inputs;
};

kiln::CompiledModel compile_case(const Case& c) {
  kiln::GraphBuilder b(c.name);
  std::vector<kiln::Value*> inputs;
  for (int i = 0; i < c.inputs; ++i) {
    inputs.push_back(b.input("x" + std::to_string(i), kiln::DType::f32, kiln::Shape{kElements}));
  }
  b.output(b.apply1(c.op, inputs));
  kiln::Expected<kiln::Graph> graph = b.finish();
  if (!graph) throw std::runtime_error(graph.status().message());
  kiln::Expected<kiln::CompiledModel> model = kiln::Compiler().compile(std::move(*graph));
  if (!model) throw std::runtime_error(model.status().message());
  return std::move(*model);
}

}  // namespace

int main() {
  std::vector<float> a(kElements), b(kElements), out(kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
    b[static_cast<size_t>(i)] = static_cast<float>(i % 777) * 1e-3f + 0.25f;
  }
  const double ceiling = copy_bandwidth(a, out);
  std::printf("machine: %d OpenMP threads; tensors of %lld f32 (%lld MiB)\n", omp_get_max_threads(),
              static_cast<long long>(kElements),
              static_cast<long long>(kElements * 4 / (1 << 20)));
  std::printf("%-28s %10s %12s %10s\n", "kernel", "time", "bandwidth", "of copy");
  std::printf("%-28s %8.2f ms %8.2f GB/s %9.0f%%\n", "copy (OpenMP loop, ceiling)",
              2.0 * kElements * 4 / ceiling * 1e3, ceiling * 1e-9, 100.0);
  const std::vector<Case> cases = {{"relu", kiln::Op::relu, 1},
                                   {"neg", kiln::Op::neg, 1},
                                   {"add", kiln::Op::add, 2},
                                   {"mul", kiln::Op::mul, 2}};
  for (const Case& c : cases) {
    kiln::CompiledModel model = compile_case(c);
    std::vector<const void*> inputs = {a.data(), b.data()};
    inputs.resize(static_cast<size_t>(c.inputs));
    std::vector<void*> outputs = {out.data()};
    const double seconds = median_seconds([&] {
      kiln::Status status = model.run_raw(inputs, outputs);
      if (!status) throw std::runtime_error(status.message());
    });
    const double bandwidth = (c.inputs + 1.0) * kElements * sizeof(float) / seconds;
    std::printf("%-28s %8.2f ms %8.2f GB/s %9.0f%%\n", ("kiln " + c.name).c_str(), seconds * 1e3,
                bandwidth * 1e-9, 100 * bandwidth / ceiling);
  }
  return 0;
}
