#include "target/cpu_kernel_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "cost/device_profile.h"
#include "support/float16.h"

namespace kiln {
namespace {

using Bytes = std::vector<unsigned char>;

template <typename T>
T read_as(const Bytes& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void write_as(Bytes& bytes, size_t i, T value) {
  std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
}

// Element i of a buffer of `dtype` as a double.
double element(const Bytes& bytes, DType dtype, size_t i) {
  switch (dtype) {
    case DType::f32:
      return read_as<float>(bytes, i);
    case DType::f64:
      return read_as<double>(bytes, i);
    case DType::f16:
      return half_bits_to_float(read_as<uint16_t>(bytes, i));
    case DType::bf16:
      return bfloat16_bits_to_float(read_as<uint16_t>(bytes, i));
    case DType::i32:
      return read_as<int32_t>(bytes, i);
    case DType::i64:
      return static_cast<double>(read_as<int64_t>(bytes, i));
    case DType::boolean:
      return bytes[i];
  }
  return 0;
}

Bytes random_buffer(const loop::Buffer& buffer, std::mt19937_64& rng) {
  const auto n = static_cast<size_t>(buffer.flat_size());
  Bytes bytes(n * static_cast<size_t>(dtype_size_bytes(buffer.dtype())));
  std::uniform_real_distribution<float> real(-2, 2);
  std::uniform_int_distribution<int32_t> integer(-5, 5);
  for (size_t i = 0; i < n; ++i) {
    switch (buffer.dtype()) {
      case DType::f32:
        write_as(bytes, i, real(rng));
        break;
      case DType::f64:
        write_as(bytes, i, static_cast<double>(real(rng)));
        break;
      case DType::f16:
        write_as(bytes, i, float_to_half_bits(real(rng)));
        break;
      case DType::bf16:
        write_as(bytes, i, float_to_bfloat16_bits(real(rng)));
        break;
      case DType::i32:
        write_as(bytes, i, integer(rng));
        break;
      case DType::i64:
        write_as(bytes, i, static_cast<int64_t>(integer(rng)));
        break;
      case DType::boolean:
        bytes[i] = static_cast<unsigned char>(rng() % 2);
        break;
    }
  }
  return bytes;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 1e-3;
    case DType::f16:
    case DType::bf16:
      return 2e-2;
    case DType::f64:
      return 1e-9;
    default:
      return 0;
  }
}

// The first element where `got` differs from `want` beyond the tolerance, described; empty
// when none does.
std::string first_difference(const std::vector<loop::Buffer>& params, const std::vector<Bytes>& want,
                             const std::vector<Bytes>& got) {
  for (size_t p = 0; p < params.size(); ++p) {
    const DType dtype = params[p].dtype();
    const auto n = static_cast<size_t>(params[p].flat_size());
    for (size_t i = 0; i < n; ++i) {
      const double a = element(want[p], dtype, i), b = element(got[p], dtype, i);
      if (std::isnan(a) && std::isnan(b)) continue;
      const double bound = tolerance(dtype) * std::max({1.0, std::abs(a), std::abs(b)});
      if (a == b || std::abs(a - b) <= bound) continue;
      return fmt::format("{}[{}]: {} where the reference gives {}", params[p].name(), i,
                         b, a);
    }
  }
  return {};
}

struct Buffers {
  std::vector<Bytes> data;
  std::vector<void*> addresses;

  explicit Buffers(std::vector<Bytes> initial) : data(std::move(initial)) {
    for (Bytes& bytes : data) addresses.push_back(bytes.data());
  }
  void reset(const std::vector<Bytes>& initial) {
    for (size_t p = 0; p < data.size(); ++p) {
      std::copy(initial[p].begin(), initial[p].end(), data[p].begin());
    }
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Expected<std::vector<loop::Timing>> CpuKernelTimer::time(std::span<const loop::Kernel> kernels,
                                                         double seconds) {
  if (kernels.empty()) return std::vector<loop::Timing>{};
  const std::vector<loop::Buffer>& params = kernels[0].params;
  int64_t total = 0;
  for (const loop::Buffer& buffer : params) {
    total += buffer.flat_size() * dtype_size_bytes(buffer.dtype());
  }
  if (total > kMaxBytes) {
    return Status::errorf("its parameters hold {} bytes, more than the timer's {}", total,
                          kMaxBytes);
  }
  codegen::cpu::CpuCompileOptions options = options_;
  options.kernels_per_unit = static_cast<int>(kernels.size());
  KILN_ASSIGN_OR_RETURN(codegen::cpu::CompiledKernels compiled,
                        codegen::cpu::compile_kernels(kernels, options));

  const std::function<bool()> quiet = cost::watch_quiet(
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  std::mt19937_64 rng(20240517);
  std::vector<Bytes> initial;
  for (const loop::Buffer& buffer : params) initial.push_back(random_buffer(buffer, rng));
  Buffers buffers(initial);
  compiled.function(0)(buffers.addresses.data());
  const std::vector<Bytes> expected = buffers.data;

  std::vector<loop::Timing> timings(kernels.size());
  const double share = seconds / static_cast<double>(std::max<size_t>(1, kernels.size() - 1));
  for (size_t k = 1; k < kernels.size(); ++k) {
    buffers.reset(initial);
    const codegen::cpu::KernelFunction function = compiled.function(k);
    function(buffers.addresses.data());
    timings[k].disagreement = first_difference(params, expected, buffers.data);
    std::vector<double> runs;
    double spent = 0;
    while (runs.size() < static_cast<size_t>(kMinRuns) ||
           (spent < share && runs.size() < static_cast<size_t>(kMaxRuns))) {
      const auto start = std::chrono::steady_clock::now();
      function(buffers.addresses.data());
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
      runs.push_back(elapsed.count());
      spent += elapsed.count();
    }
    timings[k].seconds = median(std::move(runs));
  }
  quiet_ = quiet();
  return timings;
}

}  // namespace kiln
