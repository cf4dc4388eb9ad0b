// The default scheduler: which directives it chooses for the kernels Kiln lowers, the loop
// structure they give (statistics hoisted out of the element loop, a parallel loop, a vector
// loop), and that the scheduled kernels compute exactly what the lowered ones do.
#include "loop/default_schedule.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "interp/interpreter.h"
#include "loop/ir_visitor.h"
#include "unit/loop/round_trip_check.h"
#include "unit/loop/schedule_check.h"

namespace kiln::loop {
namespace {

using testing::count_kind;
using testing::find;
using testing::LoopInfo;
using testing::loops_of;
using testing::lower;
using testing::same_results;

const ScheduleTarget kAvx2{2, 32};

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

// Schedules `kernel` for `target`, replays the printed schedule, and checks the results.
Kernel schedule_and_check(const Kernel& kernel, const ScheduleTarget& target, bool compare = true) {
  const Schedule schedule = default_schedule(kernel, target);
  Expected<Schedule> replayed = parse_schedule(print(schedule));
  EXPECT_TRUE(replayed.has_value() && *replayed == schedule) << print(schedule);
  Expected<Kernel> scheduled = apply_schedule(kernel, schedule);
  EXPECT_TRUE(scheduled.has_value()) << scheduled.status().message() << "\n" << print(schedule);
  if (!scheduled) return kernel;
  if (compare) {
    EXPECT_TRUE(same_results(kernel, *scheduled)) << print(schedule);
  }
  return std::move(scheduled).value();
}

// The loops whose body holds a store and no other loop.
std::vector<LoopInfo> innermost_loops(const std::vector<LoopInfo>& loops) {
  std::vector<LoopInfo> result;
  for (const LoopInfo& loop : loops) {
    if (!loop.has_loop && loop.stores > 0) result.push_back(loop);
  }
  return result;
}

// A 3x3 convolution's column rows and a 3x3 stride-2 max pool's first step are copies along
// a row that load x contiguously: the lowering splits off the padded ends (loop/lower_conv.cc,
// loop/lowering/pooling_nests.cc), so the rows run in vector lanes. With the padding clamped into
// every load, neither vectorized, and each ran several times slower in ResNet-50.
TEST(DefaultSchedule, ConvolutionColumnsAndPoolingRowsRunInVectorLanes) {
  const Kernel conv = lower([](GraphBuilder& b) {
    return b.conv(b.input("x", DType::f32, {1, 2, 6, 20}), b.input("w", DType::f32, {3, 2, 3, 3}),
                  {}, {1, 1, 1, 1});
  });
  const Kernel pool = lower([](GraphBuilder& b) {
    return b.max_pool(b.input("x", DType::f32, {1, 2, 6, 20}), {3, 3}, {2, 2}, {1, 1, 1, 1});
  });
  for (const Kernel* kernel : {&conv, &pool}) {
    // The convolution's gemm has no evaluator: its schedule is replayed but not compared.
    const Kernel scheduled = schedule_and_check(*kernel, kAvx2, /*compare=*/kernel == &pool);
    EXPECT_GE(count_kind(loops_of(scheduled.body), ForKind::vectorized), 1) << print(scheduled);
  }
}

TEST(DefaultSchedule, SoftmaxRowsKeepTheirStatisticsOutOfTheElementLoop) {
  const Kernel kernel = softmax(64, 1000);
  const Schedule schedule = default_schedule(kernel, kAvx2);
  // The row maximum runs in vector lanes; the sum of exponentials calls libm, so it stays
  // serial.
  EXPECT_EQ(print(schedule),
            "hoist i0\nsplit i1 8 i1.o i1.i\nvectorize i1.i\nparallel i0\nvectorize k4\n");
  // Unscheduled, the evaluator would take 64 * 1000 * 2000 steps; compare the scheduled
  // kernel with the interpreter instead.
  const Kernel scheduled = schedule_and_check(kernel, kAvx2, /*compare=*/false);
  const auto loops = loops_of(scheduled.body);
  EXPECT_EQ(count_kind(loops, ForKind::parallel), 1) << print(scheduled);
  EXPECT_EQ(count_kind(loops, ForKind::vectorized), 1) << print(scheduled);
  for (const LoopInfo& loop : innermost_loops(loops)) {
    EXPECT_FALSE(loop.has_reduce) << loop.var << " recomputes the row statistics\n"
                                  << print(scheduled);
  }
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs({b.softmax(b.input("x", DType::f32, {64, 1000}))});
  std::vector<std::vector<double>> args = testing::random_args(scheduled, testing::test_seed());
  ASSERT_TRUE(run_kernel(scheduled, args).is_ok());
  const std::vector<Array> inputs = {Array(DType::f32, Shape{64, 1000}, args[0])};
  Expected<std::vector<Array>> expected = interpret(graph, inputs);
  ASSERT_TRUE(expected.has_value()) << expected.status().message();
  for (size_t i = 0; i < args[1].size(); ++i) {
    ASSERT_NEAR(args[1][i], (*expected)[0].data[i], 1e-6) << i;
  }
}

TEST(DefaultSchedule, NormalisationsAreHoistedVectorizedAndParallel) {
  for (const Kernel& kernel : {softmax(32, 200), layer_norm(32, 203)}) {
    const Kernel scheduled = schedule_and_check(kernel, kAvx2);
    const auto loops = loops_of(scheduled.body);
    EXPECT_EQ(count_kind(loops, ForKind::parallel), 1) << print(scheduled);
    EXPECT_EQ(count_kind(loops, ForKind::vectorized), 1) << print(scheduled);
    for (const LoopInfo& loop : innermost_loops(loops)) {
      EXPECT_FALSE(loop.has_reduce) << loop.var << "\n" << print(scheduled);
    }
  }
}

// The number of vectorized and of serial reductions in a kernel.
std::pair<int, int> reductions_by_kind(const Kernel& kernel) {
  class Counter : public IRVisitor {
   public:
    int vectorized = 0, serial = 0;

   protected:
    void visit_reduce(const Reduce& node) override {
      ++(node.vectorized ? vectorized : serial);
      IRVisitor::visit_reduce(node);
    }
  } counter;
  counter.visit(kernel.body);
  return {counter.vectorized, counter.serial};
}

// Innermost reductions over contiguous elements run in vector lanes; strided ones, short ones
// and those that call libm (a call the compiler cannot vectorize) stay serial.
TEST(DefaultSchedule, ContiguousReductionsRunInVectorLanes) {
  // Layer norm: the row mean and variance, hoisted, both vectorized.
  const Kernel norm = schedule_and_check(layer_norm(8, 203), kAvx2);
  EXPECT_EQ(reductions_by_kind(norm), std::make_pair(2, 0)) << print(norm);
  // Column sums, read with a stride of 64 along the reduction: blocks of columns accumulate
  // row by row in vector lanes instead (no reduction expression left), each block a parallel
  // iteration.
  const Kernel column_sums = lower([](GraphBuilder& b) {
    return b.sum(b.input("x", DType::f32, {300, 64}), {0});
  });
  EXPECT_EQ(print(default_schedule(column_sums, kAvx2)),
            "split i0 8 i0.o i0.i\naccumulate i0.i i0.i.k\nvectorize i0.i\nparallel i0.o\n");
  const Kernel columns = schedule_and_check(column_sums, kAvx2);
  EXPECT_EQ(reductions_by_kind(columns), std::make_pair(0, 0)) << print(columns);
  // Eight terms leave most of 16 lanes idle: serial.
  const Kernel short_rows =
      schedule_and_check(lower([](GraphBuilder& b) {
                           return b.sum(b.input("x", DType::f32, {300, 8}), {1});
                         }),
                         kAvx2);
  EXPECT_EQ(reductions_by_kind(short_rows), std::make_pair(0, 1)) << print(short_rows);
  // Softmax: the maximum is vectorized, the sum of exponentials calls libm and is not,
  // unless the target has vector math (glibc's libmvec), which gives exp a vector body.
  const Kernel soft = schedule_and_check(softmax(4, 100), kAvx2);
  EXPECT_EQ(reductions_by_kind(soft), std::make_pair(1, 1)) << print(soft);
  const ScheduleTarget vector_math{2, 32, /*vector_math=*/true};
  const Kernel soft_vector = schedule_and_check(softmax(4, 100), vector_math);
  EXPECT_EQ(reductions_by_kind(soft_vector), std::make_pair(2, 0)) << print(soft_vector);
  // pow has no vector body: its sum stays serial either way.
  const Kernel powers = schedule_and_check(lower([](GraphBuilder& b) {
                                             Value* x = b.input("x", DType::f32, {4, 100});
                                             return b.sum(b.pow(x, x), {1});
                                           }),
                                           vector_math);
  EXPECT_EQ(reductions_by_kind(powers), std::make_pair(0, 1)) << print(powers);
}

TEST(DefaultSchedule, SmallNestsStaySerial) {
  // 4 x 10 elements: not worth a thread team; 10 < 16 lanes of f32 in 64-byte vectors.
  const Kernel kernel = add_broadcast(4, 10);
  EXPECT_EQ(print(default_schedule(kernel, {8, 64})), "");
  EXPECT_EQ(print(default_schedule(kernel, kAvx2)), "split i1 8 i1.o i1.i\nvectorize i1.i\n");
  // Small softmax rows: hoisted and vectorized, not parallel.
  const Kernel rows = schedule_and_check(softmax(4, 16), kAvx2);
  EXPECT_EQ(count_kind(loops_of(rows.body), ForKind::parallel), 0) << print(rows);
  EXPECT_EQ(count_kind(loops_of(rows.body), ForKind::vectorized), 1) << print(rows);
}

TEST(DefaultSchedule, MathCallsCountTowardsParallelWork) {
  // 8K elements: an add is a few microseconds, serial; gelu calls erf per element, parallel.
  const Kernel add = schedule_and_check(add_broadcast(8, 1024), kAvx2);
  EXPECT_EQ(count_kind(loops_of(add.body), ForKind::parallel), 0) << print(add);
  const Kernel gelu = schedule_and_check(lower([](GraphBuilder& b) {
                                           return b.gelu(b.input("x", DType::f32, {8, 1024}));
                                         }),
                                         kAvx2);
  EXPECT_EQ(count_kind(loops_of(gelu.body), ForKind::parallel), 1) << print(gelu);
}

TEST(DefaultSchedule, LanesFollowTheElementType) {
  EXPECT_EQ(print(default_schedule(add_broadcast(3, 9, DType::f64), kAvx2)),
            "split i1 4 i1.o i1.i\nvectorize i1.i\n");
  EXPECT_EQ(print(default_schedule(add_broadcast(3, 9, DType::f64), {2, 64})),
            "split i1 8 i1.o i1.i\nvectorize i1.i\n");
  schedule_and_check(add_broadcast(3, 9, DType::f64), kAvx2);
  schedule_and_check(add_broadcast(3, 40, DType::f16), kAvx2);
  // A bool mask beside floats: lanes for the bool, 64 of 64-byte vectors (relu's gradient,
  // where(mask, dy, 0), over a row of 200 after the nest is joined into one loop).
  const Kernel masked = lower([](GraphBuilder& b) {
    Value* dy = b.input("dy", DType::f32, {2, 100});
    return b.where(b.input("mask", DType::boolean, {2, 100}), dy, b.scalar(0, DType::f32));
  });
  EXPECT_EQ(print(default_schedule(masked, {2, 64})), "split i1 64 i1.o i1.i\nvectorize i1.i\n")
      << print(masked);
  schedule_and_check(masked, {2, 64});
  // A mask computed from floats is only stored: the floats' 16 lanes.
  const Kernel mask = lower([](GraphBuilder& b) {
    return b.greater(b.input("x", DType::f32, {2, 100}), b.scalar(0, DType::f32));
  });
  EXPECT_EQ(print(default_schedule(mask, {2, 64})), "split i1 16 i1.o i1.i\nvectorize i1.i\n")
      << print(mask);
  schedule_and_check(mask, {2, 64});
}

TEST(DefaultSchedule, FusesOuterLoopsUntilThereIsWorkForEveryCore) {
  // Two rows are too few for 8 cores x 4: the rows are fused with the vector blocks.
  const Kernel kernel = add_broadcast(2, 8192);
  const Schedule schedule = default_schedule(kernel, {8, 32});
  EXPECT_EQ(print(schedule),
            "split i1 8 i1.o i1.i\nvectorize i1.i\nfuse i0 i1.o i0_i1.o\nparallel i0_i1.o\n");
  const Kernel scheduled = schedule_and_check(kernel, {8, 32});
  EXPECT_EQ(count_kind(loops_of(scheduled.body), ForKind::parallel), 1);
  // One core: nothing to parallelise.
  EXPECT_EQ(print(default_schedule(kernel, {1, 32})), "split i1 8 i1.o i1.i\nvectorize i1.i\n");
}

// An innermost loop that is strided or holds a reduction is not vectorized; the row sum's
// reduction itself is (contiguous loads).
TEST(DefaultSchedule, ConcatenatedHeadsRunInVectorLanesPieceByPiece) {
  // Three [batch, heads, tokens, 16] tensors as rows of [tokens, heads*16], side by side: the
  // gradient of a fused Q, K and V projection. The column loop selects an input by range and
  // reads each head's 16 columns contiguously: partitioned at 64 and 128, split in lanes.
  const Kernel heads = lower([](GraphBuilder& b) {
    std::vector<Value*> parts;
    for (const char* name : {"q", "k", "v"}) {
      Value* x = b.input(name, DType::f32, {2, 4, 8, 16});
      parts.push_back(b.reshape(b.transpose(x, {0, 2, 1, 3}), {16, 64}));
    }
    return b.concat(parts, 1);
  });
  const std::string schedule = print(default_schedule(heads, kAvx2));
  EXPECT_NE(schedule.find("partition i1 64 128\n"), std::string::npos) << schedule;
  const Kernel scheduled = schedule_and_check(heads, kAvx2);
  for (const LoopInfo& loop : innermost_loops(loops_of(scheduled.body))) {
    EXPECT_EQ(loop.kind, ForKind::vectorized) << print(scheduled);
  }
}

TEST(DefaultSchedule, StridedAndReducedInnerLoopsAreNotVectorized) {
  const Kernel transpose = lower([](GraphBuilder& b) {
    return b.transpose(b.input("x", DType::f32, {160, 130}), {1, 0});
  });
  EXPECT_EQ(print(default_schedule(transpose, kAvx2)), "parallel i0\n");
  schedule_and_check(transpose, kAvx2);
  const Kernel row_sum = lower([](GraphBuilder& b) {
    return b.sum(b.input("x", DType::f32, {64, 300}), {1});
  });
  EXPECT_EQ(print(default_schedule(row_sum, kAvx2)), "parallel i0\nvectorize k1\n");
  schedule_and_check(row_sum, kAvx2);
}

// A transpose whose extents the lanes divide runs in lanes x lanes tiles, its inner loop
// vectorized along the output's rows (loads gathered from the tile's lanes input rows); with
// a batch loop around, the tiles are of the two transposed dims. Other extents keep the plain
// nest (StridedAndReducedInnerLoopsAreNotVectorized).
TEST(DefaultSchedule, TransposesRunInTiles) {
  const Kernel transpose = lower([](GraphBuilder& b) {
    return b.transpose(b.input("x", DType::f32, {64, 48}), {1, 0});
  });
  EXPECT_EQ(print(default_schedule(transpose, kAvx2)),
            "split i0 8 i0.o i0.i\nsplit i1 8 i1.o i1.i\nreorder i0.o i1.o i0.i i1.i\n"
            "vectorize i1.i\n");
  schedule_and_check(transpose, kAvx2);
  const Kernel batched = lower([](GraphBuilder& b) {
    return b.transpose(b.input("x", DType::f32, {3, 16, 40}), {0, 2, 1});
  });
  EXPECT_EQ(print(default_schedule(batched, kAvx2)),
            "split i1 8 i1.o i1.i\nsplit i2 8 i2.o i2.i\nreorder i1.o i2.o i1.i i2.i\n"
            "vectorize i2.i\n");
  schedule_and_check(batched, kAvx2);
}

// A max over time read channels last (XML-CNN's pooling, out[n, c, t] = max over k of
// x[n, t*10 + k, c]): the channel loop goes innermost and accumulates the maxima in vector
// lanes, in a local buffer since out is not contiguous along it, instead of walking each
// channel down the rows.
TEST(DefaultSchedule, ColumnReductionsStoredAcrossAccumulateInLocalBuffers) {
  const Kernel pool = lower([](GraphBuilder& b) {
    Value* x = b.transpose(b.input("x", DType::f32, {2, 40, 32}), {0, 2, 1});
    return b.max_pool(x, {10}, {10}, {0, 0});
  });
  EXPECT_EQ(print(default_schedule(pool, kAvx2)),
            "reorder i0 i2 i1\nsplit i1 8 i1.o i1.i\naccumulate i1.i i1.i.k\nvectorize i1.i\n");
  const Kernel scheduled = schedule_and_check(pool, kAvx2);
  EXPECT_NE(print(scheduled).find("allocate i1.i.k.acc0: f32[8] in local"), std::string::npos)
      << print(scheduled);
  EXPECT_TRUE(testing::round_trips(scheduled));
}

TEST(DefaultSchedule, MatmulVectorizesColumnsAndParallelisesRows) {
  const Kernel matmul = lower([](GraphBuilder& b) {
    return b.matmul(b.input("a", DType::i32, {16, 64}), b.input("b", DType::i32, {64, 36}));
  });
  // Each row of the product accumulates a's row times b's rows, in vector lanes along b's.
  EXPECT_EQ(print(default_schedule(matmul, kAvx2)),
            "split i1 8 i1.o i1.i\naccumulate i1.i i1.i.k\nvectorize i1.i\nparallel i0\n");
  schedule_and_check(matmul, kAvx2);
  // Batched f32 matmuls are loops around gemm statements, which the scheduler leaves alone.
  const Kernel batched = lower([](GraphBuilder& b) {
    return b.matmul(b.input("a", DType::f32, {64, 16, 16}), b.input("b", DType::f32, {64, 16, 16}));
  });
  schedule_and_check(batched, kAvx2);
}

TEST(DefaultSchedule, NestsOverTheSameRowsBecomeOnePass) {
  // Softmax from primitives: the row max, the row sum and the output are three nests over
  // the 40 rows; merged, each row is read three times while it is in cache, in one parallel
  // loop whose element loop is vectorized.
  const Kernel chain = lower([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {40, 500});
    Value* e = b.exp(b.sub(x, b.reduce_max(x, {1}, /*keepdims=*/true)));
    return b.div(e, b.sum(e, {1}, /*keepdims=*/true));
  });
  const Kernel scheduled = schedule_and_check(chain, kAvx2);
  const auto loops = loops_of(scheduled.body);
  EXPECT_EQ(count_kind(loops, ForKind::parallel), 1) << print(scheduled);
  EXPECT_EQ(count_kind(loops, ForKind::vectorized), 1) << print(scheduled);
  const std::string text = print(default_schedule(chain, kAvx2));
  EXPECT_NE(text.find("merge i0 i3"), std::string::npos) << text;
}

TEST(DefaultSchedule, NestsThatReadOtherRowsAreNotMerged) {
  // e = exp(x) is a group output; e + e^T reads e at [j, i]: merged into e's row loop it
  // would read rows not yet written, so the two nests stay apart.
  const Kernel kernel = testing::lower_outputs([](GraphBuilder& b) {
    Value* e = b.exp(b.input("x", DType::f32, {40, 40}));
    return std::vector<Value*>{e, b.add(e, b.transpose(e, {1, 0}))};
  });
  const Schedule schedule = default_schedule(kernel, kAvx2);
  EXPECT_EQ(print(schedule).find("merge"), std::string::npos) << print(schedule);
  schedule_and_check(kernel, kAvx2);
}

TEST(DefaultSchedule, MergedNestsMergeLevelByLevelAboveTheirElementLoops) {
  // A batch norm's output and relu's mask of it (ResNet's training step): two nests over
  // images, channels and positions. Merged level by level, x is read once per channel plane;
  // the element loops stay apart (one vector loop storing floats and bools together ran
  // 1.7x slower with g++ 12).
  const Kernel kernel = testing::lower_outputs([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {4, 6, 10, 10});
    Value* y = b.apply(Op::batch_norm_train,
                       {x, b.input("scale", DType::f32, {6}), b.input("bias", DType::f32, {6})})[0];
    Value* s = b.add(y, b.input("r", DType::f32, {4, 6, 10, 10}));
    return std::vector<Value*>{b.relu(s), b.greater(s, b.input("zero", DType::f32, {}))};
  });
  const std::string text = print(default_schedule(kernel, kAvx2));
  size_t merges = 0;
  for (size_t at = text.find("merge "); at != std::string::npos; at = text.find("merge ", at + 1)) {
    ++merges;
  }
  // The statistics' nest with itself (mean and variance), then images, channels: not positions.
  EXPECT_EQ(merges, 3u) << text;
  schedule_and_check(kernel, kAvx2);
}

TEST(DefaultSchedule, ALoopReadingItsSiblingsRowsIsNotMergedIntoIt) {
  // ViT's embeddings and their layer norm: e = x^T + p (patches transposed into tokens) is
  // stored, then layer norm reads e's rows. The nests merge over images only; merged over
  // rows too, the layer norm's statistics could not be hoisted above its element loop (e's
  // row is written first) and ran per element.
  const Kernel kernel = testing::lower_outputs([](GraphBuilder& b) {
    Value* patches = b.transpose(b.input("x", DType::f32, {4, 64, 5}), {0, 2, 1});
    Value* e = b.add(patches, b.input("p", DType::f32, {5, 64}));
    return std::vector<Value*>{
        e, b.layer_norm(e, b.input("scale", DType::f32, {64}), b.input("bias", DType::f32, {64}))};
  });
  const std::string text = print(default_schedule(kernel, kAvx2));
  EXPECT_EQ(text.find("merge i1 "), std::string::npos) << text;
  EXPECT_NE(text.find("hoist"), std::string::npos) << text;
  schedule_and_check(kernel, kAvx2);
}

TEST(DefaultSchedule, OddAndEmptyShapes) {
  for (const auto& dims : std::vector<std::vector<int64_t>>{
           {7}, {1}, {0}, {1, 5}, {0, 3}, {7, 1}, {3, 7}, {7, 20001}}) {
    SCOPED_TRACE(::testing::PrintToString(dims));
    const Kernel exp =
        lower([&](GraphBuilder& b) { return b.exp(b.input("x", DType::f32, Shape(dims))); });
    schedule_and_check(exp, kAvx2);
    const int64_t rows = dims[0], cols = dims.size() > 1 ? dims[1] : 1;
    if (rows * cols <= 400) schedule_and_check(softmax(rows, std::max<int64_t>(cols, 1)), kAvx2);
  }
}

TEST(DefaultSchedule, HostTargetReadsTheMachine) {
  const ScheduleTarget host = host_target();
  EXPECT_GE(host.cores, 1);
  EXPECT_TRUE(host.vector_bytes == 16 || host.vector_bytes == 32 || host.vector_bytes == 64);
}

}  // namespace
}  // namespace kiln::loop
