// The counter-based random bits behind dropout: one function of (seed, offset, index) that the
// reference interpreter, the loop-IR evaluator and every generated kernel compute identically,
// so a mask needs no state and no agreement on evaluation order.
//
//   counter = offset + index                  (uint64, wrapping)
//   bits    = mix(seed ^ mix(counter)) >> 40   (mix: the splitmix64 finalizer, Steele, Lea and
//                                              Flood 2014; 24 bits, uniform in [0, 2^24))
//
// Element `index` of a dropout is kept when bits >= dropout_threshold(ratio), i.e. when
// u = bits * 2^-24 >= ratio, tested in integers so no rounding of ratio can change it. The
// CPU prelude (codegen/cpu/prelude.cc) spells the same formula in generated C++; a codegen
// test compares the two.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln {

constexpr uint64_t splitmix64_mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr int64_t dropout_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  return static_cast<int64_t>(splitmix64_mix(seed ^ splitmix64_mix(offset + index)) >> 40);
}

// The smallest 24-bit value that is kept: ceil(ratio * 2^24), exact for every double ratio in
// [0, 1) since the product only shifts the exponent.
inline int64_t dropout_threshold(double ratio) {
  return static_cast<int64_t>(std::ceil(std::ldexp(ratio, 24)));
}

}  // namespace kiln
