// Conversion between ONNX TensorProto messages and Kiln arrays, for initializers, Constant
// nodes, tensor attributes and the .pb files of the ONNX test suites.
//
// Element types read: FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT32, INT64 and BOOL as themselves;
// INT8, INT16, UINT8 and UINT16 widened to i32; UINT32 and UINT64 widened to i64 (a UINT64
// value above the i64 range is an error). STRING, COMPLEX64/128 and the others are an
// "unsupported tensor data type" error. The data may be in raw_data, in the typed field ONNX
// assigns to the type (float_data, double_data, int32_data (also for FLOAT16 and BFLOAT16 bit
// patterns, BOOL and the small integers), int64_data, uint64_data), or in an external file.
//
// External data (data_location EXTERNAL, keys location/offset/length) is read only from inside
// `base_dir`: absolute locations, locations with a '..' component and locations that resolve
// through symlinks to somewhere outside base_dir are errors, and the byte range is checked
// against the tensor's declared shape and the file's size before anything is read. An empty
// base_dir allows no external data at all.
//
// Errors start with "tensor '<name>': ".
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "ir/array.h"
#include "support/status.h"

namespace kiln {

// "FLOAT", "UINT8", ... or the number for an unknown type.
std::string onnx_type_name(int32_t data_type);
// The Kiln dtype of an ONNX element type; "unsupported element type X" for types Kiln lacks
// (tensors of small integer types still read, widened: see above).
Expected<DType> dtype_from_onnx(int32_t data_type);
int32_t onnx_from_dtype(DType dtype);

Expected<Array> array_from_tensor_proto(const onnx::TensorProto& proto,
                                        const std::string& base_dir);

// The tensor with its data in raw_data, in the element type of the array's dtype.
onnx::TensorProto tensor_proto_from_array(const std::string& name, const Array& array);

}  // namespace kiln
