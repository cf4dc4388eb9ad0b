// ONNX export (frontend/onnx_export.h): a small graph for every exported op is exported, imported
// back with the ONNX importer and run on random inputs with the reference interpreter; the
// import must compute what the graph computes. Also: the model's header and names, graph
// inputs written as initializers (and an ImportedModel's weights), files, and the errors (ops
// with no export, models ONNX's checker rejects, bad initializers). A table lists every Kiln
// op's export decision, so that a new op cannot go without one.
#include "frontend/onnx_export.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/onnx_import.h"
#include "interp/interpreter.h"
#include "interp/random_inputs.h"
#include "ir/builder.h"
#include "unit/frontend/frontend_test_util.h"
#include "unit/test_util.h"

namespace kiln {
namespace {

using ::kiln::testing::is_error_with;
using ::kiln::testing::ScratchDir;

// Elements agree when equal (infinities included), both NaN, or within the dtype's tolerance:
// exported compositions round after each ONNX op where the reference rounds once.
::testing::AssertionResult arrays_match(const Array& expected, const Array& actual) {
  if (expected.type() != actual.type()) {
    return ::testing::AssertionFailure()
           << "type " << actual.type().to_string() << ", expected " << expected.type().to_string();
  }
  double rel = 0;  // integers and bools must match exactly
  double abs = 0;
  if (expected.dtype == DType::f64) {
    rel = abs = 1e-12;
  } else if (expected.dtype == DType::f32) {
    rel = 1e-5;
    abs = 1e-6;
  } else if (is_floating(expected.dtype)) {
    rel = abs = 1e-2;
  }
  for (int64_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i];
    const double a = actual[i];
    if (e == a || (std::isnan(e) && std::isnan(a))) continue;
    if (!(std::fabs(e - a) <= abs + rel * std::fabs(e))) {
      return ::testing::AssertionFailure() << "element " << i << " is " << a << ", expected " << e;
    }
  }
  return ::testing::AssertionSuccess();
}

Expected<ImportedModel> reimport(const std::string& bytes) {
  return import_onnx_bytes(bytes, "", "exported model");
}

// Runs `graph` (whose trailing inputs are weights with the values `graph_weights`) and the
// imported model on the same random data inputs, each with its own weights, and compares every
// output.
void expect_same_outputs(const Graph& graph, const std::vector<Array>& graph_weights,
                         const ImportedModel& imported, const RandomInputOptions& random) {
  const size_t num_data = graph.inputs().size() - graph_weights.size();
  ASSERT_EQ(imported.num_data_inputs, static_cast<int>(num_data));
  std::vector<Array> data;
  for (size_t i = 0; i < num_data; ++i) {
    EXPECT_EQ(imported.graph.inputs()[i]->name(), graph.inputs()[i]->name());
    EXPECT_EQ(imported.graph.inputs()[i]->type(), graph.inputs()[i]->type());
    data.push_back(random_input(graph, i, random));
  }
  std::vector<Array> inputs = data;
  inputs.insert(inputs.end(), graph_weights.begin(), graph_weights.end());
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected.has_value()) << expected.status().message();
  inputs = data;
  inputs.insert(inputs.end(), imported.weights.begin(), imported.weights.end());
  Expected<std::vector<Array>> actual = interpret(imported.graph, inputs);
  ASSERT_TRUE(actual.has_value()) << actual.status().message();
  ASSERT_EQ(actual->size(), expected->size());
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(arrays_match((*expected)[i], (*actual)[i])) << "output " << i;
  }
}

void expect_same_outputs(const Graph& graph, const ImportedModel& imported,
                         const RandomInputOptions& random) {
  expect_same_outputs(graph, {}, imported, random);
}

void expect_round_trip(const Graph& graph, const RandomInputOptions& random = {}) {
  Expected<std::string> bytes = export_onnx(graph);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();
  Expected<ImportedModel> imported = reimport(*bytes);
  ASSERT_TRUE(imported.has_value()) << imported.status().message();
  expect_same_outputs(graph, *imported, random);
}

// ---- one small graph per exported op ----------------------------------------------------------

struct ExportCase {
  std::string name;
  Op op;  // the op whose export the case checks
  std::function<void(GraphBuilder&)> build;
};

void PrintTo(const ExportCase& c, std::ostream* os) { *os << c.name; }

constexpr DType f32 = DType::f32;
constexpr DType i32 = DType::i32;
constexpr DType i64 = DType::i64;
constexpr DType boolean = DType::boolean;

std::vector<ExportCase> unary_cases() {
  std::vector<ExportCase> cases;
  for (Op op : {Op::neg, Op::abs, Op::exp, Op::reciprocal, Op::tanh, Op::sigmoid, Op::relu, Op::erf,
                Op::sin, Op::cos, Op::sign, Op::identity}) {
    cases.push_back({std::string(op_def(op).name), op, [op](GraphBuilder& b) {
                       b.output(b.unary(op, b.input("x", f32, {2, 3})));
                     }});
  }
  // Rounding on values spread over several integers.
  for (Op op : {Op::floor, Op::ceil, Op::round}) {
    cases.push_back({std::string(op_def(op).name), op, [op](GraphBuilder& b) {
                       b.output(b.unary(op, b.mul_scalar(b.input("x", f32, {2, 3}), 3)));
                     }});
  }
  // Ops defined for positive inputs.
  for (Op op : {Op::log, Op::sqrt, Op::rsqrt}) {
    cases.push_back({std::string(op_def(op).name), op, [op](GraphBuilder& b) {
                       b.output(b.unary(op, b.unary(Op::abs, b.input("x", f32, {2, 3}))));
                     }});
  }
  cases.push_back(
      {"neg_i32", Op::neg, [](GraphBuilder& b) { b.output(b.neg(b.input("x", i32, {4}))); }});
  cases.push_back({"not", Op::logical_not, [](GraphBuilder& b) {
                     b.output(b.unary(Op::logical_not, b.input("x", boolean, {2, 3})));
                   }});
  cases.push_back({"cast_f32_to_i32", Op::cast, [](GraphBuilder& b) {
                     b.output(b.cast(b.mul_scalar(b.input("x", f32, {2, 3}), 3), i32));
                   }});
  cases.push_back({"cast_i64_to_f32", Op::cast,
                   [](GraphBuilder& b) { b.output(b.cast(b.input("x", i64, {5}), f32)); }});
  cases.push_back({"cast_f32_to_bool", Op::cast, [](GraphBuilder& b) {
                     b.output(b.cast(b.unary(Op::floor, b.input("x", f32, {2, 3})), boolean));
                   }});
  cases.push_back({"cast_bool_to_f16", Op::cast, [](GraphBuilder& b) {
                     b.output(b.cast(b.input("x", boolean, {4}), DType::f16));
                   }});
  cases.push_back({"gelu", Op::gelu, [](GraphBuilder& b) {
                     b.output(b.gelu(b.input("x", f32, {2, 5})));
                   }});
  cases.push_back({"gelu_tanh", Op::gelu, [](GraphBuilder& b) {
                     b.output(b.gelu(b.input("x", f32, {2, 5}), true));
                   }});
  cases.push_back({"gelu_f16", Op::gelu, [](GraphBuilder& b) {
                     b.output(b.gelu(b.input("x", DType::f16, {2, 5})));
                   }});
  // In f64 the composition performs the reference's own arithmetic.
  cases.push_back({"gelu_tanh_f64", Op::gelu, [](GraphBuilder& b) {
                     b.output(b.gelu(b.input("x", DType::f64, {2, 5}), true));
                   }});
  return cases;
}

std::vector<ExportCase> binary_cases() {
  std::vector<ExportCase> cases;
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min}) {
    cases.push_back({std::string(op_def(op).name), op, [op](GraphBuilder& b) {
                       b.output(b.apply1(op, {b.input("a", f32, {2, 3}), b.input("b", f32, {3})}));
                     }});
  }
  cases.push_back({"div_i32_truncates", Op::div, [](GraphBuilder& b) {
                     Value* a = b.sub(b.input("a", i32, {2, 4}), b.scalar(2, i32));
                     Value* d = b.add(b.input("d", i32, {2, 4}), b.scalar(1, i32));
                     b.output(b.div(a, b.neg(d)));
                   }});
  cases.push_back({"pow", Op::pow, [](GraphBuilder& b) {
                     Value* base = b.unary(Op::abs, b.input("a", f32, {2, 3}));
                     b.output(b.apply1(Op::pow, {base, b.input("b", f32, {2, 3})}));
                   }});
  // Integer remainders with mixed signs and no zero divisor: a in [-2, 1], divisor in
  // {-3, -2, 1, 2}.
  for (bool fmod : {false, true}) {
    cases.push_back({fmod ? "mod_i32_fmod" : "mod_i32_floored", Op::mod, [fmod](GraphBuilder& b) {
                       Value* a = b.sub(b.input("a", i32, {3, 4}), b.scalar(2, i32));
                       Value* d = b.input("d", i32, {3, 4});
                       Value* low = b.apply1(Op::less, {d, b.scalar(2, i32)});
                       Value* divisor =
                           b.where(low, b.sub(d, b.scalar(3, i32)), b.sub(d, b.scalar(1, i32)));
                       b.output(b.apply1(Op::mod, {a, divisor}, {{"fmod", fmod}}));
                     }});
    cases.push_back({fmod ? "mod_f32_fmod" : "mod_f32_floored", Op::mod, [fmod](GraphBuilder& b) {
                       Value* a = b.mul_scalar(b.input("a", f32, {3, 4}), 5);
                       b.output(b.apply1(Op::mod, {a, b.input("d", f32, {4})}, {{"fmod", fmod}}));
                     }});
  }
  // Small integers, so that the comparisons meet ties.
  for (Op op : {Op::equal, Op::less, Op::less_equal, Op::greater, Op::greater_equal}) {
    cases.push_back({std::string(op_def(op).name), op, [op](GraphBuilder& b) {
                       b.output(b.apply1(op, {b.input("a", i32, {3, 4}), b.input("b", i32, {4})}));
                     }});
  }
  cases.push_back({"less_bool", Op::less, [](GraphBuilder& b) {
                     b.output(b.apply1(
                         Op::less, {b.input("a", boolean, {2, 3}), b.input("b", boolean, {2, 3})}));
                   }});
  cases.push_back({"greater_equal_bool", Op::greater_equal, [](GraphBuilder& b) {
                     b.output(b.apply1(Op::greater_equal, {b.input("a", boolean, {2, 3}),
                                                           b.input("b", boolean, {2, 3})}));
                   }});
  for (Op op : {Op::logical_and, Op::logical_or, Op::logical_xor}) {
    cases.push_back(
        {std::string(op_def(op).name), op, [op](GraphBuilder& b) {
           b.output(b.apply1(op, {b.input("a", boolean, {2, 3}), b.input("b", boolean, {1, 3})}));
         }});
  }
  cases.push_back({"where", Op::where, [](GraphBuilder& b) {
                     b.output(b.where(b.input("c", boolean, {2, 1}), b.input("x", f32, {2, 3}),
                                      b.input("y", f32, {3})));
                   }});
  return cases;
}

std::vector<ExportCase> reduction_cases() {
  const auto reduce = [](Op op, std::vector<int64_t> axes, bool keepdims) {
    return [=](GraphBuilder& b) {
      b.output(
          b.apply1(op, {b.input("x", f32, {2, 3, 4})}, {{"axes", axes}, {"keepdims", keepdims}}));
    };
  };
  const auto arg = [](Op op, int64_t axis, bool keepdims, bool last) {
    return [=](GraphBuilder& b) {
      b.output(b.apply1(op, {b.input("x", i32, {3, 5})},
                        {{"axis", axis}, {"keepdims", keepdims}, {"select_last_index", last}}));
    };
  };
  return {
      {"sum", Op::reduce_sum, reduce(Op::reduce_sum, {1}, true)},
      {"sum_every_axis", Op::reduce_sum, reduce(Op::reduce_sum, {}, false)},
      {"mean", Op::reduce_mean, reduce(Op::reduce_mean, {0, 2}, false)},
      {"mean_every_axis", Op::reduce_mean, reduce(Op::reduce_mean, {}, true)},
      {"reduce_max", Op::reduce_max, reduce(Op::reduce_max, {-1}, false)},
      {"reduce_min", Op::reduce_min, reduce(Op::reduce_min, {1}, true)},
      {"prod", Op::reduce_prod, reduce(Op::reduce_prod, {2}, false)},
      {"argmax", Op::argmax, arg(Op::argmax, 1, false, false)},
      {"argmax_last", Op::argmax, arg(Op::argmax, 0, true, true)},
      {"argmin", Op::argmin, arg(Op::argmin, -1, true, false)},
      {"argmin_last", Op::argmin, arg(Op::argmin, 1, false, true)},
  };
}

std::vector<ExportCase> layout_cases() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  return {
      {"constant", Op::constant,
       [](GraphBuilder& b) {
         b.output(b.add(b.input("x", f32, {2, 3}), b.constant(Array(f32, {3}, {1, -2, 0.5}))));
       }},
      {"reshape", Op::reshape,
       [](GraphBuilder& b) {
         b.output(b.reshape(b.input("x", f32, {2, 3, 4}), {4, -1}));
       }},
      {"reshape_zero_extent", Op::reshape,
       [](GraphBuilder& b) {
         b.output(b.reshape(b.input("x", f32, {2, 0, 3}), {0, 6}));
       }},
      {"transpose", Op::transpose,
       [](GraphBuilder& b) {
         b.output(b.transpose(b.input("x", f32, {2, 3, 4}), {2, 0, 1}));
       }},
      {"transpose_reversed", Op::transpose,
       [](GraphBuilder& b) {
         b.output(b.transpose(b.input("x", f32, {2, 3, 4}), {}));
       }},
      {"transpose_scalar", Op::transpose,
       [](GraphBuilder& b) { b.output(b.transpose(b.input("x", f32, {}), {})); }},
      {"broadcast_to", Op::broadcast_to,
       [](GraphBuilder& b) {
         b.output(b.broadcast_to(b.input("x", f32, {3, 1}), {2, 3, 4}));
       }},
      {"slice", Op::slice,
       [](GraphBuilder& b) {
         b.output(b.slice(b.input("x", f32, {4, 5, 6}), {1, -1}, {3, 0}, {0, 2}, {1, -2}));
       }},
      {"slice_extreme_bounds", Op::slice,
       [](GraphBuilder& b) {
         Value* x = b.input("x", f32, {3, 5});
         b.output(b.slice(x, {kMax, kMin}, {kMin, kMax}, {1, 0}, {-1, kMax}));
       }},
      {"concat", Op::concat,
       [](GraphBuilder& b) {
         b.output(b.concat(
             {b.input("a", f32, {2, 1}), b.input("b", f32, {2, 3}), b.input("c", f32, {2, 2})}, 1));
       }},
      {"split", Op::split,
       [](GraphBuilder& b) {
         for (Value* piece : b.split(b.input("x", f32, {2, 6}), -1, {1, 2, 3})) b.output(piece);
       }},
      {"pad", Op::pad,
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::pad, {b.input("x", f32, {2, 3})},
                           {{"pads", {1, 0, 0, 2}}, {"value", 1.5}}));
       }},
      {"pad_negative_crops", Op::pad,
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::pad, {b.input("x", i32, {3, 4})}, {{"pads", {-1, 1, 0, -2}}}));
       }},
      {"gather", Op::gather,
       [](GraphBuilder& b) {
         Value* indices = b.sub(b.input("i", i64, {2, 2}), b.scalar(2, i64));  // in [-2, 1]
         b.output(b.gather(b.input("data", f32, {5, 3}), indices));
       }},
      {"gather_scalar_index", Op::gather,
       [](GraphBuilder& b) {
         b.output(b.gather(b.input("data", f32, {5, 3}), b.input("i", i64, {}), 1));
       }},
      {"gather_axis1_i32", Op::gather,
       [](GraphBuilder& b) {
         b.output(b.gather(b.input("data", f32, {2, 6}), b.input("i", i32, {3}), 1));
       }},
      {"one_hot", Op::one_hot,
       [](GraphBuilder& b) {
         // Indices in [-1, 2]: -1 wraps to the last class.
         Value* indices = b.sub(b.input("i", i64, {2, 3}), b.scalar(1, i64));
         b.output(b.apply1(Op::one_hot, {indices},
                           {{"depth", 3}, {"axis", 0}, {"on_value", 2.0}, {"off_value", -1.0}}));
       }},
      // The importer takes ScatterND only with indices known at import, hence constant ones;
      // they repeat a position and count one from the end.
      {"scatter_add", Op::scatter_add,
       [](GraphBuilder& b) {
         Value* indices = b.constant(Array(i64, {2, 2}, {4, -1, 0, 4}));
         b.output(b.apply1(
             Op::scatter_add,
             {b.input("data", f32, {3, 5, 2}), indices, b.input("updates", f32, {3, 2, 2, 2})},
             {{"axis", 1}}));
       }},
      {"scatter_add_axis0_i32", Op::scatter_add,
       [](GraphBuilder& b) {
         Value* indices = b.constant(Array(i32, {3}, {1, 3, 1}));
         b.output(b.apply1(Op::scatter_add, {b.input("data", f32, {4, 3}), indices,
                                             b.input("updates", f32, {3, 3})}));
       }},
      {"one_hot_f16", Op::one_hot,
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::one_hot, {b.input("i", i32, {4})},
                           {{"depth", 3}, {"dtype", DType::f16}, {"on_value", 0.1}}));
       }},
      {"iota", Op::iota,
       [](GraphBuilder& b) {
         Value* counted = b.apply1(Op::iota, {}, {{"shape", {2, 3}}, {"axis", 1}, {"dtype", f32}});
         b.output(b.add(b.input("x", f32, {2, 3}), counted));
       }},
      {"iota_bool", Op::iota,
       [](GraphBuilder& b) {
         b.output(b.apply1(Op::iota, {}, {{"shape", {2, 3}}, {"axis", 0}, {"dtype", boolean}}));
       }},
      {"iota_i64", Op::iota,
       [](GraphBuilder& b) {
         b.output(b.add(b.input("x", i64, {5}), b.apply1(Op::iota, {}, {{"shape", {5}}})));
       }},
      {"fill", Op::fill,
       [](GraphBuilder& b) {
         b.output(b.add(b.input("x", f32, {2, 3}), b.fill({2, 3}, 2.5)));
       }},
      {"fill_bf16", Op::fill,
       [](GraphBuilder& b) {
         b.output(b.add(b.input("x", DType::bf16, {2, 3}), b.fill({2, 3}, 0.1, DType::bf16)));
       }},
      // Large enough that the importer keeps it as a weight rather than a constant node.
      {"fill_large", Op::fill,
       [](GraphBuilder& b) {
         b.output(b.mul(b.input("x", i32, {4, 5}), b.fill({4, 5}, -3, i32)));
       }},
  };
}

std::vector<ExportCase> contraction_and_pooling_cases() {
  const auto conv_grad_data = [](std::vector<int64_t> grad_out, std::vector<int64_t> w,
                                 Attrs attrs) {
    return [=](GraphBuilder& b) {
      b.output(b.apply1(Op::conv_grad_data,
                        {b.input("grad_out", f32, Shape(grad_out)), b.input("w", f32, Shape(w))},
                        attrs));
    };
  };
  const auto pool = [](Op op, std::vector<int64_t> x, Attrs attrs) {
    return [=](GraphBuilder& b) { b.output(b.apply1(op, {b.input("x", f32, Shape(x))}, attrs)); };
  };
  return {
      {"matmul", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", f32, {2, 3}), b.input("b", f32, {3, 4})));
       }},
      {"matmul_transposed", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", f32, {3, 2}), b.input("b", f32, {4, 3}), true, true));
       }},
      {"matmul_batched_transpose_b", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", f32, {2, 3, 4}), b.input("b", f32, {5, 4}), false, true));
       }},
      {"matmul_batched_transpose_a", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", f32, {2, 4, 3}), b.input("b", f32, {2, 4, 5}), true));
       }},
      {"matmul_batched_both_transposed", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", f32, {2, 4, 3}), b.input("b", f32, {1, 5, 4}), true, true));
       }},
      {"matmul_i64", Op::matmul,
       [](GraphBuilder& b) {
         b.output(b.matmul(b.input("a", i64, {2, 3}), b.input("b", i64, {3, 2})));
       }},
      {"conv", Op::conv,
       [](GraphBuilder& b) {
         b.output(b.conv(b.input("x", f32, {1, 4, 6, 6}), b.input("w", f32, {6, 2, 3, 3}), {2, 1},
                         {1, 0, 1, 2}, {1, 2}, 2));
       }},
      {"conv_3d", Op::conv,
       [](GraphBuilder& b) {
         b.output(b.conv(b.input("x", f32, {1, 2, 4, 4, 4}), b.input("w", f32, {3, 2, 2, 2, 2}),
                         {1, 2, 1}));
       }},
      {"conv_1d", Op::conv,
       [](GraphBuilder& b) {
         b.output(b.conv(b.input("x", f32, {2, 3, 7}), b.input("w", f32, {4, 3, 2})));
       }},
      // Conv of [1,4,6,6] by this w gives [1,6,3,3], which gives back only 5 rows and columns:
      // output_padding restores the sixth.
      {"conv_grad_data", Op::conv_grad_data,
       conv_grad_data({1, 6, 3, 3}, {6, 2, 3, 3},
                      {{"strides", {2, 2}},
                       {"pads", {1, 1, 1, 1}},
                       {"groups", 2},
                       {"input_shape", {1, 4, 6, 6}}})},
      {"conv_grad_data_dilated_1d", Op::conv_grad_data,
       conv_grad_data({2, 4, 2}, {4, 3, 3},
                      {{"strides", {3}}, {"dilations", {2}}, {"input_shape", {2, 3, 9}}})},
      {"max_pool", Op::max_pool,
       pool(Op::max_pool, {1, 2, 5, 5},
            {{"kernel", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}})},
      {"max_pool_1d", Op::max_pool, pool(Op::max_pool, {2, 3, 6}, {{"kernel", {2}}})},
      {"avg_pool", Op::avg_pool,
       pool(Op::avg_pool, {1, 2, 5, 5},
            {{"kernel", {3, 2}}, {"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}})},
      {"avg_pool_count_include_pad", Op::avg_pool,
       pool(Op::avg_pool, {1, 2, 5, 5},
            {{"kernel", {3, 3}},
             {"strides", {2, 2}},
             {"pads", {1, 1, 1, 1}},
             {"count_include_pad", true}})},
  };
}

std::vector<ExportCase> composite_cases() {
  const auto loss = [](Op op, std::vector<int64_t> scores, std::string reduction) {
    return [=](GraphBuilder& b) {
      std::vector<int64_t> positions(scores.begin(), scores.end() - 1);
      b.output(b.apply1(
          op, {b.input("scores", f32, Shape(scores)), b.input("labels", i64, Shape(positions))},
          {{"reduction", reduction}}));
    };
  };
  const auto bce = [](std::string reduction) {
    return [=](GraphBuilder& b) {
      Value* targets = b.sigmoid(b.input("t", f32, {2, 3}));
      b.output(b.apply1(Op::binary_cross_entropy, {b.input("z", f32, {2, 3}), targets},
                        {{"reduction", reduction}}));
    };
  };
  return {
      {"softmax", Op::softmax,
       [](GraphBuilder& b) {
         b.output(b.softmax(b.input("x", f32, {2, 3, 4}), 1));
       }},
      {"log_softmax", Op::log_softmax,
       [](GraphBuilder& b) {
         b.output(b.log_softmax(b.input("x", f32, {2, 3, 4})));
       }},
      {"layer_norm", Op::layer_norm,
       [](GraphBuilder& b) {
         b.output(b.layer_norm(b.input("x", f32, {2, 3, 4}), b.input("scale", f32, {4}),
                               b.input("bias", f32, {4})));
       }},
      {"layer_norm_axis1", Op::layer_norm,
       [](GraphBuilder& b) {
         b.output(b.layer_norm(b.input("x", f32, {2, 3, 4}), b.input("scale", f32, {3, 4}),
                               b.input("bias", f32, {3, 4}), 1, 1e-3));
       }},
      {"batch_norm_infer", Op::batch_norm_infer,
       [](GraphBuilder& b) {
         Value* var = b.add(b.unary(Op::abs, b.input("var", f32, {3})), b.scalar(0.5));
         b.output(b.apply1(Op::batch_norm_infer,
                           {b.input("x", f32, {2, 3, 4, 4}), b.input("scale", f32, {3}),
                            b.input("bias", f32, {3}), b.input("mean", f32, {3}), var},
                           {{"epsilon", 1e-3}}));
       }},
      {"batch_norm_train", Op::batch_norm_train,
       [](GraphBuilder& b) {
         for (Value* out : b.apply(Op::batch_norm_train,
                                   {b.input("x", f32, {4, 3, 5}), b.input("scale", f32, {3}),
                                    b.input("bias", f32, {3})})) {
           b.output(out);
         }
       }},
      {"dropout_ratio_0", Op::dropout,
       [](GraphBuilder& b) {
         b.output(b.dropout(b.input("x", f32, {2, 3}), 0, 7));
       }},
      {"cross_entropy", Op::cross_entropy, loss(Op::cross_entropy, {3, 4}, "mean")},
      {"cross_entropy_one_position", Op::cross_entropy, loss(Op::cross_entropy, {5}, "none")},
      {"cross_entropy_one_position_sum", Op::cross_entropy, loss(Op::cross_entropy, {5}, "sum")},
      {"cross_entropy_rank3", Op::cross_entropy, loss(Op::cross_entropy, {2, 3, 4}, "none")},
      {"cross_entropy_rank4_sum", Op::cross_entropy, loss(Op::cross_entropy, {2, 2, 3, 4}, "sum")},
      {"nll_loss", Op::nll_loss, loss(Op::nll_loss, {3, 4}, "sum")},
      {"nll_loss_rank3", Op::nll_loss, loss(Op::nll_loss, {2, 3, 4}, "mean")},
      {"nll_loss_one_position", Op::nll_loss, loss(Op::nll_loss, {4}, "none")},
      {"binary_cross_entropy", Op::binary_cross_entropy, bce("none")},
      {"binary_cross_entropy_mean", Op::binary_cross_entropy, bce("mean")},
      {"binary_cross_entropy_sum", Op::binary_cross_entropy, bce("sum")},
  };
}

std::vector<ExportCase> export_cases() {
  std::vector<ExportCase> cases;
  for (auto family : {&unary_cases, &binary_cases, &reduction_cases, &layout_cases,
                      &contraction_and_pooling_cases, &composite_cases}) {
    for (ExportCase& c : family()) cases.push_back(std::move(c));
  }
  return cases;
}

class OnnxExportRoundTrip : public ::testing::TestWithParam<ExportCase> {};

TEST_P(OnnxExportRoundTrip, ImportComputesTheSameOutputs) {
  GraphBuilder builder(GetParam().name);
  GetParam().build(builder);
  Expected<Graph> graph = builder.finish();
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  bool uses_op = false;
  for (const Node* node : graph->nodes()) uses_op = uses_op || node->op() == GetParam().op;
  EXPECT_TRUE(uses_op) << "the case does not use op '" << op_def(GetParam().op).name << "'";
  expect_round_trip(*graph, {.seed = 11});
}

INSTANTIATE_TEST_SUITE_P(Ops, OnnxExportRoundTrip, ::testing::ValuesIn(export_cases()),
                         [](const auto& test_info) { return test_info.param.name; });

// ---- which ops export ---------------------------------------------------------------------------

// The space-separated words of `text`.
std::set<std::string> words(std::string_view text) {
  std::set<std::string> result;
  std::istringstream stream{std::string(text)};
  for (std::string word; stream >> word;) result.insert(word);
  return result;
}

TEST(OnnxExport, EveryOpHasAnExportDecision) {
  // Every Kiln op, by name, in exactly one of two lists. (dropout exports only with ratio 0.)
  const std::set<std::string> exported = words(
      "neg abs exp log sqrt rsqrt reciprocal tanh sigmoid relu gelu erf sin cos floor ceil round "
      "sign not cast identity "
      "add sub mul div pow max min mod equal less less_equal greater greater_equal and or xor "
      "where sum mean reduce_max reduce_min prod argmax argmin "
      "constant reshape transpose broadcast_to slice concat split pad gather scatter_add one_hot "
      "iota fill "
      "matmul conv conv_grad_data "
      "max_pool avg_pool "
      "softmax log_softmax layer_norm batch_norm_train batch_norm_infer dropout cross_entropy "
      "binary_cross_entropy nll_loss");
  const std::set<std::string> not_exported =
      words("conv_grad_weight conv_channels_last spmm max_pool_grad avg_pool_grad all_reduce "
            "broadcast");
  for (const OpDef& def : all_op_defs()) {
    const bool listed_exported = exported.contains(def.name);
    if (listed_exported == not_exported.contains(def.name)) {
      ADD_FAILURE() << "op '" << def.name
                    << "' must be in exactly one list here: decide whether it exports to ONNX "
                       "(onnx_export.cc) and list it";
      continue;
    }
    EXPECT_EQ(has_onnx_export(def.op), listed_exported) << def.name;
  }
  EXPECT_EQ(exported.size() + not_exported.size(), all_op_defs().size())
      << "a list names an op Kiln does not have";
}

TEST(OnnxExport, EveryExportedOpHasARoundTripCase) {
  std::set<Op> covered;
  for (const ExportCase& c : export_cases()) covered.insert(c.op);
  for (const OpDef& def : all_op_defs()) {
    if (has_onnx_export(def.op)) {
      EXPECT_TRUE(covered.contains(def.op)) << def.name;
    }
  }
}

// ---- errors -----------------------------------------------------------------------------------

struct NoExportCase {
  std::string op;
  std::function<Expected<Node*>(Graph&)> add;  // adds a node of the op, its output named "y"
};

void PrintTo(const NoExportCase& c, std::ostream* os) { *os << c.op; }

// Output names for Graph::add_node.
std::vector<std::string> named(std::string name) { return {std::move(name)}; }

std::vector<NoExportCase> no_export_cases() {
  return {
      {"spmm",
       [](Graph& g) {
         return g.add_node(Op::spmm,
                           {g.add_input({i64, {3}}, "row_ptr"), g.add_input({i64, {4}}, "cols"),
                            g.add_input({f32, {4}}, "values"), g.add_input({f32, {3, 2}}, "d")},
                           {}, named("y"));
       }},
      {"conv_grad_weight",
       [](Graph& g) {
         return g.add_node(Op::conv_grad_weight,
                           {g.add_input({f32, {1, 2, 5}}, "x"), g.add_input({f32, {1, 3, 3}}, "g")},
                           {{"weight_shape", {3, 2, 3}}}, named("y"));
       }},
      {"max_pool_grad",
       [](Graph& g) {
         return g.add_node(
             Op::max_pool_grad,
             {g.add_input({f32, {1, 1, 4, 4}}, "x"), g.add_input({f32, {1, 1, 2, 2}}, "g")},
             {{"kernel", {2, 2}}, {"strides", {2, 2}}}, named("y"));
       }},
      {"avg_pool_grad",
       [](Graph& g) {
         return g.add_node(Op::avg_pool_grad, {g.add_input({f32, {1, 1, 2, 2}}, "g")},
                           {{"kernel", {2, 2}}, {"strides", {2, 2}}, {"input_shape", {1, 1, 4, 4}}},
                           named("y"));
       }},
      {"all_reduce",
       [](Graph& g) {
         return g.add_node(Op::all_reduce, {g.add_input({f32, {3}}, "x")}, {}, named("y"));
       }},
  };
}

class OnnxExportNoExport : public ::testing::TestWithParam<NoExportCase> {};

TEST_P(OnnxExportNoExport, IsAnErrorNamingTheNodeAndOp) {
  Graph graph;
  Expected<Node*> node = GetParam().add(graph);
  ASSERT_TRUE(node.has_value()) << node.status().message();
  graph.set_outputs({(*node)->output()});
  EXPECT_FALSE(has_onnx_export((*node)->op()));
  const std::string message = "op '" + GetParam().op + "' has no ONNX export";
  EXPECT_TRUE(is_error_with(export_onnx(graph).status(), {"node 'y'", message}));
}

INSTANTIATE_TEST_SUITE_P(Ops, OnnxExportNoExport, ::testing::ValuesIn(no_export_cases()),
                         [](const auto& test_info) { return test_info.param.op; });

TEST(OnnxExport, ScatterAddWithIndicesFromInputsExports) {
  // Kiln's importer needs ScatterND's indices at import, so this one checks the model only.
  GraphBuilder b;
  b.output(b.apply1(
      Op::scatter_add,
      {b.input("data", f32, {2, 5}), b.input("i", i32, {3}), b.input("updates", f32, {2, 3})},
      {{"axis", -1}}));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  Expected<std::string> bytes = export_onnx(*graph);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  std::vector<std::string> op_types;
  for (const onnx::NodeProto& node : model.graph().node()) op_types.push_back(node.op_type());
  EXPECT_EQ(op_types, (std::vector<std::string>{"Transpose", "Transpose", "Cast", "Less", "Add",
                                                "Where", "Unsqueeze", "ScatterND", "Transpose"}));
}

TEST(OnnxExport, DropoutExportsOnlyWithRatioZero) {
  GraphBuilder b;
  b.output(b.dropout(b.input("x", f32, {2, 3}), 0.25, 3));
  Expected<Graph> graph = b.finish();
  ASSERT_TRUE(graph.has_value()) << graph.status().message();
  EXPECT_TRUE(
      is_error_with(export_onnx(*graph).status(),
                    {"node '", "dropout with ratio 0.25 has no ONNX export", "counter-based RNG"}));
}

TEST(OnnxExport, ModelOnnxRejectsIsAnError) {
  // ONNX defines Sin for float16, float and double only.
  Graph graph;
  Value* x = graph.add_input({DType::bf16, {4}}, "x");
  Expected<Node*> sin = graph.add_node(Op::sin, {x}, {}, named("y"));
  ASSERT_TRUE(sin.has_value()) << sin.status().message();
  graph.set_outputs({(*sin)->output()});
  EXPECT_TRUE(
      is_error_with(export_onnx(graph).status(), {"fails ONNX's checks", "Sin", "node name: y"}));
}

TEST(OnnxExport, GraphWithoutOutputsIsAnError) {
  Graph graph;
  graph.add_input({f32, {2}}, "x");
  EXPECT_TRUE(is_error_with(export_onnx(graph).status(), {"no outputs"}));
}

// ---- the model ----------------------------------------------------------------------------------

// y = rsqrt(x) + 1: rsqrt exports as two ONNX nodes, one of them an intermediate.
Graph rsqrt_graph() {
  Graph graph("tiny");
  Value* x = graph.add_input({f32, {2, 3}}, "x");
  Node* root = *graph.add_node(Op::rsqrt, {x}, {}, named("r"));
  Node* one = *graph.add_node(Op::constant, {}, {{"value", Array::scalar(f32, 1)}}, named("one"));
  Node* y = *graph.add_node(Op::add, {root->output(), one->output()}, {}, named("y"));
  graph.set_outputs({y->output()});
  return graph;
}

TEST(OnnxExport, WritesAValidModelProto) {
  Expected<std::string> bytes = export_onnx(rsqrt_graph());
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  EXPECT_EQ(model.ir_version(), 8);
  EXPECT_EQ(model.producer_name(), "kiln");
  ASSERT_EQ(model.opset_import_size(), 1);
  EXPECT_EQ(model.opset_import(0).domain(), "");
  EXPECT_EQ(model.opset_import(0).version(), 17);

  const onnx::GraphProto& graph = model.graph();
  EXPECT_EQ(graph.name(), "tiny");
  ASSERT_EQ(graph.input_size(), 1);
  EXPECT_EQ(graph.input(0).name(), "x");
  EXPECT_EQ(graph.input(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  ASSERT_EQ(graph.input(0).type().tensor_type().shape().dim_size(), 2);
  EXPECT_EQ(graph.input(0).type().tensor_type().shape().dim(1).dim_value(), 3);
  ASSERT_EQ(graph.output_size(), 1);
  EXPECT_EQ(graph.output(0).name(), "y");

  std::vector<std::string> op_types;
  std::vector<std::string> node_names;
  std::vector<std::string> output_names;
  for (const onnx::NodeProto& node : graph.node()) {
    op_types.push_back(node.op_type());
    node_names.push_back(node.name());
    output_names.push_back(node.output(0));
  }
  EXPECT_EQ(op_types, (std::vector<std::string>{"Sqrt", "Reciprocal", "Constant", "Add"}));
  // Kiln's names where a Kiln value is computed, derived ones for the intermediate; each node
  // is named after its output.
  EXPECT_EQ(output_names, (std::vector<std::string>{"r/sqrt", "r", "one", "y"}));
  EXPECT_EQ(node_names, output_names);
  // Every tensor that is neither input nor output has its type declared: Kiln's values with
  // their Kiln types, the intermediate with the type ONNX's shape inference gives it.
  std::map<std::string, std::string> declared;
  for (const onnx::ValueInfoProto& info : graph.value_info()) {
    const onnx::TypeProto::Tensor& tensor = info.type().tensor_type();
    std::string type = onnx::TensorProto::DataType_Name(tensor.elem_type());
    for (const auto& dim : tensor.shape().dim()) type += " " + std::to_string(dim.dim_value());
    declared[info.name()] = type;
  }
  EXPECT_EQ(declared, (std::map<std::string, std::string>{
                          {"r/sqrt", "FLOAT 2 3"}, {"r", "FLOAT 2 3"}, {"one", "FLOAT"}}));
}

TEST(OnnxExport, MadeUpNamesAvoidKilnNames) {
  // A value already named "r/sqrt", which is what rsqrt's intermediate would be called.
  Graph graph;
  Value* x = graph.add_input({f32, {3}}, "x");
  Node* taken = *graph.add_node(Op::abs, {x}, {}, named("r/sqrt"));
  Node* root = *graph.add_node(Op::rsqrt, {taken->output()}, {}, named("r"));
  graph.set_outputs({root->output()});
  Expected<std::string> bytes = export_onnx(graph);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  std::vector<std::string> outputs;
  for (const onnx::NodeProto& node : model.graph().node()) outputs.push_back(node.output(0));
  EXPECT_EQ(outputs, (std::vector<std::string>{"r/sqrt", "r/sqrt.1", "r"}));
  expect_round_trip(graph);
}

TEST(OnnxExport, InputsAndRepeatedValuesCanBeOutputs) {
  Graph graph;
  Value* x = graph.add_input({f32, {2, 2}}, "x");
  Node* y = *graph.add_node(Op::exp, {x}, {}, named("y"));
  graph.set_outputs({x, y->output(), y->output()});
  Expected<std::string> bytes = export_onnx(graph);
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  ASSERT_EQ(model.graph().output_size(), 3);
  EXPECT_EQ(model.graph().output(0).name(), "x.1");
  EXPECT_EQ(model.graph().output(1).name(), "y");
  EXPECT_EQ(model.graph().output(2).name(), "y.1");
  expect_round_trip(graph);
}

// ---- initializers -------------------------------------------------------------------------------

// y = x @ w with w [5, 4]: more elements than the importer embeds, so it imports as a weight.
Graph linear_graph() {
  GraphBuilder b("linear");
  Value* x = b.input("x", f32, {2, 5});
  Value* w = b.input("w", f32, {5, 4});
  b.output(b.relu(b.matmul(x, w)));
  return std::move(b.finish()).value();
}

TEST(OnnxExport, InputsGivenValuesBecomeInitializers) {
  const Graph graph = linear_graph();
  const Array w = random_array({f32, {5, 4}}, 5);
  Expected<std::string> bytes = export_onnx(graph, {.initializers = {{"w", w}}});
  ASSERT_TRUE(bytes.has_value()) << bytes.status().message();

  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "x");
  ASSERT_EQ(model.graph().initializer_size(), 1);
  EXPECT_EQ(model.graph().initializer(0).name(), "w");

  Expected<ImportedModel> imported = reimport(*bytes);
  ASSERT_TRUE(imported.has_value()) << imported.status().message();
  EXPECT_EQ(imported->num_data_inputs, 1);
  ASSERT_EQ(imported->weights.size(), 1u);
  EXPECT_EQ(imported->weights[0], w);
  const Array x = random_array({f32, {2, 5}}, 6);
  Expected<std::vector<Array>> expected = interpret(graph, std::vector<Array>{x, w});
  Expected<std::vector<Array>> actual = interpret(imported->graph, std::vector<Array>{x, w});
  ASSERT_TRUE(expected.has_value() && actual.has_value());
  EXPECT_TRUE(arrays_match((*expected)[0], (*actual)[0]));
}

TEST(OnnxExport, ImportedModelWeightsBecomeInitializers) {
  const Array w = random_array({f32, {5, 4}}, 5);
  Expected<std::string> first = export_onnx(linear_graph(), {.initializers = {{"w", w}}});
  ASSERT_TRUE(first.has_value()) << first.status().message();
  Expected<ImportedModel> imported = reimport(*first);
  ASSERT_TRUE(imported.has_value()) << imported.status().message();

  Expected<std::string> second = export_onnx(*imported);
  ASSERT_TRUE(second.has_value()) << second.status().message();
  Expected<ImportedModel> again = reimport(*second);
  ASSERT_TRUE(again.has_value()) << again.status().message();
  EXPECT_EQ(again->num_data_inputs, 1);
  ASSERT_EQ(again->weights.size(), 1u);
  EXPECT_EQ(again->weights[0], w);
  expect_same_outputs(imported->graph, imported->weights, *again, {.seed = 3});
}

TEST(OnnxExport, ImportedModelRoundTripsThroughAFile) {
  const Array w = random_array({f32, {5, 4}}, 5);
  Expected<std::string> first = export_onnx(linear_graph(), {.initializers = {{"w", w}}});
  ASSERT_TRUE(first.has_value()) << first.status().message();
  Expected<ImportedModel> imported = reimport(*first);
  ASSERT_TRUE(imported.has_value()) << imported.status().message();

  ScratchDir dir;
  const std::string path = dir.file("linear.onnx");
  ASSERT_TRUE(export_onnx_file(*imported, path).is_ok());
  Expected<ImportedModel> from_file = import_onnx_file(path);
  ASSERT_TRUE(from_file.has_value()) << from_file.status().message();
  EXPECT_EQ(from_file->weights, imported->weights);
  expect_same_outputs(imported->graph, imported->weights, *from_file, {.seed = 4});
}

TEST(OnnxExport, GraphRoundTripsThroughAFile) {
  const Graph graph = rsqrt_graph();
  ScratchDir dir;
  const std::string path = dir.file("tiny.onnx");
  ASSERT_TRUE(export_onnx_file(graph, path).is_ok());
  Expected<ImportedModel> imported = import_onnx_file(path);
  ASSERT_TRUE(imported.has_value()) << imported.status().message();
  expect_same_outputs(graph, *imported, {.seed = 5});
}

TEST(OnnxExport, UnwritablePathIsAnError) {
  ScratchDir dir;
  const std::string path = dir.file("missing/tiny.onnx");
  EXPECT_TRUE(is_error_with(export_onnx_file(rsqrt_graph(), path), {path, "cannot open"}));
}

TEST(OnnxExport, InitializerForAnUnknownInputIsAnError) {
  OnnxExportOptions options;
  options.initializers.emplace("bias", Array(f32, {4}));
  EXPECT_TRUE(is_error_with(export_onnx(linear_graph(), options).status(),
                            {"'bias'", "not an input of the graph"}));
}

TEST(OnnxExport, InitializerOfTheWrongTypeIsAnError) {
  OnnxExportOptions options;
  options.initializers.emplace("w", Array(f32, {4, 5}));
  EXPECT_TRUE(is_error_with(export_onnx(linear_graph(), options).status(),
                            {"initializer for input 'w'", "f32[4,5]", "f32[5,4]"}));
}

TEST(OnnxExport, ImportedModelWithMismatchedWeightsIsAnError) {
  ImportedModel model{linear_graph(), 1, {}, 17};
  EXPECT_TRUE(
      is_error_with(export_onnx(model).status(), {"2 inputs", "1 data inputs plus 0 weights"}));
}

}  // namespace
}  // namespace kiln
