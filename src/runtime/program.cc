#include "runtime/program.h"

#include <fmt/format.h>

namespace kiln::runtime {
namespace {

std::string describe(const BufferSlot& slot) {
  switch (slot.storage) {
    case Storage::input: return fmt::format("input {}", slot.index);
    case Storage::output: return fmt::format("output {}", slot.index);
    case Storage::constant: return fmt::format("constant @{}", slot.offset);
    case Storage::arena: return fmt::format("arena @{}", slot.offset);
    case Storage::state: return fmt::format("state @{}", slot.offset);
  }
  return "?";
}

}  // namespace

std::string print_program(const Program& program) {
  const std::string state =
      program.state_bytes > 0 ? fmt::format(", state {} bytes", program.state_bytes) : "";
  std::string text = fmt::format("arena {} bytes, constants {} bytes{}, {} kernels, {} steps\n",
                                 program.arena_bytes, program.constants.size(), state,
                                 program.num_kernels, program.steps.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    text += fmt::format("buffer {}  {}  {} bytes\n", i, describe(program.buffers[i]),
                        program.buffers[i].bytes);
  }
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const Step& step = program.steps[s];
    if (step.kind == Step::Kind::kernel) {
      text += fmt::format("step {}  kernel {} (buffers {})  {}\n", s, step.kernel,
                          fmt::join(step.buffers, ", "), step.label);
    } else {
      text += fmt::format("step {}  copy buffer {} to buffer {}  {}\n", s, step.buffers.at(0),
                          step.buffers.at(1), step.label);
    }
  }
  return text;
}

}  // namespace kiln::runtime
