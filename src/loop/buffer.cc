#include "loop/buffer.h"

#include "support/check.h"

namespace kiln::loop {
namespace {

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

}  // namespace

std::string_view memory_scope_name(MemoryScope scope) {
  switch (scope) {
    case MemoryScope::global: return "global";
    case MemoryScope::local: return "local";
    case MemoryScope::registers: return "registers";
    case MemoryScope::gpu_shared: return "gpu_shared";
  }
  KILN_UNREACHABLE("bad memory scope {}", static_cast<int>(scope));
}

Buffer Buffer::param(std::string name, DType dtype, std::vector<int64_t> shape,
                     std::vector<int64_t> strides) {
  if (strides.empty()) strides = row_major_strides(shape);
  KILN_CHECK(strides.size() == shape.size(), "buffer '{}' has {} extents but {} strides", name,
             shape.size(), strides.size());
  return Buffer(std::make_shared<const BufferNode>(BufferNode{
      std::move(name), dtype, std::move(shape), std::move(strides), MemoryScope::global}));
}

Buffer Buffer::local(std::string name, DType dtype, int64_t size, MemoryScope scope) {
  return Buffer(
      std::make_shared<const BufferNode>(BufferNode{std::move(name), dtype, {size}, {1}, scope}));
}

bool Buffer::is_row_major() const { return strides() == row_major_strides(shape()); }

int64_t Buffer::flat_size() const {
  int64_t last = 0;
  for (size_t i = 0; i < shape().size(); ++i) {
    if (shape()[i] == 0) return 0;
    last += (shape()[i] - 1) * strides()[i];
  }
  return last + 1;
}

}  // namespace kiln::loop
