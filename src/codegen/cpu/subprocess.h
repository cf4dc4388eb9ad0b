// Running a program with an argument vector, never through a shell, under a time limit, with
// its standard output and error captured: how the code generator runs the system compiler.
// Arguments are passed to the program as they are, so no character in them (a path, a flag)
// can be interpreted as shell syntax.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::codegen::cpu {

struct ProcessResult {
  int exit_code = 0;
  std::string output;  // stdout and stderr, interleaved; the first kMaxProcessOutput bytes
};

inline constexpr size_t kMaxProcessOutput = 64 * 1024;

// Runs argv[0] (searched in PATH when it has no slash) with stdin from /dev/null. A program
// that cannot be started, is killed by a signal or runs past `timeout` (it is then killed) is
// an error; a non-zero exit code is a result.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::milliseconds timeout);

}  // namespace kiln::codegen::cpu
