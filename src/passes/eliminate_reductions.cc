#include "passes/eliminate_reductions.h"

#include <vector>

#include "ir/builder.h"
#include "passes/rewriting.h"

namespace kiln {
namespace {

bool is_axis_reduction(Op op) {
  return op == Op::reduce_sum || op == Op::reduce_mean || op == Op::reduce_max ||
         op == Op::reduce_min || op == Op::reduce_prod;
}

// Which axes of the node's input it reduces; the graph is verified, so they are valid.
std::vector<bool> reduced_mask(const Node& reduction) {
  return *reduced_axes(reduction.input(0)->type(), reduction.attrs().get_ints("axes"));
}

std::vector<int64_t> mask_to_axes(const std::vector<bool>& mask) {
  std::vector<int64_t> axes;
  for (size_t a = 0; a < mask.size(); ++a) {
    if (mask[a]) axes.push_back(static_cast<int64_t>(a));
  }
  return axes;
}

// Whether `reader` is the only node that reads `value`, which is no graph output.
bool only_read_by(const Graph& graph, const Value* value, const Node* reader) {
  if (graph.is_output(value)) return false;
  for (const Node* user : value->users()) {
    if (user != reader) return false;
  }
  return true;
}

// `value` reshaped to `shape`, or itself when it has that shape already.
Value* reshaped(GraphBuilder& b, Value* value, const Shape& shape) {
  return value->shape() == shape ? value : b.reshape(value, shape.dims());
}

// Replaces the reduction's result with `replacement`, built by `b`.
bool replace(Graph& graph, const GraphBuilder& b, Node* reduction, Value* replacement) {
  replace_with(graph, b, reduction->output(), replacement, "eliminate-reductions");
  return true;
}

// 1. sum over the batch axes of matmul(a, b, transpose_a): one matmul over the batch's rows.
bool merge_batch_sum_into_matmul(Graph& graph, Node* sum) {
  if (sum->op() != Op::reduce_sum) return false;
  Node* product = sum->input(0)->producer();
  if (product == nullptr || product->op() != Op::matmul) return false;
  if (!product->attrs().get_bool("transpose_a") || product->attrs().get_bool("transpose_b")) {
    return false;
  }
  if (!only_read_by(graph, product->output(), sum)) return false;
  Value* a = product->input(0);  // [batch..., k, m]
  Value* c = product->input(1);  // [batch..., k, n]
  const int rank = a->rank();
  if (rank < 3 || c->rank() != rank) return false;
  int64_t rows = 1;  // batch x k
  for (int axis = 0; axis < rank - 1; ++axis) {
    if (a->shape().dim(axis) != c->shape().dim(axis)) return false;  // a broadcast batch
    rows *= a->shape().dim(axis);
  }
  const std::vector<bool> reduced = reduced_mask(*sum);
  for (int axis = 0; axis < rank; ++axis) {
    if (reduced[static_cast<size_t>(axis)] != (axis < rank - 2)) return false;
  }
  GraphBuilder b(graph);
  Value* a_rows = b.reshape(a, {rows, a->shape().dim(rank - 1)});
  Value* c_rows = b.reshape(c, {rows, c->shape().dim(rank - 1)});
  Value* merged = b.matmul(a_rows, c_rows, /*transpose_a=*/true);
  return replace(graph, b, sum, reshaped(b, merged, sum->output()->shape()));
}

// 2. A reduction over axes of extent 1 only.
bool drop_unit_reduction(Graph& graph, Node* reduction) {
  const std::vector<bool> reduced = reduced_mask(*reduction);
  const Shape& shape = reduction->input(0)->shape();
  for (int axis = 0; axis < shape.rank(); ++axis) {
    if (reduced[static_cast<size_t>(axis)] && shape.dim(axis) != 1) return false;
  }
  GraphBuilder b(graph);
  return replace(graph, b, reduction,
                 reshaped(b, reduction->input(0), reduction->output()->shape()));
}

// 3. reduce(reduce(x)) of one kind, the inner one read by the outer alone.
bool merge_nested_reductions(Graph& graph, Node* outer) {
  Node* inner = outer->input(0)->producer();
  if (inner == nullptr || inner->op() != outer->op()) return false;
  if (outer->op() == Op::reduce_mean && !is_floating(outer->output()->dtype())) return false;
  if (!only_read_by(graph, inner->output(), outer)) return false;
  std::vector<bool> merged = reduced_mask(*inner);
  const std::vector<bool> outer_reduced = reduced_mask(*outer);
  // The outer reduction's axes, in the coordinates of the inner one's input.
  const bool inner_keeps = inner->attrs().get_bool("keepdims");
  size_t outer_axis = 0;
  for (size_t axis = 0; axis < merged.size(); ++axis) {
    if (merged[axis] && !inner_keeps) continue;
    if (outer_reduced[outer_axis++]) merged[axis] = true;
  }
  // Equal keepdims give the outer result's shape directly; mixed ones reshape to it.
  const bool keepdims = inner_keeps == outer->attrs().get_bool("keepdims") ? inner_keeps : true;
  GraphBuilder b(graph);
  Value* reduced = b.apply1(outer->op(), {inner->input(0)},
                            {{"axes", mask_to_axes(merged)}, {"keepdims", keepdims}});
  return replace(graph, b, outer, reshaped(b, reduced, outer->output()->shape()));
}

// 4. sum, mean, max or min over axes that broadcast_to created.
bool reduce_broadcast_input(Graph& graph, Node* reduction) {
  const Op op = reduction->op();
  if (op == Op::reduce_prod) return false;
  Node* broadcast = reduction->input(0)->producer();
  if (broadcast == nullptr || broadcast->op() != Op::broadcast_to) return false;
  Value* source = broadcast->input(0);
  const Shape& wide = broadcast->output()->shape();
  const int lead = wide.rank() - source->rank();
  // The source's dims aligned to the broadcast's axes; the reduced axes must be ones the
  // broadcast created (extent 1 in the source, or no axis of it at all).
  std::vector<int64_t> aligned(static_cast<size_t>(lead), 1);
  aligned.insert(aligned.end(), source->shape().dims().begin(), source->shape().dims().end());
  const std::vector<bool> reduced = reduced_mask(*reduction);
  const bool keepdims = reduction->attrs().get_bool("keepdims");
  std::vector<int64_t> source_dims;  // the source laid out as the result: reduced axes dropped
  double copies = 1;
  for (size_t axis = 0; axis < reduced.size(); ++axis) {
    if (!reduced[axis]) {
      source_dims.push_back(aligned[axis]);
      continue;
    }
    if (aligned[axis] != 1) return false;
    copies *= static_cast<double>(wide.dim(static_cast<int>(axis)));
    if (keepdims) source_dims.push_back(1);
  }
  GraphBuilder b(graph);
  Value* value = reshaped(b, source, Shape(source_dims));
  const Shape& result = reduction->output()->shape();
  if (value->shape() != result) value = b.broadcast_to(value, result.dims());
  if (op == Op::reduce_sum && copies != 1) {
    value = b.mul(value, b.scalar(copies, value->dtype()));
  }
  return replace(graph, b, reduction, value);
}

}  // namespace

bool eliminate_reductions(Graph& graph) {
  return rewrite_each_node(graph, [](Graph& g, Node* node) {
    return is_axis_reduction(node->op()) &&
           (merge_batch_sum_into_matmul(g, node) || drop_unit_reduction(g, node) ||
            merge_nested_reductions(g, node) || reduce_broadcast_input(g, node));
  });
}

}  // namespace kiln
