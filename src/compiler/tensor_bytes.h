// Converting between the interpreter's Array (every element a double) and the bytes a compiled
// kernel reads and writes: f32 float, f64 double, i32 int32_t, i64 int64_t, f16 and bf16 their
// 16-bit patterns, bool one byte 0 or 1 (the ABI of codegen/cpu/emitter.h), row-major.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "ir/array.h"

namespace kiln {

std::vector<std::byte> encode_array(const Array& array);
// Appends the encoding of `array` to `bytes` (for building constant segments).
void append_encoded(const Array& array, std::vector<std::byte>& bytes);
// `bytes` holds type.shape.num_elements() elements of type.dtype.
Array decode_array(const TensorType& type, const std::byte* bytes);

}  // namespace kiln
