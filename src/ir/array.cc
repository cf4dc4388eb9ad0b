#include "ir/array.h"

#include "support/check.h"

namespace kiln {

Array::Array(DType dtype_in, Shape shape_in)
    : dtype(dtype_in),
      shape(std::move(shape_in)),
      data(static_cast<size_t>(shape.num_elements()), 0.0) {}

Array::Array(DType dtype_in, Shape shape_in, std::vector<double> values)
    : dtype(dtype_in), shape(std::move(shape_in)), data(std::move(values)) {
  KILN_CHECK(static_cast<int64_t>(data.size()) == shape.num_elements(),
             "{} values for shape {}", data.size(), shape.to_string());
  round_to_dtype();
}

double Array::at(std::span<const int64_t> index) const {
  KILN_CHECK(static_cast<int>(index.size()) == shape.rank());
  for (int i = 0; i < shape.rank(); ++i) {
    KILN_CHECK(index[static_cast<size_t>(i)] >= 0 && index[static_cast<size_t>(i)] < shape.dim(i));
  }
  return data[static_cast<size_t>(linear_offset(shape, index))];
}

void Array::round_to_dtype() {
  for (double& v : data) v = kiln::round_to_dtype(v, dtype);
}

int64_t linear_offset(const Shape& shape, std::span<const int64_t> index) {
  int64_t offset = 0;
  for (int i = 0; i < shape.rank(); ++i) offset = offset * shape.dim(i) + index[static_cast<size_t>(i)];
  return offset;
}

int64_t broadcast_offset(const Shape& shape, std::span<const int64_t> out_index) {
  const int lead = static_cast<int>(out_index.size()) - shape.rank();
  int64_t offset = 0;
  for (int i = 0; i < shape.rank(); ++i) {
    const int64_t extent = shape.dim(i);
    offset = offset * extent + (extent == 1 ? 0 : out_index[static_cast<size_t>(lead + i)]);
  }
  return offset;
}

}  // namespace kiln
