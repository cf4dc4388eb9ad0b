// Substitution and variable queries over loop IR.
//
// `substitute(e, {{"i", j * 4}})` replaces every free occurrence of variable i in e by j * 4.
// A binder of the same name shadows the substitution in its body. Replacing under a binder
// whose name occurs free in a replacement would capture it; the verifier's rule that no name
// is bound twice in nested scopes makes that impossible in verified IR, so it is an internal
// error here.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "loop/expr.h"
#include "loop/stmt.h"

namespace kiln::loop {

using Substitution = std::map<std::string, Expr, std::less<>>;

Expr substitute(const Expr& expr, const Substitution& replacements);
Stmt substitute(const Stmt& stmt, const Substitution& replacements);
Expr substitute(const Expr& expr, const std::string& name, const Expr& replacement);
Stmt substitute(const Stmt& stmt, const std::string& name, const Expr& replacement);

// Names of the variables that occur free in `expr`.
std::set<std::string, std::less<>> free_vars(const Expr& expr);
bool uses_var(const Expr& expr, std::string_view name);
bool uses_var(const Stmt& stmt, std::string_view name);
// Names of the buffers `expr` loads.
std::set<std::string, std::less<>> buffers_used(const Expr& expr);
// Whether a division or remainder in `expr` (or `stmt`) has an operand that uses `name`: what
// joining loops must leave none of (loop/simplify.h, loop/lower_group.h).
bool divides_var(const Expr& expr, std::string_view name);
bool divides_var(const Stmt& stmt, std::string_view name);
// Whether `stmt` loads from or stores to a buffer named `name` (a gemm uses all three).
bool uses_buffer(const Stmt& stmt, std::string_view name);
// Whether `stmt` holds a gemm statement (code generators run the loops around one on the
// host, or opaque to scheduling).
bool contains_gemm(const Stmt& stmt);

}  // namespace kiln::loop
