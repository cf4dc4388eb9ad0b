// DType: the element types of Kiln tensors, with their names, sizes and value semantics.
//
// Text names are those of the IR text form: f32, f64, f16, bf16, i32, i64, bool.
// `round_to_dtype` defines what storing a real number in a dtype means; the reference
// interpreter computes in f64 and applies it wherever a value is cast, so its results are the
// exact answers of the graph's own types.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i32, DType::i64, DType::boolean};

std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
int64_t dtype_size_bytes(DType dtype);
bool is_floating(DType dtype);
bool is_integer(DType dtype);  // i32, i64 (bool is neither integer nor floating)
// f16 and bf16: the storage dtypes of mixed precision, computed in f32.
bool is_low_precision(DType dtype);
// The dtype a sum of `dtype` values accumulates in, in compiled code and in the libraries'
// contractions: f32 for f16 and bf16, `dtype` itself otherwise.
DType accumulation_dtype(DType dtype);

// The value `value` becomes when stored in `dtype`: floats round to nearest-even at the type's
// precision (overflowing to infinity); integers truncate toward zero and saturate at the
// type's range, with NaN becoming 0; bool is `value != 0`.
double round_to_dtype(double value, DType dtype);

}  // namespace kiln
