// kiln zoo: the model zoo's presets listed, shown, exported, dumped and trained; its run,
// compile, explain and bench are the top-level commands on zoo:NAME, and compare is in
// cmd_compare.cc.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "commands.h"
#include "compiler/training_loop.h"
#include "frontend/onnx_export.h"
#include "frontend/tensor_io.h"
#include "interp/interpreter.h"
#include "ir/printer.h"
#include "kiln/kiln.h"
#include "models/model.h"
#include "report.h"

namespace kiln::cli {
namespace {

int run_zoo_list() {
  fmt::print("{:<14} {:>13} {:>12} {:>12}  {}\n", "model", "parameters", "fwd GFLOP", "step GFLOP",
             "architecture and default sizes");
  for (const PresetInfo& preset : zoo_presets()) {
    Expected<ModelInstance> model = build_model(preset.name);
    if (!model) return report(model.status());
    Expected<TrainingStep> step = build_training_step(*model, Optimizer::adam());
    if (!step) return report(step.status());
    fmt::print("{:<14} {:>13} {:>12.4g} {:>12.4g}  {}\n", preset.name,
               with_thousands(model->parameter_count()), graph_flops(model->loss.graph) * 1e-9,
               graph_flops(step->graph) * 1e-9, preset.description);
  }
  fmt::print(
      "fwd: the forward pass with the loss; step: forward, backward and Adam update, "
      "counted on the training-step graph\n");
  return 0;
}

// A preset command's options: the preset (as a model source) and what the command adds.
struct ZooOptions {
  ModelSourceOptions source;
  std::string output_file;     // export, dump
  TrainingLoopOptions loop;    // train
  bool eliminate_loss = true;  // train
  CompileFlags compile;        // train
};

// The preset a zoo command names, at its sizes and seed.
Expected<ModelInstance> build_preset(const ModelSourceOptions& source) {
  return kiln::build_preset(*zoo_preset_of(source.spec), source);
}

// The training step: forward, backward and the optimizer's update in one graph.
int show_step(const ZooOptions& options, const ModelInstance& model) {
  const std::string& name = options.source.graph.optimizer;
  Expected<std::optional<Optimizer>> optimizer = parse_optimizer(name);
  if (!optimizer) return report(optimizer.status());
  Expected<TrainingStep> step = build_training_step(model, *optimizer);
  if (!step) return report(step.status());
  fmt::print(
      "// {} training step ({}): inputs after the first {} are {}; outputs: the loss, then "
      "per parameter its {}{}\n",
      model.preset, name, step->num_forward_inputs,
      !*optimizer                        ? "none"
      : (*optimizer)->needs_step_count() ? "the learning rate, the step count and the state"
                                         : "the learning rate and the state",
      *optimizer ? "updated value" : "gradient", *optimizer ? ", then the updated state" : "");
  fmt::print("{}", print_graph(step->graph));
  return 0;
}

int run_zoo_show(const ZooOptions& options) {
  Expected<ModelInstance> model = build_preset(options.source);
  if (!model) return report(model.status());
  if (options.source.graph.train) return show_step(options, *model);
  const ModelGraph& graph = options.source.graph.inference ? model->inference : model->loss;
  std::vector<std::string> data;
  size_t weights = 0;
  for (size_t i = 0; i < graph.input_kinds.size(); ++i) {
    if (graph.input_kinds[i] == InputKind::data) {
      data.push_back(print_value_ref(*graph.graph.inputs()[i]));
    } else {
      ++weights;
    }
  }
  fmt::print("// {}: data inputs {}; the other {} inputs are parameters and state\n", model->preset,
             fmt::join(data, ", "), weights);
  fmt::print("{}", print_graph(graph.graph));
  return 0;
}

int run_zoo_export(const ZooOptions& options) {
  ModelSourceOptions portable = options.source;
  portable.zoo.portable = true;
  Expected<ModelInstance> model = build_preset(portable);
  if (!model) return report(model.status());
  Status written = export_inference_onnx(*model, options.output_file);
  if (!written) return report(written);
  fmt::print("wrote {}: {} inference graph, {} parameters (ONNX opset {})\n", options.output_file,
             model->preset, with_thousands(model->parameter_count()), kOnnxExportOpset);
  return 0;
}

// Every input of the loss graph by name, its outputs as output/loss and output/logits, and each
// parameter's gradient as grad/NAME, for comparing with another implementation (tests/zoo/).
int run_zoo_dump(const ZooOptions& options) {
  Expected<ModelInstance> model = build_preset(options.source);
  if (!model) return report(model.status());
  Expected<std::vector<Array>> inputs = model->input_values(model->loss);
  if (!inputs) return report(inputs.status());
  Expected<std::vector<Array>> outputs = interpret(model->loss.graph, *inputs);
  if (!outputs) return report(outputs.status());
  Expected<TrainingStep> step = build_training_step(*model, std::nullopt);
  if (!step) return report(step.status());
  Expected<std::vector<Array>> gradients = interpret(step->graph, *inputs);
  if (!gradients) return report(gradients.status());
  const double loss = (*outputs)[0][0];
  std::vector<NamedArray> entries;
  for (size_t i = 0; i < inputs->size(); ++i) {
    entries.push_back({model->loss.graph.inputs()[i]->name(), std::move((*inputs)[i])});
  }
  entries.push_back({"output/loss", std::move((*outputs)[0])});
  entries.push_back({"output/logits", std::move((*outputs)[1])});
  for (size_t i = 0; i < step->parameters.size(); ++i) {
    entries.push_back({"grad/" + step->parameters[i], std::move((*gradients)[i + 1])});
  }
  Status written = write_npz(options.output_file, entries);
  if (!written) return report(written);
  fmt::print("wrote {}: {} loss-graph inputs and outputs; loss {}\n", options.output_file,
             model->preset, loss);
  return 0;
}

// "median 1.23 ms over 9 steps", the first step (page faults, thread start-up) left out when
// it is among them.
std::string describe_steps(std::vector<double> seconds, bool first_included) {
  if (first_included && !seconds.empty()) seconds.erase(seconds.begin());
  if (seconds.empty()) return "none timed";
  std::sort(seconds.begin(), seconds.end());
  return fmt::format("median {} over {}", format_seconds(seconds[seconds.size() / 2]),
                     count_noun(seconds.size(), "step"));
}

// Compiles a preset's training step with and without its loss and runs a training loop over it
// (compiler/training_loop.h) on the preset's fixed batch: the loss printed on the steps that
// compute it, then the time of the steps with and without the loss.
int run_zoo_train(const ZooOptions& options) {
  ModelSourceOptions step_source = options.source;
  step_source.graph.train = true;
  Expected<SourceModel> model = load_model_source(step_source, options.compile);
  if (!model) return report(model.status());
  fmt::print("{}\n", model->description);
  std::vector<std::string> unused;
  Expected<InputMaker> make_input = model_input_maker(*model, step_source, {}, unused);
  if (!make_input) return report(make_input.status());
  Expected<CompileOptions> compile_options = compile_options_from(options.compile);
  if (!compile_options) return report(compile_options.status());
  if (Status fits = check_fits_in_memory(run_memory(model->graph, nullptr)); !fits) {
    return report(fits);
  }
  Expected<CompiledTrainingStep> step =
      Compiler(*compile_options)
          .compile_training_step(model->graph.clone(), options.eliminate_loss);
  if (!step) return report(step.status());
  const int full_kernels = kernel_calls(step->full_step().compiled());
  if (CompiledModel* loss_free = step->loss_free_step()) {
    fmt::print(
        "loss elimination: the steps that do not log the loss run {} fewer, in {} "
        "(the full step: {})\n",
        count_noun(static_cast<size_t>(step->loss_nodes_eliminated()), "node"),
        count_noun(static_cast<size_t>(kernel_calls(loss_free->compiled())), "kernel"),
        full_kernels);
  } else {
    fmt::print("loss elimination off: every step computes the loss; {} kernels\n", full_kernels);
  }
  const CompiledModel& full = step->full_step();
  if (Status fits = check_fits_in_memory(run_memory(full.graph(), &full)); !fits) {
    return report(fits);
  }
  Expected<TrainingLoopResult> result = run_training_loop(*step, *make_input, options.loop);
  if (!result) return report(result.status());
  for (const LoggedLoss& logged : result->losses) {
    fmt::print("step {:>{}}  loss {:.6g}\n", logged.step,
               fmt::formatted_size("{}", options.loop.steps), logged.loss);
  }
  const bool first_logs_loss = options.loop.loss_every == 1 || options.loop.steps == 1;
  fmt::print("time per step (the first left out): with the loss {}; without {}\n",
             describe_steps(result->seconds_with_loss, first_logs_loss),
             describe_steps(result->seconds_without_loss, !first_logs_loss));
  return 0;
}

// A zoo subcommand that builds a preset: its name, sizes and seed.
CLI::App* add_preset_command(CLI::App* zoo, const std::string& name, const std::string& help,
                             ZooOptions& options) {
  CLI::App* command = zoo->add_subcommand(name, help);
  add_model_argument(command, options.source.spec, ModelArgument::zoo_preset);
  add_seed(command, options.source.seed, "Seed of the weights and data");
  add_zoo_sizes(command, options.source.zoo);
  return command;
}

}  // namespace

void add_zoo_commands(CLI::App& app, Action& action) {
  CLI::App* zoo = app.add_subcommand(
      "zoo",
      "List the model zoo's presets with parameter counts and flops, or build one: print "
      "its graph, export it to ONNX, or dump its weights, data and outputs.");
  zoo->require_subcommand(0, 1);
  zoo->callback([&action] {
    if (!action) action = run_zoo_list;
  });

  auto show = std::make_shared<ZooOptions>();
  CLI::App* show_cmd = add_preset_command(
      zoo, "show",
      "Print a preset's graph in IR text: the forward pass with the loss (default), "
      "the inference graph, or the training step.",
      *show);
  add_graph_choice(show_cmd, show->source.graph, /*without_loss=*/false,
                   /*allow_no_optimizer=*/true);
  on_parsed(show_cmd, action, show, run_zoo_show);

  add_run_command(*zoo, action, ModelArgument::zoo_preset);
  add_compile_commands(*zoo, action, ModelArgument::zoo_preset);
  add_compare_command(*zoo, action);

  auto train = std::make_shared<ZooOptions>();
  CLI::App* train_cmd = add_preset_command(
      zoo, "train",
      "Compile a preset's training step with and without its loss and run a "
      "training loop on the preset's fixed batch: each step's updated weights and "
      "optimizer state feed the next; the loss is computed (and printed) every "
      "--loss-every steps and on the last, and the other steps run the loss-free "
      "step.",
      *train);
  add_optimizer(train_cmd, train->source.graph.optimizer, /*allow_none=*/false);
  train_cmd->add_option("--steps", train->loop.steps, "Training steps to run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  train_cmd->add_option("--loss-every", train->loop.loss_every, "Compute the loss every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  train_cmd->add_flag(
      "--loss-elimination,!--no-loss-elimination", train->eliminate_loss,
      "Run the steps that do not log the loss without computing it (on by default)");
  add_compile_flags(train_cmd, train->compile);
  on_parsed(train_cmd, action, train, run_zoo_train);

  auto exported = std::make_shared<ZooOptions>();
  CLI::App* export_cmd = add_preset_command(
      zoo, "export", "Write a preset's inference graph as ONNX, parameters as initializers.",
      *exported);
  add_output(export_cmd, exported->output_file, "ONNX file to write")->required();
  on_parsed(export_cmd, action, exported, run_zoo_export);

  add_bench_command(*zoo, action, ModelArgument::zoo_preset);

  auto dump = std::make_shared<ZooOptions>();
  CLI::App* dump_cmd = add_preset_command(
      zoo, "dump",
      "Write a preset's loss-graph inputs (parameters and data, by name) and its "
      "outputs (output/loss, output/logits from the reference interpreter) to an "
      ".npz file, for cross-checking with another implementation.",
      *dump);
  add_output(dump_cmd, dump->output_file, ".npz file to write")->required();
  on_parsed(dump_cmd, action, dump, run_zoo_dump);
}

}  // namespace kiln::cli
