#include "interp/random_inputs.h"

#include <cmath>
#include <numbers>

#include "support/check.h"

namespace kiln {
namespace {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace

Array random_array(const TensorType& type, uint64_t seed, int64_t int_range) {
  KILN_CHECK(int_range > 0, "random_array: int_range must be positive, got {}", int_range);
  SplitMix64 rng(seed);
  Array array(type.dtype, type.shape);
  for (double& v : array.data) {
    if (is_floating(type.dtype)) {
      const double radius = std::sqrt(-2.0 * std::log(rng.uniform()));
      v = radius * std::cos(2.0 * std::numbers::pi * rng.uniform());
    } else if (is_integer(type.dtype)) {
      v = static_cast<double>(rng.next() % static_cast<uint64_t>(int_range));
    } else {
      v = static_cast<double>(rng.next() >> 63);
    }
  }
  array.round_to_dtype();
  return array;
}

Array random_input(const Graph& graph, size_t index, const RandomInputOptions& options) {
  const uint64_t seed = options.seed * 0x100000001B3ull + index;
  return random_array(graph.inputs().at(index)->type(), seed, options.int_range);
}

std::vector<Array> random_inputs(const Graph& graph, const RandomInputOptions& options) {
  std::vector<Array> arrays;
  for (size_t i = 0; i < graph.inputs().size(); ++i) arrays.push_back(random_input(graph, i, options));
  return arrays;
}

}  // namespace kiln
