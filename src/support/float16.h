// Conversions between float and the 16-bit floating formats (IEEE half and bfloat16).
//
// Both directions round to nearest, ties to even, and keep infinities and NaN. They are bit
// manipulations only, so the same results come out on every host.
#pragma once

#include <cstdint>

namespace kiln {

float half_bits_to_float(uint16_t bits);
uint16_t float_to_half_bits(float value);
float bfloat16_bits_to_float(uint16_t bits);
uint16_t float_to_bfloat16_bits(float value);

}  // namespace kiln
