#include "ir/ops/op_family.h"

namespace kiln::ops {

CostFn per_element_cost(double flops_per_element) {
  return [flops_per_element](std::span<const TensorType> inputs,
                             std::span<const TensorType> outputs, const Attrs&) {
    Cost cost;
    for (const TensorType& t : inputs) cost.bytes_read += t.size_bytes();
    for (const TensorType& t : outputs) {
      cost.bytes_written += t.size_bytes();
      cost.flops += flops_per_element * static_cast<double>(t.shape.num_elements());
    }
    return cost;
  };
}

GradFn zero_gradient() {
  return [](GraphBuilder&, const Node& node, std::span<Value* const>) {
    return std::vector<Value*>(static_cast<size_t>(node.num_inputs()), nullptr);
  };
}

Value* scalar_like(GraphBuilder& b, double value, const Value* like) {
  return b.scalar(value, like->dtype());
}

Status require_floating(const TensorType& type, std::string_view input) {
  if (is_floating(type.dtype)) return Status::ok();
  return Status::errorf("input '{}' must be a floating type, got {}", input, type.to_string());
}

Status require_integer(const TensorType& type, std::string_view input) {
  if (is_integer(type.dtype)) return Status::ok();
  return Status::errorf("input '{}' must be i32 or i64, got {}", input, type.to_string());
}

Status require_bool(const TensorType& type, std::string_view input) {
  if (type.dtype == DType::boolean) return Status::ok();
  return Status::errorf("input '{}' must be bool, got {}", input, type.to_string());
}

Status require_rank(const TensorType& type, std::string_view input, int rank) {
  if (type.shape.rank() == rank) return Status::ok();
  return Status::errorf("input '{}' must have rank {}, got {}", input, rank, type.to_string());
}

Status require_min_rank(const TensorType& type, std::string_view input, int min_rank) {
  if (type.shape.rank() >= min_rank) return Status::ok();
  return Status::errorf("input '{}' must have rank at least {}, got {}", input, min_rank,
                        type.to_string());
}

Status require_same_dtype(const TensorType& a, std::string_view a_name, const TensorType& b,
                          std::string_view b_name) {
  if (a.dtype == b.dtype) return Status::ok();
  return Status::errorf("inputs '{}' ({}) and '{}' ({}) must have the same dtype", a_name,
                        a.to_string(), b_name, b.to_string());
}

}  // namespace kiln::ops
