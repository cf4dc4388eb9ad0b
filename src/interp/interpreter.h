// The fp64 reference interpreter: the oracle every compiled result is compared with.
//
// It walks the graph in node order and evaluates each node with its op record's reference
// evaluation (ir/op.h): all arithmetic in double, results rounded to each value's dtype. A
// collective (all_reduce, broadcast) runs through the process's communicator instead
// (comm/communicator.h), so that the interpreter of each rank of a job computes what the job
// does; in a world of one that is the reference evaluation. It is
// written for being obviously right, not fast. Values are released after their last use, and
// every allocation is checked against a limit first, so a graph with huge shapes fails with a
// message instead of exhausting memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

struct InterpreterOptions {
  // Largest number of elements the interpreter will hold at once across live values.
  int64_t max_live_elements = int64_t{1} << 30;
};

// Runs `graph` on `inputs` (one per graph input, matching its type exactly) and returns the
// graph outputs. Errors name the node that failed.
Expected<std::vector<Array>> interpret(const Graph& graph, std::span<const Array> inputs,
                                       const InterpreterOptions& options = {});

}  // namespace kiln
