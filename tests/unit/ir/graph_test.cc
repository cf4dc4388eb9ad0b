// Tests the Graph IR container (ir/graph.h): value naming, node creation and its errors, use
// lists through every mutation, topological order, deep copies, lookup, ownership and moves.
#include "ir/graph.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;

TensorType f32(Shape shape) { return {DType::f32, std::move(shape)}; }

// Adds a node the test expects to be valid (a failure is reported, and nullptr returned).
Node* add(Graph& graph, Op op, std::vector<Value*> inputs, const Attrs& attrs = {},
          std::vector<std::string> output_names = {}) {
  Expected<Node*> node = graph.add_node(op, std::move(inputs), attrs, output_names);
  EXPECT_TRUE(node.has_value()) << node.status().message();
  return node ? *node : nullptr;
}

std::vector<Node*> node_list(const Graph& graph) {
  return {graph.nodes().begin(), graph.nodes().end()};
}

bool all_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

TEST(GraphNaming, AddInputKeepsAFreeNameAndRenamesATakenOne) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Value* x1 = g.add_input(f32({2}), "x");
  Value* x2 = g.add_input(f32({3}), "x");
  EXPECT_EQ(x->name(), "x");
  EXPECT_EQ(x1->name(), "x.1");
  EXPECT_EQ(x2->name(), "x.2");
  EXPECT_EQ(g.find_value("x"), x);
  EXPECT_EQ(g.find_value("x.2"), x2);
  EXPECT_EQ(g.inputs(), (std::vector<Value*>{x, x1, x2}));
}

TEST(GraphNaming, UnnamedValuesGetFreshNumbersThatSkipTakenOnes) {
  Graph g;
  Value* taken = g.add_input(f32({2}), "0");
  Value* a = g.add_input(f32({2}));
  Value* b = g.add_input(f32({2}), "");
  Node* relu = add(g, Op::relu, {a});
  const std::string names[] = {a->name(), b->name(), relu->output()->name()};
  for (const std::string& name : names) {
    EXPECT_TRUE(all_digits(name)) << name;
    EXPECT_NE(name, taken->name());
  }
  EXPECT_NE(names[0], names[1]);
  EXPECT_NE(names[0], names[2]);
  EXPECT_NE(names[1], names[2]);
}

TEST(GraphNaming, NodeOutputsTakeRequestedNamesOrFreshOnes) {
  Graph g;
  Value* x = g.add_input(f32({4, 6}), "x");
  Node* split = add(g, Op::split, {x}, {{"axis", 1}, {"sizes", {2, 2, 2}}}, {"left", "x"});
  ASSERT_EQ(split->num_outputs(), 3);
  EXPECT_EQ(split->output(0)->name(), "left");
  EXPECT_EQ(split->output(1)->name(), "x.1");  // "x" is the input's
  EXPECT_TRUE(all_digits(split->output(2)->name())) << split->output(2)->name();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(split->output(i)->producer(), split);
    EXPECT_EQ(split->output(i)->output_index(), i);
    EXPECT_EQ(split->output(i)->type(), f32({4, 2}));
  }
}

TEST(GraphAddNode, InfersOutputTypesAndCanonicalizesAttributes) {
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  Node* t = add(g, Op::transpose, {x}, {{"perm", {1, 0}}});
  EXPECT_EQ(t->output()->type(), f32({3, 2}));
  Node* gelu = add(g, Op::gelu, {t->output()});
  // The schema's default is filled in.
  ASSERT_NE(gelu->attrs().find("approximate"), nullptr);
  EXPECT_EQ(gelu->attrs().get_string("approximate"), "none");
}

TEST(GraphAddNode, ErrorsNameTheOpAndLeaveTheGraphUnchanged) {
  Graph g;
  Value* a = g.add_input(f32({2}), "a");
  Value* b = g.add_input(f32({3}), "b");

  Expected<Node*> mismatch = g.add_node(Op::add, {a, b});
  ASSERT_FALSE(mismatch.has_value());
  EXPECT_TRUE(is_error_with(mismatch.status(), {"op 'add'", "f32[2]", "f32[3]"}));

  Expected<Node*> arity = g.add_node(Op::exp, {a, b});
  ASSERT_FALSE(arity.has_value());
  EXPECT_TRUE(is_error_with(arity.status(), {"op 'exp'", "takes 1 inputs, got 2"}));

  Expected<Node*> bad_attr = g.add_node(Op::transpose, {a}, {{"perm", 3}});
  ASSERT_FALSE(bad_attr.has_value());
  EXPECT_TRUE(is_error_with(bad_attr.status(), {"op 'transpose'", "perm"}));

  EXPECT_EQ(g.num_nodes(), 0);
  EXPECT_TRUE(a->users().empty());
  EXPECT_TRUE(b->users().empty());
}

TEST(GraphAddNode, RejectsAnInputOfAnotherGraphEvenWithTheSameName) {
  Graph mine("mine");
  Graph other("other");
  Value* x = mine.add_input(f32({2}), "x");
  Value* foreign = other.add_input(f32({2}), "x");

  Expected<Node*> node = mine.add_node(Op::add, {x, foreign});
  ASSERT_FALSE(node.has_value());
  EXPECT_TRUE(is_error_with(node.status(), {"op 'add'", "input 1", "graph 'mine'"}));

  Expected<Node*> null_input = mine.add_node(Op::relu, {nullptr});
  ASSERT_FALSE(null_input.has_value());
  EXPECT_TRUE(is_error_with(null_input.status(), {"op 'relu'", "input 0"}));

  EXPECT_EQ(mine.num_nodes(), 0);
  EXPECT_TRUE(foreign->users().empty());
}

TEST(GraphUses, RecordEveryUseInTheOrderMade) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* square = add(g, Op::mul, {x, x});
  Node* relu = add(g, Op::relu, {x});
  EXPECT_EQ(x->users(), (std::vector<Node*>{square, square, relu}));
  EXPECT_TRUE(square->output()->users().empty());
  EXPECT_EQ(node_list(g), (std::vector<Node*>{square, relu}));
}

TEST(GraphUses, ReplaceAllUsesMovesNodeInputsAndGraphOutputs) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Value* y = g.add_input(f32({2}), "y");
  Node* square = add(g, Op::mul, {x, x});
  Node* relu = add(g, Op::relu, {x});
  g.set_outputs({x, relu->output()});

  ASSERT_TRUE(g.replace_all_uses(x, y).is_ok());
  EXPECT_EQ(square->inputs(), (std::vector<Value*>{y, y}));
  EXPECT_EQ(relu->inputs(), (std::vector<Value*>{y}));
  EXPECT_TRUE(x->users().empty());
  EXPECT_EQ(y->users(), (std::vector<Node*>{square, square, relu}));
  EXPECT_EQ(g.outputs(), (std::vector<Value*>{y, relu->output()}));
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphUses, ReplaceAllUsesRejectsADifferentTypeAndChangesNothing) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Value* wider = g.add_input(f32({3}), "wider");
  Value* f64 = g.add_input({DType::f64, Shape{2}}, "double");
  Node* relu = add(g, Op::relu, {x});

  EXPECT_TRUE(is_error_with(g.replace_all_uses(x, wider), {"%x", "f32[2]", "%wider", "f32[3]"}));
  EXPECT_TRUE(is_error_with(g.replace_all_uses(x, f64), {"%x", "f32[2]", "%double", "f64[2]"}));
  EXPECT_EQ(relu->input(0), x);
  EXPECT_EQ(x->users(), (std::vector<Node*>{relu}));
  EXPECT_TRUE(wider->users().empty());
}

// %a = relu(%x); %b = neg(%a); %c = exp(%x); %d = abs(%x); %e = sin(%d); outputs %b, %c:
// %e is a later value that can replace %a.
struct LateReplacement {
  Graph g;
  Node *a, *b, *c, *d, *e;
};

LateReplacement late_replacement() {
  LateReplacement r;
  Value* x = r.g.add_input(f32({2}), "x");
  r.a = add(r.g, Op::relu, {x});
  r.b = add(r.g, Op::neg, {r.a->output()});
  r.c = add(r.g, Op::exp, {x});
  r.d = add(r.g, Op::abs, {x});
  r.e = add(r.g, Op::sin, {r.d->output()});
  r.g.set_outputs({r.b->output(), r.c->output()});
  return r;
}

TEST(GraphUses, ReplaceAllUsesMovesAUserAfterALaterReplacement) {
  // Replacing %a with %e makes %b read a value defined after it: %b alone moves, to just
  // after %e.
  auto [g, a, b, c, d, e] = late_replacement();
  ASSERT_TRUE(g.replace_all_uses(a->output(), e->output()).is_ok());
  EXPECT_EQ(node_list(g), (std::vector<Node*>{a, c, d, e, b}));
  EXPECT_EQ(b->input(0), e->output());
  EXPECT_TRUE(a->output()->users().empty());
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphUses, MoveComputationAfterPutsAReplacementWhereItsOriginalRan) {
  // %d and %e, appended as a replacement for %a, move to just after %a, before %b and %c,
  // which keep their order.
  auto [g, a, b, c, d, e] = late_replacement();
  g.move_computation_after(e->output(), a);
  EXPECT_EQ(node_list(g), (std::vector<Node*>{a, d, e, b, c}));
  ASSERT_TRUE(g.replace_all_uses(a->output(), e->output()).is_ok());
  EXPECT_EQ(node_list(g), (std::vector<Node*>{a, d, e, b, c}));  // already in order: no sort
  g.move_computation_after(c->output(), nullptr);  // to the front
  EXPECT_EQ(node_list(g), (std::vector<Node*>{c, a, d, e, b}));
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphUses, ReplaceAllUsesRefusesToCloseACycleAndChangesNothing) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* a = add(g, Op::relu, {x}, {}, {"a"});
  Node* b = add(g, Op::neg, {a->output()}, {}, {"b"});
  g.set_outputs({b->output()});
  const std::string before = print_graph(g);

  // %a's node uses %x, so %x cannot become %a; nor %b, which is computed from %a.
  EXPECT_TRUE(is_error_with(g.replace_all_uses(x, a->output()), {"%x", "%a", "relu"}));
  EXPECT_TRUE(is_error_with(g.replace_all_uses(x, b->output()), {"%x", "%b", "%a", "relu"}));

  EXPECT_EQ(print_graph(g), before);
  EXPECT_EQ(x->users(), (std::vector<Node*>{a}));
  EXPECT_EQ(a->output()->users(), (std::vector<Node*>{b}));
  EXPECT_TRUE(b->output()->users().empty());
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphUses, ReplaceAllUsesOfAValueWithItselfChangesNothing) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* relu = add(g, Op::relu, {x});
  ASSERT_TRUE(g.replace_all_uses(x, x).is_ok());
  EXPECT_EQ(x->users(), (std::vector<Node*>{relu}));
}

TEST(GraphErase, RemovesTheNodeItsUsesAndItsOutputNames) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* square = add(g, Op::mul, {x, x}, {}, {"square"});
  Node* relu = add(g, Op::relu, {x}, {}, {"r"});
  g.set_outputs({relu->output()});

  g.erase_node(square);
  EXPECT_EQ(node_list(g), (std::vector<Node*>{relu}));
  EXPECT_EQ(x->users(), (std::vector<Node*>{relu}));
  EXPECT_EQ(g.find_value("square"), nullptr);
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphErase, ReplacingThenErasingRewritesAGraph) {
  // A typical rewrite: neg(neg(x)) -> x.
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* inner = add(g, Op::neg, {x});
  Node* outer = add(g, Op::neg, {inner->output()});
  Node* user = add(g, Op::exp, {outer->output()});
  g.set_outputs({user->output()});

  ASSERT_TRUE(g.replace_all_uses(outer->output(), x).is_ok());
  g.erase_node(outer);
  g.erase_node(inner);
  EXPECT_EQ(node_list(g), (std::vector<Node*>{user}));
  EXPECT_EQ(x->users(), (std::vector<Node*>{user}));
  EXPECT_TRUE(verify(g).is_ok()) << verify(g).message();
}

TEST(GraphEraseDeathTest, ErasingANodeWhoseOutputIsStillNeededIsAnInternalError) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* used = add(g, Op::relu, {x}, {}, {"used"});
  add(g, Op::exp, {used->output()});
  Node* returned = add(g, Op::neg, {x}, {}, {"returned"});
  g.set_outputs({returned->output()});
  EXPECT_DEATH(g.erase_node(used), "internal compiler error.*%used is still used");
  EXPECT_DEATH(g.erase_node(returned), "internal compiler error.*%returned is a graph output");
}

TEST(GraphSort, KeepsAnOrderThatIsAlreadyTopological) {
  // Independent chains interleaved in creation order: any interleaving is valid, so the sort
  // must keep this one rather than group the chains.
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Value* y = g.add_input(f32({2}), "y");
  Node* x1 = add(g, Op::relu, {x});
  Node* y1 = add(g, Op::relu, {y});
  Node* x2 = add(g, Op::neg, {x1->output()});
  Node* y2 = add(g, Op::neg, {y1->output()});
  Node* joined = add(g, Op::add, {y2->output(), x2->output()});
  g.set_outputs({joined->output()});
  const std::vector<Node*> before = node_list(g);

  ASSERT_TRUE(g.sort_topologically().is_ok());
  EXPECT_EQ(node_list(g), before);
}

TEST(GraphClone, IsDeepAndPrintsIdentically) {
  Graph g("original");
  Value* x = g.add_input(f32({2, 4}), "x");
  Value* unnamed = g.add_input(f32({2, 4}));
  Node* sum = add(g, Op::add, {x, unnamed});
  Node* split = add(g, Op::split, {sum->output()}, {{"axis", 1}, {"sizes", {1, 3}}}, {"lo", "hi"});
  Node* constant =
      add(g, Op::constant, {}, {{"value", Array(DType::f32, Shape{1, 3}, {0.5, -2.0, 3.25})}});
  Node* scaled = add(g, Op::mul, {split->output(1), constant->output()});
  Node* gelu = add(g, Op::gelu, {scaled->output()}, {{"approximate", "tanh"}}, {"act"});
  g.set_outputs({gelu->output(), split->output(0)});
  const std::string printed = print_graph(g);

  Graph copy = g.clone();
  EXPECT_EQ(print_graph(copy), printed);
  EXPECT_TRUE(verify(copy).is_ok()) << verify(copy).message();
  ASSERT_EQ(copy.num_nodes(), g.num_nodes());
  for (int i = 0; i < copy.num_nodes(); ++i) {
    const Node* cloned = copy.nodes()[static_cast<size_t>(i)];
    EXPECT_NE(cloned, g.nodes()[static_cast<size_t>(i)]);
    for (const Value* v : cloned->outputs()) {
      EXPECT_TRUE(copy.owns(v));
      EXPECT_FALSE(g.owns(v)) << v->name();
    }
  }
  for (const Value* v : copy.inputs()) EXPECT_FALSE(g.owns(v)) << v->name();

  // Changing the copy leaves the original as it was.
  Node* extra = add(copy, Op::exp, {copy.find_value("act")});
  copy.set_outputs({extra->output()});
  ASSERT_TRUE(copy.replace_all_uses(copy.find_value("x"), copy.inputs()[1]).is_ok());
  EXPECT_EQ(print_graph(g), printed);
  EXPECT_TRUE(g.find_value("act")->users().empty());
  EXPECT_EQ(x->users(), (std::vector<Node*>{sum}));
}

TEST(GraphLookup, FindValueFindsInputsAndNodeOutputsByName) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Node* relu = add(g, Op::relu, {x}, {}, {"r"});
  EXPECT_EQ(g.find_value("x"), x);
  EXPECT_EQ(g.find_value("r"), relu->output());
  EXPECT_EQ(g.find_value("missing"), nullptr);
  EXPECT_EQ(g.find_value(""), nullptr);
}

TEST(GraphLookup, OwnsOnlyItsOwnValues) {
  Graph g;
  Graph other;
  Value* x = g.add_input(f32({2}), "x");
  Value* namesake = other.add_input(f32({2}), "x");
  Node* relu = add(g, Op::relu, {x});
  EXPECT_TRUE(g.owns(x));
  EXPECT_TRUE(g.owns(relu->output()));
  EXPECT_FALSE(g.owns(namesake));
  EXPECT_FALSE(other.owns(x));
  EXPECT_FALSE(g.owns(nullptr));
}

TEST(GraphMove, KeepsValuesNodesAndNames) {
  Graph g("moved");
  Value* x = g.add_input(f32({2}), "x");
  Node* relu = add(g, Op::relu, {x});
  g.set_outputs({relu->output()});
  const std::string printed = print_graph(g);

  Graph constructed(std::move(g));
  EXPECT_EQ(constructed.name(), "moved");
  EXPECT_EQ(print_graph(constructed), printed);
  EXPECT_TRUE(constructed.owns(x));
  EXPECT_EQ(constructed.find_value("x"), x);
  EXPECT_EQ(node_list(constructed), (std::vector<Node*>{relu}));

  Graph assigned("other");
  assigned.add_input(f32({3}), "y");
  assigned = std::move(constructed);
  EXPECT_EQ(assigned.name(), "moved");
  EXPECT_EQ(print_graph(assigned), printed);
  EXPECT_EQ(assigned.find_value("y"), nullptr);
  // The moved graph goes on working with the same values.
  Node* exp = add(assigned, Op::exp, {relu->output()});
  EXPECT_EQ(relu->output()->users(), (std::vector<Node*>{exp}));
  assigned.set_outputs({exp->output()});
  EXPECT_TRUE(verify(assigned).is_ok()) << verify(assigned).message();
}

}  // namespace
}  // namespace kiln
