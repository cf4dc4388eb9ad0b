// The CPU's target, and the two things the CUDA mapping on the CPU shares with it: its kernels
// compiled as C++ for this CPU, and run by the CPU's executor (target/target.h).
#pragma once

#include <memory>
#include <span>

#include "target/target.h"

namespace kiln {

const Target& cpu_target();

// The kernels as C++, compiled through the cache and loaded (codegen/cpu/kernel_compiler.h).
Expected<GeneratedCode> compile_for_this_cpu(std::span<const loop::Kernel> kernels,
                                             const CompileOptions& options);

// The schedule search's machine (loop/schedule_cost.h) from a cost profile and the schedule's
// target: the profile's cores, bandwidth, L2 and call overhead, and its elementwise rate per
// core and lane as the rate of simple operations.
loop::CostMachine cost_machine(const cost::DeviceProfile& profile,
                               const loop::ScheduleTarget& target);

// The executor of a compilation whose kernels were compiled for this CPU.
Expected<std::unique_ptr<runtime::ProgramExecutor>> cpu_executor(const CompiledGraph& compiled);

}  // namespace kiln
