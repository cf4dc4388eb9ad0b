// kiln run: compile a model (a file or zoo:NAME) for this CPU, run it and print its outputs;
// checked kernel by kernel, timed and profiled when asked. `kiln zoo run NAME` is `kiln run
// zoo:NAME`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>

#include "commands.h"
#include "driver/compare.h"
#include "driver/model_io.h"
#include "driver/timing.h"
#include "interp/interpreter.h"
#include "interp/statistics.h"
#include "ir/printer.h"
#include "kiln/kiln.h"
#include "report.h"
#include "support/text.h"

namespace kiln::cli {
namespace {

struct RunOptions {
  ModelSourceOptions source;
  std::vector<std::string> inputs;
  std::vector<std::string> expected;
  std::string output_file;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool interpret = false;  // the reference interpreter instead of compiled code
  bool check = false;
  bool profile = false;
  int repeat = 0;
  CompileFlags compile;
};

// What running `graph` compiled takes (cli.h: run_memory), with the f64 copies that --check
// (every input) and --output (every output) decode.
RunMemory memory_of_run(const Graph& graph, const CompiledModel* program,
                        const RunOptions& options) {
  RunMemory memory = run_memory(graph, program);
  if (options.check) memory.decoded = f64_bytes(graph.inputs());
  if (!options.output_file.empty()) memory.decoded += f64_bytes(graph.outputs());
  return memory;
}

// The note a refusal adds when the command's options make f64 copies.
std::string_view copies_note(const RunOptions& options) {
  const bool copies = options.check || !options.output_file.empty();
  return copies ? "--check and --output add f64 copies" : "";
}

// Compiles `graph`, checks it kernel by kernel when asked, and runs it (timed and profiled
// when asked) on inputs encoded as `make_input` makes them; the outputs stay in the buffers.
// Nullopt when the pipeline was asked to stop before the end.
Expected<std::optional<RunBuffers>> run_compiled_model(Graph graph, const InputMaker& make_input,
                                                       const RunOptions& options) {
  KILN_ASSIGN_OR_RETURN(CompileOptions compile_options, compile_options_from(options.compile));
  // The check mode reads the kernel records, which a cached compilation does not keep.
  if (options.check) compile_options.reuse_compilations = false;
  if (compile_options.pipeline.stop_after) {
    KILN_ASSIGN_OR_RETURN(Compilation stopped,
                          Compiler(compile_options).run_pipeline(std::move(graph)));
    print_compile_summary(stopped.compiled());
    return std::optional<RunBuffers>();
  }
  KILN_RETURN_IF_ERROR(
      check_fits_in_memory(memory_of_run(graph, nullptr, options), copies_note(options)));
  KILN_ASSIGN_OR_RETURN(CompiledModel model, Compiler(compile_options).compile(std::move(graph)));
  print_compile_summary(model.compiled());
  if (compile_options.device.kind == DeviceKind::cuda) fmt::print("runs on {}\n", model.runs_on());
  KILN_RETURN_IF_ERROR(
      check_fits_in_memory(memory_of_run(model.graph(), &model, options), copies_note(options)));
  KILN_ASSIGN_OR_RETURN(RunBuffers buffers, RunBuffers::encode(model.graph(), make_input));
  if (options.check) {
    std::vector<Array> inputs;
    for (size_t i = 0; i < model.graph().inputs().size(); ++i) {
      inputs.push_back(buffers.input_array(model.graph(), i));
    }
    KILN_ASSIGN_OR_RETURN(const double worst, check_kernels(model, inputs));
    fmt::print("check: all {} agree with the reference (largest abs error {:.3g})\n",
               count_noun(model.compiled().records.size(), "kernel"), worst);
  }
  // The first run is the warm-up, never profiled (driver/timing.h); its outputs are the ones
  // reported.
  KILN_RETURN_IF_ERROR(TimedRun(model, buffers).time_one().status());
  runtime::Profile profile;
  runtime::Profile* profiling = options.profile ? &profile : nullptr;
  if (options.repeat > 0 || profiling != nullptr) {
    const std::vector<size_t> first = buffers.output_digests(model.graph());
    // On a GPU, the program alone: its inputs and outputs stay on the device while timed.
    const bool on_gpu = compile_options.device.kind == DeviceKind::cuda;
    KILN_ASSIGN_OR_RETURN(
        const std::vector<double> times,
        time_runs(model, buffers, std::max(options.repeat, 1), profiling, on_gpu));
    if (options.repeat > 0) {
      fmt::print("time per run ({} runs after a warm-up{}): median {}, min {}, max {}\n",
                 options.repeat, on_gpu ? ", inputs and outputs left on the GPU" : "",
                 format_seconds(median_of(times)), format_seconds(times.front()),
                 format_seconds(times.back()));
      // Timed runs on a GPU left their outputs there: one more run brings the last ones back.
      if (on_gpu) KILN_RETURN_IF_ERROR(TimedRun(model, buffers).time_one().status());
      // The same program on the same inputs: the last run must give the first run's bytes.
      const std::optional<std::string> differs =
          buffers.first_differing_output(model.graph(), first);
      const bool atomics = on_gpu && !compile_options.deterministic;
      fmt::print("repeatable: {}\n",
                 differs ? "no, output %" + *differs + " of the last run differs from the first's" +
                               (atomics ? " (a GPU's atomic adds sum in any order; "
                                          "--deterministic keeps them in order)"
                                        : "")
                         : "yes, the last run's outputs are the first's, bit for bit");
    }
  }
  if (profiling != nullptr) print_profile(model.program(), profile);
  return std::optional<RunBuffers>(std::move(buffers));
}

// Prints the outputs (a preset's first, the loss or the logits: the others are many), compares
// them with the expected values and writes them when asked; `output(i)` gives output i, once.
// False when one differs.
Expected<bool> report_outputs(const SourceModel& model, const std::function<Array(size_t)>& output,
                              bool compiled, const RunOptions& options) {
  KILN_ASSIGN_OR_RETURN(auto expected, load_named_tensors(options.expected));
  bool all_match = true;
  std::vector<NamedArray> named;
  if (!model.zoo)
    fmt::print("outputs ({}):\n", compiled ? "compiled" : "reference interpreter, f64");
  for (size_t i = 0; i < model.graph.outputs().size(); ++i) {
    const Value& value = *model.graph.outputs()[i];
    const bool printed = !model.zoo || i == 0;
    auto it = expected.find(value.name());
    const bool compared = it != expected.end();
    if (!printed && !compared && options.output_file.empty()) continue;
    Array array = output(i);
    if (printed) {
      fmt::print("{}{} {}: {}\n", model.zoo ? "output " : "  ", print_value_ref(value),
                 value.type().to_string(), format_statistics(compute_statistics(array)));
    }
    if (compared) {
      const Comparison comparison =
          compare_arrays(array, it->second, {.atol = options.atol, .rtol = options.rtol});
      fmt::print("    vs expected: max abs error {:.3g}, max rel error {:.3g}: {}\n",
                 comparison.max_abs_error, comparison.max_rel_error,
                 comparison.matches ? "within tolerance" : "MISMATCH, " + comparison.mismatch);
      all_match = all_match && comparison.matches;
      expected.erase(it);
    }
    if (!options.output_file.empty()) named.push_back({value.name(), std::move(array)});
  }
  if (!expected.empty()) {
    return Status::errorf("expected values given for '{}', which is not an output",
                          expected.begin()->first);
  }
  if (!options.output_file.empty()) {
    KILN_RETURN_IF_ERROR(write_npz(options.output_file, named));
    fmt::print("wrote {}\n", options.output_file);
  }
  return all_match;
}

// The reference interpreter's outputs, or the compiled ones left in their buffers; nullopt when
// the pipeline was asked to stop before the end.
Expected<std::optional<std::function<Array(size_t)>>> run_model(SourceModel& model,
                                                                const InputMaker& make_input,
                                                                const RunOptions& options) {
  using Outputs = std::optional<std::function<Array(size_t)>>;
  if (options.interpret) {
    std::vector<Array> inputs;
    for (size_t i = 0; i < model.graph.inputs().size(); ++i) {
      KILN_ASSIGN_OR_RETURN(Array input, make_input(i));
      inputs.push_back(std::move(input));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Array> outputs, interpret(model.graph, inputs));
    auto held = std::make_shared<std::vector<Array>>(std::move(outputs));
    return Outputs([held](size_t i) { return std::move((*held)[i]); });
  }
  KILN_ASSIGN_OR_RETURN(std::optional<RunBuffers> buffers,
                        run_compiled_model(model.graph.clone(), make_input, options));
  if (!buffers) return Outputs();
  auto held = std::make_shared<RunBuffers>(std::move(*buffers));
  return Outputs([held](size_t i) { return held->output_array(i); });
}

int run_run(const RunOptions& options) {
  Expected<SourceModel> model = load_model_source(options.source, options.compile);
  if (!model) return report(model.status());
  fmt::print("{}\n", model->description);
  // The reference interpreter holds every input in f64, within its own limit; a compiled run
  // encodes each as it is made and checks that all fit in memory.
  if (!model->zoo && (options.interpret || options.check)) {
    if (Status size = check_input_size(model->graph); !size) return report(size);
  }
  Expected<std::map<std::string, Array>> given = load_named_tensors(options.inputs);
  if (!given) return report(given.status());
  std::vector<std::string> random_names;
  Expected<InputMaker> make_input =
      model_input_maker(*model, options.source, std::move(*given), random_names);
  if (!make_input) return report(make_input.status());
  if (!random_names.empty()) {
    fmt::print("random inputs (seed {}): {}\n", options.source.seed, fmt::join(random_names, ", "));
  }
  if (options.interpret && (options.check || options.profile || options.repeat > 0)) {
    return report(
        Status::error("--check, --profile and --repeat apply to compiled runs, not "
                      "to --interpret"));
  }
  Expected<std::optional<std::function<Array(size_t)>>> outputs =
      run_model(*model, *make_input, options);
  if (!outputs) return report(outputs.status());
  if (!*outputs) return 0;  // stopped after a stage, as asked
  Expected<bool> matched = report_outputs(*model, **outputs, !options.interpret, options);
  if (!matched) return report(matched.status());
  if (!*matched) {
    std::fprintf(stderr, "kiln: outputs differ from the expected values beyond tolerance\n");
    return kUserError;
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& parent, Action& action, ModelArgument model) {
  auto run = std::make_shared<RunOptions>();
  CLI::App* command = parent.add_subcommand(
      "run", model == ModelArgument::zoo_preset
                 ? "Compile a preset (the loss graph by default, the inference graph, or the "
                   "training step) and run it on the preset's own inputs; `kiln run zoo:NAME`."
                 : "Compile a model (ONNX file, IR text, or zoo:NAME) for this CPU, run it and "
                   "print its outputs; compare them with expected values if given.");
  add_model_source(command, run->source, model);
  add_inputs(command, run->inputs);
  command->add_option("--expected", run->expected,
                      "Expected outputs, as for --input; the run fails beyond tolerance");
  add_output(command, run->output_file, "Write the outputs to this .npz file");
  command->add_option("--atol", run->atol, "Absolute tolerance against --expected")
      ->capture_default_str();
  command->add_option("--rtol", run->rtol, "Relative tolerance against --expected")
      ->capture_default_str();
  command->add_flag("--interpret", run->interpret,
                    "Run the fp64 reference interpreter instead of compiled code");
  add_check(command, run->check,
            "Compare every kernel's outputs with the reference evaluation of its nodes on the "
            "same inputs; fail naming the first kernel that disagrees");
  add_profile(command, run->profile,
              "Print the time of every kernel, largest first, over the runs after the warm-up "
              "(one, or --repeat N)");
  add_repeat(command, run->repeat,
             "Run N more times after the first (warm-up) run and print the median, min and max "
             "time per run (compile time apart)",
             /*positive=*/false);
  add_compile_flags(command, run->compile);
  on_parsed(command, action, run, run_run);
}

}  // namespace kiln::cli
