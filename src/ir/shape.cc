#include "ir/shape.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln {

Expected<Shape> Shape::make(std::vector<int64_t> dims) {
  int64_t elements = 1;
  for (int64_t d : dims) {
    if (d < 0) return Status::errorf("negative dimension {} in shape [{}]", d, fmt::join(dims, ","));
    if (d == 0) continue;
    if (elements > kMaxElements / d) {
      return Status::errorf("shape [{}] has more than 2^48 elements", fmt::join(dims, ","));
    }
    elements *= d;
  }
  return Shape(std::move(dims));
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> strides(dims_.size());
  int64_t stride = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims_[i];
  }
  return strides;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims_, ",")); }

Expected<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return Status::errorf("axis {} is out of range for rank {}", axis, rank);
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i;
    const int ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a.dim(ia) : 1;
    const int64_t db = ib >= 0 ? b.dim(ib) : 1;
    if (da != db && da != 1 && db != 1) {
      return Status::errorf("shapes {} and {} cannot be broadcast together", a.to_string(),
                            b.to_string());
    }
    dims[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(dims));
}

std::string TensorType::to_string() const {
  return fmt::format("{}{}", dtype_name(dtype), shape.to_string());
}

Expected<std::vector<bool>> reduced_axes(const TensorType& x, const std::vector<int64_t>& axes) {
  const int rank = x.shape.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t axis : axes) {
    Expected<int> normalized = normalize_axis(axis, rank);
    if (!normalized) {
      return Status::errorf("attribute 'axes': {} (input 'x' is {})", normalized.status().message(),
                            x.to_string());
    }
    if (reduced[static_cast<size_t>(*normalized)]) {
      return Status::errorf("attribute 'axes' lists axis {} more than once (input 'x' is {})",
                            *normalized, x.to_string());
    }
    reduced[static_cast<size_t>(*normalized)] = true;
  }
  return reduced;
}

}  // namespace kiln
