// Which outputs of a compiled program may be written over the memory of one of its inputs: a
// training step's new parameters and optimizer state over the old, so that a framework updates
// them in place and holds them once (XLA's input-output aliasing, JAX's donated buffers).
//
// Output o may take input i's memory when no step can read an element of input i after an
// element of output o was written there:
//  - one kernel step, W, writes output o (a copy or collective step never does: an output that
//    is an input, a constant or another output, or a collective's result, stays apart), and it
//    is of input i's size;
//  - every other step that reads input i runs before W;
//  - within W, when W reads input i: the statements before the first one that touches output o
//    may read input i at will, the later ones must not touch it, and in that first statement, a
//    loop nest, every read of input i comes before every write of output o in program order,
//    and every loop around them has iterations that touch elements no other iteration touches
//    (loop/schedule_analysis.h: check_independent, asked of the nest with input i read from
//    output o's buffer). An element is then read and written within one iteration of each
//    loop, and in it the reads come first: vectorized or in parallel alike.
// Anything else is refused with the reason. The check is conservative: a gemm that writes the
// output (a weight's gradient, computed into the new weight's memory before the update
// overwrites it) keeps that output apart, and so does a loop whose iterations the analysis
// cannot tell apart.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "loop/stmt.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln {

// The check for one program, asked of many pairs (a training step's every parameter and state
// tensor): which program buffers each step reads and writes is found once, when it is made.
class InPlaceCheck {
 public:
  // `kernels[k]` is the loop IR of program kernel k, as compiled; both must outlive the check.
  InPlaceCheck(const runtime::Program& program, std::span<const loop::Kernel* const> kernels);

  // OK when output `output` may be given the memory of input `input` (above), else an error
  // saying why not.
  Status check(int64_t output, int64_t input) const;

 private:
  struct StepUse {
    std::set<int> reads, writes;  // program buffers
  };

  const runtime::Program& program_;
  std::span<const loop::Kernel* const> kernels_;
  std::vector<StepUse> steps_;
  std::map<int64_t, int> input_buffer_, output_buffer_;  // caller's index -> program buffer
};

}  // namespace kiln
