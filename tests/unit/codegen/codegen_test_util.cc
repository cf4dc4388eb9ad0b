#include "unit/codegen/codegen_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "loop/evaluator.h"
#include "loop/printer.h"
#include "support/float16.h"

namespace kiln::codegen::cpu::testing {
namespace {

void store_element(void* base, int64_t index, DType dtype, double value) {
  const auto i = static_cast<size_t>(index);
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(value); return;
    case DType::f64: static_cast<double*>(base)[i] = value; return;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = float_to_half_bits(static_cast<float>(value));
      return;
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = float_to_bfloat16_bits(static_cast<float>(value));
      return;
    case DType::i32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value); return;
    case DType::i64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(value); return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = value != 0 ? 1 : 0; return;
  }
}

double load_element(const void* base, int64_t index, DType dtype) {
  const auto i = static_cast<size_t>(index);
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bfloat16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::boolean: return static_cast<const uint8_t*>(base)[i];
  }
  return 0;
}

// Sign-magnitude bits mapped to a line on which neighbouring values are one apart.
int64_t ordered_bits(double value, DType dtype) {
  int64_t magnitude = 0;
  bool negative = std::signbit(value);
  switch (dtype) {
    case DType::f64: {
      uint64_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      magnitude = static_cast<int64_t>(bits & ~(uint64_t{1} << 63));
      break;
    }
    case DType::f32: {
      const float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      magnitude = bits & 0x7FFFFFFFu;
      break;
    }
    case DType::f16:
      magnitude = float_to_half_bits(static_cast<float>(value)) & 0x7FFF;
      break;
    case DType::bf16:
      magnitude = float_to_bfloat16_bits(static_cast<float>(value)) & 0x7FFF;
      break;
    default: return static_cast<int64_t>(value);
  }
  return negative ? -magnitude - 1 : magnitude;
}

}  // namespace

loop::Kernel hostile_kernel() {
  using namespace loop;
  const auto& names = kHostileNames;
  Buffer in = Buffer::param(names[0], DType::f32, {8});
  Buffer out = Buffer::param(names[1], DType::f32, {8});
  Buffer tmp = Buffer::local(names[4], DType::f32, 8);
  Expr i = var(names[2]), x = var(names[3], DType::f32);
  Stmt body = allocate(
      tmp, block({for_loop(names[2], 0, 8, store(tmp, i, let(names[3], load(in, i), x * x))),
                  for_loop(names[2], 0, 8, store(out, i, load(tmp, i)))}));
  return Kernel{.name = names[0] + names[2], .params = {in, out}, .body = body};
}

std::vector<std::vector<double>> random_args(const loop::Kernel& kernel, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> args;
  for (const loop::Buffer& param : kernel.params) {
    std::vector<double> values(static_cast<size_t>(param.flat_size()));
    for (double& value : values) {
      if (is_floating(param.dtype())) {
        value = round_to_dtype(std::uniform_real_distribution<double>(-4, 4)(rng), param.dtype());
      } else if (param.dtype() == DType::boolean) {
        value = static_cast<double>(rng() % 2);
      } else {
        value = static_cast<double>(std::uniform_int_distribution<int>(-50, 50)(rng));
      }
    }
    args.push_back(std::move(values));
  }
  return args;
}

std::vector<std::vector<double>> run_compiled(KernelFunction function, const loop::Kernel& kernel,
                                              const std::vector<std::vector<double>>& args) {
  std::vector<std::vector<uint64_t>> storage;  // 8-byte aligned, any element type fits
  std::vector<void*> pointers;
  for (size_t p = 0; p < kernel.params.size(); ++p) {
    const DType dtype = kernel.params[p].dtype();
    storage.emplace_back(args[p].size() + 1);
    for (size_t i = 0; i < args[p].size(); ++i) {
      store_element(storage.back().data(), static_cast<int64_t>(i), dtype, args[p][i]);
    }
    pointers.push_back(storage.back().data());
  }
  function(pointers.data());
  std::vector<std::vector<double>> results;
  for (size_t p = 0; p < kernel.params.size(); ++p) {
    std::vector<double> values(args[p].size());
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = load_element(storage[p].data(), static_cast<int64_t>(i),
                               kernel.params[p].dtype());
    }
    results.push_back(std::move(values));
  }
  return results;
}

int64_t ulp_distance(double a, double b, DType dtype) {
  if (std::isnan(a) || std::isnan(b)) {
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int64_t>::max();
  }
  return std::abs(ordered_bits(a, dtype) - ordered_bits(b, dtype));
}

void expect_same_as_evaluator(KernelFunction function, const loop::Kernel& kernel,
                              std::vector<std::vector<double>> args, int64_t max_ulps) {
  const std::vector<std::vector<double>> compiled = run_compiled(function, kernel, args);
  const Status evaluated = loop::run_kernel(kernel, args);
  ASSERT_TRUE(evaluated.is_ok()) << evaluated.message();
  int reported = 0;
  for (size_t p = 0; p < kernel.params.size(); ++p) {
    const DType dtype = kernel.params[p].dtype();
    const double smallest_normal = dtype == DType::f64   ? std::numeric_limits<double>::min()
                                   : dtype == DType::f16 ? 6.103515625e-05
                                                         : std::numeric_limits<float>::min();
    for (size_t i = 0; i < args[p].size(); ++i) {
      const double want = args[p][i], got = compiled[p][i];
      const int64_t distance = ulp_distance(got, want, dtype);
      const bool close = is_floating(dtype) && max_ulps > 0 &&
                         (distance <= max_ulps || std::fabs(got - want) < smallest_normal);
      if (distance == 0 || close) continue;
      ADD_FAILURE() << "buffer '" << kernel.params[p].name() << "' element " << i
                    << ": compiled " << got << ", evaluator " << want
                    << (is_floating(dtype) ? " (" + std::to_string(distance) + " ulps)" : "")
                    << "\n"
                    << loop::print(kernel);
      if (++reported == 5) return;
    }
  }
}

}  // namespace kiln::codegen::cpu::testing
