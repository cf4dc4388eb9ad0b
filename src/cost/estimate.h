// The roofline estimate of one kernel: the time a group of graph nodes takes when lower_group
// (loop/lower_group.h) makes it one kernel.
//
// The estimate mirrors what lowering does with a group, without lowering it:
//  - Values the group computes are *stored* when they are used outside the group or are graph
//    outputs (written to memory), when their op cannot be inlined (reductions, contractions,
//    opaque ops, composites: materialised in a local buffer), or when a contraction of the
//    group reads them (a gemm reads memory). Every other value is *inlined*: recomputed at
//    each element where a consumer reads it.
//  - Bytes that cross main memory: every input of the group read once for each stored value
//    whose computation reads it (directly or through inlined producers) when the input is
//    larger than half the last-level cache, once otherwise; every output written once; a
//    local buffer larger than half the last-level cache written once and read by each stored
//    value that reads it.
//  - Arithmetic: each node's flops (its op record's cost) per element, times the number of
//    times its elements are evaluated (once for a stored value; for an inlined value, as often
//    as its consumers read it). Contractions run at the sgemm rate, the rest at the vector rate.
//  - A reshape read outside whose input is in memory anyway is a view: not stored, no bytes
//    (lower_group's ViewOutput). A group that stores nothing is no kernel; it costs
//    kViewGroupSeconds.
//  - time = kernel overhead + max(arithmetic time, bytes / bandwidth).
//  - A collective (all_reduce, broadcast; always a group of its own) adds the time its bytes
//    take between the ranks (comm/link_profile.h), over the world mpirun started this process
//    in: nothing in a world of one. The link is priced by the shared-memory default until
//    measured profiles are cached.
//
// Constant nodes are never part of a group: their values are kernel inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cost/device_profile.h"
#include "ir/graph.h"

namespace kiln::cost {

// What a group that stores nothing costs (estimate.cc says why it is not zero).
inline constexpr double kViewGroupSeconds = 1e-9;

struct KernelEstimate {
  double flops = 0;           // every arithmetic operation, recomputation included
  double matmul_flops = 0;    // of which in contractions
  double recomputed_flops = 0;  // of which evaluating inlined values more than once
  int64_t bytes = 0;          // bytes moved to or from main memory
  double compute_seconds = 0;
  double memory_seconds = 0;
  double link_seconds = 0;    // a collective's bytes between the ranks
  double seconds = 0;         // overhead + max(compute, memory) + link
  bool is_kernel = true;  // false for a group that stores nothing (only views): no kernel runs
  std::vector<const Value*> views;  // reshape results the group gives without storing them
};

// `nodes`: distinct non-constant nodes of `graph`, in any order.
KernelEstimate estimate_kernel(const Graph& graph, std::span<Node* const> nodes,
                               const DeviceProfile& profile);

}  // namespace kiln::cost
