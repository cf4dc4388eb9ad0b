#include "runtime/executor.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "runtime/memory_plan.h"

namespace kiln::runtime {
namespace {

// Step `step`'s collective: its source copied to its destination, which is then reduced, or
// broadcast, in place across the ranks.
Status run_collective(const Step& step, void* source, void* destination) {
  const Collective& collective = step.collective;
  const int64_t bytes = collective_bytes(collective);
  if (source != destination) std::memcpy(destination, source, static_cast<size_t>(bytes));
  comm::Communicator& comm = comm::default_communicator();
  const Status status =
      collective.kind == Collective::Kind::broadcast
          ? comm.broadcast(destination, bytes, collective.root)
          : comm.all_reduce(destination, collective.count, collective.type, collective.reduction);
  return status.with_context(step.label);
}

Status check_slot(const Program& program, const BufferSlot& slot, size_t index) {
  auto inside = [&](int64_t offset, int64_t size, std::string_view where) -> Status {
    if (offset < 0 || slot.bytes < 0 || offset > size || slot.bytes > size - offset) {
      return Status::errorf("buffer {} ({} bytes at {}) lies outside the {} ({} bytes)", index,
                            slot.bytes, offset, where, size);
    }
    return Status::ok();
  };
  switch (slot.storage) {
    case Storage::input:
      if (slot.index < 0 || slot.index >= static_cast<int64_t>(program.input_bytes.size()) ||
          slot.bytes != program.input_bytes[static_cast<size_t>(slot.index)]) {
        return Status::errorf("buffer {} names input {}, which has another size or none", index,
                              slot.index);
      }
      return Status::ok();
    case Storage::output:
      if (slot.index < 0 || slot.index >= static_cast<int64_t>(program.output_bytes.size()) ||
          slot.bytes != program.output_bytes[static_cast<size_t>(slot.index)]) {
        return Status::errorf("buffer {} names output {}, which has another size or none", index,
                              slot.index);
      }
      return Status::ok();
    case Storage::constant:
      return inside(slot.offset, static_cast<int64_t>(program.constants.size()),
                    "constant segment");
    case Storage::arena:
      return inside(slot.offset, program.arena_bytes, "arena");
    case Storage::state:
      return inside(slot.offset, program.state_bytes, "state");
  }
  return Status::errorf("buffer {} has no valid storage", index);
}

}  // namespace

Status check_program(const Program& program, size_t num_kernels) {
  if (static_cast<size_t>(program.num_kernels) != num_kernels) {
    return Status::errorf("the program calls {} kernels, {} were given", program.num_kernels,
                          num_kernels);
  }
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    KILN_RETURN_IF_ERROR(check_slot(program, program.buffers[i], i));
  }
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    for (int buffer : step.buffers) {
      if (buffer < 0 || static_cast<size_t>(buffer) >= program.buffers.size()) {
        return Status::errorf("step {} ({}) uses buffer {}, which does not exist", s, step.label,
                              buffer);
      }
    }
    if (step.kind == Step::Kind::kernel &&
        (step.kernel < 0 || step.kernel >= program.num_kernels)) {
      return Status::errorf("step {} ({}) calls kernel {}, which does not exist", s, step.label,
                            step.kernel);
    }
    if (step.kind != Step::Kind::kernel &&
        (step.buffers.size() != 2 ||
         program.buffers[static_cast<size_t>(step.buffers[0])].bytes !=
             program.buffers[static_cast<size_t>(step.buffers[1])].bytes)) {
      return Status::errorf("step {} ({}) copies between buffers of different sizes", s,
                            step.label);
    }
    if (step.kind == Step::Kind::collective &&
        program.buffers[static_cast<size_t>(step.buffers[1])].bytes !=
            collective_bytes(step.collective)) {
      return Status::errorf("step {} ({}) is a collective over {} bytes in a buffer of {}", s,
                            step.label, collective_bytes(step.collective),
                            program.buffers[static_cast<size_t>(step.buffers[1])].bytes);
    }
  }
  return Status::ok();
}

Status refuse_collectives(const Program& program, std::string_view reason) {
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    if (step.kind == Step::Kind::collective) {
      return Status::errorf(ErrorCode::unsupported, "step {} ({}): {}", s, step.label, reason);
    }
  }
  return Status::ok();
}

Status check_run_arguments(const Program& program, size_t inputs, size_t outputs) {
  if (inputs == program.input_bytes.size() && outputs == program.output_bytes.size()) {
    return Status::ok();
  }
  return Status::errorf("the program takes {} inputs and {} outputs, got {} and {}",
                        program.input_bytes.size(), program.output_bytes.size(), inputs, outputs);
}

void Executor::FreeAligned::operator()(std::byte* memory) const { std::free(memory); }

Expected<std::byte*> Executor::allocate_aligned(int64_t bytes, std::string_view what) {
  // aligned_alloc wants a multiple of the alignment; the plan's offsets are aligned to it.
  auto* memory = static_cast<std::byte*>(
      std::aligned_alloc(kArenaAlignment, static_cast<size_t>(round_up(bytes))));
  if (memory == nullptr)
    return Status::errorf(ErrorCode::resource_exhausted, "cannot allocate the {}-byte {}", bytes,
                          what);
  return memory;
}

Executor::Executor(std::shared_ptr<const Program> program, std::vector<KernelFunction> kernels)
    : program_(std::move(program)), kernels_(std::move(kernels)) {}

Expected<Executor> Executor::create(std::shared_ptr<const Program> program,
                                    std::vector<KernelFunction> kernels) {
  KILN_RETURN_IF_ERROR(check_program(*program, kernels.size()));
  for (size_t k = 0; k < kernels.size(); ++k) {
    if (kernels[k] == nullptr) return Status::errorf("kernel {} is missing", k);
  }
  const int64_t arena_bytes = program->arena_bytes;
  const int64_t state_bytes = program->state_bytes;
  Executor executor(std::move(program), std::move(kernels));
  executor.arena_ = std::make_shared<OwnArena>();
  executor.arena_->capacity = round_up(arena_bytes);
  if (state_bytes > 0) {
    // Zeroed: a kernel finds its state empty on the first run (codegen/cpu/prelude.h).
    KILN_ASSIGN_OR_RETURN(std::byte * memory, allocate_aligned(state_bytes, "state"));
    std::memset(memory, 0, static_cast<size_t>(state_bytes));
    executor.state_.reset(memory);
  }
  return executor;
}

void Executor::share_arena(ProgramExecutor& other_executor) {
  auto* other = dynamic_cast<Executor*>(&other_executor);
  if (other == nullptr) return;
  // The larger one serves both; each run asks for its memory then.
  if (arena_->capacity >= other->arena_->capacity) {
    other->arena_ = arena_;
  } else {
    arena_ = other->arena_;
  }
}

Expected<std::byte*> Executor::own_arena() {
  if (arena_->memory == nullptr && arena_->capacity > 0) {
    KILN_ASSIGN_OR_RETURN(std::byte * memory, allocate_aligned(arena_->capacity, "arena"));
    arena_->memory.reset(memory);
  }
  return arena_->memory.get();
}

Status Executor::run(std::span<const void* const> inputs, std::span<void* const> outputs,
                     const RunHooks& hooks) {
  const Program& program = *program_;
  KILN_RETURN_IF_ERROR(check_run_arguments(program, inputs.size(), outputs.size()));
  std::byte* arena = static_cast<std::byte*>(hooks.arena);
  if (arena != nullptr && reinterpret_cast<uintptr_t>(arena) % kArenaAlignment != 0) {
    return Status::errorf("the arena given at {} is not {}-byte aligned",
                          static_cast<const void*>(arena), kArenaAlignment);
  }
  if (arena == nullptr) {
    KILN_ASSIGN_OR_RETURN(arena, own_arena());
  }
  std::vector<void*> addresses(program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const BufferSlot& slot = program.buffers[i];
    switch (slot.storage) {
      case Storage::input:
        // Kernels never store to their inputs (lowering writes only outputs and locals).
        addresses[i] = const_cast<void*>(inputs[static_cast<size_t>(slot.index)]);
        break;
      case Storage::output: addresses[i] = outputs[static_cast<size_t>(slot.index)]; break;
      case Storage::constant:
        // Likewise read only.
        addresses[i] = const_cast<std::byte*>(program.constants.data()) + slot.offset;
        break;
      case Storage::arena: addresses[i] = arena + slot.offset; break;
      case Storage::state: addresses[i] = state_.get() + slot.offset; break;
    }
  }
  if (hooks.profile != nullptr) {
    hooks.profile->step_seconds.resize(program.steps.size(), 0.0);
    ++hooks.profile->runs;
  }
  std::vector<void*> arguments;
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    arguments.clear();
    for (int buffer : step.buffers) arguments.push_back(addresses[static_cast<size_t>(buffer)]);
    const auto start = std::chrono::steady_clock::now();
    if (step.kind == Step::Kind::kernel) {
      kernels_[static_cast<size_t>(step.kernel)](arguments.data());
    } else if (step.kind == Step::Kind::collective) {
      KILN_RETURN_IF_ERROR(run_collective(step, arguments[0], arguments[1]));
    } else if (arguments[0] != arguments[1]) {
      std::memcpy(arguments[1], arguments[0],
                  static_cast<size_t>(program.buffers[static_cast<size_t>(step.buffers[1])].bytes));
    }
    if (hooks.profile != nullptr) {
      hooks.profile->step_seconds[s] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (hooks.after_step) KILN_RETURN_IF_ERROR(hooks.after_step(static_cast<int>(s), arguments));
  }
  return Status::ok();
}

}  // namespace kiln::runtime
