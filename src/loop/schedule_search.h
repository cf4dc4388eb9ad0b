// The schedule search: each CPU kernel's schedule chosen among legal alternatives by a cost
// model and a few measurements, instead of taken from the default rules alone
// (loop/default_schedule.h), and remembered per machine.
//
// For one kernel (ScheduleSearch::choose):
//  1. Candidates (schedule_candidates). Variations of the default schedule (its vector splits
//     two and four times longer; without its parallel loops, its vectorized reductions or its
//     hoists; with its small innermost loops unrolled) and schedules built from the naive
//     kernel by knobs applied to every nest alike: which loop of the perfectly nested band
//     runs innermost (reorder), hoist, accumulation of column reductions, the vector loop's
//     split (lanes x 1, 2, 4, or none), unrolling small innermost loops, which outer loops are
//     fused and run parallel (none, the outermost, or enough for every core), vectorized
//     reductions. A directive that is not legal where a candidate asks for it is left out (as
//     the default rules do), so every candidate replays with apply_schedule; candidates are
//     deduplicated by the scheduled kernel's text. The default is always the first.
//  2. Ranking by the cost model (loop/schedule_cost.h), corrected by the machine's fit; only
//     the best few besides the default (SearchBudget::timed) are compiled and timed.
//  3. Measurement (KernelTimer, implemented for the CPU in target/cpu_kernel_timer.h): the
//     reference, the default and the chosen few are compiled together, run on the same random
//     inputs, and each is checked against the reference; one that disagrees is discarded and
//     reported (it is a bug in a directive's legality). The reference is the unscheduled
//     kernel with row_passes' merges and hoists (loop/default_schedule.h), which compute
//     exactly what it computes, in the same order, but a softmax's row statistics once per row
//     instead of once per element (quadratic in the row's length); a kernel whose reference
//     the cost model still estimates above a second is not searched.
//  4. Choice: the fastest candidate when it beats the default's measured time by
//     kMinSearchGain, else the default: the search never chooses a kernel it measured slower.
//     The fit learns from every measurement. Times measured while other programs used the
//     cores are not trusted (KernelTimer::measured_quietly): the default stays, and nothing is
//     cached or fitted (a search under a parallel build measured a parallel fill 30 times
//     slower than a serial one).
//  5. Cache (ScheduleCache): the choice, keyed by the kernel's text, the machine's identity
//     (cost::profile_identity) and the mode, so each kernel is searched once per machine; a
//     warm compile reads the choice and measures nothing.
// Kernels the timer cannot run on random inputs keep the default unsearched: those with a
// library call (the contraction's own schedule is the library's), and those whose indices or
// loop bounds read memory (random indices would read out of bounds).
//
// Budget (search_budget): per kernel, the seconds spent running candidates; per compilation,
// the seconds of all searches, after which the remaining kernels keep the default (uncached,
// so a later compile searches them).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loop/default_schedule.h"
#include "loop/schedule.h"
#include "loop/schedule_cost.h"
#include "support/status.h"

namespace kiln::loop {

enum class SearchMode : uint8_t { off, quick, full };
std::string_view search_mode_name(SearchMode mode);  // "off", "quick", "full"
Expected<SearchMode> parse_search_mode(std::string_view name);

// A candidate must beat the default's measured time by this share to be chosen: timing noise
// below it would otherwise pick kernels no faster.
inline constexpr double kMinSearchGain = 0.03;

struct SearchBudget {
  int timed = 0;              // candidates timed besides the default
  double kernel_seconds = 0;  // running the candidates of one kernel (compiling them aside)
  double model_seconds = 0;   // all the searches of one compilation, compiling included
};
// quick: 3 timed, 0.3 s per kernel, 10 s per compilation; full: 12, 2 s, 120 s; off: none.
SearchBudget search_budget(SearchMode mode);

struct Candidate {
  Schedule schedule;
  Kernel kernel;  // scheduled
  std::string text;  // print(kernel)
};

// The default schedule first, then the other candidates (above); quick makes fewer than full.
std::vector<Candidate> schedule_candidates(const Kernel& kernel, const ScheduleTarget& target,
                                           SearchMode mode);

// Why the search leaves `kernel` to the default schedule unsearched, or empty.
std::string unsearchable_reason(const Kernel& kernel);

// One kernel's measurement: its median seconds, and, when it computed something other than the
// unscheduled kernel, what differed.
struct Timing {
  double seconds = 0;
  std::string disagreement;
};

// Compiles and times kernels, checking each against the first.
class KernelTimer {
 public:
  virtual ~KernelTimer() = default;
  // kernels[0] is the reference, the others schedules of the same kernel (same parameters).
  // One Timing per kernel, in order; about `seconds` spent running them.
  virtual Expected<std::vector<Timing>> time(std::span<const Kernel> kernels, double seconds) = 0;
  // Whether other programs left the cores alone during the last time(): measured under load,
  // a parallel loop waits for descheduled threads and the times describe the moment, not the
  // machine.
  virtual bool measured_quietly() const = 0;
};

// Choices and fits on disk: `<dir>/<hash>.schedule` per kernel, machine and mode, holding its
// key in full (a hash collision is a miss, never a wrong schedule), and `<dir>/<hash>.fit` per
// machine. Written atomically; an entry that does not read back is a miss.
class ScheduleCache {
 public:
  explicit ScheduleCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

  struct Entry {
    Schedule schedule;
    double estimate = 0, measured = 0, default_measured = 0;  // seconds
  };
  std::optional<Entry> load(const Kernel& kernel, std::string_view identity,
                            SearchMode mode) const;
  Status store(const Kernel& kernel, std::string_view identity, SearchMode mode,
               const Entry& entry) const;
  // The machine's fit, or a fresh one.
  CostFit load_fit(std::string_view identity) const;
  Status store_fit(std::string_view identity, const CostFit& fit) const;

 private:
  std::filesystem::path directory_;
};

// kiln_cache_root() (support/files.h) with "schedules" appended, beside the compilations.
std::filesystem::path default_schedule_cache_dir();

// What the search did for one kernel, for `kiln explain --schedules`.
struct SearchReport {
  std::string how;  // "searched", "cached", "default" (search off) or why it was not searched
  double estimate = 0;          // the chosen schedule's corrected estimate, seconds
  double measured = 0;          // its median time; 0 when not measured
  double default_measured = 0;  // the default's; 0 when not measured
  int candidates = 0, timed = 0;
  std::vector<std::string> disagreements = {};  // candidates that computed something else
};

struct SearchChoice {
  Schedule schedule;
  Kernel kernel;  // scheduled
  SearchReport report;
};

// One compilation's search: its mode, budget and clock, the machine, the cache and the fit.
class ScheduleSearch {
 public:
  struct Config {
    SearchMode mode = SearchMode::off;
    ScheduleTarget target;
    CostMachine machine;
    std::string identity;  // the machine's, for the cache
  };
  // `cache` may be null (nothing remembered); `timer` must outlive the search.
  ScheduleSearch(Config config, KernelTimer& timer, const ScheduleCache* cache);

  // The schedule `kernel` (lowered, verified) gets: the default when the mode is off.
  Expected<SearchChoice> choose(const Kernel& kernel);

  const CostFit& fit() const { return fit_; }

 private:
  Expected<SearchChoice> search(const Kernel& kernel, SearchChoice fallback);

  Config config_;
  SearchBudget budget_;
  KernelTimer& timer_;
  const ScheduleCache* cache_;
  CostFit fit_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln::loop
