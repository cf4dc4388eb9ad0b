// Lowering groups of several nodes: inlining of elementwise producers, materialisation of
// reductions, kernel parameters, Kiln's own names, and errors.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "ir/builder.h"
#include "loop/ir_visitor.h"
#include "unit/loop/fused_graphs.h"
#include "unit/loop/lowering_check.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using testing::in;
using testing::layer_norm_chain;
using testing::matches_interpreter;
using testing::random_inputs;
using testing::random_array;

// Counts the statements that cost memory traffic: allocations, loops and stores.
class StmtCounter : public IRVisitor {
 public:
  int allocations = 0, loops = 0, stores = 0;

 protected:
  void visit_allocate(const Allocate& node) override {
    ++allocations;
    IRVisitor::visit_allocate(node);
  }
  void visit_for(const For& node) override {
    ++loops;
    IRVisitor::visit_for(node);
  }
  void visit_store(const Store& node) override {
    ++stores;
    IRVisitor::visit_store(node);
  }
};

StmtCounter count(const Kernel& kernel) {
  StmtCounter counter;
  counter.visit(kernel.body);
  return counter;
}

TEST(LowerGroup, LayerNormChainInlinesElementwiseAndMaterialisesReductions) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Graph graph;
    GraphBuilder b(graph);
    Value* y = layer_norm_chain(b, b.input("x", dtype, {3, 7}), b.input("scale", dtype, {7}),
                                b.input("bias", dtype, {7}));
    graph.set_outputs({y});
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8)) << dtype_name(dtype);
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    // The two means live in local buffers; sub, mul, add, rsqrt and the scalar are inlined.
    const StmtCounter counts = count(lowered->kernel);
    EXPECT_EQ(counts.allocations, 2) << print(lowered->kernel);
    EXPECT_EQ(counts.stores, 3) << print(lowered->kernel);
    EXPECT_EQ(lowered->kernel.params.size(), 4u);
  }
}

// Counts the math-library calls of a kernel.
class MathCallCounter : public IRVisitor {
 public:
  int calls = 0;

 protected:
  void visit_call(const Call& node) override {
    calls += is_math_call(node.intrinsic) ? 1 : 0;
    IRVisitor::visit_call(node);
  }
};

int math_calls(const Kernel& kernel) {
  MathCallCounter counter;
  counter.visit(kernel.body);
  return counter.calls;
}

TEST(LowerGroup, MathCallsReadInSeveralPlacesAreStoredOnce) {
  // layer_norm reads its input three times (mean, variance, output): gelu's erf is stored in
  // a local buffer once per element, not evaluated three times. A sum reads exp(x) once, and
  // a cheap add read three times is still inlined.
  const Graph graph = testing::math_calls_read_thrice_graph();
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(math_calls(lowered->kernel), 2) << print(lowered->kernel);  // one erf, one exp
  EXPECT_EQ(count(lowered->kernel).allocations, 1) << print(lowered->kernel);  // gelu's
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
}

TEST(LowerGroup, ScalarMathCallsAreStoredOnce) {
  // Adam's bias correction: m / (1 - pow(beta, step)) over a parameter's elements. pow is
  // stored once in a one-element local, not called at every element.
  Graph graph;
  GraphBuilder b(graph);
  Value* m = b.input("m", DType::f32, {8, 16});
  Value* correction = b.pow(b.input("beta", DType::f32, {}), b.input("step", DType::f32, {}));
  graph.set_outputs({b.div(m, b.sub(b.scalar(1.0, DType::f32), correction))});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(count(lowered->kernel).allocations, 1) << print(lowered->kernel);
  EXPECT_EQ(math_calls(lowered->kernel), 1) << print(lowered->kernel);
  const std::string text = print(lowered->kernel);
  EXPECT_LT(text.find("pow("), text.find("for (")) << text;  // before the element loop
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
}

TEST(LowerGroup, SoftmaxFromPrimitivesMatchesTheInterpreter) {
  const Graph graph = testing::softmax_from_primitives_graph();
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 4));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const StmtCounter counts = count(lowered->kernel);
  EXPECT_EQ(counts.allocations, 2) << print(lowered->kernel);  // the max and the sum
  EXPECT_EQ(counts.stores, 3) << print(lowered->kernel);
}

TEST(LowerGroup, ValueUsedOutsideTheGroupIsAnOutputParameter) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f64, {2, 3});
  Value* a = b.exp(x);
  Value* y = b.add(a, b.scalar(1, DType::f64));
  b.neg(a);  // a user of `a` outside the group
  graph.set_outputs({y});
  std::vector<Node*> group = {graph.nodes()[0], graph.nodes()[1], graph.nodes()[2]};
  ASSERT_EQ(a->producer(), group[0]);
  Expected<LoweredGroup> lowered = lower_group(graph, group);
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(lowered->inputs, (std::vector<const Value*>{x}));
  EXPECT_EQ(lowered->outputs, (std::vector<const Value*>{a, y}));
  ASSERT_EQ(lowered->kernel.params.size(), 3u);
  EXPECT_EQ(lowered->kernel.params[1].name(), "out0");
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 1, group));
  // y reads a back from its parameter instead of recomputing exp.
  EXPECT_EQ(count(lowered->kernel).stores, 2);
}

TEST(LowerGroup, ConstantTensorsAreInputsAndScalarsAreLiterals) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {2, 3});
  Value* table = b.constant(Array(DType::f32, Shape{3}, {1, 2, 3}));
  Value* y = b.mul(b.add(x, table), b.scalar(2));
  graph.set_outputs({y});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(lowered->inputs, (std::vector<const Value*>{x, table}));
  std::vector<Array> inputs = {Array(DType::f32, Shape{2, 3}, {1, 1, 1, 2, 2, 2}),
                               Array(DType::f32, Shape{3}, {1, 2, 3})};
  Expected<std::vector<std::vector<double>>> out = testing::run_lowered(*lowered, inputs);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ((*out)[0], (std::vector<double>{4, 6, 8, 6, 8, 10}));
}

TEST(LowerGroup, ModelNamesNeverReachTheKernel) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x\"); system(\"rm", DType::f32, {2});
  Value* y = b.sum(b.exp(x), {});
  graph.rename_value(y, "evil_output_name");
  graph.set_outputs({y});
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  const std::string text = print(lowered->kernel);
  EXPECT_EQ(text.find("system"), std::string::npos) << text;
  EXPECT_EQ(text.find("evil"), std::string::npos) << text;
  EXPECT_NE(text.find("in0"), std::string::npos) << text;
}

TEST(LowerGroup, NodesAreLoweredOnlyWhereNeeded) {
  // A multi-output op of which one output is used: only that output is computed.
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f64, {2, 5});
  std::vector<Value*> parts = b.apply(Op::split, {x}, {{"axis", 1}, {"sizes", {2, 3}}});
  Value* y = b.exp(parts[1]);
  graph.set_outputs({y});
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph)));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value());
  EXPECT_EQ(count(lowered->kernel).stores, 1);
}

// The reductions evaluated where a kernel stores into one of its parameters (its outputs),
// by op: what each output element costs to compute.
class ReductionsInOutputStores : public IRVisitor {
 public:
  std::map<ReduceOp, int> count;

 protected:
  void visit_store(const Store& node) override {
    in_output_store_ = node.buffer.scope() == MemoryScope::global;
    IRVisitor::visit_store(node);
    in_output_store_ = false;
  }
  void visit_reduce(const Reduce& node) override {
    if (in_output_store_) ++count[node.op];
    IRVisitor::visit_reduce(node);
  }

 private:
  bool in_output_store_ = false;
};

int count_reductions(const Kernel& kernel) {
  struct Counter : IRVisitor {
    int count = 0;
    void visit_reduce(const Reduce& node) override {
      ++count;
      IRVisitor::visit_reduce(node);
    }
  } counter;
  counter.visit(kernel.body);
  return counter.count;
}

std::map<ReduceOp, int> reductions_in_output_stores(const Kernel& kernel) {
  ReductionsInOutputStores visitor;
  visitor.visit(kernel.body);
  return visitor.count;
}

// max_pool_grad is a scatter: dx zeroed, then each window's argmax found once (bound by a let,
// no buffer of argmaxes per window; the window's maximum and argmax from two local rows, the
// maxima over the window rows and the first row tap holding each) and its dy added there;
// dx's stores hold no max or min. Ties pick the window's first maximal tap, as the
// interpreter does: an image of equal values (every tap ties) and one of few distinct
// values; a NaN tap takes the gradient, the first of several in a window; and a 3-d pool,
// whose leading taps are numbered over two dims.
TEST(LowerGroup, MaxPoolGradScattersEachWindowOnce) {
  Graph graph;
  GraphBuilder b(graph);
  const Attrs attrs = {{"kernel", std::vector<int64_t>{3, 3}},
                       {"strides", std::vector<int64_t>{2, 2}},
                       {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
  Value* x = b.input("x", DType::f32, {2, 3, 9, 8});
  Value* dy = b.input("dy", DType::f32, {2, 3, 5, 4});
  graph.set_outputs({b.apply1(Op::max_pool_grad, {x, dy}, attrs)});
  std::vector<Array> inputs = random_inputs(graph);
  EXPECT_TRUE(matches_interpreter(graph, inputs, 4));
  std::vector<double> few(static_cast<size_t>(x->shape().num_elements()));
  for (size_t i = 0; i < few.size(); ++i) few[i] = static_cast<double>((i * 7) % 3);
  EXPECT_TRUE(matches_interpreter(graph, {Array(DType::f32, x->shape(), few), inputs[1]}, 4));
  EXPECT_TRUE(matches_interpreter(graph, {Array(DType::f32, x->shape()), inputs[1]}, 4));
  std::vector<double> with_nans = few;
  for (size_t i = 0; i < with_nans.size(); i += 5) {
    with_nans[i] = std::numeric_limits<double>::quiet_NaN();
  }
  EXPECT_TRUE(
      matches_interpreter(graph, {Array(DType::f32, x->shape(), with_nans), inputs[1]}, 4));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(count(lowered->kernel).allocations, 2) << print(lowered->kernel);
  const std::map<ReduceOp, int> in_dx = reductions_in_output_stores(lowered->kernel);
  EXPECT_EQ(in_dx.count(ReduceOp::max), 0u) << print(lowered->kernel);
  EXPECT_EQ(in_dx.count(ReduceOp::min), 0u) << print(lowered->kernel);
  EXPECT_NE(print(lowered->kernel).find("let a"), std::string::npos) << print(lowered->kernel);
  // A 1-d pool (no rows to take the maximum over first) finds each window's maximum directly.
  Graph line;
  GraphBuilder l(line);
  Value* lx = l.input("x", DType::f32, {2, 3, 11});
  const Attrs line_attrs = {{"kernel", std::vector<int64_t>{3}},
                            {"strides", std::vector<int64_t>{2}},
                            {"pads", std::vector<int64_t>{1, 1}}};
  line.set_outputs(
      {l.apply1(Op::max_pool_grad, {lx, l.input("dy", DType::f32, {2, 3, 6})}, line_attrs)});
  EXPECT_TRUE(matches_interpreter(line, random_inputs(line), 4));
  Graph cube;
  GraphBuilder c(cube);
  Value* cx = c.input("x", DType::f32, {1, 2, 4, 5, 6});
  const Attrs cube_attrs = {{"kernel", std::vector<int64_t>{2, 3, 2}},
                            {"strides", std::vector<int64_t>{2, 1, 2}},
                            {"pads", std::vector<int64_t>{0, 1, 1, 1, 0, 0}}};
  cube.set_outputs(
      {c.apply1(Op::max_pool_grad, {cx, c.input("dy", DType::f32, {1, 2, 2, 4, 3})}, cube_attrs)});
  std::vector<Array> cube_inputs = random_inputs(cube);
  EXPECT_TRUE(matches_interpreter(cube, cube_inputs, 4));
  std::vector<double> ties(static_cast<size_t>(cx->shape().num_elements()));
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<double>((i * 5) % 2);
  EXPECT_TRUE(matches_interpreter(cube, {Array(DType::f32, cx->shape(), ties), cube_inputs[1]}, 4));
}

// A max_pool over two spatial dims takes the maximum over the rows of each window into a
// local row first; the output's store then reduces over the last dim's taps only. Windows
// that overlap the padding on every side, and a 3-d pool; a pool whose window is 1 wide along
// the last dim keeps the one-step definition.
TEST(LowerGroup, MaxPoolReducesEachWindowsRowsFirst) {
  struct Case {
    std::vector<int64_t> x, kernel, strides, pads;
    bool two_steps;
  };
  const Case cases[] = {
      {{2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1, 1, 1}, true},
      {{1, 2, 5, 7}, {2, 4}, {1, 3}, {1, 2, 0, 3}, true},
      {{1, 2, 4, 5, 6}, {2, 3, 2}, {2, 1, 2}, {0, 1, 1, 1, 0, 0}, true},
      {{1, 2, 5, 7}, {3, 1}, {1, 1}, {}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("x {} kernel {}", Shape(c.x).to_string(), fmt::join(c.kernel, "x")));
    Graph graph;
    GraphBuilder b(graph);
    Value* x = b.input("x", DType::f32, Shape(c.x));
    graph.set_outputs({b.max_pool(x, c.kernel, c.strides, c.pads)});
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 0));
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
    EXPECT_EQ(count(lowered->kernel).allocations, c.two_steps ? 1 : 0) << print(lowered->kernel);
    // Reductions in the output's store: one (the last dim's taps) in two steps, else one per
    // spatial dim wider than 1 (the simplifier drops a reduction over one tap).
    const auto wide =
        std::count_if(c.kernel.begin(), c.kernel.end(), [](int64_t k) { return k > 1; });
    const std::map<ReduceOp, int> in_y = reductions_in_output_stores(lowered->kernel);
    ASSERT_EQ(in_y.count(ReduceOp::max), 1u) << print(lowered->kernel);
    EXPECT_EQ(in_y.at(ReduceOp::max), c.two_steps ? 1 : static_cast<int>(wide))
        << print(lowered->kernel);
  }
}

// spmm with the sparse matrix transposed scatters each non-zero once: no reduction computes
// an output element, which the gather definition would do over every non-zero.
TEST(LowerGroup, TransposedSpmmScattersEachNonZeroOnce) {
  Graph graph;
  GraphBuilder b(graph);
  Value* row_ptr = b.input("row_ptr", DType::i64, {4});
  Value* cols = b.input("cols", DType::i64, {5});
  Value* values = b.input("values", DType::f64, {5});
  Value* dense = b.input("dense", DType::f64, {3, 6});
  graph.set_outputs({b.apply1(Op::spmm, {row_ptr, cols, values, dense},
                              {{"transpose", true}, {"num_cols", int64_t{4}}})});
  // A [3, 4]: rows {0: (1, 3)}, {1: none}, {2: (0, 1, 1)} (column 1 three times, 2 never).
  std::vector<Array> inputs = random_inputs(graph);
  inputs[0] = Array(DType::i64, Shape{4}, {0, 2, 2, 5});
  inputs[1] = Array(DType::i64, Shape{5}, {1, 3, 0, 1, 1});
  EXPECT_TRUE(matches_interpreter(graph, inputs, 1));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_TRUE(reductions_in_output_stores(lowered->kernel).empty()) << print(lowered->kernel);
}

// The extents of a kernel's loops, outermost first in program order.
std::vector<int64_t> loop_extents(const Kernel& kernel) {
  class Collector : public IRVisitor {
   public:
    std::vector<int64_t> extents;

   protected:
    void visit_for(const For& node) override {
      extents.push_back(as_const_int(node.extent).value_or(-1));
      IRVisitor::visit_for(node);
    }
  } collector;
  collector.visit(kernel.body);
  return collector.extents;
}

// Loops over contiguous elements become one loop; a per-channel operand keeps the channel
// loop apart, a transpose keeps its loops.
TEST(LowerGroup, LoopsOverContiguousElementsAreJoined) {
  const auto lowered_extents = [](const std::function<Value*(GraphBuilder&)>& build) {
    Graph graph;
    GraphBuilder b(graph);
    graph.set_outputs({build(b)});
    EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 4));
    Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
    EXPECT_TRUE(lowered.has_value()) << lowered.status().message();
    return lowered ? loop_extents(lowered->kernel) : std::vector<int64_t>{};
  };
  EXPECT_EQ(lowered_extents([](GraphBuilder& b) {
              return b.relu(b.add(b.input("x", DType::f32, {2, 3, 5, 7}),
                                  b.input("y", DType::f32, {2, 3, 5, 7})));
            }),
            (std::vector<int64_t>{210}));
  EXPECT_EQ(lowered_extents([](GraphBuilder& b) {
              return b.mul(b.input("x", DType::f32, {2, 3, 5, 7}),
                           b.input("scale", DType::f32, {1, 3, 1, 1}));
            }),
            (std::vector<int64_t>{2, 3, 35}));
  EXPECT_EQ(lowered_extents([](GraphBuilder& b) {
              return b.transpose(b.input("x", DType::f32, {6, 4}), {1, 0});
            }),
            (std::vector<int64_t>{4, 6}));
}

// Sizes of every local allocation of a kernel.
std::vector<int64_t> allocation_sizes(const Kernel& kernel) {
  class Collector : public IRVisitor {
   public:
    std::vector<int64_t> sizes;

   protected:
    void visit_allocate(const Allocate& node) override {
      sizes.push_back(node.buffer.flat_size());
      IRVisitor::visit_allocate(node);
    }
  } collector;
  collector.visit(kernel.body);
  return collector.sizes;
}

// batch_norm_train then relu: the per-channel mean and variance are computed once into
// buffers of C elements, and the normalised value is inlined into relu (no buffer the size
// of x; inlined, the statistics would be recomputed for every image).
TEST(LowerGroup, BatchNormStatisticsAreComputedOncePerChannel) {
  const Graph graph = testing::batch_norm_relu_graph();
  EXPECT_TRUE(matches_interpreter(graph, random_inputs(graph), 8));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  ASSERT_TRUE(lowered.has_value()) << lowered.status().message();
  EXPECT_EQ(allocation_sizes(lowered->kernel), (std::vector<int64_t>{3, 3})) << print(lowered->kernel);
  const std::map<ReduceOp, int> in_output = reductions_in_output_stores(lowered->kernel);
  EXPECT_TRUE(in_output.empty()) << print(lowered->kernel);
  // The variance sums the squared deviations from the stored mean: x is summed twice per
  // channel (mean, variance; each a sum over images of a sum over the plane), not three times.
  EXPECT_EQ(count_reductions(lowered->kernel), 4) << print(lowered->kernel);
}

TEST(LowerGroup, ErrorsNameTheGroupProblem) {
  Graph graph;
  GraphBuilder b(graph);
  Value* x = b.input("x", DType::f32, {4});
  graph.set_outputs({b.exp(x)});
  std::vector<Node*> nodes(graph.nodes().begin(), graph.nodes().end());
  nodes.push_back(nodes[0]);
  EXPECT_TRUE(::kiln::testing::is_error_with(lower_group(graph, nodes).status(), {"twice"}));
  EXPECT_TRUE(
      ::kiln::testing::is_error_with(lower_group(graph, {}).status(), {"no nodes"}));
}

}  // namespace
}  // namespace kiln::loop
