// Tests the graph verifier (ir/verifier.h): it accepts every graph the public API builds and
// keeps valid through mutation, and rejects a graph without outputs.
//
// The other violations it looks for (a use before definition or a cycle, a foreign input, a
// value defined twice or a name used twice, stale use lists, non-canonical attributes, stored
// types that differ from inference, an undefined graph output) cannot be produced through the
// Graph API, which maintains those invariants itself, so they are not tested here.
#include "ir/verifier.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;

TEST(Verifier, AcceptsABuiltGraphWithMultiOutputConstantAndLossNodes) {
  GraphBuilder b("mixed");
  Value* x = b.input("x", DType::f32, {2, 6});
  Value* labels = b.input("labels", DType::i64, {2});
  std::vector<Value*> halves = b.split(x, 1, {3, 3});
  ASSERT_EQ(halves.size(), 2u);
  Value* weights = b.constant(Array(DType::f32, Shape{3}, {1.0, 0.5, 0.25}));
  Value* logits =
      b.add(b.mul(halves[0], weights), b.transpose(b.reshape(halves[1], {3, 2}), {1, 0}));
  Value* loss = b.cross_entropy(b.gelu(logits, true), labels);
  b.output(loss);
  b.output(halves[1]);
  Expected<Graph> g = b.finish();
  ASSERT_TRUE(g.has_value()) << g.status().message();
  const Status status = verify(*g);
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(Verifier, AcceptsAGraphWhoseOutputsAreItsInputs) {
  Graph g;
  Value* x = g.add_input({DType::f32, Shape{2}}, "x");
  g.set_outputs({x, x});
  const Status status = verify(g);
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(Verifier, AcceptsAGraphAfterReplacingErasingAndReordering) {
  // exp(relu(x)) + relu(x), with relu(x) then replaced by a later abs(x), and relu erased.
  Graph g;
  Value* x = g.add_input({DType::f32, Shape{4}}, "x");
  Expected<Node*> relu = g.add_node(Op::relu, {x});
  ASSERT_TRUE(relu.has_value());
  Expected<Node*> exp = g.add_node(Op::exp, {(*relu)->output()});
  ASSERT_TRUE(exp.has_value());
  Expected<Node*> sum = g.add_node(Op::add, {(*exp)->output(), (*relu)->output()});
  ASSERT_TRUE(sum.has_value());
  Expected<Node*> abs = g.add_node(Op::abs, {x});
  ASSERT_TRUE(abs.has_value());
  g.set_outputs({(*sum)->output()});

  ASSERT_TRUE(g.replace_all_uses((*relu)->output(), (*abs)->output()).is_ok());
  g.erase_node(*relu);
  const Status status = verify(g);
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(Verifier, AcceptsClonedAndMovedGraphs) {
  GraphBuilder b("net");
  Value* x = b.input("x", DType::f32, {3, 4});
  Value* w = b.input("w", DType::f32, {4, 5});
  b.output(b.softmax(b.matmul(x, w)));
  Expected<Graph> built = b.finish();
  ASSERT_TRUE(built.has_value()) << built.status().message();

  Graph copy = built->clone();
  Status status = verify(copy);
  EXPECT_TRUE(status.is_ok()) << status.message();
  Graph moved = std::move(*built);
  status = verify(moved);
  EXPECT_TRUE(status.is_ok()) << status.message();
}

TEST(Verifier, RejectsAGraphWithoutOutputs) {
  Graph g("headless");
  Value* x = g.add_input({DType::f32, Shape{2}}, "x");
  ASSERT_TRUE(g.add_node(Op::relu, {x}).has_value());
  EXPECT_TRUE(is_error_with(verify(g), {"graph 'headless' has no outputs"}));
}

}  // namespace
}  // namespace kiln
