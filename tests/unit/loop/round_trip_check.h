// Test support for the loop-IR parser (loop/parser.h): a kernel's printed text must read back
// as a kernel that prints the same, verifies and computes bit-identical results on the loop
// evaluator; and so must every kernel Kiln makes of a lowered group: the lowered kernel, the
// default schedule's for a narrow and a wide target, and the GPU mapping's.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "loop/default_schedule.h"
#include "loop/gpu_mapping.h"
#include "loop/parser.h"
#include "loop/verifier.h"
#include "unit/loop/schedule_check.h"

namespace kiln::loop::testing {

inline ::testing::AssertionResult round_trips(const Kernel& kernel) {
  const std::string text = print(kernel);
  Expected<Kernel> parsed = parse_kernel(text, "printed");
  if (!parsed) return ::testing::AssertionFailure() << parsed.status().message() << "\n" << text;
  if (const std::string again = print(*parsed); again != text) {
    return ::testing::AssertionFailure() << "reads back as\n" << again << "from\n" << text;
  }
  if (Status valid = verify(*parsed); !valid) {
    return ::testing::AssertionFailure() << valid.message() << "\n" << text;
  }
  // same_results names the second kernel "scheduled": here it is the parsed one.
  return same_results(kernel, *parsed);
}

// The AVX2 machine of two cores the default target describes, and a wide one with vector math.
inline const ScheduleTarget kNarrowTarget{.cores = 2, .vector_bytes = 32, .vector_math = false};
inline const ScheduleTarget kWideTarget{.cores = 16, .vector_bytes = 64, .vector_math = true};

// `lowered` and the kernels the compiler makes of it, each with what it is.
inline std::vector<std::pair<std::string, Kernel>> compiled_forms(const Kernel& lowered) {
  std::vector<std::pair<std::string, Kernel>> forms = {{"lowered", lowered}};
  for (const ScheduleTarget& target : {kNarrowTarget, kWideTarget}) {
    const Schedule schedule = default_schedule(lowered, target);
    Expected<Kernel> scheduled = apply_schedule(lowered, schedule);
    EXPECT_TRUE(scheduled.has_value()) << scheduled.status().message();
    if (scheduled) forms.emplace_back("scheduled by\n" + print(schedule), *scheduled);
  }
  // A kernel the mapping refuses (too many launches) is no GPU kernel to read back.
  if (Expected<GpuMapping> mapped = map_to_gpu(lowered))
    forms.emplace_back("mapped", mapped->kernel);
  return forms;
}

inline ::testing::AssertionResult compiled_forms_round_trip(const Kernel& lowered) {
  for (const auto& [form, kernel] : compiled_forms(lowered)) {
    ::testing::AssertionResult result = round_trips(kernel);
    if (!result) return result << "\n(the kernel " << form << ")";
  }
  return ::testing::AssertionSuccess();
}

// Every node of `graph` lowered as one group, in each compiled form.
inline ::testing::AssertionResult graph_round_trips(const Graph& graph,
                                                    const LowerGroupOptions& options = {}) {
  Expected<LoweredGroup> lowered = lower_group(graph, graph.nodes(), options);
  if (!lowered) return ::testing::AssertionFailure() << lowered.status().message();
  return compiled_forms_round_trip(lowered->kernel);
}

// An OpCheck (unit/loop/lowering_op_cases.h): the one-op group's compiled forms read back.
inline ::testing::AssertionResult op_round_trips(Op op, const std::vector<InputSpec>& specs,
                                                 const Attrs& attrs, double) {
  Expected<Graph> graph = one_op_graph(op, specs, attrs);
  if (!graph) return ::testing::AssertionFailure() << graph.status().message();
  return graph_round_trips(*graph);
}

}  // namespace kiln::loop::testing
