// Running a Program: the executor owns the arena, resolves every step's buffers to addresses
// once per run and calls the kernels in order.
//
// An executor is made once per compiled model (it validates the program: every buffer inside
// its storage, every kernel present, copies between equal sizes) and reused for every run;
// runs on one executor must not overlap, since they share the arena. Kernels parallelise
// internally (OpenMP), so steps run one after another.
//
// Two optional observers serve the profiler and the check mode without slowing the plain
// path: `profile` receives each step's wall time, and `after_step` sees each step's buffer
// addresses right after it ran (and may stop the run by returning an error).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "runtime/kernel_abi.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln::runtime {

// Per-step wall time summed over the runs that were given this profile.
struct Profile {
  std::vector<double> step_seconds;
  int runs = 0;
};

struct RunHooks {
  Profile* profile = nullptr;
  std::function<Status(int step, std::span<void* const> buffers)> after_step = {};
};

class Executor {
 public:
  // `kernels[k]` runs kernel number k of `program`.
  static Expected<Executor> create(std::shared_ptr<const Program> program,
                                   std::vector<KernelFunction> kernels);

  // One pointer per program input and output, each to at least input_bytes / output_bytes.
  // Kernels only read their inputs, so `inputs` are not written.
  Status run(std::span<const void* const> inputs, std::span<void* const> outputs,
             const RunHooks& hooks = {});

  const Program& program() const { return *program_; }

  // Makes this executor and `other` use one arena, the larger of their two, for programs that
  // never run at once (a training step with and without its loss): the memory of one.
  void share_arena(Executor& other);

 private:
  struct FreeAligned {
    void operator()(std::byte* memory) const;
  };

  Executor(std::shared_ptr<const Program> program, std::vector<KernelFunction> kernels);

  std::shared_ptr<const Program> program_;
  std::vector<KernelFunction> kernels_;
  std::shared_ptr<std::byte> arena_;  // freed with FreeAligned
  int64_t arena_capacity_ = 0;        // bytes, at least the program's arena_bytes
};

}  // namespace kiln::runtime
