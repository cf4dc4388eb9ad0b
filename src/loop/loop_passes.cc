#include "loop/loop_passes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "loop/gpu_mapping.h"
#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/schedule.h"
#include "loop/scratch.h"
#include "loop/simplify.h"
#include "loop/verifier.h"

namespace kiln::loop {
namespace {

Expected<Kernel> run_simplify(const Kernel& kernel, const LoopPassOptions&) {
  return simplify(kernel);
}

Expected<Kernel> run_verify(const Kernel& kernel, const LoopPassOptions&) {
  KILN_RETURN_IF_ERROR(verify(kernel));
  return kernel;
}

Expected<Kernel> run_schedule(const Kernel& kernel, const LoopPassOptions& options) {
  return apply_schedule(kernel, default_schedule(kernel, options.target));
}

// The first loop, in program order, of a kind other than serial; nullptr if there is none.
const For* first_scheduled_loop(const Stmt& body) {
  class Finder : public IRVisitor {
   public:
    const For* found = nullptr;

   protected:
    void visit_for(const For& node) override {
      if (found == nullptr && node.for_kind != ForKind::serial) found = &node;
      IRVisitor::visit_for(node);
    }
  } finder;
  finder.visit(body);
  return finder.found;
}

Expected<Kernel> run_map_gpu(const Kernel& kernel, const LoopPassOptions&) {
  if (const For* loop = first_scheduled_loop(kernel.body)) {
    return Status::errorf("it maps kernels as lowering makes them, with serial loops; loop '{}' "
                          "is {}",
                          loop->var, for_kind_name(loop->for_kind));
  }
  KILN_ASSIGN_OR_RETURN(GpuMapping mapping, map_to_gpu(kernel));
  return std::move(mapping.kernel);
}

Expected<Kernel> run_scratch(const Kernel& kernel, const LoopPassOptions&) {
  std::vector<int64_t> bytes;  // the new parameters' sizes, which they declare (loop_passes.h)
  return promote_scratch(kernel, bytes);
}

constexpr LoopPassInfo kLoopPasses[] = {
    {"simplify", "fold constants, put index arithmetic in linear form, drop empty loops",
     run_simplify},
    {"verify", "check the loop IR's rules; changes nothing", run_verify},
    {"schedule", "apply the default CPU schedule (hoist, vectorize, parallelise) for the target",
     run_schedule},
    {"map-gpu", "map a lowered kernel onto a GPU: launches of thread blocks and threads",
     run_map_gpu},
    {"scratch", "make large local buffers outside parallel loops parameters after the others",
     run_scratch},
};

// Runs `pass` on `kernel` (verified), verifies the result, keeps it in `kernel` and reports the
// run to stderr as `options` ask.
Expected<LoopPassRun> run_pass(const LoopPassInfo& pass, Kernel& kernel,
                               const LoopPassOptions& options) {
  const std::string before = print(kernel);
  const auto start = std::chrono::steady_clock::now();
  Expected<Kernel> result = pass.run(kernel, options);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  if (!result) return result.status().with_context(fmt::format("loop pass '{}'", pass.name));
  if (Status valid = verify(*result); !valid) {
    return Status::errorf(ErrorCode::internal,
                          "internal compiler error: loop pass '{}' left an invalid kernel: {}",
                          pass.name, valid.message());
  }
  kernel = std::move(result).value();
  const std::string after = print(kernel);
  const LoopPassRun run{std::string(pass.name), after != before, elapsed.count()};
  if (options.time_passes) {
    fmt::print(stderr, "loop pass {:<10} {:10.3f} ms{}\n", pass.name, run.seconds * 1e3,
               run.changed ? "  changed" : "");
  }
  if (options.dump_after == pass.name) {
    fmt::print(stderr, "// after loop pass {}\n{}", pass.name, after);
  }
  return run;
}

}  // namespace

std::span<const LoopPassInfo> all_loop_passes() { return kLoopPasses; }

const LoopPassInfo* find_loop_pass(std::string_view name) {
  const auto* pass = std::ranges::find(kLoopPasses, name, &LoopPassInfo::name);
  return pass == std::end(kLoopPasses) ? nullptr : pass;
}

Expected<std::vector<LoopPassRun>> run_loop_passes(Kernel& kernel,
                                                   std::span<const std::string> names,
                                                   const LoopPassOptions& options) {
  std::vector<const LoopPassInfo*> passes;
  for (const std::string& name : names) {
    passes.push_back(find_loop_pass(name));
    if (passes.back() == nullptr) return Status::errorf("unknown loop pass '{}'", name);
  }
  if (Status valid = verify(kernel); !valid) {
    return Status::errorf("loop passes run on kernels that verify, and this one does not: {}",
                          valid.message());
  }
  std::vector<LoopPassRun> runs;
  for (const LoopPassInfo* pass : passes) {
    KILN_ASSIGN_OR_RETURN(LoopPassRun run, run_pass(*pass, kernel, options));
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace kiln::loop
