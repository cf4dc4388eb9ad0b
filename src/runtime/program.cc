#include "runtime/program.h"

#include <fmt/format.h>

#include <cstring>

#include "runtime/byte_format.h"

namespace kiln::runtime {
namespace {

std::string describe(const BufferSlot& slot) {
  switch (slot.storage) {
    case Storage::input:
      return fmt::format("input {}", slot.index);
    case Storage::output:
      return fmt::format("output {}", slot.index);
    case Storage::constant:
      return fmt::format("constant @{}", slot.offset);
    case Storage::arena:
      return fmt::format("arena @{}", slot.offset);
    case Storage::state:
      return fmt::format("state @{}", slot.offset);
  }
  return "?";
}

std::string describe(const Collective& collective) {
  if (collective.kind == Collective::Kind::broadcast) {
    return fmt::format("broadcast {} bytes from rank {}", collective.count, collective.root);
  }
  return fmt::format("all_reduce ({}) {} {}", comm::reduction_name(collective.reduction),
                     collective.count, comm::data_type_name(collective.type));
}

}  // namespace

int64_t collective_bytes(const Collective& collective) {
  return collective.kind == Collective::Kind::broadcast
             ? collective.count
             : collective.count * comm::data_type_bytes(collective.type);
}

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
    } else if (step.kind == Step::Kind::collective) {
      text += fmt::format("step {}  {}, buffer {} to buffer {}  {}\n", s,
                          describe(step.collective), step.buffers.at(0), step.buffers.at(1),
                          step.label);
    } else {
      text += fmt::format("step {}  copy buffer {} to buffer {}  {}\n", s, step.buffers.at(0),
                          step.buffers.at(1), step.label);
    }
  }
  return text;
}

namespace {

constexpr std::string_view kProgramTag = "kiln-program";
// 2: collective steps.
constexpr int64_t kProgramFormat = 2;

void write_collective(ByteWriter& w, const Collective& collective) {
  w.integer(collective.kind);
  w.integer(collective.type);
  w.integer(collective.reduction);
  w.integer(collective.root);
  w.integer(collective.count);
}

Expected<Collective> read_collective(ByteReader& r) {
  Collective c;
  KILN_ASSIGN_OR_RETURN(int64_t kind,
                        r.integer(0, int64_t(Collective::Kind::broadcast), "a collective kind"));
  c.kind = static_cast<Collective::Kind>(kind);
  KILN_ASSIGN_OR_RETURN(int64_t type,
                        r.integer(0, int64_t(comm::DataType::bf16), "a collective's type"));
  c.type = static_cast<comm::DataType>(type);
  KILN_ASSIGN_OR_RETURN(int64_t reduction,
                        r.integer(0, int64_t(comm::Reduction::mean), "a collective's reduction"));
  c.reduction = static_cast<comm::Reduction>(reduction);
  KILN_ASSIGN_OR_RETURN(int64_t root, r.integer(0, 1 << 30, "a broadcast's root"));
  c.root = static_cast<int>(root);
  KILN_ASSIGN_OR_RETURN(c.count, r.integer(0, kMaxSerializedBytes, "a collective's size"));
  return c;
}

}  // namespace

std::string serialize_program(const Program& program) {
  ByteWriter w;
  w.header(kProgramTag, kProgramFormat);
  w.integer(program.buffers.size());
  for (const BufferSlot& slot : program.buffers) {
    w.integer(slot.storage);
    w.integer(slot.index);
    w.integer(slot.offset);
    w.integer(slot.bytes);
  }
  w.integer(program.steps.size());
  for (const Step& step : program.steps) {
    w.integer(step.kind);
    w.integer(step.kernel);
    w.integer(step.buffers.size());
    for (int buffer : step.buffers) w.integer(buffer);
    w.text(step.label);
    if (step.kind == Step::Kind::collective) write_collective(w, step.collective);
  }
  for (const std::vector<int64_t>* sizes : {&program.input_bytes, &program.output_bytes}) {
    w.integer(sizes->size());
    for (int64_t bytes : *sizes) w.integer(bytes);
  }
  w.integer(program.num_kernels);
  w.integer(program.arena_bytes);
  w.integer(program.state_bytes);
  w.text(std::string_view(reinterpret_cast<const char*>(program.constants.data()),
                          program.constants.size()));
  return w.take();
}

Expected<Program> deserialize_program(std::string_view bytes) {
  ByteReader r(bytes, "program bytes");
  KILN_RETURN_IF_ERROR(r.header(kProgramTag, kProgramFormat, "a serialized Kiln program"));
  Program p;
  KILN_ASSIGN_OR_RETURN(size_t buffers, r.count(32, "the buffer count"));
  for (size_t i = 0; i < buffers; ++i) {
    BufferSlot slot;
    KILN_ASSIGN_OR_RETURN(int64_t storage, r.integer(0, int64_t(Storage::state), "a storage"));
    slot.storage = static_cast<Storage>(storage);
    KILN_ASSIGN_OR_RETURN(slot.index, r.integer(0, kMaxSerializedBytes, "a buffer index"));
    KILN_ASSIGN_OR_RETURN(slot.offset, r.integer(0, kMaxSerializedBytes, "a buffer offset"));
    KILN_ASSIGN_OR_RETURN(slot.bytes, r.integer(0, kMaxSerializedBytes, "a buffer size"));
    p.buffers.push_back(slot);
  }
  KILN_ASSIGN_OR_RETURN(size_t steps, r.count(32, "the step count"));
  for (size_t i = 0; i < steps; ++i) {
    Step step;
    KILN_ASSIGN_OR_RETURN(int64_t kind,
                          r.integer(0, int64_t(Step::Kind::collective), "a step kind"));
    step.kind = static_cast<Step::Kind>(kind);
    KILN_ASSIGN_OR_RETURN(int64_t kernel, r.integer(0, 1 << 30, "a step's kernel"));
    step.kernel = static_cast<int>(kernel);
    KILN_ASSIGN_OR_RETURN(size_t count, r.count(8, "a step's buffer count"));
    for (size_t j = 0; j < count; ++j) {
      KILN_ASSIGN_OR_RETURN(int64_t buffer,
                            r.integer(0, static_cast<int64_t>(buffers) - 1, "a step's buffer"));
      step.buffers.push_back(static_cast<int>(buffer));
    }
    KILN_ASSIGN_OR_RETURN(std::string_view label, r.text("a step's label"));
    step.label = std::string(label);
    if (step.kind == Step::Kind::collective) {
      KILN_ASSIGN_OR_RETURN(step.collective, read_collective(r));
    }
    p.steps.push_back(std::move(step));
  }
  for (std::vector<int64_t>* sizes : {&p.input_bytes, &p.output_bytes}) {
    KILN_ASSIGN_OR_RETURN(size_t count, r.count(8, "an input or output count"));
    for (size_t j = 0; j < count; ++j) {
      KILN_ASSIGN_OR_RETURN(int64_t size,
                            r.integer(0, kMaxSerializedBytes, "an input or output size"));
      sizes->push_back(size);
    }
  }
  KILN_ASSIGN_OR_RETURN(int64_t kernels, r.integer(0, 1 << 30, "the kernel count"));
  p.num_kernels = static_cast<int>(kernels);
  KILN_ASSIGN_OR_RETURN(p.arena_bytes, r.integer(0, kMaxSerializedBytes, "the arena size"));
  KILN_ASSIGN_OR_RETURN(p.state_bytes, r.integer(0, kMaxSerializedBytes, "the state size"));
  KILN_ASSIGN_OR_RETURN(std::string_view constants, r.text("the constants"));
  p.constants.resize(constants.size());
  if (!constants.empty()) std::memcpy(p.constants.data(), constants.data(), constants.size());
  if (!r.at_end()) return Status::error("program bytes: more bytes after the program");
  // Every slot within its memory, every kernel step naming a kernel.
  for (const BufferSlot& slot : p.buffers) {
    const int64_t limit = slot.storage == Storage::constant ? int64_t(p.constants.size())
                          : slot.storage == Storage::arena  ? p.arena_bytes
                          : slot.storage == Storage::state  ? p.state_bytes
                                                            : kMaxSerializedBytes;
    const auto& io = slot.storage == Storage::input ? p.input_bytes : p.output_bytes;
    if (slot.storage == Storage::input || slot.storage == Storage::output) {
      if (slot.index >= static_cast<int64_t>(io.size()) ||
          slot.bytes > io[static_cast<size_t>(slot.index)]) {
        return Status::error("program bytes: a buffer lies outside its input or output");
      }
    } else if (slot.offset + slot.bytes > limit) {
      return Status::error("program bytes: a buffer lies outside its memory");
    }
  }
  for (const Step& step : p.steps) {
    if (step.kind == Step::Kind::kernel && step.kernel >= p.num_kernels) {
      return Status::error("program bytes: a step names a kernel the program does not have");
    }
    if (step.kind == Step::Kind::copy && step.buffers.size() != 2) {
      return Status::error("program bytes: a copy step needs two buffers");
    }
    if (step.kind == Step::Kind::collective &&
        (step.buffers.size() != 2 ||
         p.buffers[static_cast<size_t>(step.buffers[1])].bytes !=
             collective_bytes(step.collective))) {
      return Status::error("program bytes: a collective step needs two buffers of its size");
    }
  }
  return p;
}

}  // namespace kiln::runtime
