// The loop IR's text form, for people, golden tests and error messages.
//
//   kernel matmul(a: f32[4, 8], b: f32[8, 16], c: f32[4, 16]) {
//     parallel for (i, 0, 4) {
//       for (j, 0, 16) {
//         c[i*16 + j] = sum(k, 0, 8, a[i*8 + k]*b[k*16 + j])
//       }
//     }
//   }
//
// Loops print as `kind for (var, min, extent)` (serial loops without a kind); `let v = e`
// scopes over the lines after it at the same indentation; `allocate t: f32[64] in local {`
// opens a local buffer's scope; a gemm is one line, `gemm(m, n, k) c[offset, ld 16] =
// a[offset, ld 8]^T * b[offset, ld 16]` (`+=` when it accumulates, `^T` on a transposed
// operand). Expressions print with the fewest parentheses that keep the tree (arithmetic
// binds tighter than comparisons, comparisons than && and ||; a right operand of equal
// precedence is parenthesised). i64 and bool constants print bare (42, true), finite f32
// constants with an `f` suffix (0.5f), f64 with a point (0.5), other types as a cast of the
// literal (i32(3), f16(0.5), f32(-inf)); casts print as `type(x)`. A parameter buffer that is
// not row-major prints its strides. loop/parser.h reads the text back.
#pragma once

#include <string>

#include "loop/expr.h"
#include "loop/stmt.h"

namespace kiln::loop {

std::string print(const Expr& expr);
// Statements end each line with a newline and indent two spaces per level from `indent`.
std::string print(const Stmt& stmt, int indent = 0);
std::string print(const Kernel& kernel);
// "name: f32[4, 8]" with strides or scope where they are not the default.
std::string print_buffer_decl(const Buffer& buffer);

}  // namespace kiln::loop
