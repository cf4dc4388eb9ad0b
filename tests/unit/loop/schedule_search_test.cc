// The schedule search (loop/schedule_search.h) with timers injected in place of compiling and
// running kernels, so that what it chooses is decided by the test; its cost model and fit
// (loop/schedule_cost.h). The real timer is tested in
// unit/compiler/schedule_search_compile_test.cc.
#include "loop/schedule_search.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "loop/printer.h"
#include "unit/loop/schedule_check.h"

namespace kiln::loop {
namespace {

using testing::lower;
using testing::random_args;

constexpr ScheduleTarget kAvx2 = {.cores = 4, .vector_bytes = 32, .vector_math = true};

Kernel softmax_rows() {
  return lower([](GraphBuilder& b) { return b.softmax(b.input("x", DType::f32, {8, 100})); });
}
Kernel column_sum() {
  return lower([](GraphBuilder& b) { return b.sum(b.input("x", DType::f32, {300, 64}), {0}); });
}
Kernel transpose() {
  return lower(
      [](GraphBuilder& b) { return b.transpose(b.input("x", DType::f32, {64, 48}), {1, 0}); });
}
Kernel elementwise_chain() {
  return lower([](GraphBuilder& b) {
    Value* x = b.input("x", DType::f32, {16, 200});
    Value* y = b.input("y", DType::f32, {1, 200});
    return b.relu(b.add(b.mul(b.exp(x), y), b.tanh(x)));
  });
}

std::vector<std::pair<std::string, Kernel>> kernels() {
  return {{"softmax rows", softmax_rows()},
          {"column sum", column_sum()},
          {"transpose", transpose()},
          {"elementwise chain", elementwise_chain()}};
}

// Both kernels on the same random inputs: every element equal, up to the reassociation of a
// vectorized reduction (a relative 1e-4 of the larger magnitude, at least 1).
::testing::AssertionResult computes_alike(const Kernel& original, const Kernel& scheduled,
                                          uint64_t seed = testing::test_seed()) {
  std::vector<std::vector<double>> expected = random_args(original, seed);
  std::vector<std::vector<double>> actual = expected;
  if (Status s = run_kernel(original, expected); !s.is_ok()) {
    return ::testing::AssertionFailure() << "original: " << s.message();
  }
  if (Status s = run_kernel(scheduled, actual); !s.is_ok()) {
    return ::testing::AssertionFailure() << "scheduled: " << s.message();
  }
  for (size_t p = 0; p < expected.size(); ++p) {
    for (size_t i = 0; i < expected[p].size(); ++i) {
      const double want = expected[p][i], got = actual[p][i];
      const double tolerance = 1e-4 * std::max({1.0, std::abs(want), std::abs(got)});
      if (std::isnan(want) ? !std::isnan(got) : !(std::abs(got - want) <= tolerance)) {
        return ::testing::AssertionFailure()
               << fmt::format("{}[{}]: scheduled {} vs original {} (seed {})\n",
                              original.params[p].name(), i, got, want, seed)
               << print(scheduled);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A timer that asks `seconds` how long each kernel takes and `disagrees` whether it computes
// something else, and remembers what it was given.
class FakeTimer final : public KernelTimer {
 public:
  using Seconds = std::function<double(size_t index, const Kernel& kernel)>;
  explicit FakeTimer(Seconds seconds, std::function<bool(size_t)> disagrees = nullptr)
      : seconds_(std::move(seconds)), disagrees_(std::move(disagrees)) {}

  Expected<std::vector<Timing>> time(std::span<const Kernel> kernels, double) override {
    ++calls;
    given.assign(kernels.begin(), kernels.end());
    std::vector<Timing> timings;
    for (size_t i = 0; i < kernels.size(); ++i) {
      timings.push_back({seconds_(i, kernels[i]),
                         disagrees_ && disagrees_(i) ? "out[0]: 3 vs 2" : std::string()});
    }
    return timings;
  }

  bool measured_quietly() const override { return quiet; }

  int calls = 0;
  bool quiet = true;
  std::vector<Kernel> given;  // the last call's kernels: [0] the reference, [1] the default

 private:
  Seconds seconds_;
  std::function<bool(size_t)> disagrees_;
};

ScheduleSearch::Config quick_config(std::string identity = "test machine") {
  return {.mode = SearchMode::quick,
          .target = kAvx2,
          .machine = {.cores = 4, .vector_bytes = 32, .vector_math = true},
          .identity = std::move(identity)};
}

std::string default_text(const Kernel& kernel) {
  return print(*apply_schedule(kernel, default_schedule(kernel, kAvx2)));
}

// A fresh folder under the test's temporary directory.
std::filesystem::path fresh_folder(std::string_view name) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / fmt::format("kiln_schedule_search_{}", name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ScheduleSearch, CandidatesAreLegalDistinctAndStartWithTheDefault) {
  for (const auto& [name, kernel] : kernels()) {
    SCOPED_TRACE(name);
    for (const SearchMode mode : {SearchMode::quick, SearchMode::full}) {
      const std::vector<Candidate> candidates = schedule_candidates(kernel, kAvx2, mode);
      ASSERT_GE(candidates.size(), 3u);
      EXPECT_EQ(candidates[0].text, default_text(kernel));
      std::set<std::string> texts;
      bool serial = false, parallel = false;
      for (const Candidate& candidate : candidates) {
        Expected<Kernel> replayed = apply_schedule(kernel, candidate.schedule);
        ASSERT_TRUE(replayed.has_value()) << replayed.status().message();
        EXPECT_EQ(print(*replayed), candidate.text);
        EXPECT_TRUE(texts.insert(candidate.text).second) << candidate.text;
        const auto loops = testing::loops_of(candidate.kernel.body);
        (testing::count_kind(loops, ForKind::parallel) > 0 ? parallel : serial) = true;
      }
      EXPECT_TRUE(serial && parallel) << "the candidates vary which loops run in parallel";
    }
  }
}

TEST(ScheduleSearch, FullMakesMoreCandidatesThanQuick) {
  const Kernel kernel = elementwise_chain();
  EXPECT_GT(schedule_candidates(kernel, kAvx2, SearchMode::full).size(),
            schedule_candidates(kernel, kAvx2, SearchMode::quick).size());
}

TEST(ScheduleSearch, ChosenScheduleComputesWhatTheUnscheduledKernelComputes) {
  for (const auto& [name, kernel] : kernels()) {
    SCOPED_TRACE(name);
    // The last kernel timed is the fastest by far: the search must choose it.
    FakeTimer timer([](size_t index, const Kernel&) { return 1.0 / static_cast<double>(index + 1); });
    ScheduleSearch search(quick_config(), timer, nullptr);
    Expected<SearchChoice> choice = search.choose(kernel);
    ASSERT_TRUE(choice.has_value()) << choice.status().message();
    ASSERT_EQ(timer.calls, 1);
    ASSERT_GE(timer.given.size(), 3u);
    EXPECT_EQ(print(timer.given[0]), print(*apply_schedule(kernel, row_passes(kernel))))
        << "the reference comes first";
    EXPECT_EQ(print(timer.given[1]), default_text(kernel)) << "then the default";
    EXPECT_EQ(print(choice->kernel), print(timer.given.back()));
    EXPECT_NE(print(choice->kernel), default_text(kernel));
    EXPECT_EQ(choice->report.how, "searched");
    EXPECT_TRUE(computes_alike(kernel, choice->kernel));
    Expected<Kernel> replayed = apply_schedule(kernel, choice->schedule);
    ASSERT_TRUE(replayed.has_value());
    EXPECT_EQ(print(*replayed), print(choice->kernel));
  }
}

TEST(ScheduleSearch, NeverChoosesAKernelMeasuredSlowerThanTheDefault) {
  const Kernel kernel = softmax_rows();
  const std::string by_default = default_text(kernel);
  // Every candidate slower, or faster by less than the margin: the default stays.
  for (const double others : {1.5, 1.0 - kMinSearchGain / 2}) {
    FakeTimer timer([&](size_t index, const Kernel&) { return index == 1 ? 1.0 : others; });
    ScheduleSearch search(quick_config(), timer, nullptr);
    Expected<SearchChoice> choice = search.choose(kernel);
    ASSERT_TRUE(choice.has_value());
    ASSERT_GE(timer.given.size(), 3u) << "candidates besides the default were timed";
    EXPECT_EQ(print(choice->kernel), by_default) << "others at " << others;
    EXPECT_EQ(choice->report.measured, 1.0);
    EXPECT_EQ(choice->report.default_measured, 1.0);
  }
  // Faster by more than the margin: chosen.
  FakeTimer faster([](size_t index, const Kernel&) { return index == 2 ? 0.5 : 1.0; });
  ScheduleSearch search(quick_config(), faster, nullptr);
  Expected<SearchChoice> choice = search.choose(kernel);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(print(choice->kernel), print(faster.given[2]));
  EXPECT_EQ(choice->report.measured, 0.5);
}

TEST(ScheduleSearch, DiscardsAndReportsACandidateThatComputesSomethingElse) {
  const Kernel kernel = column_sum();
  // The fastest candidate disagrees with the unscheduled kernel; the next is slower than the
  // default.
  FakeTimer timer([](size_t index, const Kernel&) { return index == 2 ? 0.1 : 1.0; },
                  [](size_t index) { return index == 2; });
  ScheduleSearch search(quick_config(), timer, nullptr);
  Expected<SearchChoice> choice = search.choose(kernel);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(print(choice->kernel), default_text(kernel));
  ASSERT_EQ(choice->report.disagreements.size(), 1u);
  EXPECT_NE(choice->report.disagreements[0].find("out[0]: 3 vs 2"), std::string::npos);
}

TEST(ScheduleSearch, SecondSearchReadsTheCacheAndMeasuresNothing) {
  const ScheduleCache cache(fresh_folder("cache"));
  const Kernel kernel = elementwise_chain();
  FakeTimer timer([](size_t index, const Kernel&) { return 1.0 / static_cast<double>(index + 1); });
  Expected<SearchChoice> first = ScheduleSearch(quick_config(), timer, &cache).choose(kernel);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->report.how, "searched");
  EXPECT_EQ(timer.calls, 1);

  Expected<SearchChoice> second = ScheduleSearch(quick_config(), timer, &cache).choose(kernel);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(timer.calls, 1) << "a cached kernel is not measured again";
  EXPECT_EQ(second->report.how, "cached");
  EXPECT_EQ(print(second->schedule), print(first->schedule));
  EXPECT_EQ(print(second->kernel), print(first->kernel));
  EXPECT_EQ(second->report.measured, first->report.measured);
  EXPECT_EQ(second->report.default_measured, first->report.default_measured);
  EXPECT_EQ(cache.load_fit("test machine").measurements(), first->report.timed);

  // Another machine, or another mode, searches again.
  ASSERT_TRUE(ScheduleSearch(quick_config("other machine"), timer, &cache).choose(kernel));
  EXPECT_EQ(timer.calls, 2);
  ScheduleSearch::Config full = quick_config();
  full.mode = SearchMode::full;
  ASSERT_TRUE(ScheduleSearch(full, timer, &cache).choose(kernel));
  EXPECT_EQ(timer.calls, 3);
}

TEST(ScheduleSearch, TimesMeasuredUnderLoadChooseNothingAndAreNotCached) {
  const ScheduleCache cache(fresh_folder("load"));
  const Kernel kernel = elementwise_chain();
  FakeTimer timer([](size_t index, const Kernel&) { return 1.0 / static_cast<double>(index + 1); });
  timer.quiet = false;
  Expected<SearchChoice> busy = ScheduleSearch(quick_config(), timer, &cache).choose(kernel);
  ASSERT_TRUE(busy.has_value());
  EXPECT_EQ(timer.calls, 1);
  EXPECT_EQ(print(busy->kernel), default_text(kernel));
  EXPECT_TRUE(busy->report.how.starts_with("not searched: other programs")) << busy->report.how;
  EXPECT_EQ(cache.load_fit("test machine").measurements(), 0);
  timer.quiet = true;
  Expected<SearchChoice> quiet = ScheduleSearch(quick_config(), timer, &cache).choose(kernel);
  ASSERT_TRUE(quiet.has_value());
  EXPECT_EQ(timer.calls, 2) << "nothing was cached under load";
  EXPECT_EQ(quiet->report.how, "searched");
}

TEST(ScheduleSearch, OffAndUnsearchableKernelsKeepTheDefaultUnmeasured) {
  FakeTimer timer([](size_t, const Kernel&) { return 1.0; });
  ScheduleSearch::Config off = quick_config();
  off.mode = SearchMode::off;
  const Kernel softmax = softmax_rows();
  Expected<SearchChoice> choice = ScheduleSearch(off, timer, nullptr).choose(softmax);
  ASSERT_TRUE(choice.has_value());
  EXPECT_EQ(choice->report.how, "default");
  EXPECT_EQ(print(choice->kernel), default_text(softmax));

  const Kernel gathered = lower([](GraphBuilder& b) {
    return b.gather(b.input("x", DType::f32, {10, 32}), b.input("i", DType::i64, {6}));
  });
  const Kernel product = lower([](GraphBuilder& b) {
    return b.matmul(b.input("a", DType::f32, {8, 16}), b.input("b", DType::f32, {16, 8}));
  });
  for (const Kernel* kernel : {&gathered, &product}) {
    choice = ScheduleSearch(quick_config(), timer, nullptr).choose(*kernel);
    ASSERT_TRUE(choice.has_value());
    EXPECT_TRUE(choice->report.how.starts_with("not searched")) << choice->report.how;
    EXPECT_EQ(print(choice->kernel), default_text(*kernel));
  }
  EXPECT_EQ(timer.calls, 0);
}

TEST(ScheduleCost, RanksVectorAndParallelLoopsAheadForALargeElementwiseKernel) {
  const Kernel kernel = lower([](GraphBuilder& b) {
    return b.exp(b.add(b.input("x", DType::f32, {512, 1024}), b.input("y", DType::f32, {1, 1024})));
  });
  const CostMachine machine = {.cores = 4, .vector_bytes = 32, .vector_math = true};
  const CostEstimate naive = estimate_cost(kernel, machine);
  const CostEstimate scheduled =
      estimate_cost(*apply_schedule(kernel, default_schedule(kernel, kAvx2)), machine);
  EXPECT_LT(scheduled.seconds * 4, naive.seconds);
  EXPECT_EQ(naive.features[4], 0.0);
  EXPECT_EQ(scheduled.features[4], 1.0);
  EXPECT_GT(scheduled.features[2], 0.5) << "most operations run in vector lanes";
  EXPECT_GT(naive.features[5], 0.0) << "exp is a math call";
}

TEST(ScheduleCost, StridedAccessesCostCacheLines) {
  const CostMachine machine;
  const CostEstimate columns = estimate_cost(column_sum(), machine);
  const CostEstimate rows = estimate_cost(
      lower([](GraphBuilder& b) { return b.sum(b.input("x", DType::f32, {64, 300}), {1}); }),
      machine);
  EXPECT_GT(columns.features[3], 0.9);
  EXPECT_EQ(rows.features[3], 0.0);
}

TEST(CostFit, LearnsAConsistentRatioAndKeepsItInText) {
  CostFit fit;
  const CostEstimate estimate = {1e-3, {1, 0.5, 0.2, 0, 1, 0.1}};
  EXPECT_DOUBLE_EQ(fit.corrected(estimate), 1e-3) << "a fresh fit is the plain model";
  for (int i = 0; i < 200; ++i) fit.add(estimate, 2e-3);
  EXPECT_NEAR(fit.corrected(estimate), 2e-3, 1e-4);
  Expected<CostFit> read = CostFit::from_text(fit.to_text());
  ASSERT_TRUE(read.has_value()) << read.status().message();
  EXPECT_EQ(read->measurements(), 200);
  EXPECT_DOUBLE_EQ(read->corrected(estimate), fit.corrected(estimate));
  EXPECT_FALSE(CostFit::from_text("kiln-cost-fit 1\n3\n1 2\n").has_value());
}

// Random elementwise chains with a reduction or a softmax at the end, searched with random
// timings (each a different choice): every candidate computes what the unscheduled kernel does.
TEST(ScheduleSearchFuzz, RandomKernelsSearchedAndChecked) {
  const uint64_t seed = testing::test_seed();
  std::mt19937_64 rng(seed);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  for (int round = 0; round < 12; ++round) {
    const int64_t rows = 1 + pick(40), cols = 1 + pick(70);
    const int ops = 1 + pick(3), tail = pick(4);
    const Kernel kernel = lower([&](GraphBuilder& b) {
      Value* x = b.input("x", DType::f32, {rows, cols});
      Value* y = b.input("y", DType::f32, {1, cols});
      Value* v = x;
      for (int i = 0; i < ops; ++i) {
        switch (pick(5)) {
          case 0: v = b.add(v, y); break;
          case 1: v = b.mul(v, x); break;
          case 2: v = b.tanh(v); break;
          case 3: v = b.max(v, y); break;
          default: v = b.exp(b.mul_scalar(v, 0.25)); break;
        }
      }
      switch (tail) {
        case 0: return b.sum(v, {0});
        case 1: return b.reduce_max(v, {1});
        case 2: return b.softmax(v);
        default: return v;
      }
    });
    SCOPED_TRACE(fmt::format("seed {} round {}\n{}", seed, round, print(kernel)));
    for (const Candidate& candidate : schedule_candidates(kernel, kAvx2, SearchMode::quick)) {
      ASSERT_TRUE(computes_alike(kernel, candidate.kernel, seed + round))
          << print(candidate.schedule);
    }
    FakeTimer timer([&](size_t, const Kernel&) { return 0.5 + 0.5 * (rng() % 1000) / 1000.0; });
    Expected<SearchChoice> choice = ScheduleSearch(quick_config(), timer, nullptr).choose(kernel);
    ASSERT_TRUE(choice.has_value()) << choice.status().message();
    EXPECT_TRUE(computes_alike(kernel, choice->kernel, seed + round));
    EXPECT_LE(choice->report.measured, choice->report.default_measured);
  }
}

}  // namespace
}  // namespace kiln::loop
