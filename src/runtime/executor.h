// Running a Program on this CPU: the executor owns the arena, resolves every step's buffers to addresses
// once per run and calls the kernels in order; a collective step runs through the process's
// communicator (comm/communicator.h) and waits for it, so a run returns its error (a peer
// rank gone, a timeout) rather than hanging. It owns the program's state too: memory
// kernels keep from run to run (a packed weight), zeroed when the executor is made, and never
// shared with another executor.
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
#include <string_view>
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

// Whether every buffer of `program` lies inside its storage, every step's buffers and kernel
// exist (of `num_kernels`), and copies and collectives are between buffers of one size (a
// collective's own): what an executor checks once before it runs a program.
Status check_program(const Program& program, size_t num_kernels);
// An error naming `program`'s first collective step, with `reason`, for an executor that
// cannot run collectives; ok when there is none.
Status refuse_collectives(const Program& program, std::string_view reason);
// Whether a run gives one pointer per input and output of `program`.
Status check_run_arguments(const Program& program, size_t inputs, size_t outputs);

struct RunHooks {
  Profile* profile = nullptr;
  std::function<Status(int step, std::span<void* const> buffers)> after_step = {};
  // The inputs are those an earlier run copied to the device, and the outputs stay there: a GPU
  // executor copies neither way (after a first run that has copied the inputs), so a run is
  // the program alone, as a training loop that keeps its state on the GPU runs it. The CPU's
  // executor reads and writes the caller's memory itself, and has nothing to skip.
  bool io_on_device = false;
  // The CPU's executor: the caller's memory for this run's intermediates, the program's
  // arena_bytes at kArenaAlignment (a framework's allocator gives it, and takes it back between
  // runs), instead of the executor's own arena, made when a run first needs it.
  void* arena = nullptr;
};

// What runs a Program's steps: this CPU's kernels (Executor, below) or a GPU's
// (runtime/cuda_executor.h).
class ProgramExecutor {
 public:
  virtual ~ProgramExecutor() = default;

  // One pointer per program input and output (the caller's memory), each to at least
  // input_bytes / output_bytes. Kernels only read their inputs, so `inputs` are not written.
  // `after_step` sees the step's buffers in this process's memory.
  virtual Status run(std::span<const void* const> inputs, std::span<void* const> outputs,
                     const RunHooks& hooks = {}) = 0;

  virtual const Program& program() const = 0;

  // Where the steps run, for reports: "this CPU", or the GPU and what runs its gemms.
  virtual std::string description() const = 0;

  // Makes this executor and `other`, when it is of the same kind, use one arena, the larger
  // of their two, for programs that never run at once (a training step with and without its
  // loss): the memory of one.
  virtual void share_arena(ProgramExecutor& other) = 0;
};

class Executor final : public ProgramExecutor {
 public:
  // `kernels[k]` runs kernel number k of `program`.
  static Expected<Executor> create(std::shared_ptr<const Program> program,
                                   std::vector<KernelFunction> kernels);

  Status run(std::span<const void* const> inputs, std::span<void* const> outputs,
             const RunHooks& hooks = {}) override;

  const Program& program() const override { return *program_; }
  std::string description() const override { return "this CPU"; }

  void share_arena(ProgramExecutor& other) override;

 private:
  struct FreeAligned {
    void operator()(std::byte* memory) const;
  };

  Executor(std::shared_ptr<const Program> program, std::vector<KernelFunction> kernels);
  static Expected<std::byte*> allocate_aligned(int64_t bytes, std::string_view what);

  // The executor's own arena, shared with another executor by share_arena: its size (at least
  // the program's arena_bytes), and its memory once a run without the caller's needed it.
  struct OwnArena {
    int64_t capacity = 0;
    std::unique_ptr<std::byte, FreeAligned> memory;
  };
  Expected<std::byte*> own_arena();

  std::shared_ptr<const Program> program_;
  std::vector<KernelFunction> kernels_;
  std::shared_ptr<OwnArena> arena_;
  std::unique_ptr<std::byte, FreeAligned> state_;  // the program's state_bytes, this one's own
};

}  // namespace kiln::runtime
