// Schedule directives: the text form, each directive on hand-built and lowered kernels (the
// scheduled kernel gives exactly the original's results in the loop evaluator), the legality
// errors, and random directive sequences on random lowered kernels.
#include "loop/schedule.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <variant>

#include "loop/schedule_analysis.h"
#include "unit/loop/schedule_check.h"
#include "unit/test_util.h"

namespace kiln::loop {
namespace {

using ::kiln::testing::contains_all;
using ::kiln::testing::is_error_with;
using testing::find;
using testing::loops_of;
using testing::lower;
using testing::lower_outputs;
using testing::same_results;

Kernel softmax(int64_t rows, int64_t cols) {
  return lower([&](GraphBuilder& b) { return b.softmax(b.input("x", DType::f32, {rows, cols})); });
}
Kernel layer_norm(int64_t rows, int64_t cols) {
  return lower([&](GraphBuilder& b) {
    return b.layer_norm(b.input("x", DType::f32, {rows, cols}), b.input("s", DType::f32, {cols}),
                        b.input("c", DType::f32, {cols}));
  });
}
Kernel add_broadcast(int64_t rows, int64_t cols, DType dtype = DType::f32) {
  return lower([&](GraphBuilder& b) {
    return b.add(b.input("x", dtype, {rows, cols}), b.input("y", dtype, {1, cols}));
  });
}
Kernel row_sum(int64_t rows, int64_t cols) {
  return lower([&](GraphBuilder& b) { return b.sum(b.input("x", DType::f32, {rows, cols}), {1}); });
}
Kernel transpose(int64_t rows, int64_t cols) {
  return lower([&](GraphBuilder& b) {
    return b.transpose(b.input("x", DType::f32, {rows, cols}), {1, 0});
  });
}
// An integer matmul keeps the naive reduce definition; floating matmuls lower to gemm
// statements.
Kernel matmul(int64_t m, int64_t k, int64_t n, DType dtype = DType::i32) {
  return lower([&](GraphBuilder& b) {
    return b.matmul(b.input("a", dtype, {m, k}), b.input("b", dtype, {k, n}));
  });
}

Expected<Kernel> apply_text(const Kernel& kernel, std::string_view text) {
  Expected<Schedule> schedule = parse_schedule(text);
  if (!schedule) return schedule.status();
  return apply_schedule(kernel, *schedule);
}

// Applies `text` and checks the result against the original.
::testing::AssertionResult schedules_equivalently(const Kernel& kernel, std::string_view text) {
  Expected<Kernel> scheduled = apply_text(kernel, text);
  if (!scheduled) {
    return ::testing::AssertionFailure() << scheduled.status().message() << "\n" << print(kernel);
  }
  return same_results(kernel, *scheduled);
}

// for (i, 0, n) out[i] = in[i] * 2 + 1, hand-built (no simplification: loops of extent 1 stay).
Kernel scale_kernel(int64_t n) {
  const Buffer in = Buffer::param("in", DType::f32, {n});
  const Buffer out = Buffer::param("out", DType::f32, {n});
  const Expr i = var("i");
  return {"scale", {in, out}, for_loop("i", 0, n, store(out, i, load(in, i) * 2.0 + 1.0))};
}

// --- Text form -------------------------------------------------------------------------------

TEST(ScheduleText, PrintsOneDirectivePerLineAndParsesBack) {
  const Schedule schedule{{Split{"i1", 8, "i1.o", "i1.i"}, Reorder{{"i1.o", "i0"}},
                           Fuse{"i0", "i1", "i0_i1"}, Vectorize{"i1.i"}, Parallel{"i0_i1"},
                           Unroll{"k"}, Hoist{"i0"}, Cache{"in0", "i0", "in0.c"},
                           Merge{"i0", "i3"}}};
  const std::string text = print(schedule);
  EXPECT_EQ(text,
            "split i1 8 i1.o i1.i\n"
            "reorder i1.o i0\n"
            "fuse i0 i1 i0_i1\n"
            "vectorize i1.i\n"
            "parallel i0_i1\n"
            "unroll k\n"
            "hoist i0\n"
            "cache in0 i0 in0.c\n"
            "merge i0 i3\n");
  Expected<Schedule> parsed = parse_schedule(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
  EXPECT_EQ(*parsed, schedule);
  EXPECT_EQ(print(*parsed), text);
  EXPECT_EQ(print(Schedule{}), "");
}

TEST(ScheduleText, SkipsBlankLinesCommentsAndExtraSpace) {
  Expected<Schedule> parsed =
      parse_schedule("# a softmax schedule\n\n  hoist   i0\t\r\nparallel i0\nsplit i1 8 a b");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().message();
  EXPECT_EQ(*parsed, (Schedule{{Hoist{"i0"}, Parallel{"i0"}, Split{"i1", 8, "a", "b"}}}));
}

TEST(ScheduleText, ErrorsGiveLineAndColumn) {
  EXPECT_TRUE(is_error_with(parse_schedule("hoist i0\nfrobnicate i0").status(),
                            {"2:1:", "unknown directive 'frobnicate'"}));
  EXPECT_TRUE(is_error_with(parse_schedule("split i1 x a b").status(),
                            {"1:10:", "positive integer factor", "'x'"}));
  EXPECT_TRUE(is_error_with(parse_schedule("split i1 0 a b").status(), {"1:10:"}));
  EXPECT_TRUE(is_error_with(parse_schedule("split i1 -3 a b").status(), {"1:10:"}));
  EXPECT_TRUE(
      is_error_with(parse_schedule("split i1 99999999999999999999 a b").status(), {"1:10:"}));
  EXPECT_TRUE(is_error_with(parse_schedule("vectorize 3x").status(), {"1:11:", "'3x'", "name"}));
  EXPECT_TRUE(is_error_with(parse_schedule("parallel .a").status(), {"1:10:"}));
  EXPECT_TRUE(is_error_with(parse_schedule("fuse a b").status(), {"1:1:", "3 arguments"}));
  EXPECT_TRUE(is_error_with(parse_schedule("parallel i0 i1").status(), {"1:13:", "1 argument"}));
  EXPECT_TRUE(is_error_with(parse_schedule("reorder i0").status(), {"1:1:", "two loops"}));
  EXPECT_TRUE(is_error_with(parse_schedule("cache in0 i0 in0;rm").status(), {"1:14:"}));
}

// --- split -----------------------------------------------------------------------------------

TEST(Split, DivisibleExtentMakesTwoLoopsWithoutTail) {
  const Kernel kernel = scale_kernel(16);
  Expected<Kernel> split = apply_directive(kernel, Split{"i", 4, "i.o", "i.i"});
  ASSERT_TRUE(split.has_value()) << split.status().message();
  const auto loops = loops_of(split->body);
  ASSERT_EQ(loops.size(), 2u) << print(*split);
  EXPECT_EQ(loops[0].var, "i.o");
  EXPECT_EQ(as_const_int(loops[0].extent), 4);
  EXPECT_EQ(loops[1].var, "i.i");
  EXPECT_EQ(as_const_int(loops[1].extent), 4);
  EXPECT_TRUE(same_results(kernel, *split));
}

TEST(Partition, ALoopBecomesItsRangesInOrder) {
  const Kernel kernel = scale_kernel(10);
  Expected<Kernel> pieces = apply_text(kernel, "partition i 3 7");
  ASSERT_TRUE(pieces.has_value()) << pieces.status().message();
  const Block* parts = pieces->body.as<Block>();
  ASSERT_NE(parts, nullptr) << print(*pieces);
  ASSERT_EQ(parts->stmts.size(), 3u);
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 3}, {3, 4}, {7, 3}};
  for (size_t p = 0; p < ranges.size(); ++p) {
    const For* piece = parts->stmts[p].as<For>();
    ASSERT_NE(piece, nullptr);
    EXPECT_EQ(piece->var, "i");
    EXPECT_EQ(as_const_int(piece->min), ranges[p].first);
    EXPECT_EQ(as_const_int(piece->extent), ranges[p].second);
  }
  EXPECT_TRUE(same_results(kernel, *pieces));
  EXPECT_TRUE(schedules_equivalently(kernel, "partition i 5\nsplit i 2 i.o i.i\nvectorize i.i"));
  for (const char* wrong :
       {"partition i 0", "partition i 10", "partition i 5 5", "partition i 7 3"}) {
    EXPECT_TRUE(is_error_with(apply_text(kernel, wrong).status(), {"strictly inside"})) << wrong;
  }
  EXPECT_TRUE(is_error_with(parse_schedule("partition i").status(), {"partition VAR N..."}));
  EXPECT_TRUE(is_error_with(parse_schedule("partition i x").status(), {"expected an integer"}));
}

TEST(Split, RemainderBecomesATailLoopNotAGuard) {
  const Kernel kernel = scale_kernel(7);
  Expected<Kernel> split = apply_directive(kernel, Split{"i", 3, "i.o", "i.i"});
  ASSERT_TRUE(split.has_value()) << split.status().message();
  const Block* parts = split->body.as<Block>();
  ASSERT_NE(parts, nullptr) << print(*split);
  ASSERT_EQ(parts->stmts.size(), 2u);
  const For* main = parts->stmts[0].as<For>();
  const For* tail = parts->stmts[1].as<For>();
  ASSERT_TRUE(main != nullptr && tail != nullptr);
  EXPECT_EQ(as_const_int(main->extent), 2);
  ASSERT_NE(main->body.as<For>(), nullptr);
  EXPECT_EQ(as_const_int(main->body.as<For>()->extent), 3);
  EXPECT_NE(main->body.as<For>()->body.as<Store>(), nullptr) << "no guard inside the inner loop";
  EXPECT_EQ(tail->var, "i");
  EXPECT_EQ(as_const_int(tail->min), 6);
  EXPECT_EQ(as_const_int(tail->extent), 1);
  EXPECT_TRUE(same_results(kernel, *split));
  EXPECT_TRUE(schedules_equivalently(kernel, "split i 3 a b\nvectorize b\nunroll i"));
}

TEST(Split, FactorLargerThanTheExtentLeavesOnlyTheTail) {
  const Kernel kernel = scale_kernel(5);
  EXPECT_TRUE(schedules_equivalently(kernel, "split i 8 a b\nvectorize b"));
  EXPECT_TRUE(schedules_equivalently(scale_kernel(1), "split i 4 a b\nvectorize b\nunroll i"));
  EXPECT_TRUE(schedules_equivalently(scale_kernel(1), "vectorize i"));
}

TEST(Split, WorksOnLoweredKernelsAndTheirInnerLoops) {
  EXPECT_TRUE(schedules_equivalently(add_broadcast(5, 13), "split i1 4 i1.o i1.i\nvectorize i1.i"));
  EXPECT_TRUE(schedules_equivalently(add_broadcast(5, 13), "split i0 2 a b\nsplit i1 4 c d"));
  EXPECT_TRUE(schedules_equivalently(softmax(3, 7), "split i1 4 i1.o i1.i"));
  EXPECT_TRUE(schedules_equivalently(matmul(5, 3, 6), "split i0 2 i0.o i0.i\nsplit i1 4 x y"));
  EXPECT_TRUE(schedules_equivalently(row_sum(9, 4), "split i0 4 a b\nunroll b"));
  EXPECT_TRUE(schedules_equivalently(transpose(3, 5), "split i1 2 a b\nunroll b"));
}

TEST(Split, NeedsConstantBoundsAndFreshNames) {
  const Kernel kernel = scale_kernel(8);
  EXPECT_TRUE(is_error_with(apply_directive(kernel, Split{"j", 2, "a", "b"}).status(),
                            {"split j 2 a b", "no loop named j"}));
  EXPECT_TRUE(is_error_with(apply_directive(kernel, Split{"i", 2, "i", "b"}).status(),
                            {"name i is already used"}));
  EXPECT_TRUE(
      is_error_with(apply_directive(kernel, Split{"i", 2, "a", "a"}).status(), {"given twice"}));
  EXPECT_TRUE(
      is_error_with(apply_directive(kernel, Split{"i", 0, "a", "b"}).status(), {"at least 1"}));
  EXPECT_TRUE(is_error_with(apply_directive(kernel, Split{"i", 2, "a b", "c"}).status(),
                            {"not a valid loop name"}));
  const Buffer out = Buffer::param("out", DType::f32, {8});
  const Kernel symbolic{
      "k",
      {out},
      let_stmt("n", 8, for_loop("i", 0, var("n"), store(out, var("i"), make_float(1))))};
  EXPECT_TRUE(is_error_with(apply_directive(symbolic, Split{"i", 2, "a", "b"}).status(),
                            {"constant loop bounds", "n"}));
}

// --- reorder, fuse ---------------------------------------------------------------------------

TEST(Reorder, PermutesAPerfectNest) {
  const Kernel kernel = transpose(4, 6);
  Expected<Kernel> reordered = apply_text(kernel, "reorder i1 i0");
  ASSERT_TRUE(reordered.has_value()) << reordered.status().message();
  const auto loops = loops_of(reordered->body);
  ASSERT_EQ(loops.size(), 2u);
  EXPECT_EQ(loops[0].var, "i1");
  EXPECT_EQ(loops[1].var, "i0");
  EXPECT_TRUE(same_results(kernel, *reordered));
  EXPECT_TRUE(schedules_equivalently(matmul(3, 4, 5), "reorder i1 i0"));
  EXPECT_TRUE(schedules_equivalently(matmul(3, 4, 5), "reorder i0 i1"));  // the same order
  EXPECT_TRUE(schedules_equivalently(
      lower([](GraphBuilder& b) {
        return b.add(b.input("x", DType::f32, {2, 3, 4}), b.input("y", DType::f32, {3, 1}));
      }),
      "reorder i2 i0 i1\nsplit i0 2 a b\nreorder b i1"));
}

TEST(Reorder, RejectsNonPerfectNestsAndDependences) {
  EXPECT_TRUE(is_error_with(apply_text(softmax(4, 6), "hoist i0\nreorder i1 i0").status(),
                            {"directive 2", "reorder i1 i0", "not perfectly nested"}));
  EXPECT_TRUE(is_error_with(apply_text(add_broadcast(4, 6), "reorder i0 i9").status(),
                            {"loop i1 sits between"}));
  EXPECT_TRUE(is_error_with(apply_text(add_broadcast(4, 6), "reorder i1 i1").status(),
                            {"names a loop twice"}));
  // for i, j: acc[j] = acc[j] + ... reads and writes one element per j across all i.
  const Buffer acc = Buffer::param("acc", DType::f32, {3});
  const Expr i = var("i"), j = var("j");
  const Kernel accumulate{
      "acc",
      {acc},
      for_loop("i", 0, 4,
               for_loop("j", 0, 3, store(acc, j, load(acc, j) * 0.5 + cast(DType::f32, i))))};
  EXPECT_TRUE(is_error_with(apply_directive(accumulate, Reorder{{"j", "i"}}).status(),
                            {"every iteration of i accesses acc[j]"}));
}

TEST(Fuse, MakesOneLoopOverBothExtents) {
  const Kernel kernel = matmul(3, 4, 5);
  Expected<Kernel> fused = apply_directive(kernel, Fuse{"i0", "i1", "f"});
  ASSERT_TRUE(fused.has_value()) << fused.status().message();
  const auto loops = loops_of(fused->body);
  ASSERT_EQ(loops.size(), 1u);
  EXPECT_EQ(as_const_int(loops[0].extent), 15);
  EXPECT_TRUE(same_results(kernel, *fused));
  EXPECT_TRUE(schedules_equivalently(softmax(3, 7), "fuse i0 i1 f\nparallel f"));
  EXPECT_TRUE(schedules_equivalently(add_broadcast(7, 3), "fuse i0 i1 f"));
  EXPECT_TRUE(schedules_equivalently(
      lower([](GraphBuilder& b) {
        return b.add(b.input("x", DType::f32, {2, 3, 4}), b.input("y", DType::f32, {3, 1}));
      }),
      "fuse i0 i1 a\nfuse a i2 b\nparallel b\nsplit b 4 c d\nvectorize d"));
}

TEST(Fuse, NeedsTheInnerLoopDirectlyInside) {
  EXPECT_TRUE(is_error_with(apply_text(softmax(4, 6), "hoist i0\nfuse i0 i1 f").status(),
                            {"fuse i0 i1 f", "not exactly loop i1"}));
  EXPECT_TRUE(
      is_error_with(apply_text(matmul(2, 2, 2), "fuse i1 i0 f").status(), {"not exactly loop i0"}));
  EXPECT_TRUE(
      is_error_with(apply_text(matmul(2, 2, 2), "fuse i0 i1 k2").status(), {"already used"}));
}

// --- vectorize, parallel, unroll ---------------------------------------------------------------

TEST(Vectorize, NeedsAConstantExtentAndIndependentIterations) {
  const Buffer out = Buffer::param("out", DType::f32, {8});
  const Kernel symbolic{
      "k",
      {out},
      let_stmt("n", 8, for_loop("i", 0, var("n"), store(out, var("i"), make_float(1))))};
  EXPECT_TRUE(is_error_with(apply_directive(symbolic, Vectorize{"i"}).status(),
                            {"vectorize i", "positive constant extent", "extent n"}));
  EXPECT_TRUE(
      is_error_with(apply_directive(symbolic, Unroll{"i"}).status(), {"positive constant extent"}));
  EXPECT_TRUE(apply_directive(symbolic, Parallel{"i"}).has_value());
  // A prefix sum carries a value from one iteration to the next.
  const Buffer a = Buffer::param("a", DType::f32, {8});
  const Expr i = var("i");
  const Kernel prefix{"prefix", {a}, for_loop("i", 1, 7, store(a, i, load(a, i - 1) + load(a, i)))};
  EXPECT_TRUE(is_error_with(apply_directive(prefix, Vectorize{"i"}).status(),
                            {"may touch the same element of a"}));
  EXPECT_TRUE(schedules_equivalently(add_broadcast(3, 8), "vectorize i1"));
  EXPECT_TRUE(is_error_with(apply_text(add_broadcast(3, 8), "parallel i1\nvectorize i0").status(),
                            {"directive 2"}));
}

// `vectorize` of a reduction variable marks the reduction (printed `vectorized sum(...)`);
// only an innermost one, and the evaluator's results do not change.
TEST(Vectorize, MarksInnermostReductionsByTheirVariable) {
  const Kernel sums = row_sum(5, 40);
  Expected<Kernel> marked = apply_text(sums, "vectorize k1");
  ASSERT_TRUE(marked.has_value()) << marked.status().message() << print(sums);
  EXPECT_TRUE(contains_all(print(*marked), {"vectorized sum(k1, 0, 40,"})) << print(*marked);
  EXPECT_TRUE(same_results(sums, *marked));
  EXPECT_TRUE(is_error_with(apply_directive(sums, Vectorize{"k7"}).status(),
                            {"no loop or reduction named k7"}));
  // A reduction holding another is not innermost.
  const Buffer x = Buffer::param("x", DType::f32, {4, 6}),
               out = Buffer::param("out", DType::f32, {1});
  const Kernel nested{
      "nested",
      {x, out},
      store(out, 0, sum("k0", 0, 4, sum("k1", 0, 6, load(x, var("k0") * 6 + var("k1")))))};
  EXPECT_TRUE(is_error_with(apply_directive(nested, Vectorize{"k0"}).status(),
                            {"reduction k0 holds another reduction"}));
  EXPECT_TRUE(apply_directive(nested, Vectorize{"k1"}).has_value());
  // Inside a vectorized loop it would nest one vector construct in another.
  EXPECT_TRUE(is_error_with(apply_text(softmax(4, 32), "vectorize i1\nvectorize k4").status(),
                            {"a vectorized reduction inside a vectorized loop"}));
}

TEST(Parallel, ProvesIndependenceOrRefuses) {
  const Buffer x = Buffer::param("x", DType::f32, {8});
  const Buffer acc = Buffer::param("acc", DType::f32, {1});
  const Buffer out = Buffer::param("out", DType::f32, {16});
  const Expr i = var("i"), j = var("j");
  // Every iteration adds into acc[0].
  const Kernel sum_all{
      "sum", {x, acc}, for_loop("i", 0, 8, store(acc, 0, load(acc, 0) + load(x, i)))};
  EXPECT_TRUE(is_error_with(apply_directive(sum_all, Parallel{"i"}).status(),
                            {"parallel i", "every iteration of i accesses acc[0]"}));
  // Rows of four elements two apart overlap.
  const Kernel overlapping{
      "overlap",
      {out},
      for_loop("i", 0, 6, for_loop("j", 0, 4, store(out, i * 2 + j, make_float(1))))};
  EXPECT_TRUE(
      is_error_with(apply_directive(overlapping, Parallel{"i"}).status(), {"stride 2", "span 3"}));
  EXPECT_TRUE(apply_directive(overlapping, Parallel{"j"}).has_value());
  // i % 4 repeats.
  const Kernel wrapping{"wrap", {out}, for_loop("i", 0, 8, store(out, i % 4, make_float(1)))};
  EXPECT_TRUE(is_error_with(apply_directive(wrapping, Parallel{"i"}).status(), {"repeat"}));
  const Kernel in_range{"fits", {out}, for_loop("i", 0, 4, store(out, i % 4, make_float(1)))};
  EXPECT_TRUE(apply_directive(in_range, Parallel{"i"}).has_value());
  // Reading and writing the iteration's own element is fine.
  const Kernel in_place{"scale", {x}, for_loop("i", 0, 8, store(x, i, load(x, i) * 2.0))};
  EXPECT_TRUE(schedules_equivalently(in_place, "parallel i"));
  // A local buffer allocated inside the loop is private to the iteration.
  const Buffer t = Buffer::local("t", DType::f32, 1);
  const Kernel private_temp{"temp",
                            {x},
                            for_loop("i", 0, 8,
                                     allocate(t, block({store(t, 0, load(x, i) + 1.0f),
                                                        store(x, i, load(t, 0) * load(t, 0))})))};
  EXPECT_TRUE(schedules_equivalently(private_temp, "parallel i\nunroll i"));
  EXPECT_TRUE(
      is_error_with(apply_directive(private_temp, Parallel{"k"}).status(), {"no loop named k"}));
}

TEST(Parallel, ProvesATransposeAndAScatterRowIndependent) {
  const Buffer x = Buffer::param("x", DType::f32, {4, 8});
  const Buffer out = Buffer::param("out", DType::f32, {8, 4});
  const Expr i = var("i"), j = var("j");
  // out[j][i] = x[i][j] for j inside i: j's stride 4 spans more than i's stride 1, but the
  // strides 1 (i, 4 values) and 4 (j) form a mixed radix, so no element is touched twice.
  const Kernel transpose{
      "transpose",
      {x, out},
      for_loop("i", 0, 4, for_loop("j", 0, 8, store(out, j * 4 + i, load(x, i * 8 + j))))};
  EXPECT_TRUE(schedules_equivalently(transpose, "parallel i"));
  // With j's stride 3 the rows of i interleave: i = 3, j = 0 and i = 0, j = 1 meet.
  const Buffer wide = Buffer::param("wide", DType::f32, {40});
  const Kernel interleaved{
      "interleaved",
      {x, wide},
      for_loop("i", 0, 4, for_loop("j", 0, 8, store(wide, j * 3 + i, load(x, i * 8 + j))))};
  EXPECT_FALSE(apply_directive(interleaved, Parallel{"i"}).has_value());
  // out[idx[u]][c] += x[u][c]: the row is loaded from indices the loop does not write, so it is
  // fixed for the loop over c, whose iterations are independent; those over u are not.
  const Buffer idx = Buffer::param("idx", DType::i64, {4});
  const Expr u = var("u"), c = var("c");
  const Expr row = min(max(load(idx, u), 0), 7);
  const Kernel scatter{
      "scatter",
      {idx, x, out},
      for_loop("u", 0, 4,
               for_loop("c", 0, 4,
                        store(out, row * 4 + c, load(out, row * 4 + c) + load(x, u * 8 + c))))};
  EXPECT_TRUE(apply_directive(scatter, Parallel{"c"}).has_value());
  EXPECT_FALSE(apply_directive(scatter, Parallel{"u"}).has_value());
}

TEST(Parallel, ProvesImagesIndependentInsideRowsOfABatchedColumnBuffer) {
  // col[(ch*2 + kx) * 12 + n*4 + p] = x[n][ch][p + kx] for 3 images n of 4 positions p, side by
  // side in rows of 12: ch's stride 24 spans more than n's 4, but it and kx's 12 (and the
  // constant 13 = 12 + 1 of the shifted copy) are whole rows, and n*4 + p stays inside a row.
  const Buffer x = Buffer::param("x", DType::f32, {3, 2, 5});
  const Buffer col = Buffer::param("col", DType::f32, {48});
  const Expr n = var("n"), ch = var("ch"), p = var("p");
  const auto im2col = [&](int64_t positions) {
    return Kernel{
        "im2col",
        {x, col},
        for_loop(
            "n", 0, 3,
            for_loop("ch", 0, 2,
                     block({for_loop("p", 0, positions,
                                     store(col, ch * 24 + n * 4 + p, load(x, n * 10 + ch * 5 + p))),
                            for_loop("p", 0, 3,
                                     store(col, ch * 24 + n * 4 + p + 13,
                                           load(x, n * 10 + ch * 5 + p + 2)))})))};
  };
  EXPECT_TRUE(schedules_equivalently(im2col(4), "parallel n"));
  // Five positions per image reach into the next image's columns.
  EXPECT_FALSE(apply_directive(im2col(5), Parallel{"n"}).has_value());
}

TEST(Parallel, AcceptsTheOutputNestsOfLoweredKernels) {
  EXPECT_TRUE(schedules_equivalently(softmax(4, 6), "parallel i0\nparallel i1"));
  EXPECT_TRUE(schedules_equivalently(layer_norm(3, 5), "parallel i1\nparallel i0"));
  EXPECT_TRUE(schedules_equivalently(transpose(3, 5), "parallel i1"));
  EXPECT_TRUE(schedules_equivalently(row_sum(5, 3), "parallel i0"));
  EXPECT_TRUE(schedules_equivalently(matmul(3, 4, 5), "split i1 2 a b\nparallel a\nvectorize b"));
  const Kernel chain = lower([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {4, 6});
    Value* e = b.exp(b.sub(x, b.reduce_max(x, {1}, /*keepdims=*/true)));
    return b.div(e, b.sum(e, {1}, /*keepdims=*/true));
  });
  EXPECT_TRUE(schedules_equivalently(chain, "parallel i0\nparallel i3\nparallel i6\nvectorize i7"));
}

TEST(Unroll, MarksConstantLoopsUpToALimit) {
  Expected<Kernel> unrolled = apply_text(scale_kernel(6), "unroll i");
  ASSERT_TRUE(unrolled.has_value()) << unrolled.status().message();
  EXPECT_EQ(loops_of(unrolled->body)[0].kind, ForKind::unrolled);
  EXPECT_TRUE(same_results(scale_kernel(6), *unrolled));
  EXPECT_TRUE(is_error_with(apply_text(scale_kernel(2000), "unroll i").status(),
                            {"2000 times", "at most 1024"}));
  EXPECT_TRUE(schedules_equivalently(scale_kernel(2000), "split i 8 a b\nunroll b\nvectorize a"));
}

// --- hoist -----------------------------------------------------------------------------------

TEST(Hoist, LiftsRowStatisticsOutOfTheElementLoop) {
  const Kernel kernel = softmax(4, 6);
  const auto before = loops_of(kernel.body);
  ASSERT_TRUE(find(before, "i1")->has_reduce) << print(kernel);
  Expected<Kernel> hoisted = apply_text(kernel, "hoist i0");
  ASSERT_TRUE(hoisted.has_value()) << hoisted.status().message();
  const auto after = loops_of(hoisted->body);
  EXPECT_TRUE(find(after, "i0")->has_reduce);
  EXPECT_FALSE(find(after, "i1")->has_reduce) << print(*hoisted);
  const For* row = hoisted->body.as<For>();
  ASSERT_NE(row, nullptr);
  const LetStmt* max_let = row->body.as<LetStmt>();
  ASSERT_NE(max_let, nullptr) << print(*hoisted);
  EXPECT_NE(max_let->value.as<Reduce>(), nullptr);
  EXPECT_NE(max_let->body.as<LetStmt>(), nullptr);
  EXPECT_TRUE(same_results(kernel, *hoisted));
  EXPECT_TRUE(schedules_equivalently(layer_norm(3, 5), "hoist i0"));
  EXPECT_TRUE(schedules_equivalently(layer_norm(3, 5), "hoist i0\nhoist i1"));
}

TEST(Hoist, SharesOneBindingBetweenTheMainLoopAndTheTail) {
  const Kernel kernel = softmax(3, 7);
  Expected<Kernel> hoisted = apply_text(kernel, "split i1 3 a b\nhoist i0\nvectorize b");
  ASSERT_TRUE(hoisted.has_value()) << hoisted.status().message();
  for (const testing::LoopInfo& loop : loops_of(hoisted->body)) {
    if (loop.var != "i0") {
      EXPECT_FALSE(loop.has_reduce) << loop.var << "\n" << print(*hoisted);
    }
  }
  EXPECT_TRUE(same_results(kernel, *hoisted));
}

TEST(Hoist, LiftsInvariantReductionsOfMatmulRows) {
  // out[i, j] = sum_k a[i, k] + b[j]: the row sum does not depend on j.
  const Buffer a = Buffer::param("a", DType::f32, {3, 4});
  const Buffer b = Buffer::param("b", DType::f32, {5});
  const Buffer out = Buffer::param("out", DType::f32, {3, 5});
  const Expr i = var("i"), j = var("j"), k = var("k");
  const Kernel kernel{
      "rows",
      {a, b, out},
      for_loop("i", 0, 3,
               for_loop("j", 0, 5,
                        store(out, i * 5 + j, sum("k", 0, 4, load(a, i * 4 + k)) + load(b, j))))};
  Expected<Kernel> hoisted = apply_text(kernel, "hoist i");
  ASSERT_TRUE(hoisted.has_value()) << hoisted.status().message();
  EXPECT_FALSE(find(loops_of(hoisted->body), "j")->has_reduce) << print(*hoisted);
  EXPECT_TRUE(same_results(kernel, *hoisted));
}

TEST(Hoist, BindsValuesThatReadWhatTheLoopWritesBeforeTheirOwnLoop) {
  const Buffer x = Buffer::param("x", DType::f32, {4});
  const Buffer out = Buffer::param("out", DType::f32, {4, 4});
  const Buffer t = Buffer::local("t", DType::f32, 4);
  const Expr i = var("i"), j = var("j"), k = var("k");
  // The sum reads t, which the loop writes before each use: it cannot move to the top of i's
  // body, but it is bound just before the j loop, once per i instead of once per element.
  const Kernel writes{
      "writes",
      {x, out},
      allocate(t, for_loop("i", 0, 4,
                           block({store(t, i, load(x, i) * 2.0),
                                  for_loop("j", 0, 4,
                                           store(out, i * 4 + j, sum("k", 0, 4, load(t, k))))})))};
  Expected<Kernel> hoisted = apply_directive(writes, Hoist{"i"});
  ASSERT_TRUE(hoisted.has_value()) << hoisted.status().message();
  EXPECT_EQ(
      print(hoisted->body),
      print(allocate(
          t, for_loop("i", 0, 4,
                      block({store(t, i, load(x, i) * 2.0),
                             let_stmt("h0", sum("k", 0, 4, load(t, k)),
                                      for_loop("j", 0, 4,
                                               store(out, i * 4 + j, var("h0", DType::f32))))})))));
  EXPECT_TRUE(same_results(writes, *hoisted));
  // A value that reads what its own loop writes stays.
  const Kernel own{
      "own",
      {x, out},
      allocate(
          t,
          for_loop("i", 0, 4,
                   block({store(t, i, load(x, i) * 2.0),
                          for_loop("j", 0, 4,
                                   block({store(t, j, load(x, j)),
                                          store(out, i * 4 + j, sum("k", 0, 4, load(t, k)))}))})))};
  Expected<Kernel> kept = apply_directive(own, Hoist{"i"});
  ASSERT_TRUE(kept.has_value()) << kept.status().message();
  EXPECT_TRUE(kept->body.same_as(own.body)) << print(*kept);
}

TEST(Hoist, KeepsValuesThatMayNotRun) {
  const Buffer x = Buffer::param("x", DType::f32, {4});
  const Buffer out = Buffer::param("out", DType::f32, {4, 4});
  const Expr i = var("i"), j = var("j"), k = var("k");
  // Under an if, or in a loop that may not run, the value may never have been computed.
  const Kernel guarded{
      "guarded",
      {x, out},
      for_loop("i", 0, 4,
               for_loop("j", 0, 4,
                        if_then_else(i > 0, store(out, i * 4 + j, sum("k", 0, 4, load(x, k))))))};
  Expected<Kernel> kept = apply_directive(guarded, Hoist{"i"});
  ASSERT_TRUE(kept.has_value()) << kept.status().message();
  EXPECT_TRUE(kept->body.same_as(guarded.body)) << print(*kept);
  const Kernel empty_inner{
      "empty",
      {x, out},
      for_loop("i", 0, 4, for_loop("j", 0, 0, store(out, i * 4 + j, sum("k", 0, 4, load(x, k)))))};
  kept = apply_directive(empty_inner, Hoist{"i"});
  ASSERT_TRUE(kept.has_value()) << kept.status().message();
  EXPECT_TRUE(kept->body.same_as(empty_inner.body)) << print(*kept);
}

TEST(Hoist, LiftsInvariantLetsOutOfReductionsThatAlwaysRun) {
  // out[i, j] = max over a window of (x[i, j + k] * (let f = sqrt(s[i]) in ...)): f depends on
  // i only and the window has 3 elements, so f is bound once per i. Over a window of n
  // elements, which may be empty, it stays where it is.
  const Buffer x = Buffer::param("x", DType::f32, {3, 8});
  const Buffer s = Buffer::param("s", DType::f32, {3});
  const Buffer n = Buffer::param("n", DType::i64, {1});
  const Buffer out = Buffer::param("out", DType::f32, {3, 6});
  const Expr i = var("i"), j = var("j"), k = var("k");
  const auto window = [&](Expr extent) {
    const Expr f = var("f", DType::f32);
    return Kernel{"window",
                  {x, s, n, out},
                  for_loop("i", 0, 3,
                           for_loop("j", 0, 6,
                                    store(out, i * 6 + j,
                                          reduce(ReduceOp::max, "k", 0, std::move(extent),
                                                 let("f", call(Intrinsic::sqrt, {load(s, i)}),
                                                     load(x, i * 8 + min(j + k, Expr(7))) * f)))))};
  };
  const Kernel fixed = window(3);
  Expected<Kernel> hoisted = apply_text(fixed, "hoist i");
  ASSERT_TRUE(hoisted.has_value()) << hoisted.status().message();
  const For* row = hoisted->body.as<For>();
  ASSERT_NE(row, nullptr);
  ASSERT_NE(row->body.as<LetStmt>(), nullptr) << print(*hoisted);
  EXPECT_EQ(row->body.as<LetStmt>()->name, "f");
  EXPECT_TRUE(same_results(fixed, *hoisted));
  const Kernel variable = window(min(load(n, 0), Expr(2)));
  Expected<Kernel> kept = apply_directive(variable, Hoist{"i"});
  ASSERT_TRUE(kept.has_value()) << kept.status().message();
  EXPECT_TRUE(kept->body.same_as(variable.body)) << print(*kept);
}

// --- cache -----------------------------------------------------------------------------------

TEST(Cache, StagesTheRowALoopReads) {
  const Kernel kernel = softmax(4, 6);
  Expected<Kernel> cached = apply_text(kernel, "hoist i0\ncache in0 i0 row");
  ASSERT_TRUE(cached.has_value()) << cached.status().message();
  const std::string text = print(*cached);
  EXPECT_TRUE(contains_all(text, {"allocate row: f32[6] in local"})) << text;
  // in0 is read only by the copy loop.
  int reads = 0;
  for (const Access& access : collect_accesses(cached->body, {}).list) {
    reads += access.buffer.name() == "in0" ? 1 : 0;
  }
  EXPECT_EQ(reads, 1) << text;
  EXPECT_TRUE(same_results(kernel, *cached));
  EXPECT_TRUE(schedules_equivalently(transpose(3, 5), "cache in0 i0 col"));
  EXPECT_TRUE(schedules_equivalently(matmul(3, 4, 5), "cache in1 i0 b.all\nparallel i0"));
  EXPECT_TRUE(schedules_equivalently(matmul(3, 4, 5), "cache in0 i1 a.row"));
  EXPECT_TRUE(schedules_equivalently(add_broadcast(3, 5), "cache in1 i1 y.one\nvectorize i1"));
}

TEST(Cache, RefusesWhatItCannotStage) {
  const Kernel kernel = softmax(4, 6);
  EXPECT_TRUE(is_error_with(apply_text(kernel, "cache out0 i0 c").status(), {"writes out0"}));
  EXPECT_TRUE(is_error_with(apply_text(kernel, "cache x i0 c").status(), {"x is not a parameter"}));
  EXPECT_TRUE(is_error_with(apply_text(kernel, "cache in0 i0 in0").status(), {"already used"}));
  const Kernel scale = scale_kernel(4);
  const Kernel unread{
      "k", {scale.params[0], scale.params[1], Buffer::param("z", DType::f32, {4})}, scale.body};
  EXPECT_TRUE(is_error_with(apply_text(unread, "cache z i c").status(), {"does not read z"}));
}

TEST(Merge, RowStatisticsAndTheirReadersBecomeOneLoop) {
  // x - mean(x) per row: the mean's nest (i0) and the output's nest (i1) over the same rows.
  const Kernel kernel = lower([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {4, 8});
    return b.sub(x, b.mean(x, {1}, /*keepdims=*/true));
  });
  ASSERT_EQ(loops_of(kernel.body).size(), 3u) << print(kernel);
  Expected<Kernel> merged = apply_text(kernel, "merge i0 i3");
  ASSERT_TRUE(merged.has_value()) << merged.status().message() << "\n" << print(kernel);
  EXPECT_EQ(loops_of(merged->body).size(), 2u) << print(*merged);
  EXPECT_TRUE(same_results(kernel, *merged));
  EXPECT_TRUE(schedules_equivalently(kernel, "merge i0 i3\nparallel i0\nvectorize i4"));
}

TEST(Merge, RefusesWhatWouldChangeResults) {
  // out0 = exp(x + y) [4, 8]; out1 = out0^T [8, 4]; out2 = exp(out1^T) [4, 8]: nests i0, i2,
  // i4 (y, one value per row, keeps the first nest two loops deep).
  const Kernel kernel = lower_outputs([](GraphBuilder& b) {
    Value* e = b.exp(b.add(b.input("x", DType::f32, {4, 8}), b.input("y", DType::f32, {4, 1})));
    Value* t = b.transpose(e, {1, 0});
    return std::vector<Value*>{e, t, b.exp(b.transpose(t, {1, 0}))};
  });
  const std::string text = print(kernel);
  EXPECT_TRUE(is_error_with(apply_text(kernel, "merge i0 i2").status(), {"different bounds"}))
      << text;
  EXPECT_TRUE(is_error_with(apply_text(kernel, "merge i4 i0").status(), {"does not come after"}));
  // i4 reads out1, which i2 writes from out0, which i0 writes: neither can pass i2.
  EXPECT_TRUE(is_error_with(apply_text(kernel, "merge i0 i4").status(), {"neither loop"})) << text;
  EXPECT_TRUE(is_error_with(apply_text(kernel, "merge i0 i1").status(), {"side by side"}));
  // e + e^T reads rows of e that the merged loop would not have written yet.
  const Kernel cross = lower_outputs([](GraphBuilder& b) {
    Value* e = b.exp(b.input("x", DType::f32, {6, 6}));
    return std::vector<Value*>{e, b.add(e, b.transpose(e, {1, 0}))};
  });
  EXPECT_FALSE(apply_text(cross, "merge i0 i2").has_value()) << print(cross);
  EXPECT_TRUE(
      is_error_with(apply_text(kernel, "parallel i0\nmerge i0 i4").status(), {"serial loops"}));
}

TEST(Accumulate, ColumnReductionsAdvanceRowByRow) {
  // Column sums and maxima of x [7, 5], then a value that reads both: every reduction's
  // terms in the same order, so the results are exactly the original's.
  const Kernel kernel = lower_outputs([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {7, 5});
    Value* sums = b.sum(x, {0});
    Value* maxima = b.reduce_max(x, {0});
    return std::vector<Value*>{sums, maxima, b.mul(sums, maxima)};
  });
  Expected<Kernel> merged = apply_text(kernel, "merge i0 i2\nmerge i0 i4");
  ASSERT_TRUE(merged.has_value()) << merged.status().message() << "\n" << print(kernel);
  Expected<Kernel> accumulated = apply_text(*merged, "accumulate i0 r\nvectorize i0");
  ASSERT_TRUE(accumulated.has_value()) << accumulated.status().message() << "\n" << print(*merged);
  // The accumulators' start, the loop over rows around the columns, the rest: no reduction
  // expression is left.
  const std::vector<testing::LoopInfo> loops = loops_of(accumulated->body);
  for (const testing::LoopInfo& loop : loops) EXPECT_FALSE(loop.has_reduce) << print(*accumulated);
  const testing::LoopInfo* rows = find(loops, "r");
  ASSERT_NE(rows, nullptr) << print(*accumulated);
  EXPECT_TRUE(rows->has_loop) << print(*accumulated);
  EXPECT_TRUE(same_results(kernel, *accumulated));
  EXPECT_TRUE(schedules_equivalently(
      kernel, "merge i0 i2\nmerge i0 i4\nsplit i0 2 o c\naccumulate c r\nvectorize c\nparallel o"));
}

TEST(Accumulate, RefusesWhatWouldChangeResults) {
  const Buffer x = Buffer::param("x", DType::f32, {3, 4});
  const Buffer a = Buffer::param("a", DType::f32, {4}), c = Buffer::param("c", DType::f32, {4});
  const Expr i = var("i");
  const auto column = [&](std::string k, int64_t rows) {
    return sum(k, 0, rows, load(x, var(k) * 4 + i));
  };
  const auto kernel = [&](std::vector<Stmt> body) {
    return Kernel{"k", {x, a, c}, for_loop("i", 0, 4, block(std::move(body)))};
  };
  // c's reduction reads a[i], which the first reduction writes in the same iteration: it
  // would read a partial sum.
  const Kernel reads_written =
      kernel({store(a, i, column("k0", 3)),
              store(c, i, sum("k1", 0, 3, load(a, i) * load(x, var("k1") * 4 + i)))});
  EXPECT_TRUE(is_error_with(apply_text(reads_written, "accumulate i r").status(),
                            {"reads a, which the loop writes"}));
  const Kernel same_target = kernel({store(a, i, column("k0", 3)), store(a, i, column("k1", 3))});
  EXPECT_TRUE(is_error_with(apply_text(same_target, "accumulate i r").status(),
                            {"two reductions", "store into a"}));
  const Kernel ranges = kernel({store(a, i, column("k0", 3)), store(c, i, column("k1", 2))});
  EXPECT_TRUE(is_error_with(apply_text(ranges, "accumulate i r").status(), {"different ranges"}));
  const Kernel no_reduction = kernel({store(a, i, load(x, i))});
  EXPECT_TRUE(is_error_with(apply_text(no_reduction, "accumulate i r").status(),
                            {"does not begin with a store of a serial reduction"}));
  const Kernel fine = kernel({store(a, i, column("k0", 3)), store(c, i, load(a, i) * 2.0)});
  EXPECT_TRUE(is_error_with(apply_text(fine, "accumulate i k0").status(), {"already used"}));
  EXPECT_TRUE(schedules_equivalently(fine, "accumulate i r\nvectorize i"));
  // A reduction over a range that depends on the loop.
  const Kernel triangle = kernel({store(a, i, sum("k0", 0, i, load(x, var("k0") * 4 + i)))});
  EXPECT_TRUE(
      is_error_with(apply_text(triangle, "accumulate i r").status(), {"range depends on loop i"}));
}

// --- Statements the scheduler does not know ----------------------------------------------

TEST(OpaqueStatements, AreCarriedButNeverAnalysed) {
  // A batched f32 matmul is a loop over the batch around a gemm statement.
  const Kernel kernel = lower([](GraphBuilder& b) {
    return b.matmul(b.input("a", DType::f32, {3, 2, 4}), b.input("b", DType::f32, {3, 4, 5}));
  });
  ASSERT_EQ(loops_of(kernel.body).size(), 1u) << print(kernel);
  for (const char* text : {"parallel i0", "vectorize i0", "hoist i0", "cache in0 i0 c"}) {
    EXPECT_TRUE(is_error_with(apply_text(kernel, text).status(), {"cannot analyse"})) << text;
  }
  EXPECT_TRUE(schedules_equivalently(kernel, "split i0 2 a b\nunroll b\nunroll i0"));
}

// --- Replay ----------------------------------------------------------------------------------

TEST(ApplySchedule, NamesTheFailingDirective) {
  EXPECT_TRUE(is_error_with(apply_text(softmax(4, 6), "hoist i0\nparallel i7").status(),
                            {"directive 2", "parallel i7", "no loop named i7"}));
}

TEST(ApplySchedule, ZeroSizedAndSingleElementKernels) {
  const Kernel empty = softmax(0, 3);
  Expected<Kernel> same = apply_schedule(empty, {});
  ASSERT_TRUE(same.has_value());
  EXPECT_TRUE(is_error_with(apply_text(empty, "parallel i0").status(), {"no loop named i0"}));
  EXPECT_TRUE(
      schedules_equivalently(add_broadcast(1, 5), "split i1 4 a b\nvectorize b\nparallel a"));
  EXPECT_TRUE(schedules_equivalently(add_broadcast(7, 1), "split i0 4 a b\nvectorize b"));
}

// --- Random schedules ------------------------------------------------------------------------

std::vector<std::string> loop_vars(const Kernel& kernel) {
  std::vector<std::string> vars;
  for (const testing::LoopInfo& loop : loops_of(kernel.body)) vars.push_back(loop.var);
  return vars;
}

Kernel random_kernel(std::mt19937_64& rng) {
  auto dim = [&] { return static_cast<int64_t>(rng() % 9); };  // 0 to 8
  switch (rng() % 7) {
    case 0:
      return softmax(dim(), dim() + 1);
    case 1:
      return layer_norm(dim(), dim() + 1);
    case 2:
      return add_broadcast(dim(), dim(), rng() % 2 == 0 ? DType::f32 : DType::f64);
    case 3:
      return row_sum(dim(), dim());
    case 4:
      return transpose(dim(), dim());
    case 5: {
      // gemm statements (f32) need k >= 1 (see the report on lower_group's leading dimension).
      const DType dtype = rng() % 2 == 0 ? DType::i32 : DType::f32;
      return matmul(dim() + 1, dim() + 1, dim() + 1, dtype);
    }
    default:
      return lower([&](GraphBuilder& b) {
        Value* x = b.input("x", DType::f32, {dim() + 1, dim() + 1});
        Value* e = b.exp(b.sub(x, b.reduce_max(x, {1}, /*keepdims=*/true)));
        return b.div(e, b.sum(e, {1}, /*keepdims=*/true));
      });
  }
}

Directive random_directive(const Kernel& kernel, std::mt19937_64& rng, int& fresh) {
  std::vector<std::string> vars = loop_vars(kernel);
  vars.push_back("nowhere");
  auto pick = [&] { return vars[rng() % vars.size()]; };
  auto name = [&] { return "n" + std::to_string(fresh++); };
  switch (rng() % 11) {
    case 7: {  // usually two top-level nests, in order
      std::vector<std::string> outer;
      const std::function<void(const Stmt&)> collect = [&](const Stmt& s) {
        if (const For* loop = s.as<For>()) {
          outer.push_back(loop->var);
        } else if (const Block* seq = s.as<Block>()) {
          for (const Stmt& child : seq->stmts) collect(child);
        } else if (const Allocate* alloc = s.as<Allocate>()) {
          collect(alloc->body);
        }
      };
      collect(kernel.body);
      if (outer.size() < 2 || rng() % 4 == 0) return Merge{pick(), pick()};
      const size_t a = rng() % (outer.size() - 1);
      return Merge{outer[a], outer[a + 1 + rng() % (outer.size() - a - 1)]};
    }
    case 0: {
      const std::string v = pick();
      return Split{v, static_cast<int64_t>(rng() % 5 + 1), name(), name()};
    }
    case 1:
      return Reorder{{pick(), pick()}};
    case 2:
      return Fuse{pick(), pick(), name()};
    case 3:
      return Vectorize{pick()};
    case 4:
      return Parallel{pick()};
    case 5:
      return Unroll{pick()};
    case 6:
      return Hoist{pick()};
    case 8:
      return Accumulate{pick(), name()};
    case 9:
      return Partition{pick(), {static_cast<int64_t>(rng() % 4 + 1)}};
    default: {
      const Buffer& param = kernel.params[rng() % kernel.params.size()];
      return Cache{param.name(), pick(), name()};
    }
  }
}

TEST(ScheduleFuzz, RandomDirectiveSequencesPreserveResults) {
  const uint64_t seed = testing::test_seed();
  SCOPED_TRACE(fmt::format("seed {} (set KILN_LOOP_SEED to replay)", seed));
  std::mt19937_64 rng(seed);
  int applied = 0;
  std::array<int, std::variant_size_v<Directive>> applied_by_kind = {};
  for (int round = 0; round < 150; ++round) {
    const Kernel kernel = random_kernel(rng);
    Schedule schedule;
    Kernel current = kernel;
    int fresh = 0;
    for (int step = 0; step < 8; ++step) {
      const Directive directive = random_directive(current, rng, fresh);
      Expected<Kernel> next = apply_directive(current, directive);
      if (!next) continue;
      current = std::move(next).value();
      schedule.directives.push_back(directive);
      ++applied_by_kind[directive.index()];
    }
    applied += static_cast<int>(schedule.directives.size());
    SCOPED_TRACE(fmt::format("round {}\n{}schedule:\n{}", round, print(kernel), print(schedule)));
    Expected<Schedule> reparsed = parse_schedule(print(schedule));
    ASSERT_TRUE(reparsed.has_value()) << reparsed.status().message();
    ASSERT_EQ(*reparsed, schedule);
    Expected<Kernel> scheduled = apply_schedule(kernel, *reparsed);
    ASSERT_TRUE(scheduled.has_value()) << scheduled.status().message();
    ASSERT_TRUE(same_results(kernel, *scheduled, seed + static_cast<uint64_t>(round)));
  }
  EXPECT_GT(applied, 150) << "the random directives should mostly be legal";
  for (size_t kind = 0; kind < applied_by_kind.size(); ++kind) {
    EXPECT_GT(applied_by_kind[kind], 0) << "no directive of kind " << kind << " applied";
  }
}

}  // namespace
}  // namespace kiln::loop
