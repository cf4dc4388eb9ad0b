// The timing harness of `kiln run --repeat`, `zoo compare` and `kiln bench`: compiled models
// run on inputs encoded once, timed alone or taking turns, and the fusion profile that sets a
// fused program's kernels beside the unfused time of their nodes.
//
// Runs are timed on the caller's memory (CompiledModel::run_raw), not on Arrays: for a zoo
// model, converting every weight on every run can take as long as the run. The first run of a
// model is a warm-up that the caller runs and does not time: it touches the arena's pages for
// the first time, and the page faults land on whichever kernel writes a region first.
#pragma once

#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/array.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln {

// A graph's inputs encoded once and one buffer per output. Compiled variants of one graph
// share them, an output found by its name, so a step without its loss writes the full step's
// buffers: bert-base's Adam step has 1.3 GB of inputs and as much of outputs, and `zoo compare
// --ablate-rewrites` times seven variants.
class RunBuffers {
 public:
  RunBuffers(const Graph& graph, std::span<const Array> inputs);
  // Each input encoded as soon as `make_input` gives it, so that at most one is held in f64:
  // encoded, bert-large's Adam step takes 4 GB of inputs and as much of outputs, where Arrays
  // of both took 16 GB.
  static Expected<RunBuffers> encode(const Graph& graph,
                                     const std::function<Expected<Array>(size_t)>& make_input);

  std::span<const void* const> inputs() const { return input_pointers_; }
  // The buffer of the output named like `output`, made if there is none.
  void* output(const Value& output);

  // Input `index` of `graph`, decoded.
  Array input_array(const Graph& graph, size_t index) const;
  // Output `index` of the graph these buffers were made for, decoded. By position, not by name:
  // compiling may rename an output (decomposing a softmax that is one replaces it), and the
  // compiled graph's output then writes a buffer made for the source graph's.
  Array output_array(size_t index) const;

  // A digest of each output's bytes, in `graph`'s order: enough to tell whether later runs
  // repeat a run bit for bit, without keeping a copy of its outputs.
  std::vector<size_t> output_digests(const Graph& graph);
  // The name of the first output of `graph` whose bytes no longer have the digest in `digests`
  // (output_digests of an earlier run), or nullopt when every one repeats it.
  std::optional<std::string> first_differing_output(const Graph& graph,
                                                    std::span<const size_t> digests);

 private:
  RunBuffers() = default;
  void* add_output(const Value& output);
  void add_output_in_order(const Value& output);
  size_t output_digest(const Value& output);

  std::vector<std::vector<std::byte>> input_bytes_;
  std::deque<std::vector<std::byte>> output_bytes_;  // a deque: pointers stay put
  std::map<std::string, size_t> output_by_name_;
  // The made-for graph's outputs in order: each one's type and its buffer in output_bytes_.
  std::vector<std::pair<TensorType, size_t>> outputs_in_order_;
  std::vector<const void*> input_pointers_;
};

// One compiled model ready to be timed, on buffers it may share with other variants of its
// graph. Both must outlive it.
class TimedRun {
 public:
  // With `io_on_device`, every run after the first leaves the inputs and outputs on the GPU
  // (CompiledModel::run_raw): the time of the program alone.
  TimedRun(CompiledModel& model, RunBuffers& buffers, bool io_on_device = false);

  // The seconds one run takes, profiled into `profile` when given.
  Expected<double> time_one(runtime::Profile* profile = nullptr);

 private:
  CompiledModel& model_;
  RunBuffers& buffers_;
  std::vector<void*> output_pointers_;
  bool io_on_device_;
};

// Times `repeat` runs of `model` on `buffers` (after the caller's warm-up); sorted.
Expected<std::vector<double>> time_runs(CompiledModel& model, RunBuffers& buffers, int repeat,
                                        runtime::Profile* profile = nullptr,
                                        bool io_on_device = false);

// `repeat` turns in which every run takes one timed step, in order, so that a change in the
// machine's load touches every variant alike; per run, its times, sorted. Each turn runs a
// variant twice and times the second run: a training loop runs the same step over and over,
// so a step starts with the caches as its previous step left them, not as another variant's
// program did. profiles[i], when given, profiles run i's timed runs.
Expected<std::vector<std::vector<double>>> time_interleaved(std::span<TimedRun*> runs, int repeat,
                                                            std::span<runtime::Profile*> profiles);

// The median of sorted `times` (the upper one of an even count); 0 when empty.
double median_of(std::span<const double> times);

// What fusion did to each kernel's time, measured: every kernel of `fused` next to the time its
// nodes took as kernels of their own in `unfused` (one node per step, matched by node id: the
// two compile clones of one graph), from profiles of the same interleaved runs.
struct FusedKernelTime {
  size_t step = 0;     // in fused's program
  double fused = 0;    // seconds per run
  double unfused = 0;  // its nodes' seconds per run unfused
};
struct FusionProfile {
  std::vector<FusedKernelTime> kernels;  // slowest against their nodes first
  double fused_total = 0;
  double unfused_total = 0;          // the unfused run's every step, copies included
  double unfused_kernels_total = 0;  // of that, the fused kernels' nodes
  // The unfused run's contractions (matmul, conv, spmm): fusion leaves each a library call of
  // the same shape and saves the passes around it, so unfused_total / unfused_contractions
  // bounds the speedup any partition can give.
  double unfused_contractions = 0;
};
FusionProfile join_fusion_profile(const CompiledGraph& unfused,
                                  const runtime::Profile& unfused_profile,
                                  const CompiledGraph& fused,
                                  const runtime::Profile& fused_profile);

// The protocol of `kiln bench`, for a harness that times Kiln beside other systems in one
// process tree (bench/peers): each line read from `in` is a count N, answered on `out` by one
// line "seconds T1 ... TN" of N timed runs, flushed. End of input ends it; a line that is not
// a positive count is an error.
Status serve_timing_requests(std::istream& in, std::ostream& out, TimedRun& run);

}  // namespace kiln
