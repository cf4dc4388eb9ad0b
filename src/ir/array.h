// Array: a dense tensor value held in f64, the currency of the reference interpreter.
//
// Every element is stored as a double whatever the logical dtype: floats hold the value the
// dtype would store (see round_to_dtype), integers hold exact integers (exact up to 2^53),
// bool holds 0 or 1. Arrays also carry tensor-valued attributes (the `constant` op).
// The helpers below are the index arithmetic every reference kernel needs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/shape.h"

namespace kiln {

struct Array {
  DType dtype = DType::f64;
  Shape shape;
  std::vector<double> data;  // row-major, shape.num_elements() entries

  Array() = default;
  Array(DType dtype, Shape shape);  // zero-filled
  Array(DType dtype, Shape shape, std::vector<double> values);  // values are rounded to dtype

  static Array scalar(DType dtype, double value) { return Array(dtype, Shape{}, {value}); }
  TensorType type() const { return {dtype, shape}; }
  int64_t size() const { return static_cast<int64_t>(data.size()); }

  double& operator[](int64_t i) { return data[static_cast<size_t>(i)]; }
  double operator[](int64_t i) const { return data[static_cast<size_t>(i)]; }
  double at(std::span<const int64_t> index) const;  // multi-index, bounds-checked

  // Rounds every element to this array's dtype (after computing in f64).
  void round_to_dtype();

  bool operator==(const Array&) const = default;
};

// Calls fn(index) for every multi-index of `shape` in row-major order. The span is valid only
// during the call.
template <typename Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
  const int rank = shape.rank();
  if (shape.num_elements() == 0) return;
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  while (true) {
    fn(std::span<const int64_t>(index));
    int axis = rank - 1;
    while (axis >= 0) {
      if (++index[static_cast<size_t>(axis)] < shape.dim(axis)) break;
      index[static_cast<size_t>(axis)] = 0;
      --axis;
    }
    if (axis < 0) return;
  }
}

// Linear offset of `index` in a row-major array of `shape`.
int64_t linear_offset(const Shape& shape, std::span<const int64_t> index);

// Linear offset in an array of `shape` of the element that NumPy broadcasting reads for the
// output multi-index `out_index` (whose rank may be larger; size-1 dims read index 0).
int64_t broadcast_offset(const Shape& shape, std::span<const int64_t> out_index);

}  // namespace kiln
