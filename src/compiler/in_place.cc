#include "compiler/in_place.h"

#include <fmt/format.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loop/ir_visitor.h"
#include "loop/schedule_analysis.h"

namespace kiln {
namespace {

using runtime::Program;
using runtime::Step;
using runtime::Storage;

// The buffers a statement reads and writes, by name: loads, stores (an atomic add reads too)
// and a library call's operands (its result written, and read when it accumulates).
class BufferUse : public loop::IRVisitor {
 public:
  std::set<std::string, std::less<>> reads, writes;

  bool touches(const std::string& name) const {
    return reads.contains(name) || writes.contains(name);
  }

  void add_library_call(const loop::LibraryCall& node) {
    reads.insert(node.operands[0].buffer.name());
    reads.insert(node.operands[1].buffer.name());
    writes.insert(node.operands[2].buffer.name());
    if (node.op == loop::LibraryOp::gemm && node.gemm().accumulate) {
      reads.insert(node.operands[2].buffer.name());
    }
    for (const loop::Epilogue& epilogue : node.epilogues) {
      if (epilogue.operand.defined()) reads.insert(epilogue.operand.name());
    }
  }

 protected:
  void visit_load(const loop::Load& node) override {
    reads.insert(node.buffer.name());
    IRVisitor::visit_load(node);
  }
  void visit_store(const loop::Store& node) override {
    writes.insert(node.buffer.name());
    if (node.atomic) reads.insert(node.buffer.name());
    IRVisitor::visit_store(node);
  }
  void visit_library_call(const loop::LibraryCall& node) override {
    add_library_call(node);
    IRVisitor::visit_library_call(node);
  }
};

BufferUse buffer_use(const loop::Stmt& stmt) {
  BufferUse use;
  use.visit(stmt);
  return use;
}

// The names kernel `kernel` calls the program buffer `buffer` by in step `step` (a value may
// be passed as several parameters).
std::set<std::string, std::less<>> names_of(const Step& step, const loop::Kernel& kernel,
                                            int buffer) {
  std::set<std::string, std::less<>> names;
  for (size_t p = 0; p < step.buffers.size() && p < kernel.params.size(); ++p) {
    if (step.buffers[p] == buffer) names.insert(kernel.params[p].name());
  }
  return names;
}

// The kernel's statements in order, allocations and blocks opened: each a unit that runs
// whole before the next.
void collect_units(const loop::Stmt& stmt, std::vector<loop::Stmt>& units) {
  if (const auto* allocate = stmt.as<loop::Allocate>()) {
    collect_units(allocate->body, units);
  } else if (const auto* block = stmt.as<loop::Block>()) {
    for (const loop::Stmt& child : block->stmts) collect_units(child, units);
  } else {
    units.push_back(stmt);
  }
}

// `stmt` with every load of a buffer named in `from` reading `to` instead: the nest as it
// runs when they share memory.
class MergeBuffers : public loop::IRMutator {
 public:
  MergeBuffers(const std::set<std::string, std::less<>>& from, loop::Buffer to)
      : from_(from), to_(std::move(to)) {}

 protected:
  loop::Expr visit_load(const loop::Load& node, const loop::Expr& self) override {
    if (!from_.contains(node.buffer.name())) return IRMutator::visit_load(node, self);
    return loop::load(to_, mutate(node.index));
  }

 private:
  const std::set<std::string, std::less<>>& from_;
  loop::Buffer to_;
};

// The first statement that touches the output, in program order: whether a load of the input
// comes after a store of the output, and what else refuses it.
class NestAccesses : public loop::IRVisitor {
 public:
  NestAccesses(const std::set<std::string, std::less<>>& input, std::string output)
      : input_(input), output_(std::move(output)) {}

  std::optional<std::string> refusal;

 protected:
  void visit_load(const loop::Load& node) override {
    IRVisitor::visit_load(node);
    if (written_ && input_.contains(node.buffer.name())) {
      refusal = "the input is read after the output is written";
    }
  }
  void visit_store(const loop::Store& node) override {
    IRVisitor::visit_store(node);
    if (input_.contains(node.buffer.name())) refusal = "the kernel writes the input";
    if (node.buffer.name() != output_) return;
    if (node.atomic) refusal = "the output is added to atomically";
    written_ = true;
  }
  void visit_library_call(const loop::LibraryCall& node) override {
    BufferUse use;
    use.add_library_call(node);
    for (const std::string& name : input_) {
      if (use.touches(name)) refusal = "a library call reads the input where the output is written";
    }
    if (use.touches(output_)) refusal = "a library call writes the output";
  }

 private:
  const std::set<std::string, std::less<>>& input_;
  std::string output_;
  bool written_ = false;
};

// Every loop of `stmt` around an access of `buffer` has iterations that touch elements of its
// buffers no other iteration touches.
class CheckLoops : public loop::IRVisitor {
 public:
  explicit CheckLoops(std::string buffer) : buffer_(std::move(buffer)) {}
  Status status;

 protected:
  void visit_for(const loop::For& node) override {
    if (!status) return;
    const loop::Stmt body = node.body;
    if (buffer_use(body).touches(buffer_)) {
      if (Status independent = loop::check_independent(node, scope_); !independent) {
        status = Status::errorf("loop {}: {}", node.var, independent.message());
        return;
      }
    }
    const auto saved = scope_.find(node.var) == scope_.end()
                           ? std::optional<loop::Interval>()
                           : std::optional<loop::Interval>(scope_.at(node.var));
    scope_[node.var] = loop::loop_interval(node, scope_);
    IRVisitor::visit_for(node);
    if (saved) {
      scope_[node.var] = *saved;
    } else {
      scope_.erase(node.var);
    }
  }

 private:
  std::string buffer_;
  loop::BoundsScope scope_;
};

// The kernel-level condition (the header's third point) for the kernel of step W.
Status check_kernel(const loop::Kernel& kernel, const std::set<std::string, std::less<>>& input,
                    const std::string& output) {
  std::vector<loop::Stmt> units;
  collect_units(kernel.body, units);
  size_t first = 0;
  while (first < units.size() && !buffer_use(units[first]).touches(output)) ++first;
  if (first == units.size()) return Status::error("the kernel does not write the output");
  for (size_t u = first + 1; u < units.size(); ++u) {
    const BufferUse use = buffer_use(units[u]);
    for (const std::string& name : input) {
      if (use.touches(name)) {
        return Status::error("the kernel reads the input after the statement that writes the "
                             "output");
      }
    }
  }
  NestAccesses accesses(input, output);
  accesses.visit(units[first]);
  if (accesses.refusal) return Status::error(*accesses.refusal);
  const loop::Buffer* output_buffer = nullptr;
  for (const loop::Buffer& param : kernel.params) {
    if (param.name() == output) output_buffer = &param;
  }
  if (output_buffer == nullptr) return Status::error("the output is no parameter of the kernel");
  CheckLoops loops(output);
  loops.visit(MergeBuffers(input, *output_buffer).mutate(units[first]));
  return loops.status;
}

}  // namespace

InPlaceCheck::InPlaceCheck(const Program& program,
                           std::span<const loop::Kernel* const> kernels)
    : program_(program), kernels_(kernels) {
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const runtime::BufferSlot& slot = program.buffers[b];
    if (slot.storage == Storage::input) input_buffer_.emplace(slot.index, static_cast<int>(b));
    if (slot.storage == Storage::output) output_buffer_.emplace(slot.index, static_cast<int>(b));
  }
  // A copy or a collective reads its source and writes its destination, a kernel what its loop
  // IR says of the parameter each buffer is passed as.
  for (const Step& step : program.steps) {
    StepUse& use = steps_.emplace_back();
    if (step.kind != Step::Kind::kernel) {
      use.reads.insert(step.buffers[0]);
      use.writes.insert(step.buffers[1]);
      continue;
    }
    const loop::Kernel& kernel = *kernels[static_cast<size_t>(step.kernel)];
    const BufferUse params = buffer_use(kernel.body);
    for (size_t p = 0; p < step.buffers.size() && p < kernel.params.size(); ++p) {
      if (params.reads.contains(kernel.params[p].name())) use.reads.insert(step.buffers[p]);
      if (params.writes.contains(kernel.params[p].name())) use.writes.insert(step.buffers[p]);
    }
  }
}

Status InPlaceCheck::check(int64_t output, int64_t input) const {
  const auto in = input_buffer_.find(input);
  const auto out = output_buffer_.find(output);
  if (in == input_buffer_.end() || out == output_buffer_.end()) {
    return Status::errorf("the program has no input {} or no output {}", input, output);
  }
  if (program_.input_bytes.at(static_cast<size_t>(input)) !=
      program_.output_bytes.at(static_cast<size_t>(output))) {
    return Status::error("the input and the output differ in size");
  }
  std::optional<size_t> writer;
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (!steps_[s].writes.contains(out->second)) continue;
    if (writer || program_.steps[s].kind != Step::Kind::kernel) {
      return Status::error("the output is not written by one kernel");
    }
    writer = s;
  }
  if (!writer) return Status::error("no step writes the output");
  for (size_t s = *writer + 1; s < steps_.size(); ++s) {
    if (steps_[s].reads.contains(in->second)) {
      return Status::errorf("step {} ({}) reads the input after the output is written", s,
                            program_.steps[s].label);
    }
  }
  if (!steps_[*writer].reads.contains(in->second)) return Status::ok();
  const Step& step = program_.steps[*writer];
  const loop::Kernel& kernel = *kernels_[static_cast<size_t>(step.kernel)];
  const std::set<std::string, std::less<>> output_names = names_of(step, kernel, out->second);
  if (output_names.size() != 1) return Status::error("the output is two parameters of a kernel");
  return check_kernel(kernel, names_of(step, kernel, in->second), *output_names.begin())
      .with_context(fmt::format("step {} ({})", *writer, step.label));
}

}  // namespace kiln
