#include "support/float16.h"

#include <bit>
#include <cmath>

namespace kiln {

float half_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) {  // infinity or NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t float_to_half_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) {  // infinity or NaN (keep NaN quiet)
    return sign | 0x7C00u | (abs_bits > 0x7F800000u ? 0x200u : 0u);
  }
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: overflow
  if (abs_bits < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24, rounded to nearest even.
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;  // exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: drop 13 mantissa bits with round-to-nearest-even, rebias the exponent.
  const uint32_t rounded = abs_bits + 0xFFFu + ((abs_bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

float bfloat16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace kiln
