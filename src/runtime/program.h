// A compiled model as the runtime sees it: a list of steps (kernel calls, copies and
// collectives) over buffers that live in one of five places, with every arena offset fixed
// before the first run.
//
//   buffer 0  input 0        (the caller's memory)
//   buffer 1  constant @0    (the program's constant segment: weights folded into the model)
//   buffer 2  arena @0       (an intermediate; offsets from runtime/memory_plan.h)
//   (state @0                (a kernel's own memory that lasts from run to run: a weight it
//                             keeps packed; each executor has its own, zeroed when made))
//   buffer 3  output 0       (the caller's memory: the last kernel writes it in place)
//   step 0  kernel 0 (buffers 0, 1, 2)
//   step 1  kernel 1 (buffers 2, 3)
//
// Kernels are plain functions with the ABI of runtime/kernel_abi.h; a step passes them the base
// addresses of its buffers in parameter order. A copy step (for a graph output that is a graph
// input, a constant, or another output) moves bytes between two buffers. A collective step
// (a graph's all_reduce or broadcast) copies its source buffer to its destination and reduces,
// or broadcasts, the destination in place across the ranks through the process's communicator
// (comm/communicator.h); every rank runs the same program, so their collectives pair up in
// order. Nothing here knows
// about graphs or the compiler: the program is data, and a compiled model runs with this
// library alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "support/status.h"

namespace kiln::runtime {

enum class Storage : uint8_t {
  input,     // the caller's input number `index`
  output,    // the caller's output number `index`
  constant,  // `offset` bytes into the program's constant segment
  arena,     // `offset` bytes into the arena
  state,     // `offset` bytes into the executor's state, kept between runs (above)
};

struct BufferSlot {
  Storage storage = Storage::arena;
  int64_t index = 0;   // input or output number
  int64_t offset = 0;  // constant or arena byte offset
  int64_t bytes = 0;
};

// What a collective step does to its destination buffer.
struct Collective {
  enum class Kind : uint8_t { all_reduce, broadcast };
  Kind kind = Kind::all_reduce;
  comm::DataType type = comm::DataType::f32;  // an all-reduce's elements
  comm::Reduction reduction = comm::Reduction::sum;
  int root = 0;       // a broadcast's source rank
  int64_t count = 0;  // elements (all-reduce) or bytes (broadcast)

  bool operator==(const Collective&) const = default;
};

struct Step {
  enum class Kind : uint8_t { kernel, copy, collective };
  Kind kind = Kind::kernel;
  int kernel = 0;            // for Kind::kernel: the kernel number
  // kernel: its parameters in order; copy and collective: {source, destination}
  std::vector<int> buffers;
  std::string label;         // what the step computes, for profiles and errors ("matmul #12")
  Collective collective = {};  // for Kind::collective
};

struct Program {
  std::vector<BufferSlot> buffers;
  std::vector<Step> steps;
  std::vector<int64_t> input_bytes;   // per input, the size the caller must provide
  std::vector<int64_t> output_bytes;  // per output
  int num_kernels = 0;
  int64_t arena_bytes = 0;
  int64_t state_bytes = 0;
  std::vector<std::byte> constants;
};

// What a collective step's destination buffer holds, in bytes.
int64_t collective_bytes(const Collective& collective);

// A readable listing of the program, as in the comment above, with the arena's size first.
std::string print_program(const Program& program);

// The program as bytes (a tag and format version, then every field, integers little-endian),
// and back: what the compilation cache (compiler/compilation_cache.h) stores. Reading checks
// the tag, the version, every count against the bytes left, and every step's buffer numbers
// and every slot's extent against the program, so damaged bytes are an error, never a program
// that would read out of bounds.
std::string serialize_program(const Program& program);
Expected<Program> deserialize_program(std::string_view bytes);

}  // namespace kiln::runtime
