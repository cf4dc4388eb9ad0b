#include "frontend/packed_elements.h"

#include <bit>
#include <limits>

#include "support/check.h"
#include "support/float16.h"

namespace kiln {
namespace {

// The unsigned integer made of the `size` bytes at `p` in byte order `order`.
uint64_t load_bits(const char* p, int64_t size, ByteOrder order) {
  uint64_t bits = 0;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t byte_index = order == ByteOrder::little ? size - 1 - i : i;
    bits = (bits << 8) | static_cast<unsigned char>(p[byte_index]);
  }
  return bits;
}

void store_bits_little_endian(uint64_t bits, int64_t size, std::string& out) {
  for (int64_t i = 0; i < size; ++i) {
    out.push_back(static_cast<char>(bits & 0xFFu));
    bits >>= 8;
  }
}

// The value of one element given its bits; u64 is handled by the caller.
double element_value(uint64_t bits, PackedType type) {
  switch (type) {
    case PackedType::f16: return half_bits_to_float(static_cast<uint16_t>(bits));
    case PackedType::bf16: return bfloat16_bits_to_float(static_cast<uint16_t>(bits));
    case PackedType::f32: return std::bit_cast<float>(static_cast<uint32_t>(bits));
    case PackedType::f64: return std::bit_cast<double>(bits);
    case PackedType::i8: return static_cast<int8_t>(bits);
    case PackedType::i16: return static_cast<int16_t>(bits);
    case PackedType::i32: return static_cast<int32_t>(bits);
    case PackedType::i64: return static_cast<double>(static_cast<int64_t>(bits));
    case PackedType::u8:
    case PackedType::u16:
    case PackedType::u32:
    case PackedType::u64: return static_cast<double>(bits);
    case PackedType::boolean: return bits != 0 ? 1.0 : 0.0;
  }
  KILN_UNREACHABLE("bad packed type {}", static_cast<int>(type));
}

}  // namespace

int64_t packed_size_bytes(PackedType type) {
  switch (type) {
    case PackedType::i8:
    case PackedType::u8:
    case PackedType::boolean: return 1;
    case PackedType::f16:
    case PackedType::bf16:
    case PackedType::i16:
    case PackedType::u16: return 2;
    case PackedType::f32:
    case PackedType::i32:
    case PackedType::u32: return 4;
    case PackedType::f64:
    case PackedType::i64:
    case PackedType::u64: return 8;
  }
  KILN_UNREACHABLE("bad packed type {}", static_cast<int>(type));
}

DType dtype_read_as(PackedType type) {
  switch (type) {
    case PackedType::f16: return DType::f16;
    case PackedType::bf16: return DType::bf16;
    case PackedType::f32: return DType::f32;
    case PackedType::f64: return DType::f64;
    case PackedType::i8:
    case PackedType::i16:
    case PackedType::i32:
    case PackedType::u8:
    case PackedType::u16: return DType::i32;
    case PackedType::i64:
    case PackedType::u32:
    case PackedType::u64: return DType::i64;
    case PackedType::boolean: return DType::boolean;
  }
  KILN_UNREACHABLE("bad packed type {}", static_cast<int>(type));
}

PackedType packed_type_of(DType dtype) {
  switch (dtype) {
    case DType::f16: return PackedType::f16;
    case DType::bf16: return PackedType::bf16;
    case DType::f32: return PackedType::f32;
    case DType::f64: return PackedType::f64;
    case DType::i32: return PackedType::i32;
    case DType::i64: return PackedType::i64;
    case DType::boolean: return PackedType::boolean;
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

Expected<std::vector<double>> unpack_elements(std::string_view bytes, PackedType type,
                                              ByteOrder order) {
  const int64_t size = packed_size_bytes(type);
  KILN_CHECK(static_cast<int64_t>(bytes.size()) % size == 0, "{} bytes of {}-byte elements",
             bytes.size(), size);
  const int64_t count = static_cast<int64_t>(bytes.size()) / size;
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = load_bits(bytes.data() + i * size, size, order);
    if (type == PackedType::u64 &&
        bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::errorf("element {} is {}, which does not fit in i64", i, bits);
    }
    values[static_cast<size_t>(i)] = element_value(bits, type);
  }
  return values;
}

void pack_elements(std::span<const double> values, DType dtype, std::string& out) {
  const int64_t size = dtype_size_bytes(dtype);
  out.reserve(out.size() + values.size() * static_cast<size_t>(size));
  for (double value : values) {
    const double rounded = round_to_dtype(value, dtype);
    uint64_t bits = 0;
    switch (dtype) {
      case DType::f16: bits = float_to_half_bits(static_cast<float>(rounded)); break;
      case DType::bf16: bits = float_to_bfloat16_bits(static_cast<float>(rounded)); break;
      case DType::f32: bits = std::bit_cast<uint32_t>(static_cast<float>(rounded)); break;
      case DType::f64: bits = std::bit_cast<uint64_t>(rounded); break;
      case DType::i32: bits = static_cast<uint32_t>(static_cast<int32_t>(rounded)); break;
      case DType::i64: bits = static_cast<uint64_t>(static_cast<int64_t>(rounded)); break;
      case DType::boolean: bits = rounded != 0.0 ? 1 : 0; break;
    }
    store_bits_little_endian(bits, size, out);
  }
}

}  // namespace kiln
