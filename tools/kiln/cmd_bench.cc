// kiln bench: the protocol a benchmark harness (bench/peers) drives to time Kiln beside other
// systems in one process tree. `kiln zoo bench NAME` is `kiln bench zoo:NAME`.
//
// Compile once, run once, write the inputs and outputs, print the roofline's inputs and
// "ready"; then each line read from standard input is a count N, answered by one line
// "seconds T1 ... TN" of N timed runs (driver/timing.h). End of input ends the command.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "cost/device_profile.h"
#include "driver/model_io.h"
#include "driver/timing.h"
#include "frontend/tensor_io.h"
#include "kiln/kiln.h"
#include "models/model.h"
#include "report.h"

namespace kiln::cli {
namespace {

struct BenchOptions {
  ModelSourceOptions source;
  std::vector<std::string> inputs;
  std::string output_file;
  CompileFlags compile;
};

// The outputs worth checking against another implementation: the first (the loss, or the
// logits) and, of a preset's training step, each updated parameter; the optimizer's state
// follows from the same gradients and would double the file. A file's every output.
bool saved_output(const SourceModel& model, size_t index) {
  if (!model.zoo || index == 0) return true;
  const std::string& name = model.graph.outputs()[index]->name();
  const std::string_view next = ".next";
  return name.ends_with(next) &&
         model.zoo->inputs.contains(name.substr(0, name.size() - next.size()));
}

// The roofline's inputs: the graph's flops, the bytes it cannot avoid moving (each input read
// once, each output written once) and this machine's measured peaks.
Status print_roofline(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(const cost::DeviceProfile device, cost::host_device_profile());
  int64_t io_bytes = 0;
  for (const auto* values : {&graph.inputs(), &graph.outputs()}) {
    for (const Value* value : *values) {
      io_bytes += value->shape().num_elements() * dtype_size_bytes(value->dtype());
    }
  }
  fmt::print("graph flops {:.6g}\ngraph io bytes {}\n", graph_flops(graph), io_bytes);
  fmt::print("device matmul flops {:.6g}\ndevice bandwidth {:.6g}\n", device.matmul_flops,
             device.memory_bandwidth);
  return Status::ok();
}

Status bench(const BenchOptions& options) {
  KILN_ASSIGN_OR_RETURN(SourceModel model, load_model_source(options.source, options.compile));
  fmt::print("{}\n", model.description);
  using NamedTensors = std::map<std::string, Array>;
  KILN_ASSIGN_OR_RETURN(NamedTensors given, load_named_tensors(options.inputs));
  std::vector<std::string> random_names;
  KILN_ASSIGN_OR_RETURN(std::vector<Array> inputs,
                        model_inputs(model, options.source, std::move(given), random_names));
  KILN_ASSIGN_OR_RETURN(const CompileOptions compile_options,
                        compile_options_from(options.compile));
  const Graph& graph = model.graph;
  std::vector<NamedArray> saved;
  for (size_t i = 0; i < inputs.size(); ++i)
    saved.push_back({graph.inputs()[i]->name(), inputs[i]});
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(CompiledModel compiled, Compiler(compile_options).compile(graph.clone()));
  const double compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_compile_summary(compiled.compiled());
  if (compile_options.device.kind == DeviceKind::cuda)
    fmt::print("runs on {}\n", compiled.runs_on());
  KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, compiled.run(inputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (saved_output(model, i)) {
      saved.push_back({"output/" + graph.outputs()[i]->name(), std::move(outputs[i])});
    }
  }
  outputs.clear();
  KILN_RETURN_IF_ERROR(write_npz(options.output_file, saved));
  saved.clear();
  RunBuffers buffers(graph, inputs);
  inputs.clear();
  // On a GPU, the program alone: a step's inputs and outputs stay on the device, as in a
  // training loop that keeps its state there, and as the peers are timed.
  const bool on_gpu = compile_options.device.kind == DeviceKind::cuda;
  if (on_gpu) fmt::print("timing the program alone, its inputs and outputs left on the GPU\n");
  TimedRun run(compiled, buffers, on_gpu);
  KILN_RETURN_IF_ERROR(print_roofline(graph));
  fmt::print("compile seconds {:.6f}\nready\n", compile_seconds);
  std::fflush(stdout);
  return serve_timing_requests(std::cin, std::cout, run);
}

int run_bench(const BenchOptions& options) {
  const Status done = bench(options);
  return done ? 0 : report(done.with_context("bench"));
}

}  // namespace

void add_bench_command(CLI::App& parent, Action& action, ModelArgument model) {
  auto bench = std::make_shared<BenchOptions>();
  CLI::App* command = parent.add_subcommand(
      "bench",
      "For benchmark harnesses (bench/peers): compile a model's graph once, run it, "
      "write its inputs by name and its outputs (a preset's first output and updated "
      "parameters) as output/NAME to an .npz file, and print 'ready'; then answer "
      "each line N read from standard input with 'seconds' and the times of N runs.");
  add_model_source(command, bench->source, model);
  add_inputs(command, bench->inputs);
  add_output(command, bench->output_file, ".npz file to write")->required();
  add_compile_flags(command, bench->compile);
  on_parsed(command, action, bench, run_bench);
}

}  // namespace kiln::cli
