// Loop-level passes by name, run in sequence on a kernel: what `kiln opt FILE.loop --passes=a,b`
// runs on kernels read by loop/parser.h, as passes/pass_manager.h runs graph passes on graphs.
//
//   simplify   loop/simplify.h.
//   verify     loop/verifier.h; changes nothing. The manager verifies around every pass anyway,
//              so alone it checks a kernel, and in a pipeline it documents a point.
//   schedule   the default CPU schedule for options.target (loop/default_schedule.h: rules
//              chosen and applied one by one), replayed with apply_schedule, as the compiler
//              schedules each lowered kernel (the pipeline's schedule stage, compiler/stages.h).
//   map-gpu    map_to_gpu (loop/gpu_mapping.h). The mapping takes a kernel as lowering makes
//              it, with serial loops (a CPU schedule's vector loops would end up inside GPU
//              threads), so the pass refuses a kernel with loops of other kinds.
//   scratch    promote_scratch (loop/scratch.h): local buffers larger than
//              kMaxKernelLocalBytes outside parallel loops become parameters after the others,
//              as the compiler does after scheduling. Run alone, the byte sizes promote_scratch
//              returns beside the kernel are not kept: each is its parameter's flat size times
//              its element size, which the kernel's text declares, and the new parameters are
//              those after the ones the kernel had before the pass.
//
// The manager verifies the kernel before the first pass (every pass assumes verified input;
// an error says so) and after each pass (a pass that leaves an invalid kernel is a compiler
// bug, reported naming the pass). A pass that cannot handle its kernel (map-gpu over a kernel
// too large for a GPU, say) is an error naming the pass. It can print the kernel after each run
// of a named pass and time each pass, both to stderr; a command can take both settings from
// the environment as for graph passes (PassManagerOptions::from_environment).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loop/default_schedule.h"
#include "loop/stmt.h"
#include "support/status.h"

namespace kiln::loop {

struct LoopPassOptions {
  std::string dump_after;  // a pass name; the kernel is printed to stderr after each run of it
  bool time_passes = false;
  ScheduleTarget target = host_target();  // what `schedule` schedules for
};

struct LoopPassInfo {
  std::string_view name;     // kebab-case, as in pipelines
  std::string_view summary;  // one line, for help text
  // The transformed kernel (verified input), or why the pass cannot transform it.
  Expected<Kernel> (*run)(const Kernel& kernel, const LoopPassOptions& options);
};

// Every registered loop pass, in a fixed order.
std::span<const LoopPassInfo> all_loop_passes();
const LoopPassInfo* find_loop_pass(std::string_view name);  // nullptr if unknown

struct LoopPassRun {
  std::string name;
  bool changed = false;  // the kernel prints differently after the pass
  double seconds = 0;
};

// Runs the named passes in order on `kernel`, which holds the result of the last pass that
// succeeded. Unknown names are an error before anything runs.
Expected<std::vector<LoopPassRun>> run_loop_passes(Kernel& kernel,
                                                   std::span<const std::string> names,
                                                   const LoopPassOptions& options = {});

}  // namespace kiln::loop
