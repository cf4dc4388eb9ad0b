// Packed element buffers, the payload of NumPy .npy files and of ONNX raw_data: fixed-width
// elements one after another, little-endian (big-endian .npy files are read too). Internal to
// src/frontend.
//
// Reading accepts more element types than Kiln has and widens them to the nearest Kiln dtype
// (see dtype_read_as); unsigned 64-bit values that do not fit in i64 are an error, never
// wrapped. Writing produces exactly the bytes of the array's own dtype.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"
#include "support/status.h"

namespace kiln {

enum class PackedType { f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean };

enum class ByteOrder { little, big };

int64_t packed_size_bytes(PackedType type);

// The Kiln dtype an element of `type` is read as: itself where Kiln has it, i32 for the
// narrower integers (i8, i16, u8, u16) and i64 for u32 and u64.
DType dtype_read_as(PackedType type);

// The packed type that holds `dtype` exactly.
PackedType packed_type_of(DType dtype);

// Decodes bytes.size() / packed_size_bytes(type) elements; bytes.size() must be a multiple of
// the element size. Error if a u64 element does not fit in i64, naming its index.
Expected<std::vector<double>> unpack_elements(std::string_view bytes, PackedType type,
                                              ByteOrder order);

// Appends `values` as little-endian elements of `dtype` to `out`. Values are first rounded to
// `dtype` (see round_to_dtype), so any double is safe to pass.
void pack_elements(std::span<const double> values, DType dtype, std::string& out);

}  // namespace kiln
