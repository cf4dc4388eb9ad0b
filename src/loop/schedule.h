// Schedules as data: directives that transform a kernel's loops without changing what it
// computes, which can be printed, parsed back, replayed and chosen by a scheduler.
//
// A Schedule is an ordered list of directives. Each names loops by their variable (lowered
// kernels name them i0, i1, ...; split and fuse name the loops they make) and applies to
// *every* loop of that name: a split whose tail copies the body leaves two sibling copies of
// the loops inside it, and `vectorize i2` then means both. Directives, in their text form
// (one per line; names are identifiers of letters, digits, '_' and '.', not starting with a
// digit or '.'; blank lines and lines starting with '#' are ignored by the parser):
//
//   split i1 8 i1.o i1.i   for (i1, m, n) -> for (i1.o, 0, n/8) for (i1.i, 0, 8) body with
//                          i1 = m + i1.o*8 + i1.i, then a tail `for (i1, m + n/8*8, n%8)`
//                          when 8 does not divide n (a separate loop, not a guard in the
//                          vector loop, so i1.i has a constant extent). Needs constant bounds.
//   partition i1 256 512   for (i1, m, n) -> for (i1, m, 256 - m) body; for (i1, 256, 256) body;
//                          for (i1, 512, m + n - 512) body: the same iterations in the same
//                          order, in loops whose bounds let the simplifier decide conditions
//                          on i1 in each (a concatenation's selects), so that each piece's
//                          accesses can be contiguous. Needs constant bounds and increasing
//                          points strictly inside them.
//   reorder i1 i0          permutes a perfectly nested band to the order given.
//   fuse i0 i1 i0_i1       for (i0) for (i1) -> for (i0_i1, 0, n0*n1), i0 = i0_i1 / n1 and
//                          i1 = i0_i1 % n1 (constant bounds); the fused loop is serial.
//   vectorize i1.i         marks a loop vectorized (positive constant extent). Given the
//                          variable of a reduction instead (`vectorize k3`), marks every
//                          reduction over it vectorized: its body, which may hold no other
//                          reduction, is evaluated for several k3 at once in vector lanes
//                          whose partial results are combined at the end, so a floating sum
//                          is reassociated (it rounds differently from the in-order sum).
//   parallel i0            marks a loop parallel.
//   unroll i1.i            marks a loop unrolled (positive constant extent, at most 1024).
//   hoist i0               compute-at for values: every `let` and `reduce` expression in a
//                          store's value inside loop i0 that depends on no variable bound
//                          inside i0 becomes a let_stmt at the top of i0's body, computed
//                          once per iteration of i0 instead of once per element. One that
//                          reads what an earlier statement of i0's body writes is bound
//                          just before the loop of the body that holds it instead.
//   cache in0 i0 in0.c     stages the elements of parameter in0 that loop i0's body reads
//                          into a local buffer in0.c, copied at the top of each iteration.
//   merge i0 i6            two loops of one block, outside every loop, with the same bounds
//                          become one: for (i0) { i0's body; i6's body with i6 = i0 }. It
//                          stands where i0 was when i6 commutes with the statements between
//                          them (neither writes what the other reads or writes), else where
//                          i6 was when i0 does. A row reduction and the nests that read it
//                          row by row become one pass over the rows, each row hot in cache.
//   accumulate i9.i k      a loop whose body begins with stores of reductions over one range,
//                          for (i9.i) { t[i] = sum(k3, 0, R, e(k3)); rest }, becomes
//                          for (i9.i) t[i] = 0;
//                          for (k, 0, R) for (i9.i) t[i] = t[i] + e(k);
//                          for (i9.i) rest: each reduction an accumulator that all of i9.i's
//                          iterations advance term by term, in the same order of terms, so
//                          it rounds exactly as before. A column sum then reads rows, which
//                          vectorize and stream, instead of walking each column down. A
//                          reduction stored across i9.i (t[i*4], not contiguous) accumulates
//                          in a local buffer of i9.i's constant extent, stored into t before
//                          rest, so the accumulators stay contiguous too.
//
// Legality. A directive never changes what the kernel computes (up to the rounding of a
// vectorized reduction, which reassociates: the one liberty a schedule takes, as every
// vectorizing compiler does); one that would, or whose
// safety cannot be proven, is an error that names the directive and the reason. Reorder,
// vectorize, parallel and merge need iterations that touch disjoint elements of every buffer
// they write (loop/schedule_analysis.h proves it from the indices; for merge, of the merged
// loop, so that running the two bodies iteration by iteration equals running one loop after
// the other); accumulate needs them too, reductions that read nothing the loop writes and
// store into different buffers; hoist needs the hoisted value
// to read no buffer the loop (or the statement it is bound before) writes, and only lifts values
// out of loops of positive constant extent (so it never evaluates what the original would not);
// cache needs the staged region provably inside the buffer. Statement kinds the scheduler does not
// know are opaque: loops that contain one are not analysed, so hoist, cache, reorder, vectorize and
// parallel refuse them. Split, fuse and unroll keep the order of iterations and need no proof.
//
// apply_directive returns the transformed kernel, verified but not simplified, so loop names
// stay stable from one directive to the next; apply_schedule applies a whole schedule, then
// simplifies (removing loops of extent 0 and 1, empty tails) and verifies the result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

struct Split {
  std::string var;
  int64_t factor = 0;  // >= 1
  std::string outer = {}, inner = {};
  bool operator==(const Split&) const = default;
};

struct Partition {
  std::string var;
  std::vector<int64_t> points;  // where each loop but the first begins, increasing
  bool operator==(const Partition&) const = default;
};

struct Reorder {
  std::vector<std::string> vars;  // the new order, outermost first; at least two
  bool operator==(const Reorder&) const = default;
};

struct Fuse {
  std::string outer, inner, fused;
  bool operator==(const Fuse&) const = default;
};

struct Vectorize {
  std::string var;
  bool operator==(const Vectorize&) const = default;
};

struct Parallel {
  std::string var;
  bool operator==(const Parallel&) const = default;
};

struct Unroll {
  std::string var;
  bool operator==(const Unroll&) const = default;
};

struct Hoist {
  std::string var;
  bool operator==(const Hoist&) const = default;
};

struct Cache {
  std::string buffer, var, local;  // a parameter, the loop, the local buffer to make
  bool operator==(const Cache&) const = default;
};

struct Merge {
  std::string first, second;  // second is merged into first; first's name stays
  bool operator==(const Merge&) const = default;
};

struct Accumulate {
  std::string var, terms;  // the loop, the loop over the reductions' terms to make
  bool operator==(const Accumulate&) const = default;
};

using Directive = std::variant<Split, Reorder, Fuse, Vectorize, Parallel, Unroll, Hoist, Cache,
                               Merge, Accumulate, Partition>;

struct Schedule {
  std::vector<Directive> directives;
  bool operator==(const Schedule&) const = default;
};

// The partial results a vectorized reduction keeps (code generators evaluate its body for
// that many consecutive terms at once): 64 bytes of its narrowest loaded element, at least
// 16; a compiler fills its vectors with the narrowest type and leaves a loop with fewer
// iterations than that scalar (a bool mask beside floats: 64 lanes).
int64_t reduction_lanes(const Reduce& reduction);

// One line, without the newline: "split i1 8 i1.o i1.i".
std::string print(const Directive& directive);
// One line per directive, each ending in a newline; parse_schedule(print(s)) == s.
std::string print(const Schedule& schedule);
// Errors are "line:column: message".
Expected<Schedule> parse_schedule(std::string_view text);

// `kernel` (verified) with one directive applied; verified, not simplified.
Expected<Kernel> apply_directive(const Kernel& kernel, const Directive& directive);
// Applies `directives` to `kernel` in order and appends them to `schedule`, or, when one of
// them is not legal there, changes neither: how a scheduler tries a step and keeps it only
// where it applies. True when they were applied.
bool apply_all_or_none(Kernel& kernel, Schedule& schedule,
                       const std::vector<Directive>& directives);
// Every directive in order, then simplified and verified. Errors name the directive by its
// position (from 1) and text.
Expected<Kernel> apply_schedule(const Kernel& kernel, const Schedule& schedule);

}  // namespace kiln::loop
