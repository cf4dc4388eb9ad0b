// Test support for schedules: lowering one-op and small graphs to kernels, running a kernel
// before and after scheduling on the same random inputs, and looking at loop structure.
//
// Scheduling never reassociates arithmetic, so a scheduled kernel must give bit-identical
// results; the comparison is exact (NaN equals NaN). Inputs come from a generator seeded by
// KILN_LOOP_SEED (loop/lowering_check.h), printed on failure.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "loop/evaluator.h"
#include "loop/ir_visitor.h"
#include "loop/lower_group.h"
#include "loop/printer.h"
#include "loop/schedule.h"
#include "unit/loop/lowering_check.h"

namespace kiln::loop::testing {

// The kernel lower_group makes for the graph `build` returns the outputs of.
inline Kernel lower_outputs(const std::function<std::vector<Value*>(GraphBuilder&)>& build) {
  Graph graph;
  GraphBuilder b(graph);
  graph.set_outputs(build(b));
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes());
  KILN_CHECK(lowered.has_value(), "lowering failed: {}", lowered.status().message());
  return lowered->kernel;
}

inline Kernel lower(const std::function<Value*(GraphBuilder&)>& build) {
  return lower_outputs([&](GraphBuilder& b) { return std::vector<Value*>{build(b)}; });
}

// Every parameter filled with random values of its dtype (outputs too: a kernel that failed
// to write an element then shows as a difference).
inline std::vector<std::vector<double>> random_args(const Kernel& kernel, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<double>> args;
  for (const Buffer& param : kernel.params) {
    std::vector<double> values(static_cast<size_t>(param.flat_size()));
    for (double& v : values) {
      if (is_floating(param.dtype())) {
        v = round_to_dtype(std::uniform_real_distribution<double>(-2, 2)(rng), param.dtype());
      } else if (param.dtype() == DType::boolean) {
        v = static_cast<double>(rng() % 2);
      } else {
        v = static_cast<double>(std::uniform_int_distribution<int64_t>(-5, 5)(rng));
      }
    }
    args.push_back(std::move(values));
  }
  return args;
}

// Runs both kernels (with the same parameters) on the same random inputs; every parameter
// must end up bit-identical.
inline ::testing::AssertionResult same_results(const Kernel& original, const Kernel& scheduled,
                                               uint64_t seed = test_seed()) {
  std::vector<std::vector<double>> expected = random_args(original, seed);
  std::vector<std::vector<double>> actual = expected;
  if (Status s = run_kernel(original, expected); !s.is_ok()) {
    return ::testing::AssertionFailure() << "original: " << s.message();
  }
  if (Status s = run_kernel(scheduled, actual); !s.is_ok()) {
    return ::testing::AssertionFailure() << "scheduled: " << s.message() << "\n"
                                         << print(scheduled);
  }
  for (size_t p = 0; p < expected.size(); ++p) {
    for (size_t i = 0; i < expected[p].size(); ++i) {
      const double want = expected[p][i], got = actual[p][i];
      const bool same = std::isnan(want) ? std::isnan(got) : got == want;
      if (!same) {
        return ::testing::AssertionFailure()
               << fmt::format("{}[{}]: scheduled {} vs original {} (seed {})\n",
                              original.params[p].name(), i, got, want, seed)
               << print(scheduled);
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The loops of a statement, outermost first, with what sits inside each.
struct LoopInfo {
  std::string var;
  ForKind kind = ForKind::serial;
  Expr extent;
  bool has_reduce = false;  // a reduce expression anywhere inside
  bool has_loop = false;    // another loop inside
  int stores = 0;           // stores anywhere inside
};

inline std::vector<LoopInfo> loops_of(const Stmt& body) {
  class Collector : public IRVisitor {
   public:
    std::vector<LoopInfo> loops;

   protected:
    void visit_for(const For& node) override {
      for (size_t open : open_) loops[open].has_loop = true;
      open_.push_back(loops.size());
      loops.push_back({node.var, node.for_kind, node.extent});
      IRVisitor::visit_for(node);
      open_.pop_back();
    }
    void visit_reduce(const Reduce& node) override {
      for (size_t open : open_) loops[open].has_reduce = true;
      IRVisitor::visit_reduce(node);
    }
    void visit_store(const Store& node) override {
      for (size_t open : open_) ++loops[open].stores;
      IRVisitor::visit_store(node);
    }

   private:
    std::vector<size_t> open_;
  } collector;
  collector.visit(body);
  return collector.loops;
}

inline const LoopInfo* find(const std::vector<LoopInfo>& loops, std::string_view var) {
  for (const LoopInfo& loop : loops) {
    if (loop.var == var) return &loop;
  }
  return nullptr;
}

inline int count_kind(const std::vector<LoopInfo>& loops, ForKind kind) {
  int n = 0;
  for (const LoopInfo& loop : loops) n += loop.kind == kind ? 1 : 0;
  return n;
}

}  // namespace kiln::loop::testing
