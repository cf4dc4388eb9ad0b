#include "passes/fold_layout.h"

#include <utility>
#include <vector>

#include "ir/builder.h"
#include "passes/rewriting.h"
#include "support/check.h"

namespace kiln {
namespace {

void replace(Graph& graph, const GraphBuilder& b, Value* from, Value* to) {
  replace_with(graph, b, from, to, "fold-layout");
}

Node* producer_with_op(const Value* value, Op op) {
  Node* producer = value->producer();
  return producer != nullptr && producer->op() == op ? producer : nullptr;
}

// reshape(reshape(x)) -> reshape(x); reshape(x) to x's own shape -> x.
bool fold_reshape(Graph& graph, Node* node) {
  if (node->op() != Op::reshape) return false;
  Value* source = node->input(0);
  if (Node* inner = producer_with_op(source, Op::reshape)) source = inner->input(0);
  if (source == node->input(0) && source->shape() != node->output()->shape()) return false;
  GraphBuilder b(graph);
  Value* folded = source->shape() == node->output()->shape()
                      ? source
                      : b.reshape(source, node->output()->shape().dims());
  replace(graph, b, node->output(), folded);
  return true;
}

// The permutation a transpose applies: its `perm`, or the reversed axes when that is empty.
std::vector<int64_t> permutation_of(const Node& transpose) {
  std::vector<int64_t> perm = transpose.attrs().get_ints("perm");
  if (perm.empty()) {
    for (int axis = transpose.input(0)->rank() - 1; axis >= 0; --axis) perm.push_back(axis);
  }
  return perm;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// transpose(transpose(x, p), q) -> transpose(x, p o q); the identity permutation -> x.
bool fold_transpose(Graph& graph, Node* node) {
  if (node->op() != Op::transpose) return false;
  std::vector<int64_t> perm = permutation_of(*node);
  Value* source = node->input(0);
  if (Node* inner = producer_with_op(source, Op::transpose)) {
    // Output axis i of the outer transpose is axis q[i] of the inner's output, which is axis
    // p[q[i]] of the inner's input.
    const std::vector<int64_t> inner_perm = permutation_of(*inner);
    for (int64_t& axis : perm) axis = inner_perm[static_cast<size_t>(axis)];
    source = inner->input(0);
  } else if (!is_identity(perm)) {
    return false;
  }
  GraphBuilder b(graph);
  replace(graph, b, node->output(), is_identity(perm) ? source : b.transpose(source, perm));
  return true;
}

bool fold_identity(Graph& graph, Node* node) {
  if (node->op() != Op::identity) return false;
  replace(graph, GraphBuilder(graph), node->output(), node->input(0));
  return true;
}

// A transpose that swaps the last two axes and keeps the others.
bool swaps_last_two_axes(const Node& transpose) {
  std::vector<int64_t> perm = permutation_of(transpose);
  const size_t rank = perm.size();
  if (rank < 2) return false;
  std::swap(perm[rank - 2], perm[rank - 1]);
  return is_identity(perm);
}

// matmul(transpose(a), b) -> matmul(a, b) with transpose_a flipped; likewise for b.
bool fold_matmul_transpose(Graph& graph, Node* node) {
  if (node->op() != Op::matmul) return false;
  Value* operands[2] = {node->input(0), node->input(1)};
  bool flags[2] = {node->attrs().get_bool("transpose_a"), node->attrs().get_bool("transpose_b")};
  bool folded = false;
  for (int i = 0; i < 2; ++i) {
    Node* transpose = producer_with_op(operands[i], Op::transpose);
    if (transpose == nullptr || !swaps_last_two_axes(*transpose)) continue;
    operands[i] = transpose->input(0);
    flags[i] = !flags[i];
    folded = true;
  }
  if (!folded) return false;
  GraphBuilder b(graph);
  replace(graph, b, node->output(), b.matmul(operands[0], operands[1], flags[0], flags[1]));
  return true;
}

// The elementwise ops with NumPy broadcasting: add through where in ir/ops.def.
bool broadcasts_operands(Op op) {
  return static_cast<int>(op) >= static_cast<int>(Op::add) &&
         static_cast<int>(op) <= static_cast<int>(Op::where);
}

// op(broadcast_to(x), y) -> op(x, y) where op broadcasts x to the same result itself.
bool fold_broadcast_operand(Graph& graph, Node* node) {
  if (!broadcasts_operands(node->op())) return false;
  std::vector<Value*> inputs = node->inputs();
  bool folded = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Node* broadcast = producer_with_op(inputs[i], Op::broadcast_to);
    if (broadcast == nullptr) continue;
    std::vector<TensorType> types;
    for (const Value* input : inputs) types.push_back(input->type());
    types[i] = broadcast->input(0)->type();
    const Expected<std::vector<TensorType>> result = node->def().infer(types, node->attrs());
    if (!result || result->front() != node->output()->type()) continue;
    inputs[i] = broadcast->input(0);
    folded = true;
  }
  if (!folded) return false;
  GraphBuilder b(graph);
  replace(graph, b, node->output(), b.apply1(node->op(), inputs, node->attrs()));
  return true;
}

int64_t split_axis(const Node& split) {
  const int64_t axis = split.attrs().get_int("axis");
  return axis < 0 ? axis + split.input(0)->rank() : axis;
}

// split(split(x)[i]) along the same axis -> one split of x, when the piece has no other reader
// (merged linear layers split twice, as Q with K and then with V make them, become one split
// that the gemm's epilogue can write).
bool fold_split_of_split(Graph& graph, Node* node) {
  if (node->op() != Op::split) return false;
  Value* piece = node->input(0);
  Node* outer = producer_with_op(piece, Op::split);
  if (outer == nullptr || split_axis(*outer) != split_axis(*node)) return false;
  if (piece->users().size() != 1 || graph.is_output(piece)) return false;
  const std::vector<int64_t>& outer_sizes = outer->attrs().get_ints("sizes");
  const std::vector<int64_t>& inner_sizes = node->attrs().get_ints("sizes");
  int piece_index = 0;
  while (outer->output(piece_index) != piece) ++piece_index;
  std::vector<int64_t> sizes(outer_sizes.begin(), outer_sizes.begin() + piece_index);
  sizes.insert(sizes.end(), inner_sizes.begin(), inner_sizes.end());
  sizes.insert(sizes.end(), outer_sizes.begin() + piece_index + 1, outer_sizes.end());
  GraphBuilder b(graph);
  const std::vector<Value*> pieces = b.split(outer->input(0), split_axis(*node), sizes);
  KILN_CHECK(b.ok(), "fold-layout built an invalid split: {}", b.status().message());
  // The replaced values: the outer split's pieces, with the inner split's in place of the one
  // it splits; the new split runs where the outer one did, before any of their readers.
  std::vector<Value*> replaced;
  for (int i = 0; i < outer->num_outputs(); ++i) {
    if (i != piece_index) replaced.push_back(outer->output(i));
    for (int j = 0; i == piece_index && j < node->num_outputs(); ++j) {
      replaced.push_back(node->output(j));
    }
  }
  graph.move_computation_after(pieces.front(), outer);
  for (size_t i = 0; i < replaced.size(); ++i) {
    const Status status = graph.replace_all_uses(replaced[i], pieces[i]);
    KILN_CHECK(status.is_ok(), "fold-layout: {}", status.message());
  }
  return true;
}

// concat(split(x)) of every piece, in order, along the split's axis -> x (two convolutions
// that share their input, merged by substitution, whose results were concatenated: inception's
// branches).
bool fold_concat_of_split(Graph& graph, Node* node) {
  if (node->op() != Op::concat || node->num_inputs() == 0) return false;
  Node* split = producer_with_op(node->input(0), Op::split);
  if (split == nullptr || split->num_outputs() != node->num_inputs()) return false;
  int64_t axis = node->attrs().get_int("axis");
  if (axis < 0) axis += node->output()->rank();
  if (axis != split_axis(*split)) return false;
  for (int i = 0; i < node->num_inputs(); ++i) {
    if (node->input(i) != split->output(i)) return false;
  }
  replace(graph, GraphBuilder(graph), node->output(), split->input(0));
  return true;
}

}  // namespace

bool fold_layout(Graph& graph) {
  return rewrite_each_node(graph, [](Graph& g, Node* node) {
    return fold_reshape(g, node) || fold_transpose(g, node) || fold_identity(g, node) ||
           fold_matmul_transpose(g, node) || fold_broadcast_operand(g, node) ||
           fold_split_of_split(g, node) || fold_concat_of_split(g, node);
  });
}

}  // namespace kiln
