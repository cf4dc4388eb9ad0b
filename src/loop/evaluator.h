// The loop-IR evaluator: a direct interpreter of loop IR, the oracle for the simplifier and
// for lowering.
//
// It executes the semantics stated in loop/expr.h and loop/stmt.h with the arithmetic of
// loop/scalar.h: loops run serially in order whatever their kind, reductions combine in
// order of increasing variable starting from the first element, every floating result is
// rounded to its type. A gemm is the plain triple loop in its dtype's arithmetic, each sum in
// order of increasing k (a BLAS library orders it differently: compare gemm results within
// the dtype's tolerance, not bit for bit). Buffers hold one double per element, as
// kiln::Array does (integers exact up to 2^53, bool 0 or 1); a store rounds the value to the
// buffer's dtype.
// Out-of-bounds loads and stores are errors naming the buffer and index. It is slow and
// meant for small tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loop/expr.h"
#include "loop/scalar.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

struct EvalEnvironment {
  std::map<std::string, Scalar, std::less<>> vars;                   // free variables
  std::map<std::string, std::vector<double>*, std::less<>> buffers;  // by buffer name
};

// The value of a well-typed expression (see verify(const Expr&, ...)).
Expected<Scalar> evaluate(const Expr& expr, const EvalEnvironment& env);

// Runs `kernel` on `args`, one vector per parameter in order, each of the parameter's
// flat_size(). Verifies the kernel first.
Status run_kernel(const Kernel& kernel, std::vector<std::vector<double>>& args);

}  // namespace kiln::loop
