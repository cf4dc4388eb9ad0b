#include "ir/builder.h"

#include <algorithm>

#include "support/check.h"

namespace kiln {

Value* GraphBuilder::input(std::string_view name, DType dtype, Shape shape) {
  if (!ok()) return nullptr;
  Expected<Shape> checked = Shape::make(shape.dims());
  if (!checked) {
    status_ = checked.status().with_context(fmt::format("input '{}'", name));
    return nullptr;
  }
  return graph_->add_input({dtype, std::move(*checked)}, name);
}

std::vector<Value*> GraphBuilder::apply(Op op, const std::vector<Value*>& inputs,
                                        const Attrs& attrs) {
  if (!ok()) return {};
  // Every failed call records an error, so a null input here did not come from this builder.
  if (auto null = std::ranges::find(inputs, nullptr); null != inputs.end()) {
    status_ = Status::errorf("op '{}': input {} is null", op_def(op).name, null - inputs.begin());
    return {};
  }
  Expected<Node*> node = graph_->add_node(op, inputs, attrs);
  if (!node) {
    status_ = node.status();
    return {};
  }
  return (*node)->outputs();
}

Value* GraphBuilder::apply1(Op op, const std::vector<Value*>& inputs, const Attrs& attrs) {
  std::vector<Value*> outputs = apply(op, inputs, attrs);
  if (outputs.empty()) return nullptr;
  if (outputs.size() != 1) {
    status_ = Status::errorf("op '{}' has {} outputs; use apply()", op_def(op).name,
                             outputs.size());
    return nullptr;
  }
  return outputs[0];
}

Value* GraphBuilder::constant(Array value) {
  return apply1(Op::constant, {}, {{"value", std::move(value)}});
}

Value* GraphBuilder::scalar(double value, DType dtype) {
  return constant(Array::scalar(dtype, value));
}

Value* GraphBuilder::fill(Shape shape, double value, DType dtype) {
  return apply1(Op::fill, {}, {{"shape", shape.dims()}, {"value", value}, {"dtype", dtype}});
}

Value* GraphBuilder::gelu(Value* x, bool tanh_approximation) {
  return apply1(Op::gelu, {x}, {{"approximate", tanh_approximation ? "tanh" : "none"}});
}

Value* GraphBuilder::mul_scalar(Value* x, double factor) {
  // Without x there is no dtype for the factor; mul then reports the null input.
  return mul(x, x == nullptr ? nullptr : scalar(factor, x->dtype()));
}

Value* GraphBuilder::add_scalar(Value* x, double term) {
  return add(x, x == nullptr ? nullptr : scalar(term, x->dtype()));
}

Value* GraphBuilder::sum(Value* x, std::vector<int64_t> axes, bool keepdims) {
  return apply1(Op::reduce_sum, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

Value* GraphBuilder::mean(Value* x, std::vector<int64_t> axes, bool keepdims) {
  return apply1(Op::reduce_mean, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

Value* GraphBuilder::reduce_max(Value* x, std::vector<int64_t> axes, bool keepdims) {
  return apply1(Op::reduce_max, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

Value* GraphBuilder::reduce_min(Value* x, std::vector<int64_t> axes, bool keepdims) {
  return apply1(Op::reduce_min, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

Value* GraphBuilder::prod(Value* x, std::vector<int64_t> axes, bool keepdims) {
  return apply1(Op::reduce_prod, {x}, {{"axes", std::move(axes)}, {"keepdims", keepdims}});
}

Value* GraphBuilder::sum_to(Value* x, const Shape& shape) {
  // Without x there is nothing to reduce; sum then reports the null input.
  if (x == nullptr) return apply1(Op::reduce_sum, {x});
  if (!ok() || x->shape() == shape) return x;
  const int lead = x->rank() - shape.rank();
  bool broadcastable = lead >= 0;
  std::vector<int64_t> axes;
  for (int axis = 0; broadcastable && axis < x->rank(); ++axis) {
    if (axis < lead || (shape.dim(axis - lead) == 1 && x->shape().dim(axis) != 1)) {
      axes.push_back(axis);
    } else {
      broadcastable = shape.dim(axis - lead) == x->shape().dim(axis);
    }
  }
  if (!broadcastable) {
    status_ = Status::errorf("sum_to: {} is not a broadcast of shape {}", x->type().to_string(),
                             shape.to_string());
    return nullptr;
  }
  Value* reduced = sum(x, std::move(axes));
  if (reduced == nullptr || reduced->shape() == shape) return reduced;
  return reshape(reduced, shape.dims());
}

Value* GraphBuilder::reshape(Value* x, std::vector<int64_t> shape) {
  return apply1(Op::reshape, {x}, {{"shape", std::move(shape)}});
}

Value* GraphBuilder::transpose(Value* x, std::vector<int64_t> perm) {
  return apply1(Op::transpose, {x}, {{"perm", std::move(perm)}});
}

Value* GraphBuilder::broadcast_to(Value* x, std::vector<int64_t> shape) {
  return apply1(Op::broadcast_to, {x}, {{"shape", std::move(shape)}});
}

Value* GraphBuilder::concat(const std::vector<Value*>& inputs, int64_t axis) {
  return apply1(Op::concat, inputs, {{"axis", axis}});
}

std::vector<Value*> GraphBuilder::split(Value* x, int64_t axis, std::vector<int64_t> sizes) {
  return apply(Op::split, {x}, {{"axis", axis}, {"sizes", std::move(sizes)}});
}

Value* GraphBuilder::slice(Value* x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                           std::vector<int64_t> axes, std::vector<int64_t> steps) {
  return apply1(Op::slice, {x},
                {{"starts", std::move(starts)},
                 {"ends", std::move(ends)},
                 {"axes", std::move(axes)},
                 {"steps", std::move(steps)}});
}

Value* GraphBuilder::pad(Value* x, std::vector<int64_t> pads, double value) {
  return apply1(Op::pad, {x}, {{"pads", std::move(pads)}, {"value", value}});
}

Value* GraphBuilder::gather(Value* data, Value* indices, int64_t axis) {
  return apply1(Op::gather, {data, indices}, {{"axis", axis}});
}

Value* GraphBuilder::scatter_add(Value* data, Value* indices, Value* updates, int64_t axis) {
  return apply1(Op::scatter_add, {data, indices, updates}, {{"axis", axis}});
}

Value* GraphBuilder::one_hot(Value* indices, int64_t depth, DType dtype, int64_t axis) {
  return apply1(Op::one_hot, {indices}, {{"depth", depth}, {"axis", axis}, {"dtype", dtype}});
}

Value* GraphBuilder::iota(Shape shape, int64_t axis, DType dtype) {
  return apply1(Op::iota, {}, {{"shape", shape.dims()}, {"axis", axis}, {"dtype", dtype}});
}

Value* GraphBuilder::matmul(Value* a, Value* b, bool transpose_a, bool transpose_b) {
  return apply1(Op::matmul, {a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}});
}

Value* GraphBuilder::conv(Value* x, Value* w, std::vector<int64_t> strides,
                          std::vector<int64_t> pads, std::vector<int64_t> dilations,
                          int64_t groups) {
  return apply1(Op::conv, {x, w},
                {{"strides", std::move(strides)},
                 {"pads", std::move(pads)},
                 {"dilations", std::move(dilations)},
                 {"groups", groups}});
}

Value* GraphBuilder::spmm(Value* row_ptr, Value* col_indices, Value* values, Value* dense,
                          bool transpose, int64_t num_cols) {
  return apply1(Op::spmm, {row_ptr, col_indices, values, dense},
                {{"transpose", transpose}, {"num_cols", num_cols}});
}

Value* GraphBuilder::max_pool(Value* x, std::vector<int64_t> kernel, std::vector<int64_t> strides,
                              std::vector<int64_t> pads) {
  return apply1(Op::max_pool, {x},
                {{"kernel", std::move(kernel)},
                 {"strides", std::move(strides)},
                 {"pads", std::move(pads)}});
}

Value* GraphBuilder::avg_pool(Value* x, std::vector<int64_t> kernel, std::vector<int64_t> strides,
                              std::vector<int64_t> pads, bool count_include_pad) {
  return apply1(Op::avg_pool, {x},
                {{"kernel", std::move(kernel)},
                 {"strides", std::move(strides)},
                 {"pads", std::move(pads)},
                 {"count_include_pad", count_include_pad}});
}

Value* GraphBuilder::softmax(Value* x, int64_t axis) {
  return apply1(Op::softmax, {x}, {{"axis", axis}});
}

Value* GraphBuilder::log_softmax(Value* x, int64_t axis) {
  return apply1(Op::log_softmax, {x}, {{"axis", axis}});
}

Value* GraphBuilder::layer_norm(Value* x, Value* scale, Value* bias, int64_t axis,
                                double epsilon) {
  return apply1(Op::layer_norm, {x, scale, bias}, {{"axis", axis}, {"epsilon", epsilon}});
}

Value* GraphBuilder::dropout(Value* x, double ratio, int64_t seed, int64_t offset) {
  return apply1(Op::dropout, {x}, {{"ratio", ratio}, {"seed", seed}, {"offset", offset}});
}

Value* GraphBuilder::dropout(Value* x, double ratio, Value* seed, int64_t offset) {
  return apply1(Op::dropout, {x, seed}, {{"ratio", ratio}, {"offset", offset}});
}

Value* GraphBuilder::cross_entropy(Value* logits, Value* labels, std::string_view reduction) {
  return apply1(Op::cross_entropy, {logits, labels}, {{"reduction", std::string(reduction)}});
}

void GraphBuilder::output(Value* value) {
  KILN_CHECK(owned_ != nullptr, "output() on a builder appending to graph '{}'", graph_->name());
  if (!ok()) return;
  if (value == nullptr || !graph_->owns(value)) {
    status_ = Status::errorf("graph '{}': output {} is {}", graph_->name(), outputs_.size(),
                             value == nullptr ? "null" : "not a value of this builder");
    return;
  }
  outputs_.push_back(value);
}

Expected<Graph> GraphBuilder::finish() {
  KILN_CHECK(owned_ != nullptr, "finish() on a builder appending to graph '{}'", graph_->name());
  if (!ok()) return status_;
  if (outputs_.empty()) return Status::errorf("graph '{}' has no outputs", graph_->name());
  graph_->set_outputs(std::move(outputs_));
  outputs_.clear();
  return std::move(*graph_);
}

}  // namespace kiln
