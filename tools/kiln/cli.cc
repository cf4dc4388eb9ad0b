#include "cli.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "fusion/rules.h"
#include "interp/interpreter.h"
#include "loop/schedule_search.h"
#include "passes/pass_manager.h"
#include "passes/rewrite_graph.h"
#include "support/memory.h"

namespace kiln::cli {

int report(const Status& status) {
  std::fprintf(stderr, "kiln: error: %s\n", status.message().c_str());
  return kUserError;
}

std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n);
  for (auto i = static_cast<ptrdiff_t>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(digits.begin() + i, ',');
  }
  return digits;
}

Status check_input_size(const Graph& graph) {
  int64_t total = 0;
  for (const Value* input : graph.inputs()) total += input->shape().num_elements();
  const int64_t limit = InterpreterOptions{}.max_live_elements;
  if (total > limit) {
    return Status::errorf(
        "the graph's inputs hold {} elements, more than the reference "
        "interpreter's limit of {}",
        total, limit);
  }
  return Status::ok();
}

int64_t f64_bytes(const std::vector<Value*>& values) {
  int64_t elements = 0;
  for (const Value* value : values) elements += value->shape().num_elements();
  return elements * int64_t{sizeof(double)};
}

namespace {

int64_t encoded_bytes(const Value& value) {
  return value.shape().num_elements() * dtype_size_bytes(value.dtype());
}

}  // namespace

RunMemory run_memory(const Graph& graph, const CompiledModel* program) {
  RunMemory memory;
  for (const Value* input : graph.inputs()) {
    memory.inputs += encoded_bytes(*input);
    // The input being made, in f64, before it is encoded.
    memory.decoded =
        std::max(memory.decoded, input->shape().num_elements() * int64_t{sizeof(double)});
  }
  for (const Value* output : graph.outputs()) memory.outputs += encoded_bytes(*output);
  if (program != nullptr && program->compiled().program && !program->compiled().cuda) {
    memory.program = program->program().arena_bytes + program->program().state_bytes;
  }
  return memory;
}

Status check_fits_in_memory(const RunMemory& memory, std::string_view note) {
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available || memory.total() <= *available) return Status::ok();
  std::string parts = fmt::format("inputs {}, outputs {}", format_bytes(memory.inputs),
                                  format_bytes(memory.outputs));
  if (memory.program > 0) parts = fmt::format("arena {}, {}", format_bytes(memory.program), parts);
  if (memory.decoded > 0) parts += fmt::format(", f64 copies {}", format_bytes(memory.decoded));
  return Status::error(ErrorCode::resource_exhausted,
                       fmt::format("the run needs {} ({}) and this machine has {} available{}",
                                   format_bytes(memory.total()), parts, format_bytes(*available),
                                   note.empty() ? "" : fmt::format(" ({})", note)));
}

Expected<double> check_kernels(CompiledModel& model, std::span<const Array> inputs) {
  KILN_ASSIGN_OR_RETURN(CheckReport report, model.check(inputs));
  if (!report.ok()) {
    const KernelCheck& bad = report.kernels.back();
    return Status::errorf("check: step {} ({}) disagrees with the reference: {}", bad.step,
                          bad.label, bad.mismatch);
  }
  double worst = 0;
  for (const KernelCheck& kernel : report.kernels) worst = std::max(worst, kernel.max_abs_error);
  return worst;
}

void add_model_argument(CLI::App* command, std::string& spec, ModelArgument kind) {
  switch (kind) {
    case ModelArgument::file:
      command->add_option("model", spec, "Model file (.onnx, or IR text)")->required();
      return;
    case ModelArgument::file_or_zoo:
      command
          ->add_option("model", spec,
                       "Model: a file (.onnx, or IR text), or zoo:NAME for a preset of the model "
                       "zoo (kiln zoo lists them)")
          ->required();
      return;
    case ModelArgument::zoo_preset:
      command->add_option("name", spec, "Model preset (kiln zoo lists them)")
          ->required()
          ->transform([](const std::string& name) { return "zoo:" + name; });
      return;
  }
}

void add_model_source(CLI::App* command, ModelSourceOptions& source, ModelArgument kind) {
  add_model_argument(command, source.spec, kind);
  if (kind == ModelArgument::file_or_zoo) {
    add_shapes(command, source.shapes);
    add_seed(command, source.seed,
             "Seed of a model file's random inputs, or of a zoo preset's weights and data");
  } else {
    add_seed(command, source.seed, "Seed of the weights and data");
  }
  add_zoo_sizes(command, source.zoo);
  add_graph_choice(command, source.graph, /*without_loss=*/true, /*allow_no_optimizer=*/true);
  add_freeze(command, source.freeze);
  command->get_option("--freeze")->excludes("--train");
  if (kind == ModelArgument::file_or_zoo) {
    command
        ->add_flag("--weights-as-inputs", source.weights_as_inputs,
                   "A model file's weights (an ONNX model's initializers) as graph inputs after "
                   "its data, to swap weights between runs; by default they are compiled in as "
                   "constants, as ONNX Runtime treats them, so that what is computed from them "
                   "alone (a transposed weight) is computed once, when compiling")
        ->excludes("--freeze");
  }
}

void add_zoo_sizes(CLI::App* command, ModelOptions& sizes) {
  const std::string group = "Zoo preset sizes (default: the preset's)";
  command->add_option("--batch", sizes.batch, "Batch size")
      ->check(CLI::PositiveNumber)
      ->group(group);
  command->add_option("--seq-len", sizes.seq_len, "Sequence length (bert, xml-cnn)")
      ->check(CLI::PositiveNumber)
      ->group(group);
  command->add_option("--image-size", sizes.image_size, "Image height and width (vit, resnet)")
      ->check(CLI::PositiveNumber)
      ->group(group);
  command->add_option("--nodes", sizes.nodes, "Graph nodes (gcn)")
      ->check(CLI::PositiveNumber)
      ->group(group);
  command->add_option("--avg-degree", sizes.avg_degree, "Average node degree (gcn)")
      ->check(CLI::NonNegativeNumber)
      ->group(group);
}

void add_seed(CLI::App* command, uint64_t& seed, std::string help) {
  command->add_option("--seed", seed, std::move(help))->capture_default_str();
}

void add_graph_choice(CLI::App* command, ZooGraphChoice& choice, bool without_loss,
                      bool allow_no_optimizer) {
  command->add_flag("--inference", choice.inference, "The inference graph (logits, no loss)");
  command->add_flag("--train", choice.train, "The training step (forward, backward, update)")
      ->excludes("--inference");
  add_optimizer(command, choice.optimizer, allow_no_optimizer);
  if (without_loss) {
    command
        ->add_flag("--without-loss", choice.without_loss,
                   "With --train: the step without its loss output (loss elimination), as a "
                   "training loop runs it between the steps that log the loss")
        ->needs("--train");
  }
}

void add_optimizer(CLI::App* command, std::string& optimizer, bool allow_none) {
  std::vector<std::string> names = {"sgd", "adam", "adamw"};
  std::string help = "sgd (momentum 0.9), adam, adamw (weight decay 0.01)";
  if (allow_none) {
    names.emplace_back("none");
    help = "With --train: " + help + ", or none (the step returns the gradients)";
  }
  command->add_option("--optimizer", optimizer, help)
      ->capture_default_str()
      ->check(CLI::IsMember(names));
}

void add_freeze(CLI::App* command, bool& freeze) {
  command->add_flag("--freeze", freeze,
                    "Compile a zoo preset's parameters and state in as constants, so that what "
                    "is computed from them alone (a concatenation of weights made by a "
                    "substitution) is computed once, when compiling; the model's inputs are "
                    "then its data (a model file's weights are constants already, unless "
                    "--weights-as-inputs)");
}

void add_inputs(CLI::App* command, std::vector<std::string>& inputs) {
  command->add_option("--input", inputs,
                      "Input tensor: NAME=FILE (.npy or TensorProto .pb) or FILE.npz; inputs "
                      "not given are random");
}

void add_shapes(CLI::App* command, std::vector<std::string>& shapes) {
  command->add_option("--shape", shapes,
                      "Static shape of an ONNX input with symbolic dimensions: NAME=1x128");
}

void add_compile_flags(CLI::App* command, CompileFlags& flags) {
  std::vector<std::string> rules;
  std::string rule_help = "A fusion rule not to apply, for bisecting a wrong result (repeatable):";
  for (const fusion::FusionRule& rule : fusion::fusion_rules()) {
    rules.emplace_back(rule.name);
    rule_help += fmt::format(" {} ({});", rule.name, rule.summary);
  }
  command
      ->add_option("--fusion", flags.fusion,
                   "Which nodes share a kernel: off (one kernel per node), greedy (merge along "
                   "edges while the cost model gains), ilp (the partition of least estimated "
                   "time, by integer programming)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "greedy", "ilp"}));
  command->add_option("--disable-rule", flags.disabled_rules, rule_help)
      ->check(CLI::IsMember(rules));
  command
      ->add_option("--schedule-search", flags.schedule_search,
                   "On a CPU, how each kernel's schedule is chosen: off (the default rules), "
                   "quick or full (candidate schedules ranked by a cost model, the best 3 or 12 "
                   "compiled, checked and timed here, the fastest kept when it beats the "
                   "default; about 10 s or 120 s per model at most, each kernel searched once "
                   "per machine and cached; loop/schedule_search.h)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "quick", "full"}));
  command
      ->add_flag("--pack-weights,!--no-pack-weights", flags.pack_weights,
                 "On a CPU, keep a constant weight packed in oneDNN's layout for this machine "
                 "for the products with few rows that read it, packed on the first run "
                 "(default), instead of repacking it in every call")
      ->capture_default_str();
  command
      ->add_flag("--channels-last,!--no-channels-last", flags.channels_last,
                 "On a CPU, compute an inference graph's f32 convolutions with their images' "
                 "channels last, through oneDNN's direct convolutions, and the elementwise ops "
                 "between them in that layout (default), instead of channels first as im2col "
                 "and gemm")
      ->capture_default_str();
  command
      ->add_flag("--reuse-compilations,!--no-reuse-compilations", flags.reuse_compilations,
                 "For run, bench and zoo train: load the model from the compilation cache when "
                 "this Kiln compiled it before with the same options (the summary then lists no "
                 "graph stages or partition), and store the compilation there otherwise "
                 "(default; compiler/compilation_cache.h; for the CPU and the GPU). compile, "
                 "explain, --check, --time-stages, --dump-after and --stop-after always compile "
                 "afresh, since they show what the cache does not keep")
      ->capture_default_str();
  add_device_flag(command, flags);
  add_rewrite_flags(command, flags);
  add_pipeline_flags(command, flags);
}

void add_device_flag(CLI::App* command, CompileFlags& flags) {
  command
      ->add_option("--device", flags.device,
                   "What the kernels are compiled for: cpu (this machine); cuda or cuda:N "
                   "(NVIDIA GPUs: CUDA C compiled by NVRTC for sm_90, run through the CUDA "
                   "driver on this machine's GPU N, 0 by default); cuda-mapping-on-cpu (the GPU "
                   "mapping run on this CPU, to check it)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](const std::string& name) {
            Expected<Device> device = parse_device(name);
            return device ? std::string() : device.status().message();
          },
          "DEVICE"));
  command->add_flag("--deterministic", flags.deterministic,
                    "On a GPU, no atomic adds: a scatter's or sparse product's gradient adds in "
                    "order, so that every run gives the same bits (slower; by default such "
                    "sums add atomically, in any order, and differ by rounding between runs)");
  command
      ->add_option("--precision", flags.precision,
                   "The precision the model computes in: fp32 (as written); bf16 or fp16 (mixed "
                   "precision, as torch.autocast: matmuls read bf16 or fp16 copies of their "
                   "operands and accumulate in f32, and on the CPU so do convolutions (on a "
                   "GPU they stay f32 for now); sums, softmax, normalizations, exp, log and "
                   "losses compute in f32; elementwise ops follow "
                   "their operands; inputs, outputs, parameters and optimizer state keep their "
                   "dtypes); tf32 (f32 dtypes; on a GPU, f32 matmuls run on tensor cores in TF32 "
                   "through cuBLASLt, as torch.backends.cuda.matmul.allow_tf32; on the CPU as "
                   "fp32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
}

void add_rewrite_flags(CLI::App* command, CompileFlags& flags) {
  std::vector<std::string> rewrites;
  std::string rewrite_help = "A graph rewrite not to run before partitioning (repeatable):";
  for (std::string_view name : rewrite_names()) {
    rewrites.emplace_back(name);
    const std::string_view summary =
        name == kDecomposeRewrite
            ? "write a kind of composite as primitives where the estimate says it pays (on a "
              "CPU; on a GPU composites stay whole)"
        : name == kCanonicalizeRewrite
            ? "recognize what exporters write (a layer norm, GELU or softmax spelled in "
              "primitives, pow(x, 2), a division by a constant) and rewrite it into Kiln's "
              "composites and cheaper forms, by the canonical rules"
            : find_pass(name)->summary;
    rewrite_help += fmt::format(" {} ({});", name, summary);
  }
  command
      ->add_flag("--rewrites,!--no-rewrites", flags.rewrites,
                 "Run the graph rewrites before partitioning (default), or not")
      ->capture_default_str();
  command->add_option("--disable-rewrite", flags.disabled_rewrites, rewrite_help)
      ->check(CLI::IsMember(rewrites));
  command
      ->add_flag("--substitute,!--no-substitute", flags.substitute,
                 "Search the rewrites by the shipped rules proved at build time that lower the "
                 "estimated time after fusion (TASO's search; on by default, not with "
                 "--fusion=off)")
      ->capture_default_str();
  command
      ->add_option("--substitute-max-expansions", flags.substitute_max_expansions,
                   "With --substitute: stop after expanding this many graphs")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  command
      ->add_option("--substitute-max-priced", flags.substitute_max_priced,
                   "With --substitute: stop after pricing this many graphs (each a partition of "
                   "the whole graph, so the budget's time grows with the graph; matches alike, "
                   "such as the same rewrite in every layer, are priced once; 0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  command
      ->add_option("--substitute-max-seconds", flags.substitute_max_seconds,
                   "With --substitute: the search's time budget in seconds, whatever the graph "
                   "(0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
}

void add_pipeline_flags(CLI::App* command, CompileFlags& flags) {
  std::vector<std::string> stages;
  for (const Stage stage : kStages) stages.emplace_back(stage_name(stage));
  const std::string names = fmt::format("{}", fmt::join(stages, ", "));
  const std::string group = "Compiler pipeline";
  stages.emplace_back("all");
  command
      ->add_option("--dump-after", flags.dump_after,
                   "Print the result of a stage of the compiler pipeline to standard error "
                   "(repeatable; all for every stage): the graph, the partition, the loop IR, "
                   "the program or the generated code. Stages: " +
                       names)
      ->check(CLI::IsMember(stages))
      ->group(group);
  command
      ->add_flag("--time-stages", flags.time_stages,
                 "Print the time of every stage of the compiler pipeline to standard error")
      ->group(group);
  stages.pop_back();
  command
      ->add_option("--stop-after", flags.stop_after,
                   "Stop the compiler pipeline after this stage (with --dump-after, to look at "
                   "a stage's result without waiting for the rest)")
      ->check(CLI::IsMember(stages))
      ->group(group);
}

Expected<SourceModel> load_model_source(ModelSourceOptions source, const CompileFlags& flags) {
  source.graph.loss_scaling = flags.precision == "fp16";
  return kiln::load_model_source(source);
}

Expected<CompileOptions> compile_options_from(const CompileFlags& flags) {
  CompileOptions options;
  KILN_ASSIGN_OR_RETURN(options.device, parse_device(flags.device));
  options.deterministic = flags.deterministic;
  KILN_ASSIGN_OR_RETURN(options.precision, parse_precision(flags.precision));
  options.pack_weights = flags.pack_weights;
  options.channels_last = flags.channels_last;
  options.reuse_compilations = flags.reuse_compilations;
  KILN_ASSIGN_OR_RETURN(options.fusion.mode, fusion::parse_fusion_mode(flags.fusion));
  KILN_ASSIGN_OR_RETURN(options.schedule_search, loop::parse_search_mode(flags.schedule_search));
  options.fusion.disabled_rules.insert(flags.disabled_rules.begin(), flags.disabled_rules.end());
  options.rewrites.enabled = flags.rewrites;
  options.rewrites.disabled.insert(flags.disabled_rewrites.begin(), flags.disabled_rewrites.end());
  options.substitution = {.enabled = flags.substitute,
                          .max_expansions = flags.substitute_max_expansions,
                          .max_priced = flags.substitute_max_priced,
                          .max_seconds = flags.substitute_max_seconds};
  for (const std::string& name : flags.dump_after) {
    if (name == "all") {
      options.pipeline.dump_after.insert(kStages.begin(), kStages.end());
      continue;
    }
    KILN_ASSIGN_OR_RETURN(const Stage stage, parse_stage(name));
    options.pipeline.dump_after.insert(stage);
  }
  options.pipeline.time_stages = flags.time_stages;
  if (!flags.stop_after.empty()) {
    KILN_ASSIGN_OR_RETURN(options.pipeline.stop_after, parse_stage(flags.stop_after));
  }
  return options;
}

void add_check(CLI::App* command, bool& check, std::string help) {
  command->add_flag("--check", check, std::move(help));
}

void add_profile(CLI::App* command, bool& profile, std::string help) {
  command->add_flag("--profile", profile, std::move(help));
}

void add_repeat(CLI::App* command, int& repeat, std::string help, bool positive) {
  command->add_option("--repeat", repeat, std::move(help))
      ->capture_default_str()
      ->check(positive ? CLI::PositiveNumber : CLI::NonNegativeNumber);
}

CLI::Option* add_output(CLI::App* command, std::string& path, std::string help) {
  return command->add_option("--output,-o", path, std::move(help));
}

}  // namespace kiln::cli
