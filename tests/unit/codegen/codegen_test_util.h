// Helpers shared by the CPU code generator's tests: a private compile cache directory per test,
// running a compiled kernel on the evaluator's double buffers, and comparing results.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/cpu/emitter.h"
#include "loop/stmt.h"
#include "unit/test_util.h"

namespace kiln::codegen::cpu::testing {

using ::kiln::testing::TempDir;

// Random values for every parameter of `kernel` (exactly representable in its dtype), drawn
// from `seed`; floats in [-4, 4], integers in [-50, 50], bools 0 or 1.
std::vector<std::vector<double>> random_args(const loop::Kernel& kernel, uint64_t seed);

// Runs `function` (kernel compiled) on `args`, converted to the ABI's element types, and
// returns the buffers converted back.
std::vector<std::vector<double>> run_compiled(KernelFunction function, const loop::Kernel& kernel,
                                              const std::vector<std::vector<double>>& args);

// Distance in units in the last place of `dtype` between two values of it (0 for equal
// values, -0 and 0 are one apart; both NaN: 0; one NaN: a huge distance).
int64_t ulp_distance(double a, double b, DType dtype);

// Names a hostile model file could carry: quotes, newlines, comment terminators, a
// preprocessor line, non-ASCII, a backslash.
inline const std::string kHostileNames[] = {
    "a\"); system(\"rm -rf ~\"); //", "b\n#include </etc/passwd>\n", "c */ int evil; /*",
    "d\xc3\xa9\xe2\x80\x8b", "e\\"};

// A small valid kernel (out[i] = in[i]^2 through a local buffer and a let) whose kernel,
// buffer and variable names are all kHostileNames.
loop::Kernel hostile_kernel();

// Runs `kernel` in the evaluator and compiled on the same `args` and checks that every
// buffer agrees: exactly (bits, NaN equal to NaN) when `max_ulps` is 0, else floats within
// `max_ulps` or closer than the type's smallest normal number.
void expect_same_as_evaluator(KernelFunction function, const loop::Kernel& kernel,
                              std::vector<std::vector<double>> args, int64_t max_ulps = 0);

}  // namespace kiln::codegen::cpu::testing
