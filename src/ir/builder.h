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
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln {

class GraphBuilder {
 public:
  explicit GraphBuilder(std::string name = "main") : graph_(std::move(name)) {}

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
  Value* gelu(Value* x, bool tanh_approximation = false);
  Value* cast(Value* x, DType to) { return apply1(Op::cast, {x}, {{"to", to}}); }
  Value* add(Value* a, Value* b) { return apply1(Op::add, {a, b}); }
  Value* sub(Value* a, Value* b) { return apply1(Op::sub, {a, b}); }
  Value* mul(Value* a, Value* b) { return apply1(Op::mul, {a, b}); }
  Value* div(Value* a, Value* b) { return apply1(Op::div, {a, b}); }
  Value* max(Value* a, Value* b) { return apply1(Op::max, {a, b}); }
  Value* min(Value* a, Value* b) { return apply1(Op::min, {a, b}); }
  Value* where(Value* condition, Value* x, Value* y) {
    return apply1(Op::where, {condition, x, y});
  }
  // x * factor, with the factor a scalar constant of x's dtype (as 1/sqrt(d) in attention).
  Value* mul_scalar(Value* x, double factor);

  // Reductions.
  Value* sum(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* mean(Value* x, std::vector<int64_t> axes, bool keepdims = false);
  Value* reduce_max(Value* x, std::vector<int64_t> axes, bool keepdims = false);

  // Layout.
  Value* reshape(Value* x, std::vector<int64_t> shape);
  Value* transpose(Value* x, std::vector<int64_t> perm);
  Value* broadcast_to(Value* x, std::vector<int64_t> shape);
  Value* concat(const std::vector<Value*>& inputs, int64_t axis);
  std::vector<Value*> split(Value* x, int64_t axis, std::vector<int64_t> sizes);
  Value* slice(Value* x, std::vector<int64_t> starts, std::vector<int64_t> ends,
               std::vector<int64_t> axes = {}, std::vector<int64_t> steps = {});
  Value* gather(Value* data, Value* indices, int64_t axis = 0);

  // Contractions.
  // Batched when either operand has rank above 2: leading dims broadcast, as NumPy's matmul.
  Value* matmul(Value* a, Value* b, bool transpose_a = false, bool transpose_b = false);
  // A dense layer on the last axis: x [..., in] times weight [in, out], plus bias [out].
  Value* linear(Value* x, Value* weight) { return matmul(x, weight); }
  Value* linear(Value* x, Value* weight, Value* bias) { return add(linear(x, weight), bias); }
  Value* conv(Value* x, Value* w, std::vector<int64_t> strides = {}, std::vector<int64_t> pads = {},
              std::vector<int64_t> dilations = {}, int64_t groups = 1);

  // Composites.
  Value* softmax(Value* x, int64_t axis = -1);
  Value* log_softmax(Value* x, int64_t axis = -1);
  Value* layer_norm(Value* x, Value* scale, Value* bias, int64_t axis = -1,
                    double epsilon = 1e-5);
  Value* dropout(Value* x, double ratio, int64_t seed, int64_t offset = 0);
  Value* cross_entropy(Value* logits, Value* labels, std::string_view reduction = "mean");

  void output(Value* value);

  bool ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  // The built graph (outputs as declared), or the first error. The builder is left empty.
  Expected<Graph> finish();

 private:
  Graph graph_;
  std::vector<Value*> outputs_;
  Status status_;
};

}  // namespace kiln
