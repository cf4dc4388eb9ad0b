// The schedule search's measurements on this CPU (loop/schedule_search.h: KernelTimer): the
// kernels compiled together as one translation unit by the machinery that compiles every CPU
// kernel (codegen/cpu/kernel_compiler.h, through its cache), run on the same random inputs,
// each checked against the first (the reference, loop/schedule_search.h) and timed.
//
// Inputs: every parameter filled with random values of its dtype (floats uniform in [-2, 2],
// integers in [-5, 5], bools 0 or 1), outputs included, and restored before each checked run,
// so a kernel that reads what it writes (an optimizer's update in place) starts from the same
// values each time. The search only gives kernels whose indices read no memory, so random
// values never address out of bounds.
//
// Check: after one run of each kernel from the same inputs, every element of every parameter
// must equal the reference's, exactly for integers and bools, and for floats within a
// relative 1e-3 of the larger magnitude (at least 1) in f32, 2e-2 in f16 and bf16, 1e-9 in f64:
// the reassociation of a vectorized reduction and the vector bodies of math functions round
// differently, nothing else may differ. NaN matches NaN.
//
// Timing: that run is the warm-up; then each scheduled kernel runs at least kMinRuns times,
// and more while its share of the budget lasts (at most kMaxRuns), and its time is the median.
#pragma once

#include <span>

#include "codegen/cpu/kernel_compiler.h"
#include "loop/schedule_search.h"

namespace kiln {

class CpuKernelTimer final : public loop::KernelTimer {
 public:
  static constexpr int kMinRuns = 3;
  static constexpr int kMaxRuns = 50;
  // Kernels whose parameters hold more are not timed (an error the search reports).
  static constexpr int64_t kMaxBytes = int64_t{1} << 30;

  explicit CpuKernelTimer(codegen::cpu::CpuCompileOptions options) : options_(std::move(options)) {}

  Expected<std::vector<loop::Timing>> time(std::span<const loop::Kernel> kernels,
                                           double seconds) override;
  // cost::watch_quiet over the runs of the last time().
  bool measured_quietly() const override { return quiet_; }

 private:
  codegen::cpu::CpuCompileOptions options_;
  bool quiet_ = true;
};

}  // namespace kiln
