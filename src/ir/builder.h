// GraphBuilder: the C++ API for writing graphs by hand (models, tests, examples).
//
// Builder calls return Value* and never fail on the spot. The first error (a shape mismatch,
// a bad attribute) is recorded with the op that raised it; from then on every call returns
// nullptr, and `finish()` returns that first error. (A null input or output given while no
// error is recorded, or a value of another graph, is itself such an error.) This keeps model
// code linear, as XLA's XlaBuilder does:
//
//   GraphBuilder b("ffn");
//   Value* x = b.input("x", DType::f32, {8, 64});
//   Value* w = b.input("w", DType::f32, {64, 256});
//   Value* h = b.gelu(b.matmul(x, w));
//   b.output(h);
//   Expected<Graph> graph = b.finish();
//
// A builder either owns the graph it builds (constructed with a name; `output` and `finish`
// complete it) or appends to an existing graph it does not own (constructed with a Graph&; the
// caller checks `ok()` / `status()` and keeps the graph). Gradient rules and autodiff use the
// second form to append the backward graph to the forward one.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln {

class GraphBuilder {
 public:
  // Builds a new graph, returned by finish().
  explicit GraphBuilder(std::string name = "main")
      : owned_(std::make_unique<Graph>(std::move(name))), graph_(owned_.get()) {}
  // Appends to `graph`, which must outlive the builder. Such a builder has no output() or
  // finish(); values are added to `graph` as they are built.
  explicit GraphBuilder(Graph& graph) : graph_(&graph) {}

  Value* input(std::string_view name, DType dtype, Shape shape);

  // Any op, by enum. Returns all outputs, or an empty vector after an error.
  std::vector<Value*> apply(Op op, const std::vector<Value*>& inputs, const Attrs& attrs = {});
  // Any single-output op (nullptr after an error).
  Value* apply1(Op op, const std::vector<Value*>& inputs, const Attrs& attrs = {});

  // Constants.
  Value* constant(Array value);
  Value* scalar(double value, DType dtype = DType::f32);
  Value* fill(Shape shape, double value, DType dtype = DType::f32);

  // Elementwise.
  Value* unary(Op op, Value* x) { return apply1(op, {x}); }
  Value* neg(Value* x) { return unary(Op::neg, x); }
  Value* exp(Value* x) { return unary(Op::exp, x); }
  Value* log(Value* x) { return unary(Op::log, x); }
  Value* sqrt(Value* x) { return unary(Op::sqrt, x); }
  Value* rsqrt(Value* x) { return unary(Op::rsqrt, x); }
  Value* tanh(Value* x) { return unary(Op::tanh, x); }
  Value* sigmoid(Value* x) { return unary(Op::sigmoid, x); }
  Value* relu(Value* x) { return unary(Op::relu, x); }
  Value* abs(Value* x) { return unary(Op::abs, x); }
  Value* sign(Value* x) { return unary(Op::sign, x); }
  Value* floor(Value* x) { return unary(Op::floor, x); }
  Value* erf(Value* x) { return unary(Op::erf, x); }
  Value* sin(Value* x) { return unary(Op::sin, x); }
  Value* cos(Value* x) { return unary(Op::cos, x); }
  Value* gelu(Value* x, bool tanh_approximation = false);
  Value* cast(Value* x, DType to) { return apply1(Op::cast, {x}, {{"to", to}}); }
  Value* add(Value* a, Value* b) { return apply1(Op::add, {a, b}); }
  Value* sub(Value* a, Value* b) { return apply1(Op::sub, {a, b}); }
  Value* mul(Value* a, Value* b) { return apply1(Op::mul, {a, b}); }
  Value* div(Value* a, Value* b) { return apply1(Op::div, {a, b}); }
  Value* pow(Value* a, Value* b) { return apply1(Op::pow, {a, b}); }
  Value* max(Value* a, Value* b) { return apply1(Op::max, {a, b}); }
  Value* min(Value* a, Value* b) { return apply1(Op::min, {a, b}); }
  Value* equal(Value* a, Value* b) { return apply1(Op::equal, {a, b}); }
  Value* greater(Value* a, Value* b) { return apply1(Op::greater, {a, b}); }
  Value* greater_equal(Value* a, Value* b) { return apply1(Op::greater_equal, {a, b}); }
  Value* where(Value* condition, Value* x, Value* y) {
    return apply1(Op::where, {condition, x, y});
  }
  // x * factor and x + term, with the constant a scalar of x's dtype (as 1/sqrt(d) in
  // attention).
  Value* mul_scalar(Value* x, double factor);
  Value* add_scalar(Value* x, double term);

  // Reductions.
  Value* sum(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* mean(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* reduce_max(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* reduce_min(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* prod(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  // The sum of x over the axes NumPy broadcasting added or stretched to reach x's shape from
  // `shape`: the adjoint of broadcasting, how a broadcast operand's gradient is reduced back to
  // its own shape. Returns x itself when its shape already is `shape`.
  Value* sum_to(Value* x, const Shape& shape);

  // Layout.
  Value* reshape(Value* x, std::vector<int64_t> shape);
  Value* transpose(Value* x, std::vector<int64_t> perm);
  Value* broadcast_to(Value* x, std::vector<int64_t> shape);
  Value* concat(const std::vector<Value*>& inputs, int64_t axis);
  std::vector<Value*> split(Value* x, int64_t axis, std::vector<int64_t> sizes);
  Value* slice(Value* x, std::vector<int64_t> starts, std::vector<int64_t> ends,
               std::vector<int64_t> axes = {}, std::vector<int64_t> steps = {});
  Value* pad(Value* x, std::vector<int64_t> pads, double value = 0);
  Value* gather(Value* data, Value* indices, int64_t axis = 0);
  Value* scatter_add(Value* data, Value* indices, Value* updates, int64_t axis = 0);
  Value* one_hot(Value* indices, int64_t depth, DType dtype, int64_t axis = -1);
  Value* iota(Shape shape, int64_t axis = 0, DType dtype = DType::i64);

  // Contractions.
  // Batched when either operand has rank above 2: leading dims broadcast, as NumPy's matmul.
  Value* matmul(Value* a, Value* b, bool transpose_a = false, bool transpose_b = false);
  // A dense layer on the last axis: x [..., in] times weight [in, out], plus bias [out].
  Value* linear(Value* x, Value* weight) { return matmul(x, weight); }
  Value* linear(Value* x, Value* weight, Value* bias) { return add(linear(x, weight), bias); }
  Value* conv(Value* x, Value* w, std::vector<int64_t> strides = {}, std::vector<int64_t> pads = {},
              std::vector<int64_t> dilations = {}, int64_t groups = 1);
  // Sparse CSR matrix A [M, K] times dense: A x dense [K, N], or with `transpose` A^T x dense
  // [M, N], where `num_cols` gives K (-1: dense's rows, only without transpose).
  Value* spmm(Value* row_ptr, Value* col_indices, Value* values, Value* dense,
              bool transpose = false, int64_t num_cols = -1);

  // Pooling over the spatial dims of x [N, C, *spatial].
  Value* max_pool(Value* x, std::vector<int64_t> kernel, std::vector<int64_t> strides = {},
                  std::vector<int64_t> pads = {});
  Value* avg_pool(Value* x, std::vector<int64_t> kernel, std::vector<int64_t> strides = {},
                  std::vector<int64_t> pads = {}, bool count_include_pad = false);

  // Composites.
  Value* softmax(Value* x, int64_t axis = -1);
  Value* log_softmax(Value* x, int64_t axis = -1);
  Value* layer_norm(Value* x, Value* scale, Value* bias, int64_t axis = -1,
                    double epsilon = 1e-5);
  Value* dropout(Value* x, double ratio, int64_t seed, int64_t offset = 0);
  // With the seed an input (a 0-d i64 value), so that it can change from run to run.
  Value* dropout(Value* x, double ratio, Value* seed, int64_t offset = 0);
  Value* cross_entropy(Value* logits, Value* labels, std::string_view reduction = "mean");

  // Renames a value the builder made (Graph::rename_value): importers name a result after the
  // node of the file it comes from.
  void rename(Value* value, std::string_view name) { graph_->rename_value(value, name); }

  // Declares a graph output. Only for a builder that owns its graph.
  void output(Value* value);

  bool ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  // The built graph (outputs as declared), or the first error. The builder is left empty. Only
  // for a builder that owns its graph.
  Expected<Graph> finish();

 private:
  std::unique_ptr<Graph> owned_;  // null when appending to a graph owned elsewhere
  Graph* graph_;                  // the graph nodes are added to
  std::vector<Value*> outputs_;
  Status status_;
};

}  // namespace kiln
