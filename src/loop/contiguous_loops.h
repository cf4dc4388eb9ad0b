// Joining loops over contiguous dims into one loop, a step of lowering (loop/lower_group.h).
//
// A loop directly around another, both serial from 0 to a constant, becomes one loop over
// both when every index in the body is linear in the joined variable: for (i, 0, A) for (j,
// 0, B) body is for (j, 0, A*B) body with i = j / B and j = j % B, kept when the simplifier
// takes every / and % of j away again (loop/simplify.h). Innermost pairs first, so a nest
// over the contiguous trailing dims of a tensor (rows and columns of an image plane, 56 x 56
// in ResNet) becomes one long loop: the default schedule then vectorizes it without a tail
// per row, and with enough iterations for the lanes of its narrowest element (a bool mask
// beside floats takes 64 lanes of AVX-512).
#pragma once

#include "loop/stmt.h"

namespace kiln::loop {

Stmt join_contiguous_loops(const Stmt& stmt);

}  // namespace kiln::loop
