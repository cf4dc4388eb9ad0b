#include "compiler/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "compiler/stage_text.h"
#include "compiler/stages.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "support/check.h"

namespace kiln {
namespace {

// Times the stages, prints their results and times where asked, and says where to stop.
class StageLog {
 public:
  StageLog(const PipelineOptions& options, CompiledGraph& out) : options_(options), out_(out) {}

  // Runs `body`, the work of `stage`, and returns what it returns.
  template <typename Body>
  auto time(Stage stage, const Body& body) {
    const auto start = std::chrono::steady_clock::now();
    auto result = body();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out_.stage_seconds.emplace_back(stage, seconds);
    out_.last_stage = stage;
    if (options_.time_stages) {
      print(fmt::format("stage {:<14} {:10.3f} ms\n", stage_name(stage), seconds * 1e3));
    }
    return result;
  }

  // After `stage` succeeded: prints its result, `text()`, when asked, and returns whether the
  // pipeline stops here.
  bool done(Stage stage, const std::function<std::string()>& text) {
    if (options_.dump_after.contains(stage)) {
      print(fmt::format("// after stage {}\n{}", stage_name(stage), text()));
    }
    return options_.stop_after == stage;
  }

 private:
  void print(const std::string& text) const {
    if (options_.print) {
      options_.print(text);
    } else {
      std::fputs(text.c_str(), stderr);
    }
  }

  const PipelineOptions& options_;
  CompiledGraph& out_;
};

// The fault a test asks for with $KILN_FAULT, as a bug in Kiln would show itself: "internal"
// returns an internal error, "check" fails a KILN_CHECK (support/check.h); unset or empty, none.
// Tests use it to see how each host (the command line, the Python module and backend) reports
// Kiln's own bugs.
Status injected_fault() {
  const char* fault = std::getenv("KILN_FAULT");
  if (fault == nullptr || *fault == '\0') return Status::ok();
  const std::string_view kind = fault;
  KILN_CHECK(kind != "check", "KILN_FAULT=check");
  if (kind == "internal") {
    return Status::error(ErrorCode::internal, "internal compiler error: KILN_FAULT=internal");
  }
  return Status::errorf("KILN_FAULT='{}': the faults are 'internal' and 'check'", kind);
}

// A graph stage runs on `graph` when it may be rewritten; compile_graph's is compiled as given.
template <typename Report>
Expected<Report> graph_stage(Graph* graph, Expected<Report> (*stage)(Graph&, const CompileOptions&),
                             const CompileOptions& options) {
  if (graph == nullptr) return Report();
  return stage(*graph, options);
}

// The pipeline. `rewritable` is `graph` when the graph stages may rewrite it, else null; a
// non-empty `given` partition replaces the partitioner's.
Expected<CompiledGraph> run_stages(Graph* rewritable, const Graph& graph,
                                   std::span<const std::vector<Node*>> given,
                                   const CompileOptions& options) {
  KILN_RETURN_IF_ERROR(injected_fault());
  CompiledGraph out;
  StageLog log(options.pipeline, out);
  const auto graph_text = [&] { return print_graph(graph); };

  KILN_RETURN_IF_ERROR(log.time(Stage::verify, [&] { return verify(graph); }));
  if (log.done(Stage::verify, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.rewrites.precision, log.time(Stage::precision, [&] {
    return graph_stage(rewritable, precision_stage, options);
  }));
  if (log.done(Stage::precision, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.rewrites.passes, log.time(Stage::rewrite, [&] {
    return graph_stage(rewritable, rewrite_stage, options);
  }));
  out.rewrites.nodes_after = graph.num_nodes();
  if (log.done(Stage::rewrite, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.rewrites.substitution, log.time(Stage::substitute, [&] {
    return graph_stage(rewritable, substitute_stage, options);
  }));
  out.rewrites.nodes_after = graph.num_nodes();
  if (log.done(Stage::substitute, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.rewrites.decompositions, log.time(Stage::decompose, [&] {
    return graph_stage(rewritable, decompose_stage, options);
  }));
  out.rewrites.nodes_after = graph.num_nodes();
  if (log.done(Stage::decompose, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.rewrites.channels_last, log.time(Stage::layout, [&] {
    return graph_stage(rewritable, layout_stage, options);
  }));
  out.rewrites.nodes_after = graph.num_nodes();
  if (log.done(Stage::layout, graph_text)) return out;

  KILN_ASSIGN_OR_RETURN(out.partition, log.time(Stage::partition, [&] {
    return partition_stage(graph, options, given);
  }));
  if (log.done(Stage::partition, [&] { return fusion::explain_partition(graph, out.partition); })) {
    return out;
  }

  // Collectives are no kernels: their steps go between those of the groups around them.
  KILN_ASSIGN_OR_RETURN(LoweredKernels lowered, log.time(Stage::lower, [&] {
    return lower_stage(graph, kernel_groups(out.partition));
  }));
  out.records = std::move(lowered.records);
  KILN_ASSIGN_OR_RETURN(const std::vector<CollectiveCall> collectives,
                        place_collectives(out.partition, out.records, options));
  const auto calls_text = [&] { return kernel_calls_text(out.records); };
  if (log.done(Stage::lower, calls_text)) return out;

  KILN_RETURN_IF_ERROR(
      log.time(Stage::schedule, [&] { return schedule_stage(out.records, options); }));
  if (log.done(Stage::schedule, calls_text)) return out;

  log.time(Stage::scratch, [&] {
    scratch_stage(out.records, options);
    return 0;
  });
  if (log.done(Stage::scratch, calls_text)) return out;

  log.time(Stage::pack_weights, [&] {
    pack_weights_stage(out.records, options);
    return 0;
  });
  if (log.done(Stage::pack_weights, calls_text)) return out;

  const std::vector<loop::Kernel> kernels =
      log.time(Stage::share_kernels, [&] { return share_kernels_stage(out.records); });
  if (log.done(Stage::share_kernels, [&] { return shared_kernels_text(kernels, out.records); })) {
    return out;
  }

  KILN_ASSIGN_OR_RETURN(PlannedProgram planned, log.time(Stage::plan_memory, [&] {
    return plan_memory_stage(graph, out.records, collectives, lowered.views,
                             static_cast<int>(kernels.size()));
  }));
  out.program = std::make_shared<const runtime::Program>(std::move(planned.program));
  out.step_kernel_record = std::move(planned.step_kernel_record);
  out.stats.arena_total_bytes = planned.arena_total_bytes;
  out.stats.arena_live_bound_bytes = planned.arena_live_bound_bytes;
  if (log.done(Stage::plan_memory, [&] { return plan_text(out); })) return out;

  KILN_ASSIGN_OR_RETURN(GeneratedCode code,
                        log.time(Stage::codegen, [&] { return codegen_stage(kernels, options); }));
  out.kernels = std::move(code.cpu);
  out.cuda = std::move(code.cuda);
  out.stats.units = code.units;
  out.stats.units_compiled = code.units_compiled;
  log.done(Stage::codegen, [&] {
    Expected<std::string> source = kernel_source(out);
    return source ? *source : "// " + source.status().message() + "\n";
  });
  return out;
}

}  // namespace

double CompiledGraph::seconds_in(std::initializer_list<Stage> stages) const {
  double seconds = 0;
  for (const auto& [stage, time] : stage_seconds) {
    if (std::find(stages.begin(), stages.end(), stage) != stages.end()) seconds += time;
  }
  return seconds;
}

Expected<CompiledGraph> run_pipeline(Graph& graph, const CompileOptions& options) {
  return run_stages(&graph, graph, {}, options);
}

Expected<CompiledGraph> compile_graph(const Graph& graph, const CompileOptions& options) {
  return run_stages(nullptr, graph, {}, options);
}

Expected<CompiledGraph> compile_groups(const Graph& graph,
                                       std::span<const std::vector<Node*>> groups,
                                       const CompileOptions& options) {
  return run_stages(nullptr, graph, groups, options);
}

}  // namespace kiln
