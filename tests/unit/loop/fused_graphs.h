// Graphs of the lowering tests that other tests reuse: groups fused in one kernel (a layer
// norm and a softmax written in primitives, batch norm then relu, matmuls with elementwise and
// row epilogues, convolutions with epilogues) and the matmul and convolution cases.
// lower_group_test.cc, gemm_test.cc and conv_gemm_test.cc check how they lower;
// parser_corpus_test.cc reads their kernels back from text.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"

namespace kiln::loop::testing {

// layer norm over the last axis of x [R, N], written in primitives.
inline Value* layer_norm_chain(GraphBuilder& b, Value* x, Value* scale, Value* bias) {
  Value* mean = b.mean(x, {-1}, /*keepdims=*/true);
  Value* centered = b.sub(x, mean);
  Value* var = b.mean(b.mul(centered, centered), {-1}, /*keepdims=*/true);
  Value* inv_std = b.rsqrt(b.add(var, b.scalar(1e-5, x->dtype())));
  return b.add(b.mul(b.mul(centered, inv_std), scale), bias);
}

// layer_norm(gelu(x)), sum(exp(x)) and layer_norm(x + bias) over x [4, 9]: values read three
// times, some through math calls.
inline Graph math_calls_read_thrice_graph() {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 9});
  Value* scale = b.input("scale", DType::f32, {9});
  Value* bias = b.input("bias", DType::f32, {9});
  graph.set_outputs({b.layer_norm(b.gelu(x), scale, bias), b.sum(b.exp(x), {1}),
                     b.layer_norm(b.add(x, bias), scale, bias)});
  return graph;
}

// softmax over the rows of x [4, 6], written in primitives.
inline Graph softmax_from_primitives_graph() {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 6});
  Value* e = b.exp(b.sub(x, b.reduce_max(x, {1}, /*keepdims=*/true)));
  graph.set_outputs({b.div(e, b.sum(e, {1}, /*keepdims=*/true))});
  return graph;
}

// relu(batch_norm_train(x [4, 3, 5, 6])).
inline Graph batch_norm_relu_graph() {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4, 3, 5, 6});
  Value* y = b.apply(Op::batch_norm_train,
                     {x, b.input("scale", DType::f32, {3}), b.input("bias", DType::f32, {3})})[0];
  graph.set_outputs({b.relu(y)});
  return graph;
}

struct MatmulCase {
  std::vector<int64_t> a, b;
  bool transpose_a = false, transpose_b = false;
};

inline Graph matmul_graph(DType dtype, const MatmulCase& c) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.matmul(b.input("a", dtype, Shape(c.a)), b.input("b", dtype, Shape(c.b)),
                              c.transpose_a, c.transpose_b)});
  return graph;
}

inline const std::vector<MatmulCase>& matmul_cases() {
  static const std::vector<MatmulCase> cases = {
      {{1, 1}, {1, 1}},
      {{7, 5}, {5, 3}},
      {{5, 7}, {5, 3}, true, false},
      {{7, 5}, {3, 5}, false, true},
      {{5, 7}, {3, 5}, true, true},
      {{2, 3, 4, 5}, {5, 6}},
      {{3, 1, 4, 5}, {2, 5, 6}},
      {{4, 5}, {2, 3, 5, 6}},
      {{2, 1, 5, 4}, {3, 6, 5}, true, true},
      {{7, 0}, {0, 7}},  // an empty sum: zeros (BLAS still gets leading dimensions of 1)
      {{0, 4}, {0, 3}, true, false},
  };
  return cases;
}

// x [M, K] * w [K, N] + bias [N], then relu: the fusion issue's epilogue group.
inline Graph bias_relu_graph(DType dtype, int64_t m, int64_t k, int64_t n) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", dtype, {m, k}), b.input("w", dtype, {k, n}));
  graph.set_outputs({b.relu(b.add(y, b.input("bias", dtype, {n})))});
  return graph;
}

// softmax(a b * 0.5): a row epilogue.
inline Graph softmax_epilogue_graph(const MatmulCase& c) {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, Shape(c.a)), b.input("w", DType::f32, Shape(c.b)));
  graph.set_outputs({b.softmax(b.mul(y, b.scalar(0.5)))});
  return graph;
}

// x and w of softmax_epilogue_graph: blocks of 3 rows over 7 leave a tail; a batch folds into
// the rows of one gemm; a batch of matrices.
inline std::vector<MatmulCase> softmax_epilogue_cases() {
  return {{{7, 4}, {4, 5}}, {{2, 7, 4}, {4, 5}}, {{3, 4, 2}, {3, 2, 6}}};
}

// A layer norm of x w [2, 5, 6] written in primitives, and the row sums of x w.
inline Graph row_statistics_epilogue_graph() {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {2, 5, 3}), b.input("w", DType::f32, {3, 6}));
  Value* mean = b.mean(y, {2}, /*keepdims=*/true);
  Value* centered = b.sub(y, mean);
  Value* variance = b.mean(b.mul(centered, centered), {2}, /*keepdims=*/true);
  Value* normed = b.mul(centered, b.rsqrt(b.add(variance, b.scalar(1e-5))));
  Value* row_sums = b.sum(y, {2});
  graph.set_outputs({normed, row_sums});
  return graph;
}

// layer_norm(gelu(x w + b)) over x [2, 3, 4], w [4, 8].
inline Graph layer_norm_of_gelu_epilogue_graph() {
  Graph graph;
  GraphBuilder b(graph);
  Value* y = b.matmul(b.input("x", DType::f32, {2, 3, 4}), b.input("w", DType::f32, {4, 8}));
  Value* g = b.gelu(b.add(y, b.input("b", DType::f32, {8})));
  graph.set_outputs(
      {b.layer_norm(g, b.input("scale", DType::f32, {8}), b.input("bias", DType::f32, {8}))});
  return graph;
}

struct ConvCase {
  std::vector<int64_t> x, w;
  Attrs attrs;
};

// conv of `c`, then its two gradients with a random output gradient: three single-op graphs.
inline std::vector<Graph> conv_graphs(DType dtype, const ConvCase& c) {
  std::vector<Graph> graphs(3);
  GraphBuilder forward(graphs[0]);
  Value* y = forward.apply1(
      Op::conv, {forward.input("x", dtype, Shape(c.x)), forward.input("w", dtype, Shape(c.w))},
      c.attrs);
  EXPECT_NE(y, nullptr);
  if (y == nullptr) return {};
  graphs[0].set_outputs({y});
  const std::vector<int64_t> y_dims = y->shape().dims();
  Attrs data = c.attrs;
  data.set("input_shape", c.x);
  GraphBuilder b1(graphs[1]);
  graphs[1].set_outputs(
      {b1.apply1(Op::conv_grad_data,
                 {b1.input("dy", dtype, Shape(y_dims)), b1.input("w", dtype, Shape(c.w))}, data)});
  Attrs weight = c.attrs;
  weight.set("weight_shape", c.w);
  GraphBuilder b2(graphs[2]);
  graphs[2].set_outputs({b2.apply1(
      Op::conv_grad_weight,
      {b2.input("x", dtype, Shape(c.x)), b2.input("dy", dtype, Shape(y_dims))}, weight)});
  return graphs;
}

inline std::vector<ConvCase> conv_cases() {
  return {
      {{2, 3, 5, 6},
       {4, 3, 2, 2},
       {{"strides", {2, 1}}, {"pads", {1, 0, 1, 2}}, {"dilations", {1, 2}}}},
      {{1, 4, 7}, {6, 2, 3}, {{"groups", 2}, {"pads", {1, 1}}, {"strides", {2}}}},
      {{2, 2, 3, 4, 3}, {3, 2, 2, 1, 2}, {{"pads", {0, 1, 1, 1, 0, 0}}}},
      {{2, 6, 4, 3}, {6, 1, 3, 3}, {{"groups", 6}, {"pads", {1, 1, 1, 1}}}},  // depthwise
      {{2, 5, 3, 4}, {7, 5, 1, 1}, {}},                                       // pointwise
      {{1, 4, 5}, {4, 2, 1}, {{"groups", 2}}},                                // grouped pointwise
      {{3, 4, 6, 6}, {2, 4, 1, 1}, {{"strides", {2, 2}}}},                    // strided 1x1
      {{0, 2, 4}, {3, 2, 3}, {}},                                             // no images
      // Wide padding and stride 3: the last tap of a row sees only padding (an empty range
      // of the column copy), the first sees x only at the second output position.
      {{1, 2, 3, 2}, {2, 2, 1, 3}, {{"strides", {1, 3}}, {"pads", {0, 3, 0, 3}}}},
      // 272 output positions per image: a gemm per image (fewer share one gemm).
      {{2, 2, 17, 16}, {3, 2, 3, 3}, {{"pads", {1, 1, 1, 1}}}},
  };
}

// The conv of `c` (op 0) or its data gradient (op 1), then relu(product * scale[channel]):
// batch norm's shape of epilogue, a per-channel broadcast and an activation.
inline Graph conv_epilogue_graph(DType dtype, const ConvCase& c, int op) {
  std::vector<Graph> graphs = conv_graphs(dtype, c);
  Graph graph = std::move(graphs.at(static_cast<size_t>(op)));
  GraphBuilder b(graph);
  Value* product = graph.outputs().front();
  std::vector<int64_t> channel(static_cast<size_t>(product->rank() - 1), 1);
  channel.front() = product->shape().dim(1);
  graph.set_outputs({b.relu(b.mul(product, b.input("scale", dtype, Shape(channel))))});
  return graph;
}

}  // namespace kiln::loop::testing
