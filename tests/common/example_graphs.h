// Small valid graphs for the IR tests: at least one per op of the registry, with the op's
// attributes set to non-default values, and graphs for the corners of the text form (quoted
// names, multi-output nodes, inputs returned as outputs, scalars, zero-size dims, special
// floats). tests/unit/ir/round_trip_test.cc round-trips each one and fails when an op or one of
// its attributes has no example; tests/fuzz/parser_fuzz_test.cc mutates their printed text.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "ir/graph.h"

namespace kiln::testing {

struct ExampleGraph {
  std::string name;      // unique; letters, digits and '_' (it names a gtest case)
  std::optional<Op> op;  // the op the example is for; none for a text-form corner case
  std::function<Expected<Graph>()> build;
};

// How gtest shows an example (as a test parameter).
inline void PrintTo(const ExampleGraph& example, std::ostream* os) { *os << example.name; }

namespace example_detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An example for `op`, built with a GraphBuilder; `variant` says what it covers when an op has
// several examples.
struct OpExample {
  Op op;
  std::string variant;
  std::function<void(GraphBuilder&)> build;  // adds inputs, nodes and outputs
};

inline ExampleGraph to_example_graph(OpExample example) {
  std::string name(op_def(example.op).name);
  if (!example.variant.empty()) name += "_" + example.variant;
  return {name, example.op, [name, build = std::move(example.build)]() -> Expected<Graph> {
            GraphBuilder b(name);
            build(b);
            return b.finish();
          }};
}

// An op without attributes applied to fresh inputs of the given types, named after the op's
// documented inputs.
struct PlainOpCase {
  Op op;
  std::vector<TensorType> inputs;
};

inline OpExample plain_op_example(const PlainOpCase& c) {
  return {c.op, "", [c](GraphBuilder& b) {
            const OpDef& def = op_def(c.op);
            std::vector<Value*> inputs;
            for (size_t i = 0; i < c.inputs.size(); ++i) {
              inputs.push_back(b.input(def.input_names[i], c.inputs[i].dtype, c.inputs[i].shape));
            }
            b.output(b.apply1(c.op, inputs));
          }};
}

inline std::vector<OpExample> attributeless_examples() {
  using D = DType;
  const PlainOpCase cases[] = {
      {Op::neg, {{D::i32, {2, 3}}}},
      {Op::abs, {{D::f64, {4}}}},
      {Op::exp, {{D::f32, {2, 2}}}},
      {Op::log, {{D::f16, {3}}}},
      {Op::sqrt, {{D::bf16, {3}}}},
      {Op::rsqrt, {{D::f32, {}}}},
      {Op::reciprocal, {{D::f64, {0, 2}}}},
      {Op::tanh, {{D::f32, {1, 2, 3}}}},
      {Op::sigmoid, {{D::f16, {2}}}},
      {Op::relu, {{D::i64, {5}}}},
      {Op::erf, {{D::f32, {3}}}},
      {Op::sin, {{D::f64, {2}}}},
      {Op::cos, {{D::f32, {2}}}},
      {Op::floor, {{D::bf16, {2}}}},
      {Op::ceil, {{D::f64, {2}}}},
      {Op::round, {{D::f32, {3}}}},
      {Op::sign, {{D::i32, {3}}}},
      {Op::logical_not, {{D::boolean, {4}}}},
      {Op::identity, {{D::i64, {}}}},
      {Op::add, {{D::f32, {2, 3}}, {D::f32, {3}}}},
      {Op::sub, {{D::i32, {4}}, {D::i32, {}}}},
      {Op::mul, {{D::f16, {2, 1}}, {D::f16, {1, 3}}}},
      {Op::div, {{D::i64, {3}}, {D::i64, {3}}}},
      {Op::pow, {{D::f64, {2}}, {D::f64, {2}}}},
      {Op::max, {{D::bf16, {2}}, {D::bf16, {2}}}},
      {Op::min, {{D::i32, {2}}, {D::i32, {1}}}},
      {Op::equal, {{D::f32, {2}}, {D::f32, {2}}}},
      {Op::less, {{D::i32, {3}}, {D::i32, {3}}}},
      {Op::less_equal, {{D::f64, {}}, {D::f64, {2}}}},
      {Op::greater, {{D::f16, {2}}, {D::f16, {2}}}},
      {Op::greater_equal, {{D::i64, {2}}, {D::i64, {2}}}},
      {Op::logical_and, {{D::boolean, {2, 2}}, {D::boolean, {2}}}},
      {Op::logical_or, {{D::boolean, {2}}, {D::boolean, {2}}}},
      {Op::logical_xor, {{D::boolean, {}}, {D::boolean, {3}}}},
      {Op::where, {{D::boolean, {2, 3}}, {D::f32, {3}}, {D::f32, {2, 1}}}},
      {Op::spmm, {{D::i32, {4}}, {D::i64, {5}}, {D::f32, {5}}, {D::f32, {6, 2}}}},
  };
  std::vector<OpExample> examples;
  for (const PlainOpCase& c : cases) examples.push_back(plain_op_example(c));
  return examples;
}

// Ops with attributes, each set to a non-default value in at least one example.
inline std::vector<OpExample> attribute_examples() {
  using D = DType;
  return {
      // Unary.
      {Op::gelu, "",
       [](GraphBuilder& b) {
         b.output(b.gelu(b.input("x", D::f32, {4}), /*tanh_approximation=*/true));
       }},
      {Op::cast, "to_bf16",
       [](GraphBuilder& b) {
         b.output(b.cast(b.input("x", D::f32, {2, 3}), D::bf16));
       }},
      {Op::cast, "to_bool",
       [](GraphBuilder& b) { b.output(b.cast(b.input("x", D::i64, {}), D::boolean)); }},
      // Binary.
      {Op::mod, "",
       [](GraphBuilder& b) {
         Value* a = b.input("a", D::i64, {4});
         b.output(b.apply1(Op::mod, {a, b.input("b", D::i64, {4})}, {{"fmod", true}}));
       }},
      // Reductions.
      {Op::reduce_sum, "",
       [](GraphBuilder& b) {
         b.output(b.sum(b.input("x", D::f32, {2, 3, 4}), {0, -1}, /*keepdims=*/true));
       }},
      {Op::reduce_mean, "",
       [](GraphBuilder& b) {
         b.output(b.mean(b.input("x", D::f64, {3, 4}), {1}, /*keepdims=*/true));
       }},
      {Op::reduce_max, "",
       [](GraphBuilder& b) {
         b.output(b.reduce_max(b.input("x", D::f32, {2, 3}), {-1}, /*keepdims=*/true));
       }},
      {Op::reduce_min, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::reduce_min, {b.input("x", D::i32, {3, 2})},
                           {{"axes", {0}}, {"keepdims", true}}));
       }},
      {Op::reduce_prod, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::reduce_prod, {b.input("x", D::f16, {2, 2})},
                           {{"axes", {1, 0}}, {"keepdims", true}}));
       }},
      {Op::argmax, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::argmax, {b.input("x", D::f32, {3, 4})},
                           {{"axis", 1}, {"keepdims", true}, {"select_last_index", true}}));
       }},
      {Op::argmin, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::argmin, {b.input("x", D::i64, {3, 4})},
                           {{"axis", -1}, {"keepdims", true}, {"select_last_index", true}}));
       }},
      // Constants: every dtype, with values whose text is easy to get wrong.
      {Op::constant, "f32_special_values",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(
             D::f32, {2, 4}, {0.1, 1e-30, kInf, -kInf, kNaN, -0.0, 3.4028234663852886e38, 1e-45})));
       }},
      {Op::constant, "f64_extremes",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(
             D::f64, {5}, {5e-324, 1.7976931348623157e308, -2.2250738585072014e-308, 0.1, 1e21})));
       }},
      {Op::constant, "f16",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(D::f16, {6}, {0.1, 65504, 6e-8, -kInf, kNaN, 70000})));
       }},
      {Op::constant, "bf16",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(D::bf16, {2, 2}, {0.1, 3e38, -1.5, 1e-40})));
       }},
      {Op::constant, "bool",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(D::boolean, {2, 2}, {1, 0, 0, 1})));
       }},
      {Op::constant, "i64",
       [](GraphBuilder& b) {
         b.output(
             b.constant(Array(D::i64, {4}, {-9223372036854775808.0, 9007199254740992, -1, 0})));
       }},
      {Op::constant, "i32",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(D::i32, {3}, {2147483647, -2147483648.0, 7})));
       }},
      {Op::constant, "scalar", [](GraphBuilder& b) { b.output(b.scalar(2.5)); }},
      {Op::constant, "empty",
       [](GraphBuilder& b) {
         b.output(b.constant(Array(D::f32, {0, 3}, {})));
       }},
      // Layout.
      {Op::reshape, "",
       [](GraphBuilder& b) {
         b.output(b.reshape(b.input("x", D::f32, {2, 3}), {3, -1}));
       }},
      {Op::transpose, "",
       [](GraphBuilder& b) {
         b.output(b.transpose(b.input("x", D::i32, {2, 3, 4}), {1, 0, 2}));
       }},
      {Op::broadcast_to, "",
       [](GraphBuilder& b) {
         b.output(b.broadcast_to(b.input("x", D::boolean, {3}), {2, 3}));
       }},
      {Op::slice, "",
       [](GraphBuilder& b) {
         b.output(b.slice(b.input("x", D::f32, {4, 5}), {1, 4}, {3, 0}, {0, -1}, {1, -2}));
       }},
      {Op::concat, "",
       [](GraphBuilder& b) {
         b.output(b.concat({b.input("a", D::f32, {2, 1}), b.input("b", D::f32, {2, 3}),
                            b.input("c", D::f32, {2, 0})},
                           1));
       }},
      {Op::split, "",
       [](GraphBuilder& b) {
         for (Value* part : b.split(b.input("x", D::f32, {2, 6}), 1, {1, 2, 0, 3})) {
           b.output(part);
         }
       }},
      {Op::pad, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::pad, {b.input("x", D::f32, {2, 3})},
                           {{"pads", {1, 0, -1, 2}}, {"value", 0.5}}));
       }},
      {Op::pad, "negative_infinity",
       [](GraphBuilder& b) {
         b.output(
             b.apply1(Op::pad, {b.input("x", D::f64, {2})}, {{"pads", {1, 1}}, {"value", -kInf}}));
       }},
      {Op::gather, "",
       [](GraphBuilder& b) {
         b.output(b.gather(b.input("data", D::f32, {4, 3}), b.input("indices", D::i32, {2, 2}), 1));
       }},
      {Op::scatter_add, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::scatter_add,
                           {b.input("data", D::f32, {4, 3}), b.input("indices", D::i64, {2}),
                            b.input("updates", D::f32, {4, 2})},
                           {{"axis", 1}}));
       }},
      {Op::one_hot, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::one_hot, {b.input("indices", D::i64, {3})},
                           {{"depth", 4},
                            {"axis", 0},
                            {"dtype", D::f64},
                            {"on_value", 1e-30},
                            {"off_value", -0.0}}));
       }},
      {Op::iota, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::iota, {}, {{"shape", {2, 3}}, {"axis", 1}, {"dtype", D::i32}}));
       }},
      {Op::fill, "",
       [](GraphBuilder& b) {
         b.output(b.fill({2, 2}, 0.1, D::f16));
       }},
      {Op::fill, "nan", [](GraphBuilder& b) { b.output(b.fill({3}, kNaN, D::f32)); }},
      {Op::fill, "negative_zero", [](GraphBuilder& b) { b.output(b.fill({}, -0.0, D::f64)); }},
      {Op::all_reduce, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::all_reduce, {b.input("x", D::f32, {2, 3})},
                           {{"reduction", "mean"}}));
       }},
      {Op::broadcast, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::broadcast, {b.input("x", D::i64, {4})}, {{"root", 2}}));
       }},
      {Op::fill, "infinity", [](GraphBuilder& b) { b.output(b.fill({1}, kInf, D::bf16)); }},
      // Contractions: conv over 2 spatial dims, 4 channels in 2 groups, 6 output channels.
      {Op::matmul, "",
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", D::f32, {2, 4, 3}), b.input("b", D::f32, {5, 4}),
                           /*transpose_a=*/true, /*transpose_b=*/true));
       }},
      {Op::conv, "",
       [](GraphBuilder& b) {
         b.output(b.conv(b.input("x", D::f32, {1, 4, 5, 5}), b.input("w", D::f32, {6, 2, 3, 3}),
                         /*strides=*/{2, 1}, /*pads=*/{1, 0, 1, 2}, /*dilations=*/{1, 2},
                         /*groups=*/2));
       }},
      {Op::conv_grad_data, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(
             Op::conv_grad_data,
             {b.input("grad_out", D::f32, {1, 6, 3, 3}), b.input("w", D::f32, {6, 2, 3, 3})},
             {{"strides", {2, 1}},
              {"pads", {1, 0, 1, 2}},
              {"dilations", {1, 2}},
              {"groups", 2},
              {"input_shape", {1, 4, 5, 5}}}));
       }},
      {Op::conv_grad_weight, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(
             Op::conv_grad_weight,
             {b.input("x", D::f32, {1, 4, 5, 5}), b.input("grad_out", D::f32, {1, 6, 3, 3})},
             {{"strides", {2, 1}},
              {"pads", {1, 0, 1, 2}},
              {"dilations", {1, 2}},
              {"groups", 2},
              {"weight_shape", {6, 2, 3, 3}}}));
       }},
      // Images [N, H, W, C], with a bias and the relu.
      {Op::conv_channels_last, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::conv_channels_last,
                           {b.input("x", D::f32, {1, 5, 5, 4}), b.input("w", D::f32, {6, 2, 3, 3}),
                            b.input("bias", D::f32, {6})},
                           {{"strides", {2, 1}},
                            {"pads", {1, 0, 1, 2}},
                            {"dilations", {1, 2}},
                            {"groups", 2},
                            {"relu", true}}));
       }},
      // A 3x3 kernel at stride 1 computed by Winograd's algorithm.
      {Op::conv_channels_last, "winograd",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::conv_channels_last,
                           {b.input("x", D::f32, {1, 6, 6, 4}), b.input("w", D::f32, {8, 4, 3, 3})},
                           {{"pads", {1, 1, 1, 1}}, {"winograd", true}}));
       }},
      // A^T [K = 6, M = 3] times dense [3, 2].
      {Op::spmm, "transposed",
       [](GraphBuilder& b) {
         b.output(b.spmm(b.input("row_ptr", D::i32, {4}), b.input("col_indices", D::i64, {5}),
                         b.input("values", D::f32, {5}), b.input("dense", D::f32, {3, 2}),
                         /*transpose=*/true, /*num_cols=*/6));
       }},
      // Pooling: a [3, 2] window with strides [2, 1] over a padded 5x5 input gives 3x5.
      {Op::max_pool, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::max_pool, {b.input("x", D::f32, {1, 2, 5, 5})},
                           {{"kernel", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}}));
       }},
      {Op::avg_pool, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::avg_pool, {b.input("x", D::f64, {1, 2, 5, 5})},
                           {{"kernel", {3, 2}},
                            {"strides", {2, 1}},
                            {"pads", {1, 0, 1, 1}},
                            {"count_include_pad", true}}));
       }},
      {Op::max_pool_grad, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(
             Op::max_pool_grad,
             {b.input("x", D::f32, {1, 2, 5, 5}), b.input("grad_out", D::f32, {1, 2, 3, 5})},
             {{"kernel", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}}));
       }},
      {Op::avg_pool_grad, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::avg_pool_grad, {b.input("grad_out", D::f32, {1, 2, 3, 5})},
                           {{"kernel", {3, 2}},
                            {"strides", {2, 1}},
                            {"pads", {1, 0, 1, 1}},
                            {"count_include_pad", true},
                            {"input_shape", {1, 2, 5, 5}}}));
       }},
      {Op::max_pool, "one_spatial_dim",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::max_pool, {b.input("x", D::bf16, {2, 3, 8})}, {{"kernel", {4}}}));
       }},
      // Composites.
      {Op::softmax, "",
       [](GraphBuilder& b) {
         b.output(b.softmax(b.input("x", D::f32, {2, 3}), 0));
       }},
      {Op::log_softmax, "",
       [](GraphBuilder& b) {
         b.output(b.log_softmax(b.input("x", D::f64, {2, 3, 4}), 1));
       }},
      {Op::layer_norm, "",
       [](GraphBuilder& b) {
         b.output(b.layer_norm(b.input("x", D::f32, {2, 3, 4}), b.input("scale", D::f32, {3, 4}),
                               b.input("bias", D::f32, {3, 4}), 1, 1e-3));
       }},
      {Op::batch_norm_train, "",
       [](GraphBuilder& b) {
         for (Value* v : b.apply(Op::batch_norm_train,
                                 {b.input("x", D::f32, {4, 3, 2}), b.input("scale", D::f32, {3}),
                                  b.input("bias", D::f32, {3})},
                                 {{"epsilon", 0.01}})) {
           b.output(v);
         }
       }},
      {Op::batch_norm_infer, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::batch_norm_infer,
                           {b.input("x", D::f64, {2, 3}), b.input("scale", D::f64, {3}),
                            b.input("bias", D::f64, {3}), b.input("mean", D::f64, {3}),
                            b.input("var", D::f64, {3})},
                           {{"epsilon", 0.0}}));
       }},
      {Op::dropout, "",
       [](GraphBuilder& b) {
         b.output(b.dropout(b.input("x", D::f16, {2, 3}), 0.1, 42, 7));
       }},
      {Op::dropout, "seed_input",
       [](GraphBuilder& b) {
         b.output(b.dropout(b.input("x", D::f32, {4, 5}), 0.5, b.input("seed", D::i64, {}), 3));
       }},
      {Op::cross_entropy, "",
       [](GraphBuilder& b) {
         b.output(b.cross_entropy(b.input("logits", D::f32, {4, 5}), b.input("labels", D::i64, {4}),
                                  "sum"));
       }},
      {Op::binary_cross_entropy, "",
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::binary_cross_entropy,
                           {b.input("logits", D::f32, {3}), b.input("targets", D::f32, {3})},
                           {{"reduction", "none"}}));
       }},
      {Op::nll_loss, "",
       [](GraphBuilder& b) {
         b.output(
             b.apply1(Op::nll_loss,
                      {b.input("log_probs", D::f64, {2, 3, 4}), b.input("labels", D::i32, {2, 3})},
                      {{"reduction", "none"}}));
       }},
  };
}

// Builds a graph node by node through Graph::add_node, which (unlike GraphBuilder) names the
// outputs; the first error is kept and returned by finish().
class NamedGraph {
 public:
  explicit NamedGraph(std::string name) : graph_(std::move(name)) {}

  Value* input(std::string_view name, TensorType type) {
    return graph_.add_input(std::move(type), name);
  }
  std::vector<Value*> node(Op op, std::vector<Value*> inputs, std::vector<std::string> names,
                           const Attrs& attrs = {}) {
    if (!status_.is_ok()) return std::vector<Value*>(names.size(), nullptr);
    Expected<Node*> node = graph_.add_node(op, std::move(inputs), attrs, names);
    if (!node) {
      status_ = node.status();
      return std::vector<Value*>(names.size(), nullptr);
    }
    return (*node)->outputs();
  }
  Expected<Graph> finish(std::vector<Value*> outputs) {
    if (!status_.is_ok()) return status_;
    graph_.set_outputs(std::move(outputs));
    return std::move(graph_);
  }

 private:
  Graph graph_;
  Status status_;
};

inline std::vector<ExampleGraph> text_form_examples() {
  using D = DType;
  return {
      {"quoted_names", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("encoder");
         Value* x = g.input("encoder/layer.0:out", {D::f32, {2, 3}});
         Value* y = g.input("x y", {D::f32, {3}});
         Value* sum = g.node(Op::add, {x, y}, {"sum \"quoted\" \\ back"})[0];
         Value* relu = g.node(Op::relu, {sum}, {"na\xC3\xAFve\ttab\nline"})[0];
         Value* neg = g.node(Op::neg, {relu}, {"-1"})[0];
         return g.finish({neg, relu});
       }},
      {"names_that_look_like_keywords_and_numbers", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("return");
         Value* a = g.input("graph", {D::f32, {2}});
         Value* b = g.input("1.5", {D::f32, {2}});
         Value* sum = g.node(Op::add, {a, b}, {"return"})[0];
         Value* inf = g.node(Op::neg, {sum}, {"inf"})[0];
         Value* nan = g.node(Op::abs, {inf}, {"nan"})[0];
         return g.finish({nan, g.node(Op::exp, {nan}, {"f32"})[0]});
       }},
      {"quoted_graph_name", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("my model/v2");
         return g.finish({g.input("x", {D::i32, {1}})});
       }},
      {"empty_graph_name", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("");
         return g.finish({g.input("x", {D::i32, {1}})});
       }},
      {"multi_output_nodes", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("parts");
         Value* x = g.input("x", {D::f32, {2, 6}});
         std::vector<Value*> parts =
             g.node(Op::split, {x}, {"a", "b", "c"}, {{"axis", 1}, {"sizes", {1, 2, 3}}});
         Value* stats = g.input("stats", {D::f32, {4, 2, 3}});
         Value* scale = g.input("scale", {D::f32, {2}});
         Value* bias = g.input("bias", {D::f32, {2}});
         std::vector<Value*> bn =
             g.node(Op::batch_norm_train, {stats, scale, bias}, {"y", "mean", "var"});
         // The first part and the normalized values are unused; `var` is returned twice.
         return g.finish({parts[2], parts[1], bn[2], bn[1], bn[2]});
       }},
      {"inputs_returned_as_outputs", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("passthrough");
         Value* x = g.input("x", {D::f32, {2}});
         Value* unused = g.input("unused", {D::i64, {3, 1}});
         Value* y = g.node(Op::neg, {x}, {"y"})[0];
         return g.finish({x, unused, y, x});
       }},
      {"scalars", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("scalars");
         Value* x = g.input("x", {D::f32, {}});
         Value* two = g.node(Op::constant, {}, {"two"}, {{"value", Array::scalar(D::f32, 2)}})[0];
         Value* y = g.node(Op::mul, {x, two}, {"y"})[0];
         Value* flag = g.node(Op::greater, {y, x}, {"flag"})[0];
         return g.finish({y, flag, g.node(Op::reduce_sum, {y}, {"total"})[0]});
       }},
      {"zero_size_dims", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("empty");
         Value* x = g.input("x", {D::f32, {2, 0, 3}});
         Value* e = g.input("e", {D::i64, {0}});
         Value* sum = g.node(Op::reduce_sum, {x}, {"sum"}, {{"axes", {1}}})[0];
         Value* flat = g.node(Op::reshape, {x}, {"flat"}, {{"shape", {0, 5}}})[0];
         Value* picked = g.node(Op::gather, {sum, e}, {"picked"}, {{"axis", 1}})[0];
         return g.finish({sum, flat, picked, e});
       }},
      {"no_inputs", std::nullopt,
       []() -> Expected<Graph> {
         NamedGraph g("constants");
         Value* c = g.node(Op::iota, {}, {"c"}, {{"shape", {3}}, {"dtype", D::f32}})[0];
         Value* d = g.node(Op::fill, {}, {"d"}, {{"shape", {3}}, {"value", 1e300}})[0];
         return g.finish({g.node(Op::add, {c, d}, {"sum"})[0]});
       }},
  };
}

}  // namespace example_detail

// Every example: the op examples first (in table order), then the text-form corner cases.
inline std::vector<ExampleGraph> example_graphs() {
  std::vector<ExampleGraph> all;
  using example_detail::OpExample;
  for (OpExample& e : example_detail::attributeless_examples()) {
    all.push_back(to_example_graph(std::move(e)));
  }
  for (OpExample& e : example_detail::attribute_examples()) {
    all.push_back(to_example_graph(std::move(e)));
  }
  for (ExampleGraph& e : example_detail::text_form_examples()) all.push_back(std::move(e));
  return all;
}

}  // namespace kiln::testing
