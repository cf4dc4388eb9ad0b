// Dead-code elimination: removes every node none of whose outputs reaches a graph output.
//
//   graph @g(%x: f32[4]) {            graph @g(%x: f32[4]) {
//     %a = exp(%x) : f32[4]             %b = relu(%x) : f32[4]
//     %b = relu(%x) : f32[4]    ==>     return %b
//     return %b                       }
//   }
//
// Graph inputs are the graph's signature and stay, used or not. Every Kiln op is pure (dropout's
// mask is a function of its seed and offset attributes), so a node whose results nobody reads
// can always go.
#pragma once

#include "ir/graph.h"

namespace kiln {

// Returns whether anything was removed.
bool eliminate_dead_code(Graph& graph);

}  // namespace kiln
