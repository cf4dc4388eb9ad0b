// The compiler pipeline: every stage from a graph to compiled code, in order, in one function
// that reads top to bottom (run_pipeline in pipeline.cc). The stages are listed once, in
// compiler/options.h (KILN_STAGES): the graph stages (verify, precision, rewrite, substitute,
// decompose, layout), the partition into fused groups, and the back-end stages that turn the
// groups into a program. Where a stage's work depends on the device, it asks the compilation's
// target (target/target.h).
//
// Each stage is a call of compiler/stages.h with a typed input and output. Every entry point
// compiles through here: Compiler::compile (include/kiln/kiln.h), every `kiln` command. The
// pipeline can show itself (CompileOptions::pipeline, PipelineOptions): the result of any stage
// in text (--dump-after STAGE), the time of every stage (--time-stages), and a stop after any
// stage (--stop-after STAGE), the compilation then holding what the stages up to it made.
#pragma once

#include <span>
#include <vector>

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "ir/graph.h"
#include "support/status.h"

namespace kiln {

// Compiles `graph`, which the graph stages rewrite in place (keeping its inputs, and its
// outputs' names); the result points into it.
Expected<CompiledGraph> run_pipeline(Graph& graph, const CompileOptions& options = {});

// The pipeline on a graph that is not to be rewritten: the graph stages do not run (verify
// does), so the result's nodes are the caller's.
Expected<CompiledGraph> compile_graph(const Graph& graph, const CompileOptions& options = {});

// compile_graph with the partition given: `groups` of nodes of `graph`, in dependency order
// (every value a group reads is a graph input, a constant or computed by an earlier group),
// taken as they are by the partition stage. For tests that compile chosen groups.
Expected<CompiledGraph> compile_groups(const Graph& graph,
                                       std::span<const std::vector<Node*>> groups,
                                       const CompileOptions& options = {});

}  // namespace kiln
