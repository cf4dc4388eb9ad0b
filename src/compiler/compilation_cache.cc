#include "compiler/compilation_cache.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <filesystem>
#include <mutex>

#include "codegen/cpu/compile_cache.h"
#include "cost/device_profile.h"
#include "fusion/partition.h"
#include "ir/printer.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "support/files.h"

namespace kiln {
namespace {

constexpr std::string_view kEntryTag = "kiln-compilation 1\n";

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

// "<size>\n<bytes>", so that any bytes may follow one another.
void append_part(std::string& entry, std::string_view part) {
  entry += fmt::format("{}\n", part.size());
  entry.append(part);
}

std::optional<std::string_view> next_part(std::string_view& rest) {
  const size_t newline = rest.find('\n');
  if (newline == std::string_view::npos) return std::nullopt;
  size_t size = 0;
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + newline, size);
  if (error != std::errc() || end != rest.data() + newline || size > rest.size() - newline - 1) {
    return std::nullopt;
  }
  std::string_view part = rest.substr(newline + 1, size);
  rest.remove_prefix(newline + 1 + size);
  return part;
}

}  // namespace

std::string compile_options_fingerprint(const CompileOptions& o) {
  const fusion::FusionOptions& f = o.fusion;
  std::string text = fmt::format(
      "device {}; deterministic {}; schedule {}; pack_weights {}\n"
      "cpu compiler '{}' flags [{}]\n"
      "rewrites {} disabled [{}]\n"
      "substitution {} max_expansions {} max_priced {} max_seconds {}\n"
      "fusion {} disabled [{}] max_candidates {} max_group_nodes {} ilp_seconds {} "
      "max_local_bytes {}\n",
      static_cast<int>(o.device), o.deterministic, o.schedule, o.pack_weights, o.cpu.compiler,
      fmt::join(o.cpu.flags, " "), o.rewrites.enabled, fmt::join(o.rewrites.disabled, ","),
      o.substitution.enabled, o.substitution.max_expansions,
      o.substitution.max_priced, o.substitution.max_seconds,
      fusion::fusion_mode_name(f.mode), fmt::join(f.disabled_rules, ","), f.max_candidates,
      f.max_group_nodes, f.ilp_seconds_per_component, f.max_local_bytes);
  return text;
}

Expected<std::optional<std::string>> compilation_key(const Graph& graph,
                                                     const CompileOptions& options) {
  if (options.device != Device::cpu || constant_elements(graph) > kMaxCachedConstantElements) {
    return std::optional<std::string>();
  }
  KILN_ASSIGN_OR_RETURN(std::string identity, binary_identity());
  cost::DeviceProfile profile;
  if (options.fusion.profile) {
    profile = *options.fusion.profile;
  } else {
    KILN_ASSIGN_OR_RETURN(profile, cost::host_device_profile());
  }
  const std::vector<std::string> parts = {compile_options_fingerprint(options),
                                          cost::profile_to_json(profile)};
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
  if (!rest.starts_with(kEntryTag)) return std::nullopt;
  rest.remove_prefix(kEntryTag.size());
  const std::optional<std::string_view> program = next_part(rest);
  const std::optional<std::string_view> kernels = next_part(rest);
  const std::optional<std::string_view> explanation = next_part(rest);
  if (!program || !kernels || !explanation || !rest.empty()) return std::nullopt;
  Expected<runtime::Program> parsed_program = runtime::deserialize_program(*program);
  Expected<std::vector<loop::Kernel>> parsed_kernels = loop::parse_kernels(*kernels, path.string());
  if (!parsed_program || !parsed_kernels ||
      parsed_kernels->size() != static_cast<size_t>(parsed_program->num_kernels)) {
    return std::nullopt;
  }
  touch(path);
  return CachedCompilation{std::move(*parsed_program), std::move(*parsed_kernels),
                           std::string(*explanation)};
}

Status store_compilation(const std::string& key, const Graph& graph,
                         const CompiledGraph& compiled) {
  if (!compiled.program || compiled.last_stage != Stage::codegen || compiled.cuda) {
    return Status::error("only a complete CPU compilation is cached");
  }
  // Program kernel k is the loop IR of the records that share it.
  std::vector<const loop::Kernel*> kernels(static_cast<size_t>(compiled.program->num_kernels));
  for (const KernelRecord& record : compiled.records) {
    const auto k = static_cast<size_t>(record.program_kernel);
    if (k < kernels.size() && kernels[k] == nullptr) kernels[k] = &record.kernel;
  }
  std::string kernels_text;
  for (const loop::Kernel* kernel : kernels) {
    if (kernel == nullptr) return Status::error("a program kernel has no record");
    kernels_text += loop::print(*kernel);
  }
  std::string entry(kEntryTag);
  append_part(entry, runtime::serialize_program(*compiled.program));
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
