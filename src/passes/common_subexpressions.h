// Common-subexpression elimination: of two nodes applying the same op with the same attributes
// to the same inputs, the later one is removed and its uses read the earlier one's outputs.
//
//   %a = exp(%x) : f32[4]              %a = exp(%x) : f32[4]
//   %b = exp(%x) : f32[4]      ==>     %c = add(%a, %a) : f32[4]
//   %c = add(%a, %b) : f32[4]
//
// Every Kiln op is pure and deterministic (dropout included: equal seed and offset attributes
// give equal masks), so equal node keys mean equal values. Constants merge when their values
// are equal. Nodes are visited in order, so chains of duplicates collapse in one run: once %b
// becomes %a, a later exp(%b) is exp(%a) and merges too. The removed node's output names are
// lost; graph outputs keep their positions but may now share a value.
#pragma once

#include "ir/graph.h"

namespace kiln {

// Returns whether anything was merged.
bool eliminate_common_subexpressions(Graph& graph);

}  // namespace kiln
