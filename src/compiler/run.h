// Running a compiled graph on Arrays, and the check mode.
//
// The check mode runs the compiled program step by step. After each kernel it decodes the
// kernel's input buffers, evaluates the kernel's nodes with their reference evaluation (the
// op records' f64 `eval`, as the interpreter does) on exactly those inputs, and compares the
// results with the kernel's outputs. Because every kernel is judged on its own inputs, an
// error is pinned to the kernel that made it, not to the first kernel it propagated to; the
// report names the first kernel that disagrees and stops there.
//
// Tolerances are per dtype, relative to each element and to the largest magnitude of the output
// (f32 kernels accumulate in f32, the reference in f64): f64 1e-9, f32 1e-4, f16 and bf16 1e-2;
// integers and bool exactly. A kernel's outputs are held to the loosest tolerance of the values its
// nodes compute: under mixed precision an f32 output computed from a bf16 value carries bf16's
// error. Some elements are ill-conditioned: a rounding-sized change of the inputs moves them far
// more than the tolerance (an Adam update of a gradient that cancels to near Adam's epsilon, where
// any f32 summation order gives another value). So a kernel that fails is judged again, each
// element allowed twice the most the reference moves by when the kernel's floating inputs and each
// node's results are scaled by 1 +- 2^-16 (the error of f32 accumulation; three samples of random
// signs, in the manner of Monte Carlo arithmetic); a wrong index or formula still fails on the
// well-conditioned elements.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "ir/array.h"
#include "runtime/executor.h"

namespace kiln {

// One Array per graph input, of its exact type; returns the graph outputs.
Expected<std::vector<Array>> run_compiled(const Graph& graph, runtime::ProgramExecutor& executor,
                                          std::span<const Array> inputs,
                                          const runtime::RunHooks& hooks = {});

struct KernelCheck {
  int step = 0;
  std::string label = {};
  double max_abs_error = 0;
  double max_rel_error = 0;
  std::string mismatch = {};  // empty when the kernel agrees with the reference
};

struct CheckReport {
  std::vector<KernelCheck> kernels;  // every kernel run, in order; the last may be the bad one
  bool ok() const { return kernels.empty() || kernels.back().mismatch.empty(); }
};

Expected<CheckReport> check_compiled(const Graph& graph, const CompiledGraph& compiled,
                                     runtime::ProgramExecutor& executor, std::span<const Array> inputs);

}  // namespace kiln
