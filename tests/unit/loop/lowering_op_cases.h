// The lowering cases of every op with a compute definition, as lists that take the check to
// run on each case: lowering_ops_test.cc compares each one-op group with the interpreter (and,
// built as kiln_compiled_ops_tests or kiln_gpu_mapped_ops_tests, runs it compiled or mapped
// onto a GPU); parser_corpus_test.cc reads each group's kernels back from their text. Several
// shapes each (odd sizes, broadcasting, size-1 dims), f32 and f64 where the op allows.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "unit/loop/lowering_check.h"

namespace kiln::loop::testing {

// A check of one node of `op` on inputs of `specs` with `attrs`; `scale` widens the tolerance
// of results compared with the interpreter (lowering_check.h).
class OpCheck {
 public:
  using Fn = std::function<::testing::AssertionResult(Op, const std::vector<InputSpec>&,
                                                      const Attrs&, double)>;
  explicit OpCheck(Fn fn) : fn_(std::move(fn)) {}
  ::testing::AssertionResult operator()(Op op, const std::vector<InputSpec>& specs,
                                        const Attrs& attrs = {}, double scale = 1) const {
    return fn_(op, specs, attrs, scale);
  }

 private:
  Fn fn_;
};

namespace op_cases {

constexpr DType f32 = DType::f32, f64 = DType::f64, i32 = DType::i32, i64 = DType::i64,
                boolean = DType::boolean;

inline void unary_float_ops(const OpCheck& check) {
  const Op signed_ops[] = {Op::neg, Op::abs,  Op::exp,   Op::tanh,     Op::sigmoid,
                           Op::relu, Op::gelu, Op::erf,  Op::sin,      Op::cos,
                           Op::floor, Op::ceil, Op::round, Op::sign,   Op::identity,
                           Op::reciprocal};
  const Op positive_ops[] = {Op::log, Op::sqrt, Op::rsqrt};
  for (DType dtype : {f32, f64}) {
    for (Op op : signed_ops) {
      EXPECT_TRUE(check(op, {in(dtype, {3, 5})})) << op_def(op).name;
    }
    for (Op op : positive_ops) {
      EXPECT_TRUE(check(op, {in(dtype, {7}, Fill::positive)})) << op_def(op).name;
    }
  }
  EXPECT_TRUE(check(Op::gelu, {in(f32, {2, 3})}, {{"approximate", "tanh"}}));
  EXPECT_TRUE(check(Op::exp, {in(f32, {})}));
}

inline void round_is_half_to_even(const OpCheck& check) {
  Array x(f32, Shape{8}, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49999976, -0.49999997});
  EXPECT_TRUE(check(Op::round, {fixed(x)}));
}

inline void unary_integer_and_bool_ops(const OpCheck& check) {
  for (DType dtype : {i32, i64}) {
    for (Op op : {Op::neg, Op::abs, Op::relu, Op::sign, Op::identity}) {
      EXPECT_TRUE(check(op, {in(dtype, {4, 3})})) << op_def(op).name;
    }
  }
  EXPECT_TRUE(check(Op::logical_not, {in(boolean, {5}, Fill::boolean)}));
}

inline void casts(const OpCheck& check) {
  const std::pair<DType, DType> pairs[] = {{f64, f32}, {f32, f64}, {f32, i32}, {f64, i64},
                                           {i32, f32}, {i64, i32}, {f32, boolean},
                                           {boolean, f32}, {f32, DType::f16},
                                           {f32, DType::bf16}};
  for (auto [from, to] : pairs) {
    const Fill fill = from == boolean ? Fill::boolean : Fill::signed_values;
    EXPECT_TRUE(check(Op::cast, {in(from, {2, 5}, fill)}, {{"to", to}}))
        << dtype_name(from) << " -> " << dtype_name(to);
  }
}

inline void binary_ops_broadcast(const OpCheck& check) {
  const Op float_ops[] = {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min, Op::mod};
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{3, 5}, {3, 5}}, {{3, 1}, {1, 5}}, {{2, 3, 4}, {4}}, {{1}, {3, 1, 2}}, {{}, {3}}};
  for (DType dtype : {f32, f64}) {
    for (Op op : float_ops) {
      for (const auto& [a, b] : shapes) {
        EXPECT_TRUE(check(op, {in(dtype, a), in(dtype, b)}))
            << op_def(op).name << " " << dtype_name(dtype);
      }
    }
    EXPECT_TRUE(check(Op::pow, {in(dtype, {3, 4}, Fill::positive),
                                                 in(dtype, {4})}));
    EXPECT_TRUE(check(Op::mod, {in(dtype, {3, 4}), in(dtype, {3, 1})},
                                       {{"fmod", true}}));
  }
  for (DType dtype : {i32, i64}) {
    for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::max, Op::min, Op::mod}) {
      EXPECT_TRUE(check(op, {in(dtype, {4, 5}), in(dtype, {5})}))
          << op_def(op).name << " " << dtype_name(dtype);
    }
    EXPECT_TRUE(check(Op::mod, {in(dtype, {6, 5}), in(dtype, {1, 5})},
                                       {{"fmod", true}}));
  }
}

inline void comparisons_logic_and_where(const OpCheck& check) {
  for (Op op : {Op::equal, Op::less, Op::less_equal, Op::greater, Op::greater_equal}) {
    EXPECT_TRUE(check(op, {in(i64, {3, 4}), in(i64, {4})})) << op_def(op).name;
    EXPECT_TRUE(check(op, {in(f32, {3, 1}), in(f32, {1, 4})}));
    EXPECT_TRUE(check(op, {in(boolean, {5}, Fill::boolean),
                                            in(boolean, {5}, Fill::boolean)}));
  }
  for (Op op : {Op::logical_and, Op::logical_or, Op::logical_xor}) {
    EXPECT_TRUE(check(op, {in(boolean, {2, 3}, Fill::boolean),
                                            in(boolean, {3}, Fill::boolean)}));
  }
  EXPECT_TRUE(check(
      Op::where, {in(boolean, {3, 1}, Fill::boolean), in(f32, {4}), in(f32, {3, 4})}));
}

inline void reductions(const OpCheck& check) {
  const Op ops[] = {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_min,
                    Op::reduce_prod};
  const std::vector<Attrs> attrs = {{},
                                    {{"axes", {1}}},
                                    {{"axes", {0, 2}}, {"keepdims", true}},
                                    {{"axes", {-1}}, {"keepdims", true}}};
  for (DType dtype : {f32, f64}) {
    for (Op op : ops) {
      for (const Attrs& a : attrs) {
        EXPECT_TRUE(check(op, {in(dtype, {3, 1, 5})}, a, 8)) << op_def(op).name;
      }
    }
  }
  EXPECT_TRUE(check(Op::reduce_sum, {in(i32, {4, 3})}, {{"axes", {0}}}));
  EXPECT_TRUE(check(Op::reduce_max, {in(i64, {4, 3})}, {{"axes", {1}}}));
}

inline void arg_reductions(const OpCheck& check) {
  for (Op op : {Op::argmax, Op::argmin}) {
    EXPECT_TRUE(check(op, {in(f32, {3, 5})}, {{"axis", 1}}));
    EXPECT_TRUE(check(op, {in(f64, {4, 2, 3})}, {{"axis", 0}, {"keepdims", true}}));
    // Integer ties: first index, or last with select_last_index.
    EXPECT_TRUE(check(op, {indices(i32, {4, 6}, 0, 2)}, {{"axis", -1}}));
    EXPECT_TRUE(check(op, {indices(i32, {4, 6}, 0, 2)},
                                       {{"axis", -1}, {"select_last_index", true}}));
  }
  const double nan = std::nan("");
  EXPECT_TRUE(check(Op::argmax, {fixed(Array(f64, Shape{2, 4},
                                                              {1, nan, 3, nan, 2, 5, 5, 1}))},
                                     {{"axis", 1}}));
}

inline void reshape_transpose_broadcast(const OpCheck& check) {
  EXPECT_TRUE(check(Op::reshape, {in(f32, {2, 3, 4})}, {{"shape", {4, 6}}}));
  EXPECT_TRUE(check(Op::reshape, {in(f64, {6})}, {{"shape", {3, 1, 2}}}));
  EXPECT_TRUE(check(Op::transpose, {in(f32, {2, 3, 4})}, {{"perm", {2, 0, 1}}}));
  EXPECT_TRUE(check(Op::transpose, {in(i64, {3, 5})}));
  EXPECT_TRUE(check(Op::broadcast_to, {in(f32, {3, 1})}, {{"shape", {2, 3, 4}}}));
}

inline void slice_with_steps_including_negative(const OpCheck& check) {
  EXPECT_TRUE(check(Op::slice, {in(f32, {5, 7})},
                                     {{"starts", {1, 0}}, {"ends", {4, 7}}, {"steps", {1, 2}}}));
  EXPECT_TRUE(check(Op::slice, {in(f64, {5, 7})},
                                     {{"starts", {-1}}, {"ends", {-100}}, {"axes", {1}},
                                      {"steps", {-3}}}));
  EXPECT_TRUE(check(Op::slice, {in(f32, {6})},
                                     {{"starts", {4}}, {"ends", {0}}, {"steps", {-1}}}));
}

inline void concat_and_split(const OpCheck& check) {
  EXPECT_TRUE(check(Op::concat, {in(f32, {2, 3}), in(f32, {2, 1}), in(f32, {2, 0}),
                                                  in(f32, {2, 2})},
                                     {{"axis", 1}}));
  EXPECT_TRUE(check(Op::concat, {in(i64, {1, 3}), in(i64, {2, 3})},
                                     {{"axis", 0}}));
  EXPECT_TRUE(check(Op::split, {in(f32, {3, 7})},
                                     {{"axis", 1}, {"sizes", {2, 0, 5}}}));
}

inline void pad_crops_and_fills(const OpCheck& check) {
  EXPECT_TRUE(check(Op::pad, {in(f32, {3, 4})},
                                     {{"pads", {1, 2, 0, 1}}, {"value", 1.5}}));
  EXPECT_TRUE(check(Op::pad, {in(f64, {4, 5})},
                                     {{"pads", {-1, 2, 1, -2}}}));
  EXPECT_TRUE(check(Op::pad, {in(i32, {2, 2})}, {{"pads", {1, 1, 1, 1}},
                                                                   {"value", 7.0}}));
}

inline void gather_wraps_negative_indices(const OpCheck& check) {
  EXPECT_TRUE(check(Op::gather, {in(f32, {5, 3}), indices(i64, {2, 4}, -5, 5)}));
  EXPECT_TRUE(check(Op::gather, {in(f64, {2, 6, 3}), indices(i32, {4}, -6, 6)},
                                     {{"axis", 1}}));
  EXPECT_TRUE(check(Op::gather, {in(f32, {4, 5}), indices(i64, {}, -5, 5)},
                                     {{"axis", -1}}));
}

inline void one_hot_iota_fill_constant(const OpCheck& check) {
  EXPECT_TRUE(check(Op::one_hot, {indices(i64, {2, 3}, -5, 6)},
                                     {{"depth", 4}, {"axis", 1}, {"on_value", 2.5}}));
  EXPECT_TRUE(check(Op::one_hot, {indices(i32, {5}, 0, 3)},
                                     {{"depth", 3}, {"dtype", DType::i64}}));
  EXPECT_TRUE(check(Op::iota, {}, {{"shape", {3, 4}}, {"axis", 1}}));
  EXPECT_TRUE(check(Op::iota, {}, {{"shape", {5}}, {"dtype", f32}}));
  EXPECT_TRUE(check(Op::fill, {}, {{"shape", {2, 3}}, {"value", 0.1}}));
  EXPECT_TRUE(check(Op::constant, {}, {{"value", Array::scalar(f64, 2.25)}}));
  EXPECT_TRUE(check(Op::constant, {}, {{"value", Array(f32, Shape{1, 1}, {-3})}}));
}

inline void softmax_and_log_softmax(const OpCheck& check) {
  for (Op op : {Op::softmax, Op::log_softmax}) {
    EXPECT_TRUE(check(op, {in(f32, {3, 7})}, {}, 4));
    EXPECT_TRUE(check(op, {in(f64, {2, 5, 3})}, {{"axis", 1}}));
  }
}

inline void normalizations(const OpCheck& check) {
  EXPECT_TRUE(check(Op::layer_norm,
                                     {in(f32, {3, 6}), in(f32, {6}), in(f32, {6})}, {}, 8));
  EXPECT_TRUE(check(Op::layer_norm,
                                     {in(f64, {2, 3, 4}), in(f64, {3, 4}), in(f64, {3, 4})},
                                     {{"axis", 1}}));
  EXPECT_TRUE(check(
      Op::batch_norm_infer,
      {in(f32, {2, 3, 4}), in(f32, {3}), in(f32, {3}), in(f32, {3}), in(f32, {3}, Fill::positive)}));
  EXPECT_TRUE(check(Op::batch_norm_train,
                                     {in(f64, {2, 3, 2, 2}), in(f64, {3}), in(f64, {3})}));
  EXPECT_TRUE(check(Op::batch_norm_train,
                                     {in(f32, {3, 2, 5}), in(f32, {2}), in(f32, {2})}, {}, 8));
}

inline void losses(const OpCheck& check) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    const Attrs attrs = {{"reduction", reduction}};
    EXPECT_TRUE(check(Op::cross_entropy,
                                       {in(f32, {4, 5}), indices(i64, {4}, 0, 5)}, attrs, 8));
    EXPECT_TRUE(check(Op::nll_loss,
                                       {in(f64, {2, 3, 4}), indices(i32, {2, 3}, 0, 4)}, attrs));
    EXPECT_TRUE(check(Op::binary_cross_entropy,
                                       {in(f64, {3, 4}), in(f64, {3, 4}, Fill::positive)}, attrs));
  }
}

inline void matmul(const OpCheck& check) {
  EXPECT_TRUE(check(Op::matmul, {in(f32, {3, 5}), in(f32, {5, 2})}, {}, 8));
  EXPECT_TRUE(check(Op::matmul, {in(f64, {2, 1, 3, 4}), in(f64, {3, 4, 2})}));
  EXPECT_TRUE(check(Op::matmul, {in(f64, {4, 3}), in(f64, {2, 2, 4})},
                                     {{"transpose_a", true}, {"transpose_b", true}}));
  EXPECT_TRUE(check(Op::matmul, {in(i64, {2, 3}), in(i64, {3, 2})}));
}

inline void conv_and_its_gradients(const OpCheck& check) {
  const Attrs attrs = {{"strides", {2, 1}}, {"pads", {1, 0, 1, 2}}, {"dilations", {1, 2}}};
  EXPECT_TRUE(check(Op::conv, {in(f64, {2, 3, 5, 6}), in(f64, {4, 3, 2, 2})},
                                     attrs));
  EXPECT_TRUE(check(Op::conv, {in(f32, {1, 4, 7}), in(f32, {2, 2, 3})},
                                     {{"groups", 2}, {"pads", {1, 1}}}, 8));
  // conv of x [2, 3, 5, 6] by w [4, 3, 2, 2] with `attrs` is [2, 4, 3, 6].
  Attrs data = attrs;
  data.set("input_shape", std::vector<int64_t>{2, 3, 5, 6});
  EXPECT_TRUE(check(Op::conv_grad_data,
                                     {in(f64, {2, 4, 3, 6}), in(f64, {4, 3, 2, 2})}, data));
  Attrs weight = attrs;
  weight.set("weight_shape", std::vector<int64_t>{4, 3, 2, 2});
  EXPECT_TRUE(check(Op::conv_grad_weight,
                                     {in(f64, {2, 3, 5, 6}), in(f64, {2, 4, 3, 6})}, weight));
  EXPECT_TRUE(check(Op::conv_grad_data, {in(f64, {1, 2, 5}), in(f64, {2, 2, 3})},
                                     {{"groups", 2}, {"pads", {1, 1}}, {"input_shape", {1, 4, 5}}}));
  // f32 (a gemm in generated code): pointwise, depthwise, 3-d windows.
  EXPECT_TRUE(check(Op::conv, {in(f32, {2, 5, 3, 4}), in(f32, {7, 5, 1, 1})}, {},
                                     8));
  EXPECT_TRUE(check(Op::conv_grad_data,
                                     {in(f32, {2, 7, 3, 4}), in(f32, {7, 5, 1, 1})},
                                     {{"input_shape", {2, 5, 3, 4}}}, 8));
  EXPECT_TRUE(check(Op::conv_grad_weight,
                                     {in(f32, {2, 5, 3, 4}), in(f32, {2, 7, 3, 4})},
                                     {{"weight_shape", {7, 5, 1, 1}}}, 8));
  const Attrs depthwise = {{"groups", 6}, {"pads", {1, 1, 1, 1}}, {"strides", {2, 2}}};
  EXPECT_TRUE(check(Op::conv, {in(f32, {2, 6, 5, 4}), in(f32, {6, 1, 3, 3})},
                                     depthwise, 8));
  Attrs depthwise_weight = depthwise;
  depthwise_weight.set("weight_shape", std::vector<int64_t>{6, 1, 3, 3});
  // conv of x [2, 6, 5, 4] with `depthwise` is [2, 6, 3, 2].
  EXPECT_TRUE(check(Op::conv_grad_weight,
                                     {in(f32, {2, 6, 5, 4}), in(f32, {2, 6, 3, 2})},
                                     depthwise_weight, 8));
  EXPECT_TRUE(check(Op::conv,
                                     {in(f32, {1, 2, 3, 4, 3}), in(f32, {3, 2, 2, 1, 2})},
                                     {{"pads", {0, 1, 1, 1, 0, 0}}}, 8));
  // 1-D with many channels per group: one gemm per tap over the padded input (padding on
  // both sides, a dilation; two groups; more padding than a tap reads).
  EXPECT_TRUE(check(Op::conv, {in(f32, {2, 64, 9}), in(f32, {5, 64, 3})},
                    {{"pads", {2, 1}}, {"dilations", {2}}}, 8));
  EXPECT_TRUE(check(Op::conv, {in(f32, {1, 128, 7}), in(f32, {4, 64, 4})},
                    {{"groups", 2}, {"pads", {3, 0}}}, 8));
  EXPECT_TRUE(check(Op::conv, {in(f32, {1, 64, 3}), in(f32, {2, 64, 2})},
                    {{"pads", {4, 4}}}, 8));
}

inline void sparse_times_dense(const OpCheck& check) {
  // A [3, 4] with rows {0: (1, 3)}, {1: none}, {2: (0, 1, 2)}.
  const Array row_ptr(i64, Shape{4}, {0, 2, 2, 5});
  const Array cols(i32, Shape{5}, {1, 3, 0, 1, 2});
  EXPECT_TRUE(check(Op::spmm, {fixed(row_ptr), fixed(cols), in(f64, {5}),
                                                in(f64, {4, 3})}));
  EXPECT_TRUE(check(Op::spmm, {fixed(row_ptr), fixed(cols), in(f32, {5}),
                                                in(f32, {3, 2})},
                                     {{"transpose", true}, {"num_cols", 4}}));
  // Transposed, as a GCN's backward pass multiplies: columns hit by several rows accumulate in
  // row order, column 4 by none (its output row is zero), row 3 has no non-zero. A [5, 6].
  const Array wide_ptr(i32, Shape{6}, {0, 3, 5, 8, 8, 11});
  const Array wide_cols(i64, Shape{11}, {0, 2, 5, 2, 3, 0, 1, 5, 1, 2, 5});
  for (DType dtype : {f32, f64}) {
    EXPECT_TRUE(check(Op::spmm, {fixed(wide_ptr), fixed(wide_cols),
                                                  in(dtype, {11}), in(dtype, {5, 7})},
                                       {{"transpose", true}, {"num_cols", 6}}, 4))
        << dtype_name(dtype);
  }
}

inline void pooling(const OpCheck& check) {
  const Attrs attrs = {{"kernel", {2, 3}}, {"strides", {2, 1}}, {"pads", {1, 1, 0, 2}}};
  EXPECT_TRUE(check(Op::max_pool, {in(f32, {2, 2, 5, 4})}, attrs));
  for (bool include_pad : {false, true}) {
    Attrs avg = attrs;
    avg.set("count_include_pad", include_pad);
    EXPECT_TRUE(check(Op::avg_pool, {in(f64, {1, 2, 5, 4})}, avg));
    avg.set("input_shape", std::vector<int64_t>{1, 2, 5, 4});
    // avg_pool of [1, 2, 5, 4] with `attrs` is [1, 2, 3, 5].
    EXPECT_TRUE(check(Op::avg_pool_grad, {in(f64, {1, 2, 3, 5})}, avg));
  }
  EXPECT_TRUE(check(Op::max_pool, {in(f64, {1, 1, 7})},
                                     {{"kernel", {3}}, {"strides", {2}}}));
}

// max_pool_grad routes each dy element to its window's first maximum; dy is random, x random
// (distinct values) or fixed with ties. Shapes: grad_out is max_pool's output for x.
inline void max_pool_grad(const OpCheck& check) {
  // 1-d, overlapping windows (stride < kernel) with padding: x [2, 3, 7] pools to [2, 3, 4].
  EXPECT_TRUE(check(Op::max_pool_grad, {in(f64, {2, 3, 7}), in(f64, {2, 3, 4})},
                                     {{"kernel", {3}}, {"strides", {2}}, {"pads", {1, 1}}}));
  EXPECT_TRUE(check(Op::max_pool_grad, {in(f32, {2, 3, 7}), in(f32, {2, 3, 4})},
                                     {{"kernel", {3}}, {"strides", {2}}, {"pads", {1, 1}}}, 4));
  // Stride > kernel: elements between windows get 0. [1, 2, 9] pools to [1, 2, 3].
  EXPECT_TRUE(check(Op::max_pool_grad, {in(f64, {1, 2, 9}), in(f64, {1, 2, 3})},
                                     {{"kernel", {2}}, {"strides", {3}}, {"pads", {1, 0}}}));
  // Every element in up to 5 windows: [1, 1, 5] with kernel 5, stride 1, pads 2 pools to 5.
  EXPECT_TRUE(check(Op::max_pool_grad, {in(f64, {1, 1, 5}), in(f64, {1, 1, 5})},
                                     {{"kernel", {5}}, {"pads", {2, 2}}}));
  // 2-d, odd sizes: [2, 2, 5, 4] pools to [2, 2, 3, 5].
  const Attrs overlapping = {{"kernel", {2, 3}}, {"strides", {2, 1}}, {"pads", {1, 1, 0, 2}}};
  EXPECT_TRUE(check(Op::max_pool_grad,
                                     {in(f64, {2, 2, 5, 4}), in(f64, {2, 2, 3, 5})}, overlapping));
  EXPECT_TRUE(check(Op::max_pool_grad,
                                     {in(f32, {2, 2, 5, 4}), in(f32, {2, 2, 3, 5})}, overlapping,
                                     4));
  // 2-d, stride > kernel: [1, 2, 7, 5] pools to [1, 2, 3, 2].
  EXPECT_TRUE(check(Op::max_pool_grad,
                                     {in(f64, {1, 2, 7, 5}), in(f64, {1, 2, 3, 2})},
                                     {{"kernel", {2, 2}}, {"strides", {3, 3}},
                                      {"pads", {1, 0, 0, 1}}}));
  // 3-d: [1, 1, 3, 4, 5] pools to [1, 1, 3, 2, 3].
  EXPECT_TRUE(check(Op::max_pool_grad,
                                     {in(f64, {1, 1, 3, 4, 5}), in(f64, {1, 1, 3, 2, 3})},
                                     {{"kernel", {2, 2, 3}}, {"strides", {1, 2, 2}},
                                      {"pads", {0, 1, 1, 1, 0, 1}}}));
}

inline void max_pool_grad_routes_ties_to_the_first_maximum(const OpCheck& check) {
  const Attrs pad1 = {{"kernel", {3}}, {"pads", {1, 1}}};
  // Windows (padding as _): [_ 1 3] [1 3 3] [3 3 2] [3 2 3] [2 3 3] [3 3 _]: maxima at 1 1 1 2
  // 4 4, never the later 3 of a tie.
  EXPECT_TRUE(check(
      Op::max_pool_grad,
      {fixed(Array(f64, Shape{1, 1, 6}, {1, 3, 3, 2, 3, 3})), in(f64, {1, 1, 6})}, pad1));
  // -0 and 0 tie; a window of -inf picks its first real element, never the padding.
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(check(
      Op::max_pool_grad,
      {fixed(Array(f32, Shape{2, 1, 4}, {-0.0, 0.0, 0.0, -0.0, -inf, -inf, -inf, -inf})),
       in(f32, {2, 1, 4})},
      pad1));
  // NaN wins, the first NaN of the window.
  const double nan = std::nan("");
  EXPECT_TRUE(check(
      Op::max_pool_grad,
      {fixed(Array(f64, Shape{1, 1, 6}, {1, nan, 5, nan, 2, 7})), in(f64, {1, 1, 6})}, pad1));
  // 2-d, all equal: every window's first real tap, with padding and overlap.
  EXPECT_TRUE(check(
      Op::max_pool_grad,
      {fixed(Array(f64, Shape{1, 1, 3, 5}, std::vector<double>(15, 1.5))), in(f64, {1, 1, 3, 4})},
      {{"kernel", {2, 3}}, {"strides", {1, 1}}, {"pads", {1, 0, 0, 1}}}));
  // 2-d, ties in pairs: rows {0 2 2 0 1}, {2 2 1 1 0}, {0 1 1 2 2}.
  EXPECT_TRUE(check(
      Op::max_pool_grad,
      {fixed(Array(f32, Shape{1, 1, 3, 5}, {0, 2, 2, 0, 1, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2})),
       in(f32, {1, 1, 2, 2})},
      {{"kernel", {2, 2}}, {"strides", {1, 2}}, {"pads", {0, 0, 0, 0}}}));
}

// scatter_add adds every update whose index names the element: repeated indices accumulate,
// negative indices wrap as gather's. updates have gather's output shape.
inline void scatter_add(const OpCheck& check) {
  // Axis 0, 7 indices into 5 rows: some repeat.
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f32, {5, 3}), indices(i64, {7}, -5, 5), in(f32, {7, 3})}, {}, 4));
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f64, {5, 3}), indices(i32, {7}, -5, 5), in(f64, {7, 3})}));
  // A middle axis with 2-d indices: data [2, 4, 3], indices [2, 3], updates [2, 2, 3, 3].
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f64, {2, 4, 3}), indices(i32, {2, 3}, -4, 4), in(f64, {2, 2, 3, 3})},
      {{"axis", 1}}));
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f32, {2, 4, 3}), indices(i64, {2, 3}, -4, 4), in(f32, {2, 2, 3, 3})},
      {{"axis", -2}}, 4));
  // The last axis; a scalar index; the embedding gradient's shape (zeros, tokens [3, 5]).
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f64, {3, 4}), indices(i64, {6}, 0, 4), in(f64, {3, 6})},
      {{"axis", -1}}));
  EXPECT_TRUE(check(
      Op::scatter_add, {in(f32, {4, 3}), indices(i64, {}, -4, 4), in(f32, {3})}));
  EXPECT_TRUE(check(
      Op::scatter_add,
      {fixed(Array(f32, Shape{10, 4})), indices(i32, {3, 5}, 0, 10), in(f32, {3, 5, 4})}, {}, 8));
  // Fixed indices: 2 three times (once as -1), 0 never.
  EXPECT_TRUE(check(
      Op::scatter_add,
      {in(f64, {3, 2}), fixed(Array(i64, Shape{4}, {2, 1, -1, 2})), in(f64, {4, 2})}));
  EXPECT_TRUE(check(
      Op::scatter_add, {in(i64, {4, 2}), indices(i64, {5}, -4, 4), in(i64, {5, 2})}));
  EXPECT_TRUE(check(Op::scatter_add, {in(boolean, {4, 2}, Fill::boolean),
                                                     indices(i64, {5}, -4, 4),
                                                     in(boolean, {5, 2}, Fill::boolean)}));
}

struct CaseList {
  const char* name;
  void (*run)(const OpCheck& check);
};

inline constexpr CaseList kAll[] = {
    {"UnaryFloatOps", unary_float_ops},
    {"RoundIsHalfToEven", round_is_half_to_even},
    {"UnaryIntegerAndBoolOps", unary_integer_and_bool_ops},
    {"Cast", casts},
    {"BinaryOpsBroadcast", binary_ops_broadcast},
    {"ComparisonsLogicAndWhere", comparisons_logic_and_where},
    {"Reductions", reductions},
    {"ArgReductions", arg_reductions},
    {"ReshapeTransposeBroadcast", reshape_transpose_broadcast},
    {"SliceWithStepsIncludingNegative", slice_with_steps_including_negative},
    {"ConcatAndSplit", concat_and_split},
    {"PadCropsAndFills", pad_crops_and_fills},
    {"GatherWrapsNegativeIndices", gather_wraps_negative_indices},
    {"OneHotIotaFillConstant", one_hot_iota_fill_constant},
    {"SoftmaxAndLogSoftmax", softmax_and_log_softmax},
    {"Normalizations", normalizations},
    {"Losses", losses},
    {"Matmul", matmul},
    {"ConvAndItsGradients", conv_and_its_gradients},
    {"SparseTimesDense", sparse_times_dense},
    {"Pooling", pooling},
    {"MaxPoolGrad", max_pool_grad},
    {"MaxPoolGradRoutesTiesToTheFirstMaximum", max_pool_grad_routes_ties_to_the_first_maximum},
    {"ScatterAdd", scatter_add},
};

}  // namespace op_cases
}  // namespace kiln::loop::testing
