// What the `kiln` commands share: exit codes, error reports, number formats, how a command
// hands its work to main, and every option that more than one command takes, each defined once
// here (a command adds the ones it takes).
//
// Exit codes: 0 success, 1 user error (bad file, invalid graph, failed evaluation), 2 usage
// error (unknown subcommand or option). Library errors arrive as Status values and are printed
// as "kiln: error: MESSAGE".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/options.h"
#include "driver/model_source.h"
#include "kiln/kiln.h"
#include "support/status.h"
#include "support/text.h"

namespace kiln::cli {

inline constexpr int kUserError = 1;
inline constexpr int kUsageError = 2;

// Prints `status` as an error and returns kUserError.
int report(const Status& status);

std::string with_thousands(int64_t n);                        // "109,512,762"

// Random inputs are made whole before the reference interpreter's own memory limit applies, so
// a graph whose inputs alone exceed that limit is refused up front.
Status check_input_size(const Graph& graph);

// The memory running a graph compiled takes beyond what is allocated already, by part.
struct RunMemory {
  int64_t program = 0;  // the arena and the kernels' state (on a CPU)
  int64_t inputs = 0;   // encoded, as the kernels read them
  int64_t outputs = 0;  // encoded
  int64_t decoded = 0;  // f64 copies: the input being encoded, and what a command decodes

  int64_t total() const { return program + inputs + outputs + decoded; }
};

int64_t f64_bytes(const std::vector<Value*>& values);  // the values as f64 Arrays

// What running `graph` compiled takes with its inputs made and encoded one at a time,
// `program` being its compilation when made (its arena is planned then; before, the inputs
// and outputs alone are known).
RunMemory run_memory(const Graph& graph, const CompiledModel* program);

// Stops a command before it allocates when `memory` exceeds what this machine has free
// (support/memory.h), saying what it needs, by part, and what is free, with `note` when not
// empty: the kernel would otherwise kill it without a word.
Status check_fits_in_memory(const RunMemory& memory, std::string_view note = "");

// Checks every kernel of `model` against the reference on `inputs`: the largest absolute
// error, or the error naming the first kernel that disagrees.
Expected<double> check_kernels(CompiledModel& model, std::span<const Array> inputs);

// A command's work, run once the command line parsed.
using Action = std::function<int()>;

// When `command` is the one parsed, `action` becomes run(*options).
template <typename Options>
void on_parsed(CLI::App* command, Action& action, std::shared_ptr<Options> options,
               int (*run)(const Options&)) {
  command->callback([&action, options, run] { action = [options, run] { return run(*options); }; });
}

// --- The model a command works on -------------------------------------------------------------

// What the model argument names.
enum class ModelArgument {
  file,         // a model file: .onnx, or IR text
  file_or_zoo,  // a model file, or zoo:NAME
  zoo_preset,   // a preset's name (the zoo's own commands): the model is zoo:NAME
};

// The model argument, and for file_or_zoo and zoo_preset the options of a source
// (driver/model_source.h): --seed, --freeze, --shape (files), the preset's sizes and graph.
void add_model_argument(CLI::App* command, std::string& spec, ModelArgument kind);
void add_model_source(CLI::App* command, ModelSourceOptions& source, ModelArgument kind);

// A preset's sizes (--batch, --seq-len, --image-size, --nodes, --avg-degree).
void add_zoo_sizes(CLI::App* command, ModelOptions& sizes);
// --seed, with what it seeds.
void add_seed(CLI::App* command, uint64_t& seed, std::string help);
// Which of a preset's graphs: --inference, --train, --optimizer and, with `without_loss`, the
// step without its loss. `allow_no_optimizer`: --optimizer none (the gradients) is allowed.
void add_graph_choice(CLI::App* command, ZooGraphChoice& choice, bool without_loss,
                      bool allow_no_optimizer);
// --optimizer alone (sgd, adam, adamw, and none when allowed).
void add_optimizer(CLI::App* command, std::string& optimizer, bool allow_none);
void add_freeze(CLI::App* command, bool& freeze);
void add_shapes(CLI::App* command, std::vector<std::string>& shapes);
// --input NAME=FILE or FILE.npz (repeatable): a model's inputs, the rest random.
void add_inputs(CLI::App* command, std::vector<std::string>& inputs);

// --- Compiling --------------------------------------------------------------------------------

// The command-line form of CompileOptions.
struct CompileFlags {
  std::string device = "cpu";
  bool deterministic = false;
  std::string precision = "fp32";
  bool pack_weights = true;
  bool channels_last = true;
  bool reuse_compilations = true;
  std::string fusion = "ilp";
  std::string schedule_search = "off";
  std::vector<std::string> disabled_rules;
  bool rewrites = true;
  std::vector<std::string> disabled_rewrites;
  bool substitute = SubstitutionOptions{}.enabled;
  int substitute_max_expansions = SubstitutionOptions{}.max_expansions;
  int substitute_max_priced = SubstitutionOptions{}.max_priced;
  double substitute_max_seconds = SubstitutionOptions{}.max_seconds;
  std::vector<std::string> dump_after;
  bool time_stages = false;
  std::string stop_after;
};

// --fusion, --disable-rule, --schedule-search, then add_device_flag, add_rewrite_flags and add_pipeline_flags.
void add_compile_flags(CLI::App* command, CompileFlags& flags);
// --device: cpu, cuda or cuda-mapping-on-cpu; --deterministic; --precision.
void add_device_flag(CLI::App* command, CompileFlags& flags);
// --rewrites, --disable-rewrite and the substitution search's flags.
void add_rewrite_flags(CLI::App* command, CompileFlags& flags);
// --dump-after, --time-stages, --stop-after.
void add_pipeline_flags(CLI::App* command, CompileFlags& flags);
Expected<CompileOptions> compile_options_from(const CompileFlags& flags);
// The model `source` names, built for the compilation `flags` ask for: a training step in fp16
// scales its loss (ZooGraphChoice::loss_scaling).
Expected<SourceModel> load_model_source(ModelSourceOptions source, const CompileFlags& flags);

// --- Running ----------------------------------------------------------------------------------

void add_check(CLI::App* command, bool& check, std::string help);
void add_profile(CLI::App* command, bool& profile, std::string help);
void add_repeat(CLI::App* command, int& repeat, std::string help, bool positive);
// -o/--output: a file or folder to write.
CLI::Option* add_output(CLI::App* command, std::string& path, std::string help);

}  // namespace kiln::cli
