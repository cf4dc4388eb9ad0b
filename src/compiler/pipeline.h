// The compiler pipeline: every stage from a graph to compiled code, in order, in one function
// that reads top to bottom (run_pipeline in pipeline.cc):
//
//   verify         the graph is well formed
//   rewrite        graph rewrites: fold constants and layout ops, eliminate reductions
//   substitute     TASO's search over the proved rules, priced after fusion
//   decompose      composites as primitives where the estimate drops
//   layout         convolutions channels last, through oneDNN (CPU, inference)
//   partition      nodes into fused groups (greedy or the integer program over the cost model)
//   lower          each group to a loop-IR kernel
//   schedule       the default schedule for this CPU, or the mapping onto a GPU
//   scratch        large local buffers become arena parameters (CPU)
//   share-kernels  groups with identical loop IR share one compiled kernel
//   plan-memory    program steps, buffers and the arena
//   codegen        C++ compiled and loaded, or CUDA compiled to a cubin
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
