#include "loop/schedule_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "loop/ir_visitor.h"
#include "loop/printer.h"
#include "loop/schedule_analysis.h"
#include "loop/simplify.h"
#include "loop/substitute.h"
#include "loop/tuning.h"
#include "loop/verifier.h"
#include "support/files.h"

namespace kiln::loop {
namespace {

// The reference kernel's estimated seconds above which a kernel is not searched: checking the
// candidates would take longer than the search's budget.
constexpr double kMaxReferenceSeconds = 1.0;

// Loops of at most this many iterations are small enough to unroll.
constexpr int64_t kSmallLoop = 16;

// --- Building candidates -------------------------------------------------------------------

// A schedule built directive by directive on a kernel, keeping only what applies legally.
class Builder {
 public:
  explicit Builder(const Kernel& kernel) : kernel_(kernel) {}

  // Applies all of `directives` or none; true when they were applied.
  bool apply(const std::vector<Directive>& directives) {
    return apply_all_or_none(kernel_, schedule_, directives);
  }

  const Kernel& kernel() const { return kernel_; }
  const For* loop(std::string_view var) const { return find_loop(kernel_.body, var); }

  // The candidate: the schedule and the kernel simplified as apply_schedule leaves it.
  std::optional<Candidate> finish() const {
    Kernel simplified = simplify(kernel_);
    if (!verify(simplified).is_ok()) return std::nullopt;
    std::string text = print(simplified);
    return Candidate{schedule_, std::move(simplified), std::move(text)};
  }

 private:
  Kernel kernel_;
  Schedule schedule_;
};

// The innermost reductions outside every vectorized loop, in order of first appearance.
std::vector<std::string> scalar_innermost_reductions(const Stmt& body) {
  class Finder : public IRVisitor {
   public:
    std::vector<std::string> vars;

   protected:
    void visit_for(const For& node) override {
      const bool outer = in_vector_loop_;
      in_vector_loop_ = outer || node.for_kind == ForKind::vectorized;
      IRVisitor::visit_for(node);
      in_vector_loop_ = outer;
    }
    void visit_reduce(const Reduce& node) override {
      if (!in_vector_loop_ && !node.vectorized && !contains_reduce(node.body) &&
          std::find(vars.begin(), vars.end(), node.var) == vars.end()) {
        vars.push_back(node.var);
      }
      IRVisitor::visit_reduce(node);
    }

   private:
    bool in_vector_loop_ = false;
  } finder;
  finder.visit(body);
  return finder.vars;
}

// The serial innermost loops of constant extent up to kSmallLoop.
std::vector<std::string> small_innermost_loops(const Stmt& body) {
  class Finder : public IRVisitor {
   public:
    std::vector<std::string> vars;

   protected:
    void visit_for(const For& node) override {
      const size_t before = loops_++;
      IRVisitor::visit_for(node);
      const bool innermost = loops_ == before + 1;
      const std::optional<int64_t> extent = as_const_int(node.extent);
      if (innermost && node.for_kind == ForKind::serial && extent && *extent > 1 &&
          *extent <= kSmallLoop && std::ranges::find(vars, node.var) == vars.end()) {
        vars.push_back(node.var);
      }
    }

   private:
    size_t loops_ = 0;
  } finder;
  finder.visit(body);
  return finder.vars;
}

// The loops of the perfectly nested band that starts at `root`, outermost first.
std::vector<std::string> band_of(const Builder& builder, const std::string& root) {
  std::vector<std::string> band;
  for (const For* f = builder.loop(root); f != nullptr; f = f->body.as<For>()) {
    band.push_back(f->var);
  }
  return band;
}

enum class Parallelism : uint8_t { none, outermost, balanced };

// How a candidate built from the naive kernel schedules every nest.
struct Knobs {
  int innermost = -1;     // the band's loop at this position moved innermost; -1: as lowered
  int vector_factor = 1;  // the vector loop's split, in vector lanes; 0: no vector loop
  Parallelism parallel = Parallelism::balanced;
  bool unroll = false;  // small innermost loops unrolled
  bool vectorize_reductions = true;
};

// Fuses outer loops of the band from `root` until there are kIterationsPerCore iterations per
// core (never into a vector loop) and marks the result parallel; else the root alone.
void parallelize_balanced(Builder& builder, const std::string& root,
                          const std::set<std::string>& vector_loops, int cores) {
  const std::optional<int64_t> root_extent = as_const_int(builder.loop(root)->extent);
  if (!root_extent) {
    builder.apply({Parallel{root}});
    return;
  }
  int64_t iterations = *root_extent;
  std::string var = root;
  std::vector<Directive> directives;
  Builder trial = builder;
  while (iterations < kIterationsPerCore * cores) {
    const For* inner = trial.loop(var)->body.as<For>();
    if (inner == nullptr || vector_loops.contains(inner->var)) break;
    const std::optional<int64_t> inner_extent = as_const_int(inner->extent);
    if (!inner_extent) break;
    const Fuse fuse{var, inner->var, var + "_" + inner->var};
    if (!trial.apply({fuse})) break;
    directives.push_back(fuse);
    var = fuse.fused;
    iterations *= *inner_extent;
  }
  directives.push_back(Parallel{var});
  if (!builder.apply(directives) && directives.size() > 1) builder.apply({Parallel{root}});
}

// One nest of a knob candidate: order, hoists, accumulation, the vector loop, unrolling, then
// the parallel loop.
void schedule_nest(Builder& builder, const std::string& root, bool inside_parallel,
                   const Knobs& knobs, const ScheduleTarget& target) {
  std::vector<std::string> band = band_of(builder, root);
  if (band.empty()) return;
  if (knobs.innermost >= 0 && static_cast<size_t>(knobs.innermost) + 1 < band.size()) {
    std::vector<std::string> order = band;
    const std::string moved = order[static_cast<size_t>(knobs.innermost)];
    std::erase(order, moved);
    order.push_back(moved);
    if (builder.apply({Reorder{order}})) band = order;
  }
  for (size_t i = 0; i + 1 < band.size(); ++i) builder.apply({Hoist{band[i]}});
  const std::string leaf = band.back();
  const std::vector<Stmt> leaf_body = flatten_blocks(builder.loop(leaf)->body);
  const auto* first_store = leaf_body.empty() ? nullptr : leaf_body[0].as<Store>();
  if (first_store != nullptr && first_store->value.as<Reduce>() != nullptr) {
    builder.apply({Accumulate{leaf, leaf + ".k"}});
  }
  std::set<std::string> vector_loops;
  const std::optional<int64_t> extent = as_const_int(builder.loop(leaf)->extent);
  const int64_t lanes = lanes_of_widest(builder.loop(leaf)->body, target.vector_bytes);
  const int64_t factor = lanes * knobs.vector_factor;
  std::string outermost = band.front();
  if (knobs.vector_factor > 0 && lanes >= 2 && extent && *extent >= factor) {
    if (*extent == factor) {
      if (builder.apply({Vectorize{leaf}})) vector_loops.insert(leaf);
    } else if (builder.apply({Split{leaf, factor, leaf + ".o", leaf + ".i"},
                              Vectorize{leaf + ".i"}})) {
      vector_loops.insert(leaf + ".i");
      if (leaf == outermost) outermost = leaf + ".o";
    }
  }
  if (knobs.unroll) {
    for (const std::string& var : small_innermost_loops(builder.loop(outermost)->body)) {
      builder.apply({Unroll{var}});
    }
  }
  if (inside_parallel || vector_loops.contains(outermost)) return;
  if (knobs.parallel == Parallelism::outermost) builder.apply({Parallel{outermost}});
  if (knobs.parallel == Parallelism::balanced) {
    parallelize_balanced(builder, outermost, vector_loops, target.cores);
  }
}

std::optional<Candidate> knob_candidate(const Kernel& kernel, const Knobs& knobs,
                                        const ScheduleTarget& target) {
  Builder builder(kernel);
  std::set<std::string, std::less<>> inside_parallel;
  for (const std::string& root : schedulable_nests(kernel.body, &inside_parallel)) {
    if (builder.loop(root) == nullptr) continue;
    schedule_nest(builder, root, inside_parallel.contains(root), knobs, target);
  }
  if (knobs.vectorize_reductions) {
    for (const std::string& var : scalar_innermost_reductions(builder.kernel().body)) {
      builder.apply({Vectorize{var}});
    }
  }
  return builder.finish();
}

// How a candidate varies the default schedule.
struct Variation {
  int64_t vector_factor = 1;  // the vector loops' splits times this
  bool parallel = true;
  bool vectorize_reductions = true;
  bool hoist = true;
  bool unroll = false;
};

// The default schedule replayed with `variation`; directives that no longer apply are left out.
std::optional<Candidate> varied_default(const Kernel& kernel, const Schedule& schedule,
                                        const Variation& variation) {
  std::set<std::string> vectorized;
  for (const Directive& directive : schedule.directives) {
    if (const auto* v = std::get_if<Vectorize>(&directive)) vectorized.insert(v->var);
  }
  Builder builder(kernel);
  for (Directive directive : schedule.directives) {
    if (auto* split = std::get_if<Split>(&directive); split && vectorized.contains(split->inner)) {
      split->factor *= variation.vector_factor;
    }
    if (std::holds_alternative<Parallel>(directive) && !variation.parallel) continue;
    if (std::holds_alternative<Hoist>(directive) && !variation.hoist) continue;
    if (const auto* v = std::get_if<Vectorize>(&directive);
        v && builder.loop(v->var) == nullptr && !variation.vectorize_reductions) {
      continue;  // a reduction's variable, not a loop's
    }
    builder.apply({directive});
  }
  if (variation.unroll) {
    for (const std::string& var : small_innermost_loops(builder.kernel().body)) {
      builder.apply({Unroll{var}});
    }
  }
  return builder.finish();
}

std::vector<Variation> variations(SearchMode mode) {
  std::vector<Variation> out = {{.vector_factor = 2}, {.vector_factor = 4}, {.parallel = false},
                                {.vectorize_reductions = false}, {.hoist = false},
                                {.unroll = true}};
  if (mode == SearchMode::full) {
    out.push_back({.vector_factor = 2, .unroll = true});
    out.push_back({.vector_factor = 2, .parallel = false});
    out.push_back({.parallel = false, .vectorize_reductions = false});
  }
  return out;
}

std::vector<Knobs> knob_grid(SearchMode mode) {
  const bool full = mode == SearchMode::full;
  const std::vector<int> orders = full ? std::vector<int>{-1, 0, 1, 2} : std::vector<int>{-1, 0};
  const std::vector<int> factors = full ? std::vector<int>{0, 1, 2, 4} : std::vector<int>{1, 2};
  std::vector<Parallelism> parallel = {Parallelism::none, Parallelism::balanced};
  if (full) parallel.push_back(Parallelism::outermost);
  const std::vector<bool> unroll = full ? std::vector<bool>{false, true} : std::vector<bool>{false};
  std::vector<Knobs> grid;
  for (const int order : orders) {
    for (const int factor : factors) {
      for (const Parallelism p : parallel) {
        for (const bool u : unroll) {
          grid.push_back({.innermost = order, .vector_factor = factor, .parallel = p, .unroll = u});
        }
      }
    }
  }
  return grid;
}

// --- Searchable kernels ----------------------------------------------------------------------

// Whether an index, a loop bound or a reduction's range reads memory.
bool reads_memory_for_addresses(const Stmt& body) {
  class Finder : public IRVisitor {
   public:
    bool found = false;

   protected:
    void visit_load(const Load& node) override {
      address(node.index);
      IRVisitor::visit_load(node);
    }
    void visit_store(const Store& node) override {
      address(node.index);
      IRVisitor::visit_store(node);
    }
    void visit_for(const For& node) override {
      address(node.min);
      address(node.extent);
      IRVisitor::visit_for(node);
    }
    void visit_reduce(const Reduce& node) override {
      address(node.min);
      address(node.extent);
      IRVisitor::visit_reduce(node);
    }
    void visit_let_stmt(const LetStmt& node) override {
      // An integer let may become an index.
      if (!is_floating(node.value.type())) address(node.value);
      IRVisitor::visit_let_stmt(node);
    }
    void visit_let(const Let& node) override {
      if (!is_floating(node.value.type())) address(node.value);
      IRVisitor::visit_let(node);
    }

   private:
    void address(const Expr& e) {
      class AnyLoad : public IRVisitor {
       public:
        bool found = false;

       protected:
        void visit_load(const Load&) override { found = true; }
      } any;
      any.visit(e);
      found = found || any.found;
    }
  } finder;
  finder.visit(body);
  return finder.found;
}

// --- The cache's text ----------------------------------------------------------------------

constexpr std::string_view kEntryTag = "kiln-schedule 1\n";

// FNV-1a over the parts, each followed by a zero byte: names files; the entry holds its key in
// full, so a collision is only a miss.
std::string file_hash(std::initializer_list<std::string_view> parts) {
  uint64_t hash = 14695981039346656037ull;
  for (const std::string_view part : parts) {
    for (const char c : part) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    hash *= 1099511628211ull;
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace

std::string_view search_mode_name(SearchMode mode) {
  switch (mode) {
    case SearchMode::off:
      return "off";
    case SearchMode::quick:
      return "quick";
    case SearchMode::full:
      return "full";
  }
  return "off";
}

Expected<SearchMode> parse_search_mode(std::string_view name) {
  for (const SearchMode mode : {SearchMode::off, SearchMode::quick, SearchMode::full}) {
    if (search_mode_name(mode) == name) return mode;
  }
  return Status::errorf(ErrorCode::invalid_input,
                        "unknown schedule search mode '{}' (expected off, quick or full)", name);
}

SearchBudget search_budget(SearchMode mode) {
  switch (mode) {
    case SearchMode::off:
      return {};
    case SearchMode::quick:
      return {.timed = 3, .kernel_seconds = 0.3, .model_seconds = 10};
    case SearchMode::full:
      return {.timed = 12, .kernel_seconds = 2, .model_seconds = 120};
  }
  return {};
}

std::vector<Candidate> schedule_candidates(const Kernel& kernel, const ScheduleTarget& target,
                                           SearchMode mode) {
  std::vector<Candidate> candidates;
  std::set<std::string, std::less<>> seen;
  const auto keep = [&](std::optional<Candidate> candidate) {
    if (candidate && seen.insert(candidate->text).second) {
      candidates.push_back(std::move(*candidate));
    }
  };
  const Schedule by_default = default_schedule(kernel, target);
  keep(varied_default(kernel, by_default, {}));
  for (const Variation& variation : variations(mode)) {
    keep(varied_default(kernel, by_default, variation));
  }
  for (const Knobs& knobs : knob_grid(mode)) keep(knob_candidate(kernel, knobs, target));
  return candidates;
}

std::string unsearchable_reason(const Kernel& kernel) {
  if (contains_gemm(kernel.body)) return "not searched: it calls a library";
  if (!all_statements_known(kernel.body)) return "not searched: a statement the search skips";
  if (reads_memory_for_addresses(kernel.body)) {
    return "not searched: its indices read memory, which random inputs would send out of bounds";
  }
  if (!contains_loop(kernel.body)) return "not searched: it has no loop";
  return {};
}

// --- Cache ---------------------------------------------------------------------------------

std::filesystem::path default_schedule_cache_dir() { return kiln_cache_root() / "schedules"; }

std::optional<ScheduleCache::Entry> ScheduleCache::load(const Kernel& kernel,
                                                        std::string_view identity,
                                                        SearchMode mode) const {
  const std::string text = print(kernel);
  const std::filesystem::path path =
      directory_ / (file_hash({identity, search_mode_name(mode), text}) + ".schedule");
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::nullopt;
  Expected<std::string> bytes = read_file(path.string());
  if (!bytes || !std::string_view(*bytes).starts_with(kEntryTag)) return std::nullopt;
  std::string_view rest = std::string_view(*bytes).substr(kEntryTag.size());
  std::vector<std::string_view> parts;
  while (std::optional<std::string_view> part = next_part(rest)) parts.push_back(*part);
  if (!rest.empty() || parts.size() != 5 || parts[0] != identity ||
      parts[1] != search_mode_name(mode) || parts[2] != text) {
    return std::nullopt;
  }
  Expected<Schedule> schedule = parse_schedule(parts[3]);
  if (!schedule) return std::nullopt;
  Entry entry{std::move(*schedule)};
  std::istringstream numbers{std::string(parts[4])};
  if (!(numbers >> entry.estimate >> entry.measured >> entry.default_measured)) {
    return std::nullopt;
  }
  touch(path);
  return entry;
}

Status ScheduleCache::store(const Kernel& kernel, std::string_view identity, SearchMode mode,
                            const Entry& entry) const {
  const std::string text = print(kernel);
  std::string contents(kEntryTag);
  append_part(contents, identity);
  append_part(contents, search_mode_name(mode));
  append_part(contents, text);
  append_part(contents, print(entry.schedule));
  append_part(contents, fmt::format("{:.9g} {:.9g} {:.9g}", entry.estimate, entry.measured,
                                    entry.default_measured));
  return write_file_atomically(
      directory_ / (file_hash({identity, search_mode_name(mode), text}) + ".schedule"), contents);
}

CostFit ScheduleCache::load_fit(std::string_view identity) const {
  const std::filesystem::path path = directory_ / (file_hash({identity}) + ".fit");
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return {};
  Expected<std::string> bytes = read_file(path.string());
  if (!bytes) return {};
  Expected<CostFit> fit = CostFit::from_text(*bytes);
  return fit ? *fit : CostFit{};
}

Status ScheduleCache::store_fit(std::string_view identity, const CostFit& fit) const {
  return write_file_atomically(directory_ / (file_hash({identity}) + ".fit"), fit.to_text());
}

// --- The search ----------------------------------------------------------------------------

ScheduleSearch::ScheduleSearch(Config config, KernelTimer& timer, const ScheduleCache* cache)
    : config_(std::move(config)),
      budget_(search_budget(config_.mode)),
      timer_(timer),
      cache_(cache),
      fit_(cache != nullptr ? cache->load_fit(config_.identity) : CostFit{}),
      start_(std::chrono::steady_clock::now()) {}

Expected<SearchChoice> ScheduleSearch::choose(const Kernel& kernel) {
  SearchChoice fallback{default_schedule(kernel, config_.target), {}, {.how = "default"}};
  Expected<Kernel> scheduled = apply_schedule(kernel, fallback.schedule);
  if (!scheduled) {
    // The default schedule keeps only directives it applied legally, so replaying it cannot
    // fail: if it does, that is a bug, reported with the kernel.
    return Status::errorf(ErrorCode::internal,
                          "internal compiler error: the default schedule does not replay: {}\n{}",
                          scheduled.status().message(), print(kernel));
  }
  fallback.kernel = std::move(*scheduled);
  if (config_.mode == SearchMode::off) return fallback;
  if (std::string reason = unsearchable_reason(kernel); !reason.empty()) {
    fallback.report.how = std::move(reason);
    return fallback;
  }
  if (cache_ != nullptr) {
    if (std::optional<ScheduleCache::Entry> entry =
            cache_->load(kernel, config_.identity, config_.mode)) {
      if (Expected<Kernel> cached = apply_schedule(kernel, entry->schedule)) {
        return SearchChoice{std::move(entry->schedule), std::move(*cached),
                            {.how = "cached",
                             .estimate = entry->estimate,
                             .measured = entry->measured,
                             .default_measured = entry->default_measured}};
      }
    }
  }
  const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start_;
  if (spent.count() >= budget_.model_seconds) {
    fallback.report.how = "not searched: the compilation's search budget is spent";
    return fallback;
  }
  return search(kernel, std::move(fallback));
}

Expected<SearchChoice> ScheduleSearch::search(const Kernel& kernel, SearchChoice fallback) {
  std::vector<Candidate> candidates = schedule_candidates(kernel, config_.target, config_.mode);
  std::vector<CostEstimate> estimates;
  for (const Candidate& candidate : candidates) {
    estimates.push_back(estimate_cost(candidate.kernel, config_.machine));
  }
  // The default (first), then the others by corrected estimate, as many as the budget times.
  std::vector<size_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin() + 1, order.end(), [&](size_t a, size_t b) {
    return fit_.corrected(estimates[a]) < fit_.corrected(estimates[b]);
  });
  order.resize(std::min(order.size(), static_cast<size_t>(budget_.timed) + 1));
  Expected<Kernel> reference = apply_schedule(kernel, row_passes(kernel));
  if (!reference) return fallback;  // row_passes applies what is legal: a bug, kept unsearched
  if (estimate_cost(*reference, config_.machine).seconds > kMaxReferenceSeconds) {
    fallback.report.how = "not searched: the reference kernel would run too long";
    return fallback;
  }
  std::vector<Kernel> kernels = {std::move(*reference)};
  for (const size_t i : order) kernels.push_back(candidates[i].kernel);

  SearchReport report{.how = "searched",
                      .candidates = static_cast<int>(candidates.size()),
                      .timed = static_cast<int>(order.size())};
  Expected<std::vector<Timing>> timings = timer_.time(kernels, budget_.kernel_seconds);
  if (!timings || timings->size() != kernels.size()) {
    fallback.report.how = fmt::format(
        "not searched: timing failed: {}",
        timings ? "the timer returned too few timings" : timings.status().message());
    return fallback;
  }
  if (!timer_.measured_quietly()) {
    fallback.report.how = "not searched: other programs used the cores while it measured";
    return fallback;
  }
  // Position p of `order` is kernel p + 1 of the timings; p = 0 is the default.
  const auto timing = [&](size_t p) -> const Timing& { return (*timings)[p + 1]; };
  std::vector<double> ranked;  // the estimates the candidates were ranked by, before this fit
  for (const size_t i : order) ranked.push_back(fit_.corrected(estimates[i]));
  size_t best = 0;
  for (size_t p = 0; p < order.size(); ++p) {
    const Timing& t = timing(p);
    if (!t.disagreement.empty()) {
      report.disagreements.push_back(
          fmt::format("{}: {}", p == 0 ? "the default schedule" : print(candidates[order[p]].schedule),
                      t.disagreement));
      continue;
    }
    fit_.add(estimates[order[p]], t.seconds);
    if (p > 0 && (best == 0 || t.seconds < timing(best).seconds)) best = p;
  }
  const double default_seconds = timing(0).seconds;
  if (best != 0 && !(timing(best).seconds <= default_seconds * (1 - kMinSearchGain))) best = 0;
  Candidate& chosen = candidates[order[best]];
  report.estimate = ranked[best];
  report.measured = timing(best).seconds;
  report.default_measured = default_seconds;
  if (cache_ != nullptr) {
    // A cache that cannot be written only costs a search next time.
    (void)cache_->store(kernel, config_.identity, config_.mode,
                        {chosen.schedule, report.estimate, report.measured, default_seconds});
    (void)cache_->store_fit(config_.identity, fit_);
  }
  return SearchChoice{std::move(chosen.schedule), std::move(chosen.kernel), std::move(report)};
}

}  // namespace kiln::loop
