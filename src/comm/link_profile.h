// The link between ranks as the cost model sees it: a latency per message and a bandwidth,
// what a collective's time is estimated from, as the device profile (cost/device_profile.h)
// is for a kernel's.
//
// A collective over `k` ranks is priced after the algorithms MPI uses for it: an all-reduce as
// a ring (a reduce-scatter then an all-gather: 2(k-1) messages in sequence, each rank sending
// 2(k-1)/k of the buffer), a broadcast as a binomial tree (ceil(log2 k) rounds, each sending
// the whole buffer). A world of one costs nothing.
//
// measure_link_profile times the link through a communicator: a ping-pong of one small
// message for the latency and a large all-reduce for the bandwidth. Every rank must call it
// together; the ranks then agree on the result (they average it), so that each prices, and so
// compiles, the same. Caching it per machine and world size, as the device profile is, comes
// with the data-parallel pass (docs/design/distributed.md).
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "support/status.h"

namespace kiln::comm {

struct LinkProfile {
  double latency_seconds = 0;  // one small message from a rank to another
  double bytes_per_second = 0;  // of one rank's sending, in a long message

  bool operator==(const LinkProfile&) const = default;
};

// Open MPI's shared-memory transport between processes of one machine, of the order its
// ping-pong and all-reduce reach on a small server: what a compilation prices with until a
// measured profile is cached.
LinkProfile shared_memory_link_profile();

// Estimated seconds of an all-reduce, or a broadcast, of `bytes` over `ranks` ranks.
double all_reduce_seconds(const LinkProfile& link, int64_t bytes, int ranks);
double broadcast_seconds(const LinkProfile& link, int64_t bytes, int ranks);

// Measures the link of `comm`'s world (at least two ranks); every rank calls it at once.
Expected<LinkProfile> measure_link_profile(Communicator& comm);

}  // namespace kiln::comm
