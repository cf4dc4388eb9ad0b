// A world of two for tests in one process: this process is rank 0, and rank 1 is simulated.
// In an all-reduce, rank 1's buffer is this rank's plus one, so a sum gives 2x + 1 and a mean
// x + 0.5; what rank 1 broadcasts is zero bytes, 0 in every dtype. These values tell a
// collective that went through the communicator from one that did not (in a world of one,
// every collective is the identity).
#pragma once

#include <cstring>
#include <memory>

#include "comm/communicator.h"

namespace kiln::testing {

class SimulatedPeerCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string description() const override { return "rank 0 of 2, rank 1 simulated"; }

  Expected<std::unique_ptr<comm::PendingCollective>> start_all_reduce(
      void* data, int64_t count, comm::DataType type, comm::Reduction reduction) override {
    KILN_RETURN_IF_ERROR(comm::check_all_reduce_arguments(data, count, type));
    ++collectives;
    if (type == comm::DataType::f64) {
      combine(static_cast<double*>(data), count, reduction);
    } else {
      combine(static_cast<float*>(data), count, reduction);
    }
    return done();
  }

  Expected<std::unique_ptr<comm::PendingCollective>> start_broadcast(void* data, int64_t bytes,
                                                                     int root) override {
    KILN_RETURN_IF_ERROR(comm::check_broadcast_arguments(data, bytes, root, size()));
    ++collectives;
    if (root == 1) std::memset(data, 0, static_cast<size_t>(bytes));
    return done();
  }

  Status barrier() override { return Status::ok(); }

  int collectives = 0;  // started so far

 private:
  class Done final : public comm::PendingCollective {
   public:
    Status wait() override { return Status::ok(); }
  };
  static Expected<std::unique_ptr<comm::PendingCollective>> done() {
    return std::unique_ptr<comm::PendingCollective>(std::make_unique<Done>());
  }
  template <typename T>
  static void combine(T* values, int64_t count, comm::Reduction reduction) {
    for (int64_t i = 0; i < count; ++i) {
      const T sum = values[i] + (values[i] + T(1));
      values[i] = reduction == comm::Reduction::mean ? sum / T(2) : sum;
    }
  }
};

// Makes `replacement` the process's communicator for one scope.
class ScopedCommunicator {
 public:
  explicit ScopedCommunicator(comm::Communicator& replacement)
      : previous_(comm::replace_default_communicator(&replacement)) {}
  ~ScopedCommunicator() { comm::replace_default_communicator(previous_); }
  ScopedCommunicator(const ScopedCommunicator&) = delete;
  ScopedCommunicator& operator=(const ScopedCommunicator&) = delete;

 private:
  comm::Communicator* previous_;
};

}  // namespace kiln::testing
