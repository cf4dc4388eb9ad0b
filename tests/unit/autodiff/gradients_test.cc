// build_gradients: what it appends, how it accumulates, and its errors.
#include "autodiff/gradients.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "interp/interpreter.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;

constexpr DType f64 = DType::f64;

// Builds the gradients of `loss` with respect to `wrt`, makes them the graph's outputs, checks
// that the graph verifies and returns what the interpreter computes on `inputs`.
std::vector<Array> run_gradients(Graph& graph, Value* loss, std::vector<Value*> wrt,
                                 const std::vector<Array>& inputs) {
  Expected<std::vector<Value*>> grads = build_gradients(graph, loss, wrt);
  EXPECT_TRUE(grads.has_value()) << grads.status().message();
  if (!grads) return {};
  graph.set_outputs(*grads);
  EXPECT_TRUE(verify(graph).is_ok()) << verify(graph).message();
  Expected<std::vector<Array>> values = interpret(graph, inputs);
  EXPECT_TRUE(values.has_value()) << values.status().message();
  return values ? *values : std::vector<Array>{};
}

int count_nodes(const Graph& graph, Op op) {
  return static_cast<int>(
      std::ranges::count_if(graph.nodes(), [op](const Node* n) { return n->op() == op; }));
}

TEST(BuildGradients, SumsTheContributionsOfEveryUse) {
  // loss = sum(x * x + x): d/dx = 2x + 1.
  Graph graph("fan_out");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {3});
  Value* loss = b.sum(b.add(b.mul(x, x), x), {});
  ASSERT_TRUE(b.ok());
  const std::vector<Array> grads =
      run_gradients(graph, loss, {x}, {Array(f64, Shape{3}, {1, -2, 0.5})});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0], Array(f64, Shape{3}, {3, -3, 2}));
}

TEST(BuildGradients, ALossIndependentOfAValueGivesItZeros) {
  Graph graph("unused");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {2});
  Value* unused = b.input("unused", f64, {2, 2});
  Value* loss = b.sum(b.exp(x), {});
  ASSERT_TRUE(b.ok());
  const std::vector<Array> grads = run_gradients(
      graph, loss, {unused, x}, {Array(f64, Shape{2}, {0, 1}), Array(f64, Shape{2, 2})});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0], Array(f64, Shape{2, 2}, {0, 0, 0, 0}));
  EXPECT_EQ(grads[1], Array(f64, Shape{2}, {1, std::exp(1.0)}));
}

TEST(BuildGradients, TheLossWithRespectToItselfIsOne) {
  Graph graph("self");
  GraphBuilder b(graph);
  Value* loss = b.sum(b.input("x", f64, {2}), {});
  ASSERT_TRUE(b.ok());
  const std::vector<Array> grads =
      run_gradients(graph, loss, {loss}, {Array(f64, Shape{2}, {1, 2})});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0], Array::scalar(f64, 1));
}

// Gradients flow only through floating values: argmax's index stops them, so x gets zeros
// while the gathered table gets its rows' gradient.
TEST(BuildGradients, IntegerValuesStopGradients) {
  Graph graph("indices");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {3});
  Value* table = b.input("table", f64, {3, 2});
  Value* index = b.apply1(Op::argmax, {x});
  Value* loss = b.sum(b.gather(table, index), {});
  ASSERT_TRUE(b.ok());
  const std::vector<Array> grads =
      run_gradients(graph, loss, {x, table},
                    {Array(f64, Shape{3}, {0, 5, 1}), Array(f64, Shape{3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0], Array(f64, Shape{3}, {0, 0, 0}));
  EXPECT_EQ(grads[1], Array(f64, Shape{3, 2}, {0, 0, 1, 1, 0, 0}));
}

// A rule builds every input's gradient; those no wrt value needs are removed again.
TEST(BuildGradients, AppendsOnlyTheGradientsThatAreNeeded) {
  Graph graph("mlp");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {4, 3});
  Value* w = b.input("w", f64, {3, 2});
  Value* loss = b.mean(b.tanh(b.matmul(x, w)), {});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(build_gradients(graph, loss, std::vector<Value*>{w}).has_value());
  // The forward matmul and x^T dy; not dy w^T.
  EXPECT_EQ(count_nodes(graph, Op::matmul), 2);
  graph.set_outputs({loss});
  EXPECT_TRUE(verify(graph).is_ok());
}

TEST(BuildGradients, NodesOffThePathAreNotDifferentiated) {
  Graph graph("off_path");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {2});
  Value* constant_branch = b.exp(b.input("c", f64, {2}));
  Value* loss = b.sum(b.mul(x, constant_branch), {});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(build_gradients(graph, loss, std::vector<Value*>{x}).has_value());
  EXPECT_EQ(count_nodes(graph, Op::exp), 1);  // exp's gradient was not built
}

TEST(BuildGradients, ConvertsTheGradientOfACastBack) {
  Graph graph("cast");
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {2});
  Value* loss = b.sum(b.cast(x, f64), {});
  ASSERT_TRUE(b.ok());
  Expected<std::vector<Value*>> grads = build_gradients(graph, loss, std::vector<Value*>{x});
  ASSERT_TRUE(grads.has_value()) << grads.status().message();
  EXPECT_EQ((*grads)[0]->type(), x->type());
}

TEST(BuildGradients, RejectsALossThatIsNotAFloatingScalar) {
  Graph graph("bad_loss");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {2});
  Value* index = b.input("i", DType::i64, {});
  ASSERT_TRUE(b.ok());
  const std::vector<Value*> wrt = {x};
  EXPECT_TRUE(is_error_with(build_gradients(graph, x, wrt).status(),
                            {"the loss %x must be a scalar, got f64[2]"}));
  EXPECT_TRUE(is_error_with(build_gradients(graph, index, wrt).status(),
                            {"the loss %i is i64[]: only floating values have gradients"}));
  EXPECT_TRUE(is_error_with(build_gradients(graph, nullptr, wrt).status(), {"the loss is null"}));
}

TEST(BuildGradients, RejectsWrtValuesThatCannotHaveGradients) {
  Graph graph("bad_wrt");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {2});
  Value* index = b.input("i", DType::i64, {2});
  Value* loss = b.sum(x, {});
  Graph other("other");
  Value* foreign = other.add_input({f64, {2}}, "y");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(is_error_with(build_gradients(graph, loss, std::vector<Value*>{x, index}).status(),
                            {"wrt[1] %i is i64[2]: only floating values have gradients"}));
  EXPECT_TRUE(is_error_with(build_gradients(graph, loss, std::vector<Value*>{foreign}).status(),
                            {"wrt[0] %y is not a value of graph 'bad_wrt'"}));
  EXPECT_TRUE(is_error_with(build_gradients(graph, loss, std::vector<Value*>{nullptr}).status(),
                            {"wrt[0] is null"}));
}

TEST(BuildGradients, NamesTheNodeWhoseOpHasNoRule) {
  Graph graph("second_order");
  GraphBuilder b(graph);
  Value* x = b.input("x", f64, {1, 1, 4});
  Value* g = b.input("g", f64, {1, 1, 2});
  Value* dx = b.apply1(Op::max_pool_grad, {x, g}, {{"kernel", {2}}, {"strides", {2}}});
  Value* loss = b.sum(dx, {});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(is_error_with(
      build_gradients(graph, loss, std::vector<Value*>{g}).status(),
      {"node %" + dx->name(), "(op 'max_pool_grad')", "has no gradient: second-order"}));
}

}  // namespace
}  // namespace kiln
