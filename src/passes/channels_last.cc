#include "passes/channels_last.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ir/builder.h"
#include "passes/dead_code.h"
#include "passes/fold_constants.h"
#include "passes/fold_layout.h"
#include "passes/rewriting.h"

namespace kiln {
namespace {

constexpr std::string_view kPass = "channels-last";

// The permutation moving dim 1 of a rank-`rank` value last, and its inverse.
std::vector<int64_t> to_last_perm(int rank) {
  std::vector<int64_t> perm = {0};
  for (int d = 2; d < rank; ++d) perm.push_back(d);
  perm.push_back(1);
  return perm;
}

std::vector<int64_t> to_first_perm(int rank) {
  std::vector<int64_t> perm = {0, rank - 1};
  for (int d = 1; d < rank - 1; ++d) perm.push_back(d);
  return perm;
}

// The value `value` holds with its channels last when it is a to_first transpose.
Value* channels_last_source(const Value* value) {
  const Node* node = value->producer();
  if (node == nullptr || node->op() != Op::transpose) return nullptr;
  if (node->attrs().get_ints("perm") != to_first_perm(value->rank())) return nullptr;
  return node->input(0);
}

bool is_training_graph(const Graph& graph) {
  return std::ranges::any_of(graph.nodes(), [](const Node* node) {
    return node->op() == Op::conv_grad_data || node->op() == Op::conv_grad_weight;
  });
}

// Why `conv` keeps its layout, or empty when it moves to channels last.
std::string why_kept(const Node& conv) {
  const DType dtype = conv.output(0)->dtype();
  if (dtype != DType::f32 && !is_low_precision(dtype)) {
    return fmt::format("of {} (oneDNN's direct convolution takes f32, bf16 and f16)",
                       dtype_name(dtype));
  }
  if (conv.attrs().get_int("groups") != 1) return "grouped";
  return {};
}

void convert_conv(Graph& graph, Node* conv) {
  GraphBuilder b(graph);
  const int rank = conv->output(0)->rank();
  Value* x = b.transpose(conv->input(0), to_last_perm(rank));
  Value* y = b.apply1(Op::conv_channels_last, {x, conv->input(1)}, conv->attrs());
  replace_with(graph, b, conv->output(0), b.transpose(y, to_first_perm(rank)), kPass);
}

// Whether an operand of a rank-`rank` result whose channels dim holds `channels` can move to
// the channels-last layout without a pass over memory: it is a to_first transpose, a scalar,
// or holds no more elements than the channels.
bool moves_cheaply(const Value* operand, int rank, int64_t channels) {
  return channels_last_source(operand) != nullptr || operand->rank() == 0 ||
         (operand->shape().num_elements() <= channels && operand->rank() <= rank);
}

// That operand in the channels-last layout (where moves_cheaply).
Value* operand_channels_last(GraphBuilder& b, Value* operand, int rank) {
  if (Value* source = channels_last_source(operand); source != nullptr) return source;
  if (operand->rank() == 0) return operand;
  // NumPy broadcasting aligns trailing dims: as a rank-`rank` value first, then transposed.
  std::vector<int64_t> dims(static_cast<size_t>(rank - operand->rank()), 1);
  dims.insert(dims.end(), operand->shape().dims().begin(), operand->shape().dims().end());
  Value* full = dims == operand->shape().dims() ? operand : b.reshape(operand, dims);
  return b.transpose(full, to_last_perm(rank));
}

// Whether `op` computes each element from the elements at the same index alone, whatever the
// layout: the elementwise ops but dropout (whose mask hashes each element's flat index), and
// the ops with NumPy broadcasting (add through where in ir/ops.def; batch_norm_infer, whose
// statistics follow axis 1, has its own rewrite below).
bool moves_with_layout(const Node& node) {
  const Op op = node.op();
  return (node.def().fusion_kind == FusionKind::elementwise && op != Op::dropout) ||
         (static_cast<int>(op) >= static_cast<int>(Op::add) &&
          static_cast<int>(op) <= static_cast<int>(Op::where));
}

// Moves a to_first transpose below `node` when `node` moves with the layout over a result of
// a to_first transpose's shape and every operand can follow (above).
bool sink_through(Graph& graph, Node* node) {
  if (!moves_with_layout(*node) || node->num_outputs() != 1 || node->output(0)->rank() < 3) {
    return false;
  }
  const Value* out = node->output(0);
  const bool reads_a_transpose = std::ranges::any_of(node->inputs(), [&](const Value* v) {
    return channels_last_source(v) != nullptr && v->shape() == out->shape();
  });
  const bool all_move = std::ranges::all_of(node->inputs(), [&](const Value* v) {
    return moves_cheaply(v, out->rank(), out->shape().dim(1));
  });
  if (!reads_a_transpose || !all_move) return false;
  GraphBuilder b(graph);
  std::vector<Value*> operands;
  for (Value* input : node->inputs())
    operands.push_back(operand_channels_last(b, input, out->rank()));
  Value* result = b.apply1(node->op(), operands, node->attrs());
  replace_with(graph, b, node->output(0), b.transpose(result, to_first_perm(out->rank())), kPass);
  return true;
}

// Moves a to_first transpose below a split of its result (ResNet's two convolutions of one
// input, merged by the substitution search, are split along the channels): the split cuts
// the transpose's input along the axis the transpose moved there.
bool sink_through_split(Graph& graph, Node* split) {
  if (split->op() != Op::split) return false;
  Value* source = channels_last_source(split->input(0));
  if (source == nullptr) return false;
  const int rank = source->rank();
  int64_t axis = split->attrs().get_int("axis");
  if (axis < 0) axis += rank;
  Attrs attrs = split->attrs();
  attrs.set("axis", to_first_perm(rank)[static_cast<size_t>(axis)]);
  GraphBuilder b(graph);
  const std::vector<Value*> pieces = b.apply(Op::split, {source}, attrs);
  for (size_t i = 0; i < pieces.size(); ++i) {
    Value* piece = b.ok() ? b.transpose(pieces[i], to_first_perm(rank)) : nullptr;
    replace_with(graph, b, split->output(static_cast<int>(i)), piece, kPass);
  }
  return true;
}

// The conv_channels_last whose result `value` is when nothing else reads it and its epilogue
// can still take `op` (a bias only before the relu, one of each), else null.
Node* sole_reader_conv(const Graph& graph, const Value* value, Op op) {
  Node* conv = value->producer();
  if (conv == nullptr || conv->op() != Op::conv_channels_last || value->users().size() != 1 ||
      graph.is_output(value) || conv->attrs().get_bool("relu")) {
    return nullptr;
  }
  return op == Op::add && conv->num_inputs() == 3 ? nullptr : conv;
}

// Folds a bias add (an operand of one value per output channel) or a relu into the
// conv_channels_last it reads, which oneDNN then computes in its epilogue.
bool fuse_into_conv(Graph& graph, Node* node) {
  if (node->op() != Op::add && node->op() != Op::relu) return false;
  for (int i = 0; i < node->num_inputs(); ++i) {
    Node* conv = sole_reader_conv(graph, node->input(i), node->op());
    if (conv == nullptr) continue;
    std::vector<Value*> inputs = conv->inputs();
    Attrs attrs = conv->attrs();
    GraphBuilder b(graph);
    if (node->op() == Op::relu) {
      attrs.set("relu", true);
    } else {
      Value* bias = node->input(1 - i);
      const Shape& y = node->input(i)->shape();
      const int64_t channels = y.dim(y.rank() - 1);
      const std::vector<int64_t>& dims = bias->shape().dims();
      const bool per_channel =
          bias->dtype() == node->input(i)->dtype() && !dims.empty() && dims.back() == channels &&
          std::all_of(dims.begin(), dims.end() - 1, [](int64_t d) { return d == 1; });
      if (!per_channel || node->output(0)->shape() != y) return false;
      inputs.push_back(dims.size() == 1 ? bias : b.reshape(bias, {channels}));
    }
    replace_with(graph, b, node->output(0), b.apply1(Op::conv_channels_last, inputs, attrs), kPass);
    return true;
  }
  return false;
}

// Moves a to_first transpose below an inference batch norm of its result (a zoo model's, whose
// statistics are inputs), written as the broadcasting ops it computes over the last axis:
// ((x - mean) * rsqrt(var + epsilon)) * scale + bias, in its evaluation's order.
bool sink_through_batch_norm(Graph& graph, Node* norm) {
  if (norm->op() != Op::batch_norm_infer) return false;
  Value* source = channels_last_source(norm->input(0));
  if (source == nullptr) return false;
  const int rank = source->rank();
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  dims.back() = source->shape().dim(rank - 1);
  GraphBuilder b(graph);
  const auto per_channel = [&](Value* v) { return b.reshape(v, dims); };
  Value* inv_std = b.rsqrt(b.add_scalar(norm->input(4), norm->attrs().get_float("epsilon")));
  Value* normalized = b.mul(b.sub(source, per_channel(norm->input(3))), per_channel(inv_std));
  Value* y = b.add(b.mul(normalized, per_channel(norm->input(1))), per_channel(norm->input(2)));
  replace_with(graph, b, norm->output(0), b.transpose(y, to_first_perm(rank)), kPass);
  return true;
}

// Whether oneDNN has Winograd kernels for the shape of `conv`: a 2-D kernel of 3x3 at stride
// 1, undilated, not grouped, padded by at most one, of f32 (it has none of bf16 or f16).
bool winograd_applies(const Node& conv) {
  if (conv.output(0)->dtype() != DType::f32) return false;
  const Shape& w = conv.input(1)->shape();
  const Attrs& attrs = conv.attrs();
  const auto all_at_most = [](const std::vector<int64_t>& v, int64_t most) {
    return std::ranges::all_of(v, [&](int64_t e) { return e <= most; });
  };
  return w.rank() == 4 && w.dim(2) == 3 && w.dim(3) == 3 && attrs.get_int("groups") == 1 &&
         all_at_most(attrs.get_ints("strides"), 1) && all_at_most(attrs.get_ints("dilations"), 1) &&
         all_at_most(attrs.get_ints("pads"), 1);
}

// The estimated seconds of `conv` computed by Winograd's algorithm or not: its flops (the op's
// cost, fewer for Winograd's) at the gemm rate, and for Winograd's the copies of x and y into
// oneDNN's blocked layout and back (each read and written once) at the bandwidth.
double conv_seconds(const Node& conv, bool winograd, const cost::DeviceProfile& profile) {
  Attrs attrs = conv.attrs();
  attrs.set("winograd", winograd);
  const double compute =
      conv.def().cost(conv.input_types(), conv.output_types(), attrs).flops / profile.matmul_flops;
  if (!winograd) return compute;
  const double copied = 2.0 * static_cast<double>(conv.input(0)->type().size_bytes() +
                                                  conv.output(0)->type().size_bytes());
  return compute + copied / profile.memory_bandwidth;
}

// Whether Winograd's algorithm computes `conv` (a conv_channels_last) in less estimated time
// on `profile`'s machine than the direct sum.
bool prefers_winograd(const Node& conv, const cost::DeviceProfile& profile) {
  return winograd_applies(conv) &&
         conv_seconds(conv, true, profile) < conv_seconds(conv, false, profile);
}

// Step 5: marks `conv` winograd where that prices lower.
bool choose_winograd(Graph& graph, Node* conv, const cost::DeviceProfile& profile) {
  if (conv->op() != Op::conv_channels_last || conv->attrs().get_bool("winograd") ||
      !prefers_winograd(*conv, profile)) {
    return false;
  }
  Attrs attrs = conv->attrs();
  attrs.set("winograd", true);
  GraphBuilder b(graph);
  replace_with(graph, b, conv->output(0), b.apply1(Op::conv_channels_last, conv->inputs(), attrs),
               kPass);
  return true;
}

}  // namespace

ChannelsLastReport convert_to_channels_last(Graph& graph, const cost::DeviceProfile& profile) {
  ChannelsLastReport report;
  const bool training = is_training_graph(graph);
  const std::vector<Node*> nodes(graph.nodes().begin(), graph.nodes().end());
  for (Node* node : nodes) {
    if (node->op() != Op::conv) continue;
    std::string kept =
        training ? "in a training graph (its gradients read x channels first)" : why_kept(*node);
    if (!kept.empty()) {
      report.kept.push_back(fmt::format("{}: {}", node->output(0)->name(), kept));
      continue;
    }
    convert_conv(graph, node);
    ++report.converted;
  }
  if (report.converted == 0) return report;
  // Each round sinks every to_first transpose by at least one op; the walk's order (the
  // graph's) sinks a whole chain in one round.
  while (rewrite_each_node(graph, [&](Graph& g, Node* node) {
    const bool sunk =
        sink_through(g, node) || sink_through_split(g, node) || sink_through_batch_norm(g, node);
    report.sunk += sunk ? 1 : 0;
    return sunk;
  })) {
  }
  eliminate_dead_code(graph);  // the sunk transposes, which still read the convolutions
  rewrite_each_node(graph, [&](Graph& g, Node* node) {
    const bool fused = fuse_into_conv(g, node);
    report.fused += fused ? 1 : 0;
    return fused;
  });
  while (fold_layout(graph) || fold_constants(graph)) {
  }
  eliminate_dead_code(graph);
  rewrite_each_node(graph, [&](Graph& g, Node* node) {
    const bool chosen = choose_winograd(g, node, profile);
    report.winograd += chosen ? 1 : 0;
    return chosen;
  });
  eliminate_dead_code(graph);  // the convolutions replaced by their winograd forms
  return report;
}

}  // namespace kiln
