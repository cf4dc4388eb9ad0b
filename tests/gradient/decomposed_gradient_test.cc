// The composites' decomposed forms, written in primitive ops, differentiate too: their gradients
// match finite differences and agree with the composites' own rules.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "gradient/gradient_check.h"
#include "ir/builder.h"

namespace kiln::testing {
namespace {

Value* softmax_of_primitives(GraphBuilder& b, Value* x, int64_t axis) {
  Value* e = b.exp(b.sub(x, b.reduce_max(x, {axis}, /*keepdims=*/true)));
  return b.div(e, b.sum(e, {axis}, /*keepdims=*/true));
}

Value* log_softmax_of_primitives(GraphBuilder& b, Value* x, int64_t axis) {
  Value* shifted = b.sub(x, b.reduce_max(x, {axis}, /*keepdims=*/true));
  return b.sub(shifted, b.log(b.sum(b.exp(shifted), {axis}, /*keepdims=*/true)));
}

// layer_norm over the last axis.
Value* layer_norm_of_primitives(GraphBuilder& b, Value* x, Value* scale, Value* bias,
                                double epsilon) {
  Value* centered = b.sub(x, b.mean(x, {-1}, /*keepdims=*/true));
  Value* var = b.mean(b.mul(centered, centered), {-1}, /*keepdims=*/true);
  Value* normalized = b.mul(centered, b.rsqrt(b.add_scalar(var, epsilon)));
  return b.add(b.mul(normalized, scale), bias);
}

// cross_entropy with reduction "mean", class axis last.
Value* cross_entropy_of_primitives(GraphBuilder& b, Value* logits, Value* labels) {
  const int64_t classes = logits->shape().dim(logits->rank() - 1);
  Value* log_probs = log_softmax_of_primitives(b, logits, -1);
  Value* picked = b.sum(b.mul(b.one_hot(labels, classes, logits->dtype()), log_probs), {-1});
  return b.neg(b.mean(picked, {}));
}

// Builds a graph with inputs of the arrays' types (named in0, in1, ...) and the output `body`
// computes from them.
Expected<Graph> graph_of(const std::vector<Array>& inputs,
                         const std::function<Value*(GraphBuilder&, std::vector<Value*>)>& body) {
  GraphBuilder b("case");
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    values.push_back(b.input("in" + std::to_string(i), inputs[i].dtype, inputs[i].shape));
  }
  b.output(body(b, values));
  return b.finish();
}

// The decomposed form's gradients match finite differences and the composite's rule.
::testing::AssertionResult decomposition_agrees(
    const std::vector<Array>& inputs,
    const std::function<Value*(GraphBuilder&, std::vector<Value*>)>& composite,
    const std::function<Value*(GraphBuilder&, std::vector<Value*>)>& decomposed) {
  Expected<Graph> primitive_graph = graph_of(inputs, decomposed);
  ::testing::AssertionResult fd = gradients_match(primitive_graph, inputs);
  if (!fd) return fd << " (decomposed form)";
  Expected<Graph> composite_graph = graph_of(inputs, composite);
  if (!composite_graph) return ::testing::AssertionFailure() << composite_graph.status().message();
  Expected<std::vector<Array>> expected = analytic_gradients(*composite_graph, inputs);
  Expected<std::vector<Array>> actual = analytic_gradients(*primitive_graph, inputs);
  if (!expected || !actual) {
    return ::testing::AssertionFailure()
           << (expected ? actual.status().message() : expected.status().message());
  }
  return arrays_agree(*actual, *expected);
}

TEST(DecomposedGradient, Softmax) {
  for (int64_t axis : {-1, 0}) {
    EXPECT_TRUE(decomposition_agrees(
        {normal(Shape{3, 4}, 1)},
        [axis](GraphBuilder& b, std::vector<Value*> in) { return b.softmax(in[0], axis); },
        [axis](GraphBuilder& b, std::vector<Value*> in) {
          return softmax_of_primitives(b, in[0], axis);
        }))
        << "axis " << axis;
  }
}

TEST(DecomposedGradient, LogSoftmax) {
  EXPECT_TRUE(decomposition_agrees(
      {normal(Shape{2, 3, 5}, 2)},
      [](GraphBuilder& b, std::vector<Value*> in) { return b.log_softmax(in[0], 1); },
      [](GraphBuilder& b, std::vector<Value*> in) {
        return log_softmax_of_primitives(b, in[0], 1);
      }));
}

TEST(DecomposedGradient, LayerNorm) {
  EXPECT_TRUE(decomposition_agrees(
      {normal(Shape{2, 3, 4}, 3), normal(Shape{4}, 4), normal(Shape{4}, 5)},
      [](GraphBuilder& b, std::vector<Value*> in) {
        return b.layer_norm(in[0], in[1], in[2], -1, 1e-3);
      },
      [](GraphBuilder& b, std::vector<Value*> in) {
        return layer_norm_of_primitives(b, in[0], in[1], in[2], 1e-3);
      }));
}

TEST(DecomposedGradient, CrossEntropy) {
  EXPECT_TRUE(decomposition_agrees(
      {normal(Shape{4, 5}, 6), integers(Shape{4}, 5, 7)},
      [](GraphBuilder& b, std::vector<Value*> in) { return b.cross_entropy(in[0], in[1]); },
      [](GraphBuilder& b, std::vector<Value*> in) {
        return cross_entropy_of_primitives(b, in[0], in[1]);
      }));
}

}  // namespace
}  // namespace kiln::testing
