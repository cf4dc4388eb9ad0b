// The loop-IR verifier: checks every rule loop/expr.h and loop/stmt.h state.
//
//  - Types agree with no implicit promotion: binary operands have one type; arithmetic
//    (+ - * / % min max, <, <=, >, >=) takes i32, i64 or floats, && || ! take bool, == and !=
//    any equal types; select's condition is bool and its branches agree; intrinsics other
//    than abs take floats, with the right number of arguments of the call's type; indices,
//    loop and reduction bounds and variables are i64; a store's value has the buffer's
//    element type; constants are representable in their type.
//  - Scoping: every variable is bound (by an enclosing For, Let, LetStmt or Reduce) and used
//    with its binder's type, and no name is bound where it is already bound in an enclosing
//    scope (sibling scopes may reuse a name). Every buffer is a kernel parameter or an
//    enclosing allocation and agrees with that declaration (dtype, shape, strides, scope).
//  - Buffers: parameters are global with non-negative extents and strides and unique names;
//    allocations are local, of positive size, and do not shadow another buffer.
//  - Library calls: three operands, and dtypes that are the operands' (accumulating in the
//    output's accumulation dtype, f32 for f16 and bf16); a gemm has no epilogue, a conv a
//    bias then a relu, each at most once.
//    A gemm's three buffers hold one floating dtype (or A and B f16 or bf16 and C f32); C is
//    neither A nor B; offsets and
//    extents are i64; leading dimensions are positive and at least the matrix's width where
//    that is constant; a region whose offset and extents are constant lies inside its
//    buffer; constant extents fit BLAS's int. A conv's geometry is a convolution's, its
//    buffers of one dtype: f32, bf16 or f16.
//  - Loop kinds: vectorized and unrolled loops have constant positive extents; no parallel
//    or vectorized loop, and no vectorized reduction, is nested inside a vectorized loop or
//    a vectorized reduction.
// The first violation is returned as a Status naming the rule and printing the offending
// expression or statement (a statement by its first line).
//
// The rules that concern one node alone, given its children's types (operand and result
// types, constants, a store's element type, a loop's bounds and constant extent, an
// allocation's scope and size, a gemm's operands and regions), are also `check_node`: the
// loop-IR parser (loop/parser.h) applies them to each node as it builds it, so that an error
// points at the text that made the node; scoping and nesting need the whole tree.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loop/expr.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

Status verify(const Kernel& kernel);
// An expression whose free variables have the given types and whose loads read `buffers`.
Status verify(const Expr& expr, const std::map<std::string, DType, std::less<>>& free_vars = {},
              const std::vector<Buffer>& buffers = {});
// The rules of one node given its children's types; a statement's body is not looked at.
Status check_node(const Expr& expr);
Status check_node(const Stmt& stmt);

}  // namespace kiln::loop
