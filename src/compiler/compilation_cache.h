// The compilation cache: a graph that this build of Kiln compiled before for this CPU, or for
// a GPU (DeviceKind::cuda), with the same options, is loaded instead of compiled
// (CompileOptions::reuse_compilations; the CLI's run, bench and zoo train set it unless told
// --no-reuse-compilations, and so does the Python backend). It is what lets a JIT (the
// torch.compile backend) or a repeated `kiln run` skip the graph stages, the partition, the
// lowering and the code generation of a graph it has seen.
//
// Key: SHA-256 (codegen/cpu/compile_cache.h: cache_key) over
//   - the graph as text (ir/printer.h), constants' values included, without the graph's own
//     name (which changes nothing compiled; the Python backend numbers its graphs);
//   - every option that shapes the result (compile_options_fingerprint: the device and, for a
//     GPU, the architecture compiled for among them) and which device profile the cost model
//     prices with: a pinned one's figures, else this machine's CPU model and core count
//     (cost::profile_identity), never a measurement, so that the key is a pure function of
//     the graph, the options and the binary;
//   - the identity of the Kiln binary: the SHA-256 of the file that holds this code (the
//     executable or the Python extension), so a rebuilt Kiln never reads an older one's entries.
// Entry: `<cache root>/compilations/<key>.bin` (support/files.h: kiln_cache_root), written
// atomically, holding the program (runtime/program.h: serialize_program) and the partition's
// explanation, and
//   - for the CPU: the program kernels' loop IR as text (loop/parser.h reads it back, and the
//     kernel cache finds their compiled code by the C++ it emits);
//   - for a GPU: the CUDA source, the architecture, the cubin and the launches
//     (runtime/cuda_launch.h: serialize_launches), from which the executor is made directly.
//
// What a cached compilation lacks: the graph stages' reports, the partition and the kernel
// records. `kiln explain`, `kiln compile -o` and the check mode, which read them, compile
// without the cache, as does a compile asked to time, dump or stop after its stages
// (PipelineOptions), which a cached compilation skips. Graphs holding more than
// kMaxCachedConstantElements constant elements (frozen weights) are not cached: printing them
// for the key would cost more than it saves.
// An entry that does not read back (damaged, or from another format) is compiled again and
// replaced, never trusted. The entries are kept within kMaxCompilationCacheBytes: a store that
// finds more removes the least recently loaded or stored (support/files.h:
// prune_least_recently_used).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/compiled_graph.h"
#include "compiler/options.h"
#include "ir/graph.h"
#include "loop/stmt.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln {

inline constexpr int64_t kMaxCachedConstantElements = int64_t{1} << 20;
inline constexpr int64_t kMaxCompilationCacheBytes = int64_t{1} << 30;

// The options that shape a compilation's result, as text: a field added to CompileOptions
// that changes what is compiled must be added here.
std::string compile_options_fingerprint(const CompileOptions& options);

// The cache key of `graph` compiled with `options`, or nullopt when it is not cached (for
// neither the CPU nor a GPU, or too many constant elements).
Expected<std::optional<std::string>> compilation_key(const Graph& graph,
                                                     const CompileOptions& options);

struct CachedCompilation {
  runtime::Program program;
  std::vector<loop::Kernel> kernels;  // program kernel k is kernels[k]
  std::optional<CudaCompiled> cuda;   // GPU: instead of `kernels`
  std::string explanation;            // fusion::explain_partition of the stored compilation
};

// The entry of `key`, or nullopt when there is none or it does not read back.
std::optional<CachedCompilation> load_compilation(const std::string& key);

// Stores a complete compilation of `graph` (for the CPU or a GPU) under `key`.
Status store_compilation(const std::string& key, const Graph& graph, const CompiledGraph& compiled);

}  // namespace kiln
