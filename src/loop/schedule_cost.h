// A cost model of a scheduled kernel, for ranking the candidates of the schedule search
// (loop/schedule_search.h) before any of them is compiled: only the best few are timed.
//
// The estimate is a roofline per top-level statement of the kernel (a nest), summed: the
// larger of its compute time and its memory time, plus the cost of starting each parallel loop.
//  - Compute: simple operations (arithmetic, selects, casts, loads, one per loop iteration for
//    the loop's own counting, none in an unrolled loop), kMathCallWork per math-library call
//    (exp, erf, ...), each reduction's body times its extent. Inside a vectorized loop or a
//    vectorized reduction they are divided by the vector lanes, except a math call without a
//    vector body (no vector math, or pow) and a load that is not contiguous (a gather, one per
//    lane). Divided by the cores a parallel loop around them keeps busy.
//  - Memory: every load and store moves its element's bytes when it is contiguous along the
//    innermost loop or reduction around it, nothing when invariant there, and a 64-byte cache
//    line otherwise (a column walk, a transpose's strided side). Bytes of a buffer that fits in
//    one core's L2 move at the cache's bandwidth, others at the memory's (half of it for a
//    serial loop, all of it with every core).
//  - Parallel balance: a parallel loop of P iterations on C cores runs ceil(P / C) rounds.
//
// The features (CostEstimate::features) describe the kind of nest, for a per-machine linear
// correction (CostFit) fitted to what the search measures:
//   0  1 (the bias);
//   1  the memory share: memory time over compute plus memory time;
//   2  the vector share: operations run in vector lanes over all operations;
//   3  the strided share: bytes moved by accesses that are not contiguous over all bytes;
//   4  parallel: 1 when the kernel has a parallel loop;
//   5  the math share: operations in math-library calls over all operations.
// CostFit is ridge regression of log(measured / estimated) on them, the corrected estimate
// estimate * exp(w . features). It starts at w = 0 (the plain model) and learns from every
// search that measures, kept with the search's cache (loop/schedule_search.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

// The machine the estimate is for; the defaults are a modest two-core x86-64.
struct CostMachine {
  int cores = 2;
  int vector_bytes = 32;
  bool vector_math = false;
  double ops_per_second = 2e9;      // simple operations per second on one core
  double memory_bandwidth = 10e9;   // bytes/s read plus written with every core
  double cache_bandwidth = 50e9;    // bytes/s from L2, per core
  int64_t l2_bytes = int64_t{1} << 20;  // per core
  double parallel_start = 5e-6;     // seconds to start a parallel loop
};

inline constexpr size_t kCostFeatures = 6;
using CostFeatures = std::array<double, kCostFeatures>;

struct CostEstimate {
  double seconds = 0;
  CostFeatures features = {};
};

CostEstimate estimate_cost(const Kernel& scheduled, const CostMachine& machine);

// The per-machine correction (above).
class CostFit {
 public:
  // The estimate corrected: seconds * exp(w . features).
  double corrected(const CostEstimate& estimate) const;
  // One measurement of a kernel whose plain estimate was `estimate`.
  void add(const CostEstimate& estimate, double measured_seconds);
  int measurements() const { return measurements_; }

  // Text form of the sums the fit keeps; from_text(to_text()) gives the same fit.
  std::string to_text() const;
  static Expected<CostFit> from_text(std::string_view text);

 private:
  void solve();  // weights_ from the sums

  // The normal equations' sums: features' outer products and features times residuals.
  std::array<std::array<double, kCostFeatures>, kCostFeatures> gram_ = {};
  CostFeatures moment_ = {};
  int measurements_ = 0;
  CostFeatures weights_ = {};  // solved after every add
};

}  // namespace kiln::loop
