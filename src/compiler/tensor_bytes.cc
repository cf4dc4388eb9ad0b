#include "compiler/tensor_bytes.h"

#include <cstdint>
#include <cstring>

#include "support/float16.h"

namespace kiln {
namespace {

template <typename T>
void put(T value, std::byte* out) {
  std::memcpy(out, &value, sizeof(T));
}

template <typename T>
T get(const std::byte* in) {
  T value;
  std::memcpy(&value, in, sizeof(T));
  return value;
}

}  // namespace

void append_encoded(const Array& array, std::vector<std::byte>& bytes) {
  const size_t width = static_cast<size_t>(dtype_size_bytes(array.dtype));
  const size_t start = bytes.size();
  bytes.resize(start + width * array.data.size());
  std::byte* out = bytes.data() + start;
  for (double v : array.data) {
    switch (array.dtype) {
      case DType::f32: put(static_cast<float>(v), out); break;
      case DType::f64: put(v, out); break;
      case DType::f16: put(float_to_half_bits(static_cast<float>(v)), out); break;
      case DType::bf16: put(float_to_bfloat16_bits(static_cast<float>(v)), out); break;
      case DType::i32: put(static_cast<int32_t>(v), out); break;
      case DType::i64: put(static_cast<int64_t>(v), out); break;
      case DType::boolean: put(static_cast<uint8_t>(v != 0 ? 1 : 0), out); break;
    }
    out += width;
  }
}

std::vector<std::byte> encode_array(const Array& array) {
  std::vector<std::byte> bytes;
  append_encoded(array, bytes);
  return bytes;
}

Array decode_array(const TensorType& type, const std::byte* bytes) {
  Array array(type.dtype, type.shape);
  const size_t width = static_cast<size_t>(dtype_size_bytes(type.dtype));
  for (double& v : array.data) {
    switch (type.dtype) {
      case DType::f32: v = get<float>(bytes); break;
      case DType::f64: v = get<double>(bytes); break;
      case DType::f16: v = half_bits_to_float(get<uint16_t>(bytes)); break;
      case DType::bf16: v = bfloat16_bits_to_float(get<uint16_t>(bytes)); break;
      case DType::i32: v = get<int32_t>(bytes); break;
      case DType::i64: v = static_cast<double>(get<int64_t>(bytes)); break;
      case DType::boolean: v = get<uint8_t>(bytes) != 0 ? 1 : 0; break;
    }
    bytes += width;
  }
  return array;
}

}  // namespace kiln
