// Shape and TensorType: static tensor shapes and the (dtype, shape) type of an IR value.
//
// Shapes are static: every dimension is a known non-negative extent; rank 0 is a scalar.
// Layout is row-major (the last dimension is contiguous). The text form of a type is
// `f32[2,3]`, and of a scalar `f32[]`.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "support/status.h"

namespace kiln {

// Element counts above this are rejected when a shape is built from untrusted input, so that
// every later size computation (bytes, flops) stays far from int64 overflow.
inline constexpr int64_t kMaxElements = int64_t{1} << 48;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  // Validates dims from an untrusted source: non-negative, the product of the non-zero ones at
  // most kMaxElements (so that a zero extent cannot hide others whose product overflows).
  static Expected<Shape> make(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int axis) const { return dims_.at(static_cast<size_t>(axis)); }
  int64_t operator[](int axis) const { return dim(axis); }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t num_elements() const;
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;
  std::string to_string() const;  // "[2,3]"

  bool operator==(const Shape&) const = default;

 private:
  std::vector<int64_t> dims_;
};

// Resolves a possibly negative axis against `rank` (-1 is the last axis); error if out of range.
Expected<int> normalize_axis(int64_t axis, int rank);

// NumPy broadcasting of two shapes; error names both shapes when they are incompatible.
Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b);

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;

  int64_t size_bytes() const { return shape.num_elements() * dtype_size_bytes(dtype); }
  std::string to_string() const;  // "f32[2,3]"
  bool operator==(const TensorType&) const = default;
};

// Which axes of `x` a reduction's attribute `axes` names: an empty list means every axis (as
// ONNX with noop_with_empty_axes=0, and NumPy's axis=None); negative axes count from the end.
// Errors, naming the attribute and the input 'x', for an axis out of range or listed twice.
Expected<std::vector<bool>> reduced_axes(const TensorType& x, const std::vector<int64_t>& axes);

}  // namespace kiln
