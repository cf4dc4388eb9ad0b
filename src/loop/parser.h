// Parser for the loop IR's text form (loop/printer.h): kernels read back from text, so that
// loop-level passes run on files (loop/loop_passes.h) and tests state kernels as the printer
// writes them. For every kernel k that verifies, print(parse_kernel(print(k))) == print(k), and
// the parsed kernel verifies and computes what k computes.
//
// Grammar (`//` starts a comment that runs to the end of the line; other whitespace is free):
//   file     := kernel*
//   kernel   := 'kernel' [name] '(' [decl (',' decl)*] ')' body
//   body     := '{' stmt* '}'
//   decl     := name ':' dtype '[' [int (',' int)*] ']' ['strides' '[' [int (',' int)*] ']']
//               ['in' scope]
//   stmt     := [loop-kind] 'for' '(' name ',' expr ',' expr ')' body
//             | 'let' name '=' expr
//             | 'allocate' decl body
//             | 'if' '(' expr ')' body ['else' body]
//             | 'gemm' '(' expr ',' expr ',' expr ')' region ('=' | '+=') region '*' region
//             | name '[' expr ']' '=' expr
//   region   := name '[' expr ',' 'ld' int ']' ['^' 'T']
//   expr     := unary (binop unary)*   binary operators, loosest first: || ; && ;
//                                      == != < <= > >= ; + - ; * / %  (left-associative)
//   unary    := '!' unary | primary
//   primary  := int | float | float'f' | 'true' | 'false' | 'inf' | 'nan' | '-'number | '-inf'
//             | '(' expr ')' | '(' 'let' name '=' expr 'in' expr ')'
//             | dtype '(' expr ')' | 'select' '(' expr ',' expr ',' expr ')'
//             | ('min' | 'max') '(' expr ',' expr ')' | intrinsic '(' expr (',' expr)* ')'
//             | ['vectorized'] reduce-op '(' name ',' expr ',' expr ',' expr ')'
//             | name '[' expr ']' | name
// Names are letters, digits, '_' and '.', not starting with a digit or '.'. A word is a keyword
// only where the grammar expects one (a buffer may be named `if`), except that true, false, inf
// and nan are always constants. The IR has no unary minus (the printer writes `0 - x`): a '-'
// directly before a number is the number's sign.
//
// What the text leaves out is recovered from context:
//  - Types. An integer is i64; a number with a point or an exponent is f64, with an `f` suffix
//    f32; inf and nan are f64. `T(c)` of a constant c is the constant of type T where that is how
//    such a constant prints (i32(3), f16(0.5), f32(-inf)), else a cast (f32(0.5) casts the f64
//    0.5): the two print alike and compute alike. Loop and reduction variables are i64, a let's
//    variable has its value's type, a load its buffer's element type.
//  - Let scopes. `let v = e` scopes over the statements after it in its block up to the first
//    that binds v again (another `let v`, or a statement with a binder of v inside): in a
//    verified kernel v cannot be bound again inside its own scope, so the let ended there.
//    Sibling lets of one name (the GPU mapping's unrolled host loops) read back as siblings.
//  - Blocks, which do not print: a body of one statement is that statement, of none the no-op.
// An allocation's buffer is flat (one extent, no strides) and not global; a parameter is global.
//
// What `kiln compile -o DIR` writes before each kernel of kernels.loop (its number and the
// schedule that made it) and what --dump-after writes between kernels are comments.
//
// Errors read "FILE:LINE:COL: message"; no input crashes the parser. Each node is checked as it
// is built (loop/verifier.h: check_node), so a type error points at its operator, and each kernel
// is verified once read (an error from that, such as a name bound twice, points at its
// `kernel`). Expressions and statements nested deeper than kMaxLoopIRNesting are an error.
#pragma once

#include <string_view>
#include <vector>

#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

// Deep enough for any kernel Kiln makes (a concatenation's nested selects, a chain of sums),
// shallow enough that the parser's recursion fits a thread's stack even in a sanitizer build,
// whose frames are several times larger.
inline constexpr int kMaxLoopIRNesting = 256;

// Every kernel of `text`, in order (none for a text of comments).
Expected<std::vector<Kernel>> parse_kernels(std::string_view text,
                                            std::string_view filename = "<input>");
// The one kernel of `text`; more or fewer is an error.
Expected<Kernel> parse_kernel(std::string_view text, std::string_view filename = "<input>");

}  // namespace kiln::loop
