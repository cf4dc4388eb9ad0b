#include "compiler/compilation_cache.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <mutex>

#include "codegen/cpu/compile_cache.h"
#include "fusion/partition.h"
#include "ir/printer.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "support/files.h"
#include "target/target.h"

namespace kiln {
namespace {

constexpr std::string_view kEntryTag = "kiln-compilation 1\n";
constexpr std::string_view kCudaEntryTag = "kiln-cuda-compilation 2\n";

// The SHA-256 of the file that holds this code: the executable, or the shared object (the
// Python extension) Kiln was linked into. Computed once per process.
Expected<std::string> binary_identity() {
  static std::once_flag once;
  static Expected<std::string> identity = Status::error("not computed");
  std::call_once(once, [] {
    Dl_info info{};
    std::string path = "/proc/self/exe";
    // The loader names shared objects by absolute path; the main program it may name as it was
    // invoked, which /proc/self/exe resolves.
    if (dladdr(reinterpret_cast<void*>(&binary_identity), &info) != 0 && info.dli_fname &&
        info.dli_fname[0] == '/') {
      path = info.dli_fname;
    }
    Expected<std::string> bytes = read_file(path, int64_t{1} << 31);
    identity = bytes ? Expected<std::string>(codegen::cpu::cache_key("", {}, *bytes))
                     : Expected<std::string>(bytes.status().with_context("Kiln's own binary"));
  });
  return identity;
}

int64_t constant_elements(const Graph& graph) {
  int64_t elements = 0;
  for (const Node* node : graph.nodes()) {
    if (node->op() == Op::constant) elements += node->output(0)->shape().num_elements();
  }
  return elements;
}

std::filesystem::path entry_path(const std::string& key) {
  return kiln_cache_root() / "compilations" / (key + ".bin");
}

// The loop IR of every program kernel of a CPU compilation, in order: program kernel k is the
// kernel of the records that share it.
Expected<std::string> program_kernels_text(const CompiledGraph& compiled) {
  std::string text;
  for (const loop::Kernel* kernel : compiled.program_kernels()) {
    if (kernel == nullptr) return Status::error("a program kernel has no record");
    text += loop::print(*kernel);
  }
  return text;
}

}  // namespace

std::string compile_options_fingerprint(const CompileOptions& o) {
  const fusion::FusionOptions& f = o.fusion;
  std::string text = fmt::format(
      "device {}; deterministic {}; schedule {}; schedule_search {}; pack_weights {}; "
      "channels_last {}; precision {}\n"
      "cpu compiler '{}' flags [{}]\n"
      "cuda architecture '{}'\n"
      "rewrites {} disabled [{}]\n"
      "substitution {} max_expansions {} max_priced {} max_seconds {}\n"
      "fusion {} disabled [{}] max_candidates {} max_group_nodes {} ilp_seconds {} "
      "max_local_bytes {}\n",
      device_kind_name(o.device.kind), o.deterministic, o.schedule,
      loop::search_mode_name(o.schedule_search), o.pack_weights, o.channels_last,
      precision_name(o.precision),
      o.cpu.compiler, fmt::join(o.cpu.flags, " "), o.cuda.architecture, o.rewrites.enabled,
      fmt::join(o.rewrites.disabled, ","), o.substitution.enabled, o.substitution.max_expansions,
      o.substitution.max_priced, o.substitution.max_seconds, fusion::fusion_mode_name(f.mode),
      fmt::join(f.disabled_rules, ","), f.max_candidates, f.max_group_nodes,
      f.ilp_seconds_per_component, f.max_local_bytes);
  return text;
}

Expected<std::optional<std::string>> compilation_key(const Graph& graph,
                                                     const CompileOptions& options) {
  const Target& target = target_of(options);
  if (!target.caches_compilations() || constant_elements(graph) > kMaxCachedConstantElements) {
    return std::optional<std::string>();
  }
  KILN_ASSIGN_OR_RETURN(std::string identity, binary_identity());
  KILN_ASSIGN_OR_RETURN(std::string profile, target.cost_profile_identity(options));
  const std::vector<std::string> parts = {compile_options_fingerprint(options),
                                          std::move(profile)};
  return std::optional<std::string>(
      codegen::cpu::cache_key(identity, parts, print_graph(graph, {.anonymous = true})));
}

std::optional<CachedCompilation> load_compilation(const std::string& key) {
  const std::filesystem::path path = entry_path(key);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  Expected<std::string> bytes = read_file(path.string(), int64_t{1} << 40);
  if (!bytes) return std::nullopt;
  std::string_view rest = *bytes;
  const bool cuda = rest.starts_with(kCudaEntryTag);
  if (!cuda && !rest.starts_with(kEntryTag)) return std::nullopt;
  rest.remove_prefix(cuda ? kCudaEntryTag.size() : kEntryTag.size());
  std::vector<std::string_view> parts;
  while (std::optional<std::string_view> part = next_part(rest)) parts.push_back(*part);
  // CPU: program, loop IR, explanation; GPU: program, source, architecture, cubin, launches,
  // loop IR, explanation.
  if (!rest.empty() || parts.size() != (cuda ? 7u : 3u)) return std::nullopt;
  Expected<runtime::Program> program = runtime::deserialize_program(parts[0]);
  if (!program) return std::nullopt;
  const auto num_kernels = static_cast<size_t>(program->num_kernels);
  CachedCompilation cached;
  cached.explanation = std::string(parts.back());
  if (cuda) {
    Expected<runtime::CudaKernelLaunches> launches = runtime::deserialize_launches(parts[4]);
    if (!launches || launches->size() != num_kernels) return std::nullopt;
    cached.cuda = CudaCompiled{std::string(parts[1]), std::string(parts[3]),
                               std::string(parts[2]), std::move(*launches)};
  }
  Expected<std::vector<loop::Kernel>> kernels =
      loop::parse_kernels(parts[parts.size() - 2], path.string());
  if (!kernels || kernels->size() != num_kernels) return std::nullopt;
  cached.kernels = std::move(*kernels);
  cached.program = std::move(*program);
  touch(path);
  return cached;
}

Status store_compilation(const std::string& key, const Graph& graph,
                         const CompiledGraph& compiled) {
  if (!compiled.program || compiled.last_stage != Stage::codegen) {
    return Status::error("only a complete compilation is cached");
  }
  std::string entry;
  KILN_ASSIGN_OR_RETURN(std::string kernels_text, program_kernels_text(compiled));
  if (const std::optional<CudaCompiled>& cuda = compiled.cuda) {
    entry = kCudaEntryTag;
    append_part(entry, runtime::serialize_program(*compiled.program));
    append_part(entry, cuda->source);
    append_part(entry, cuda->architecture);
    append_part(entry, cuda->cubin);
    append_part(entry, runtime::serialize_launches(cuda->launches));
  } else {
    entry = kEntryTag;
    append_part(entry, runtime::serialize_program(*compiled.program));
  }
  // The kernels' loop IR: what the CPU compiles, and what a GPU entry's compiled model answers
  // allow_in_place from (compiler/in_place.h).
  append_part(entry, kernels_text);
  append_part(entry, fusion::explain_partition(graph, compiled.partition));
  const std::filesystem::path path = entry_path(key);
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  KILN_RETURN_IF_ERROR(write_file_atomically(path, entry));
  prune_least_recently_used(path.parent_path(), kMaxCompilationCacheBytes);
  return Status::ok();
}

}  // namespace kiln
