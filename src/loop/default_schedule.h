// The default CPU schedule: a few rules that get most of the speed of a lowered kernel
// without search.
//
// For each top-level loop nest of the kernel, in order (a loop around a gemm statement is kept
// as it is, serial or parallel as lowering made it, and the nests beside the gemm inside it
// are scheduled instead: a matmul's epilogue, a convolution's im2col):
//  1. Hoist. Every loop of the output nest but the innermost gets `hoist`, outermost first,
//     when it lifts something: row statistics (softmax's max and sum, layer norm's mean and
//     variance) are then computed once per row instead of once per element (O(N) instead of
//     O(N^2) per row), and the row is read three times in a row while it is in cache.
//  2. Vectorize. The innermost loop, when every store in it is contiguous in its variable
//     (stride 1) and every load is contiguous or invariant (stride 0), is split by the number
//     of lanes of the narrowest element type it loads (vector bytes / element bytes; f16
//     and bf16 count as f32, which they are computed in; a bool mask read beside floats takes
//     64 lanes of 64-byte vectors, since the compiler fills its vectors with the narrowest
//     type it loads and leaves a shorter loop scalar) and the inner part is vectorized; the
//     remainder runs as a serial tail loop. Loops shorter than a vector are left alone, and
//     reductions inside a vectorized loop stay scalar, one per lane. Strided loads are
//     vectorized only inside a transpose's tiles (lanes x lanes elements, whose input lines
//     each tile reads whole) and column reductions accumulate in lanes, along the innermost
//     loop or a loop around it moved innermost (default_schedule.cc's rules 2a and 2c).
//  3. Parallelise. Nests that do less than kMinParallelWork operations (loop iterations
//     times the work of their bodies, reduction steps included, a math-library call such as
//     exp or erf counted as kMathCallWork) stay serial: starting the
//     thread team costs more than it saves. Otherwise outer loops that are perfectly nested
//     are fused until there are kIterationsPerCore iterations per core (enough to balance
//     uneven cores), never into the vector loop, and the result is marked parallel. Nests
//     inside a loop that is parallel already (lowering's parallel batch of small gemms) stay
//     serial: each runs on one thread.
//  4. Vectorize reductions. After every nest, each innermost reduction outside every
//     vectorized loop, of at least as many terms as it would keep lanes (loop/schedule.h:
//     reduction_lanes), whose body calls no math library and loads contiguously or at an
//     invariant index, gets `vectorize` on its variable: partial results in vector lanes.
// Every directive is applied as it is chosen and kept only when it is legal (a dependence
// between iterations makes vectorize or parallel fail; the rule is then skipped), so the
// schedule always replays on the kernel it was made for.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "loop/schedule.h"

namespace kiln::loop {

struct ScheduleTarget {
  int cores = 2;
  int vector_bytes = 32;  // AVX2
  // exp, log, erf, tanh, sin, cos (and sigmoid, through exp) have vector bodies: glibc's
  // libmvec, which the generated code's prelude declares (codegen/cpu/prelude.cc).
  bool vector_math = false;
};

// The machine this process runs on: its hardware threads, 64-byte vectors with AVX-512F,
// 32 with AVX2, 16 otherwise; vector math on x86-64 with glibc 2.35 or later, the prelude's
// condition.
ScheduleTarget host_target();

Schedule default_schedule(const Kernel& kernel, const ScheduleTarget& target = {});

// The loop nests the rules schedule, by their outermost loop's variable, in order: the top-level
// loops, and beside a gemm the nests inside the loop that holds it. Those inside a loop that is
// parallel already go to `in_parallel` as well, when given.
std::vector<std::string> schedulable_nests(const Stmt& body,
                                           std::set<std::string, std::less<>>* in_parallel = {});

// The vector lanes of the widest element `stmt` loads or stores (f16 and bf16 as f32).
int64_t lanes_of_widest(const Stmt& stmt, int64_t vector_bytes);

// Rules 0 and 1 alone: the merges and hoists default_schedule begins with, which make each row
// one pass with its statistics computed once (for the GPU mapping, which takes these and none
// of the CPU's tiling or vectorization).
Schedule row_passes(const Kernel& kernel);

}  // namespace kiln::loop
