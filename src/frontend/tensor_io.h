// Tensor files: NumPy .npy and .npz, and single ONNX TensorProto .pb files (the format of the
// ONNX conformance tests' inputs and outputs). Used to feed inputs and weights to Kiln and to
// compare its outputs with other frameworks.
//
// .npy: versions 1.0, 2.0 and 3.0 are read, 1.0 is written (2.0 only for a header too long
// for 1.0), byte for byte as NumPy's np.save writes it. Element types read: <f2 <f4 <f8 <i4 <i8
// |b1 and, widened to the nearest Kiln dtype, |i1 <i2 |u1 <u2 (as i32) and <u4 <u8 (as i64; a
// u8 value above the i64 range is an error). Big-endian ('>') files are byte-swapped and
// Fortran-order files transposed to row-major on reading. NumPy has no bfloat16, so a bf16
// array is written as <f4 (exactly: every bf16 value is an f32 value) and reads back as f32.
//
// .npz: a zip archive of .npy members, as np.savez (stored) and np.savez_compressed (deflated)
// write it; entry names are the member names without ".npy". write_npz stores members
// uncompressed, as np.savez does.
//
// Every file is untrusted: a truncated or malformed file is an error naming the file and what
// is wrong, and no allocation is sized by a header before the data backing it has been seen.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/array.h"
#include "support/status.h"

namespace kiln {

// Tensor files, and .npz members once decompressed, larger than this are rejected.
inline constexpr int64_t kMaxTensorFileBytes = int64_t{1} << 32;

struct NamedArray {
  std::string name;
  Array array;

  bool operator==(const NamedArray&) const = default;
};

// .npy. `source` names the bytes in error messages.
Expected<Array> parse_npy(std::string_view bytes, std::string_view source);
std::string serialize_npy(const Array& array);
Expected<Array> read_npy(const std::string& path);
Status write_npy(const std::string& path, const Array& array);

// .npz. Entries keep the archive's order. Names must be unique and non-empty.
Expected<std::vector<NamedArray>> parse_npz(std::string_view bytes, std::string_view source);
Expected<std::vector<NamedArray>> read_npz(const std::string& path);
Status write_npz(const std::string& path, const std::vector<NamedArray>& entries);

// A file holding one serialized onnx.TensorProto. External data is looked up in the file's
// folder (see array_from_tensor_proto in frontend/onnx_tensor.h for the rules).
Expected<NamedArray> read_tensor_proto_file(const std::string& path);
Status write_tensor_proto_file(const std::string& path, const std::string& name,
                               const Array& array);

}  // namespace kiln
