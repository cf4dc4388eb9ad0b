#include "comm/link_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace kiln::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingPongs = 200;
constexpr int kAllReduces = 5;
constexpr int64_t kAllReduceElements = int64_t{4} << 20;  // 16 MiB of f32: long messages

int tree_rounds(int ranks) { return static_cast<int>(std::ceil(std::log2(ranks))); }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The best time of `runs` calls of `body`, after one that warms the path up.
template <typename Body>
Expected<double> best_seconds(int runs, const Body& body) {
  KILN_RETURN_IF_ERROR(body());
  double best = INFINITY;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    KILN_RETURN_IF_ERROR(body());
    best = std::min(best, seconds_since(start));
  }
  return best;
}

}  // namespace

LinkProfile shared_memory_link_profile() {
  return {.latency_seconds = 2e-6, .bytes_per_second = 4e9};
}

double all_reduce_seconds(const LinkProfile& link, int64_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  const double steps = 2.0 * (ranks - 1);
  return steps * link.latency_seconds +
         steps / ranks * static_cast<double>(bytes) / link.bytes_per_second;
}

double broadcast_seconds(const LinkProfile& link, int64_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  return tree_rounds(ranks) *
         (link.latency_seconds + static_cast<double>(bytes) / link.bytes_per_second);
}

Expected<LinkProfile> measure_link_profile(Communicator& comm) {
  const int ranks = comm.size();
  if (ranks < 2) {
    return Status::errorf("measuring the link between ranks needs two or more, not {}", ranks);
  }
  KILN_RETURN_IF_ERROR(comm.barrier());
  // The ping-pong: rank 0's message to rank 1 and back, as two broadcasts of 8 bytes.
  double message = 0;
  KILN_ASSIGN_OR_RETURN(const double round_trip, best_seconds(kPingPongs, [&]() -> Status {
    KILN_RETURN_IF_ERROR(comm.broadcast(&message, sizeof message, 0));
    return comm.broadcast(&message, sizeof message, 1);
  }));
  LinkProfile link;
  link.latency_seconds = round_trip / (2.0 * tree_rounds(ranks));
  std::vector<float> buffer(static_cast<size_t>(kAllReduceElements), 1.0f);
  KILN_ASSIGN_OR_RETURN(const double reduce, best_seconds(kAllReduces, [&] {
    return comm.all_reduce(buffer.data(), kAllReduceElements, DataType::f32, Reduction::sum);
  }));
  const double steps = 2.0 * (ranks - 1);
  const double moving = std::max(reduce - steps * link.latency_seconds, reduce / 2);
  link.bytes_per_second =
      steps / ranks * static_cast<double>(kAllReduceElements * 4) / moving;
  // The ranks measured different times; their mean is the profile every one of them uses.
  double figures[2] = {link.latency_seconds, link.bytes_per_second};
  KILN_RETURN_IF_ERROR(comm.all_reduce(figures, 2, DataType::f64, Reduction::mean));
  return LinkProfile{.latency_seconds = figures[0], .bytes_per_second = figures[1]};
}

}  // namespace kiln::comm
