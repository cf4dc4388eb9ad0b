#include "frontend/onnx_tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "frontend/packed_elements.h"
#include "support/check.h"
#include "support/float16.h"

namespace kiln {

std::string onnx_type_name(int32_t data_type) {
  if (onnx::TensorProto_DataType_IsValid(data_type)) {
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(data_type));
  }
  return std::to_string(data_type);
}

Expected<DType> dtype_from_onnx(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT: return DType::f32;
    case onnx::TensorProto::DOUBLE: return DType::f64;
    case onnx::TensorProto::FLOAT16: return DType::f16;
    case onnx::TensorProto::BFLOAT16: return DType::bf16;
    case onnx::TensorProto::INT32: return DType::i32;
    case onnx::TensorProto::INT64: return DType::i64;
    case onnx::TensorProto::BOOL: return DType::boolean;
    default:
      return Status::errorf(ErrorCode::unsupported, "unsupported element type {}",
                            onnx_type_name(data_type));
  }
}

int32_t onnx_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return onnx::TensorProto::FLOAT;
    case DType::f64: return onnx::TensorProto::DOUBLE;
    case DType::f16: return onnx::TensorProto::FLOAT16;
    case DType::bf16: return onnx::TensorProto::BFLOAT16;
    case DType::i32: return onnx::TensorProto::INT32;
    case DType::i64: return onnx::TensorProto::INT64;
    case DType::boolean: return onnx::TensorProto::BOOL;
  }
  KILN_UNREACHABLE("bad dtype {}", static_cast<int>(dtype));
}

namespace {

namespace fs = std::filesystem;

Expected<PackedType> packed_type_from_onnx(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT: return PackedType::f32;
    case onnx::TensorProto::DOUBLE: return PackedType::f64;
    case onnx::TensorProto::FLOAT16: return PackedType::f16;
    case onnx::TensorProto::BFLOAT16: return PackedType::bf16;
    case onnx::TensorProto::INT8: return PackedType::i8;
    case onnx::TensorProto::INT16: return PackedType::i16;
    case onnx::TensorProto::INT32: return PackedType::i32;
    case onnx::TensorProto::INT64: return PackedType::i64;
    case onnx::TensorProto::UINT8: return PackedType::u8;
    case onnx::TensorProto::UINT16: return PackedType::u16;
    case onnx::TensorProto::UINT32: return PackedType::u32;
    case onnx::TensorProto::UINT64: return PackedType::u64;
    case onnx::TensorProto::BOOL: return PackedType::boolean;
    default:
      return Status::errorf(ErrorCode::unsupported, "unsupported tensor data type {}",
                            onnx_type_name(data_type));
  }
}

// A typed data field converted to doubles by `convert`, after checking its length.
template <typename Field, typename Convert>
Expected<std::vector<double>> convert_field(const Field& field, std::string_view field_name,
                                            const Shape& shape, Convert convert) {
  if (field.size() != shape.num_elements()) {
    return Status::errorf("{} has {} values, but shape {} needs {}", field_name, field.size(),
                          shape.to_string(), shape.num_elements());
  }
  std::vector<double> values;
  values.reserve(static_cast<size_t>(field.size()));
  for (const auto& value : field) values.push_back(convert(value));
  return values;
}

// The tensor's values from the typed field ONNX assigns to its element type.
Expected<std::vector<double>> typed_field_values(const onnx::TensorProto& proto, PackedType type,
                                                 const Shape& shape) {
  const auto as_double = [](auto value) { return static_cast<double>(value); };
  switch (type) {
    case PackedType::f32: return convert_field(proto.float_data(), "float_data", shape, as_double);
    case PackedType::f64:
      return convert_field(proto.double_data(), "double_data", shape, as_double);
    case PackedType::i64: return convert_field(proto.int64_data(), "int64_data", shape, as_double);
    case PackedType::u32:
    case PackedType::u64: {
      const uint64_t max = type == PackedType::u32 ? std::numeric_limits<uint32_t>::max()
                                                   : std::numeric_limits<int64_t>::max();
      for (int i = 0; i < proto.uint64_data_size(); ++i) {
        if (proto.uint64_data(i) > max) {
          return Status::errorf("uint64_data value {} at index {} does not fit in {}",
                                proto.uint64_data(i), i,
                                type == PackedType::u32 ? "UINT32" : "i64");
        }
      }
      return convert_field(proto.uint64_data(), "uint64_data", shape, as_double);
    }
    case PackedType::f16:
      return convert_field(proto.int32_data(), "int32_data", shape, [](int32_t bits) {
        return static_cast<double>(half_bits_to_float(static_cast<uint16_t>(bits)));
      });
    case PackedType::bf16:
      return convert_field(proto.int32_data(), "int32_data", shape, [](int32_t bits) {
        return static_cast<double>(bfloat16_bits_to_float(static_cast<uint16_t>(bits)));
      });
    case PackedType::boolean:
      return convert_field(proto.int32_data(), "int32_data", shape,
                           [](int32_t value) { return value != 0 ? 1.0 : 0.0; });
    case PackedType::i8:
    case PackedType::i16:
    case PackedType::i32:
    case PackedType::u8:
    case PackedType::u16: return convert_field(proto.int32_data(), "int32_data", shape, as_double);
  }
  KILN_UNREACHABLE("bad packed type {}", static_cast<int>(type));
}

Expected<int64_t> parse_byte_count(std::string_view text, std::string_view key) {
  int64_t value = 0;
  const auto [end, errc] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (errc != std::errc() || end != text.data() + text.size() || value < 0) {
    return Status::errorf("external data {} '{}' is not a non-negative integer", key, text);
  }
  return value;
}

// Whether `path` is `folder` or lies below it; both must be canonical.
bool is_within(const fs::path& path, const fs::path& folder) {
  const auto [folder_end, path_end] =
      std::mismatch(folder.begin(), folder.end(), path.begin(), path.end());
  return folder_end == folder.end();
}

// The canonical path of external data file `location`, checked to lie inside `base_dir`.
Expected<fs::path> resolve_external_location(const std::string& location,
                                             const std::string& base_dir) {
  if (location.empty()) return Status::error("external data has no location");
  if (location.find('\0') != std::string::npos) {
    return Status::error("external data location contains a NUL character");
  }
  if (base_dir.empty()) {
    return Status::errorf("external data '{}' cannot be read: no base directory is known",
                          location);
  }
  const fs::path relative(location);
  if (relative.has_root_path()) {
    return Status::errorf("external data location '{}' is absolute; it must be relative to '{}'",
                          location, base_dir);
  }
  for (const fs::path& part : relative) {
    if (part == "..") {
      return Status::errorf("external data location '{}' must not contain '..'", location);
    }
  }
  std::error_code error;
  const fs::path base = fs::canonical(base_dir, error);
  if (error) {
    return Status::errorf("base directory '{}' of external data: {}", base_dir, error.message());
  }
  const fs::path file = fs::weakly_canonical(base / relative, error);
  if (error) return Status::errorf("external data '{}': {}", location, error.message());
  if (!is_within(file, base)) {
    return Status::errorf("external data location '{}' resolves to '{}', outside '{}'", location,
                          file.string(), base_dir);
  }
  if (!fs::is_regular_file(file, error)) {
    return Status::errorf("external data file '{}' not found in '{}'", location, base_dir);
  }
  return file;
}

// Reads the `num_bytes` bytes of external data that `proto` points to.
Expected<std::string> read_external_data(const onnx::TensorProto& proto,
                                         const std::string& base_dir, int64_t num_bytes) {
  std::string location;
  std::optional<int64_t> offset;
  std::optional<int64_t> length;
  for (const onnx::StringStringEntryProto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      KILN_ASSIGN_OR_RETURN(offset, parse_byte_count(entry.value(), "offset"));
    } else if (entry.key() == "length") {
      KILN_ASSIGN_OR_RETURN(length, parse_byte_count(entry.value(), "length"));
    }
  }
  KILN_ASSIGN_OR_RETURN(fs::path file, resolve_external_location(location, base_dir));
  if (length && *length != num_bytes) {
    return Status::errorf("external data length {} differs from the {} bytes the tensor needs",
                          *length, num_bytes);
  }
  std::error_code error;
  const auto file_size = static_cast<int64_t>(fs::file_size(file, error));
  if (error) return Status::errorf("external data '{}': {}", location, error.message());
  const int64_t start = offset.value_or(0);
  if (start > file_size || num_bytes > file_size - start) {
    return Status::errorf("external data file '{}' has {} bytes, too few for {} bytes at offset {}",
                          location, file_size, num_bytes, start);
  }
  std::ifstream in(file, std::ios::binary);
  std::string data(static_cast<size_t>(num_bytes), '\0');
  in.seekg(start);
  in.read(data.data(), num_bytes);
  if (!in) return Status::errorf("external data file '{}': read error", location);
  return data;
}

Expected<Array> array_from_proto_contents(const onnx::TensorProto& proto,
                                          const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(PackedType type, packed_type_from_onnx(proto.data_type()));
  if (proto.has_segment())
    return Status::error(ErrorCode::unsupported, "segmented tensors are unsupported");
  KILN_ASSIGN_OR_RETURN(
      Shape shape, Shape::make(std::vector<int64_t>(proto.dims().begin(), proto.dims().end())));
  const int64_t num_bytes = shape.num_elements() * packed_size_bytes(type);
  std::vector<double> values;
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    KILN_ASSIGN_OR_RETURN(std::string data, read_external_data(proto, base_dir, num_bytes));
    KILN_ASSIGN_OR_RETURN(values, unpack_elements(data, type, ByteOrder::little));
  } else if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != num_bytes) {
      return Status::errorf("raw_data has {} bytes, but shape {} of {} needs {}",
                            proto.raw_data().size(), shape.to_string(),
                            onnx_type_name(proto.data_type()), num_bytes);
    }
    KILN_ASSIGN_OR_RETURN(values, unpack_elements(proto.raw_data(), type, ByteOrder::little));
  } else {
    KILN_ASSIGN_OR_RETURN(values, typed_field_values(proto, type, shape));
  }
  return Array(dtype_read_as(type), std::move(shape), std::move(values));
}

}  // namespace

Expected<Array> array_from_tensor_proto(const onnx::TensorProto& proto,
                                        const std::string& base_dir) {
  auto array = array_from_proto_contents(proto, base_dir);
  if (!array) return array.status().with_context(fmt::format("tensor '{}'", proto.name()));
  return array;
}

onnx::TensorProto tensor_proto_from_array(const std::string& name, const Array& array) {
  onnx::TensorProto proto;
  proto.set_name(name);
  proto.set_data_type(onnx_from_dtype(array.dtype));
  for (int64_t dim : array.shape.dims()) proto.add_dims(dim);
  std::string raw;
  pack_elements(array.data, array.dtype, raw);
  proto.set_raw_data(std::move(raw));
  return proto;
}

}  // namespace kiln
