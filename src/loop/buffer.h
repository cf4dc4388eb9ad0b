// Buffers of the loop IR: the named, typed, flat arrays that loads and stores address.
//
// A buffer is either a kernel parameter (scope `global`: memory the caller owns, with a shape
// and element strides) or a local allocation (made by an Allocate statement, flat, in scope
// `local`, `registers` or `gpu_shared`). Loads and stores address a buffer by one i64 element
// offset; `element_offset` (loop/expr.h) turns a multi-index into that offset with the
// buffer's strides. Buffers are immutable and shared; two buffers are the same buffer when
// their names are equal, and the verifier checks that every use agrees with its declaration.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"

namespace kiln::loop {

enum class MemoryScope : uint8_t {
  global,      // kernel parameters: owned by the caller, visible to every iteration
  local,       // private to the iteration that allocates it (stack or heap on a CPU)
  registers,   // like local, small and constant-size: code generators keep it in registers
  gpu_shared,  // shared by the threads of a GPU block (a CPU treats it as local)
};

std::string_view memory_scope_name(MemoryScope scope);

struct BufferNode {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;    // extents, outermost first
  std::vector<int64_t> strides;  // in elements, one per extent
  MemoryScope scope = MemoryScope::global;

  bool operator==(const BufferNode&) const = default;
};

class Buffer {
 public:
  Buffer() = default;

  // A kernel parameter; empty `strides` means row-major.
  static Buffer param(std::string name, DType dtype, std::vector<int64_t> shape,
                      std::vector<int64_t> strides = {});
  // A flat local allocation of `size` elements.
  static Buffer local(std::string name, DType dtype, int64_t size,
                      MemoryScope scope = MemoryScope::local);

  bool defined() const { return node_ != nullptr; }
  const BufferNode& node() const { return *node_; }
  const std::string& name() const { return node_->name; }
  DType dtype() const { return node_->dtype; }
  const std::vector<int64_t>& shape() const { return node_->shape; }
  const std::vector<int64_t>& strides() const { return node_->strides; }
  MemoryScope scope() const { return node_->scope; }
  bool is_row_major() const;
  // Elements from offset 0 to one past the largest addressable offset (0 if any extent is 0).
  int64_t flat_size() const;

 private:
  explicit Buffer(std::shared_ptr<const BufferNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const BufferNode> node_;
};

}  // namespace kiln::loop
