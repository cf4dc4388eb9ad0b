#include "comm/communicator.h"

#include <charconv>
#include <cstdlib>
#include <mutex>

#include "comm/mpi_communicator.h"

namespace kiln::comm {
namespace {

constexpr double kDefaultTimeoutSeconds = 300;

// A collective that finished when it started.
class DoneCollective final : public PendingCollective {
 public:
  Status wait() override { return Status::ok(); }
};

Expected<std::unique_ptr<PendingCollective>> done() {
  return std::unique_ptr<PendingCollective>(std::make_unique<DoneCollective>());
}

// The communicator of a process under mpirun whose MPI world could not be joined: it knows
// its place from mpirun's environment, and every collective fails with the reason.
class FailedCommunicator final : public Communicator {
 public:
  FailedCommunicator(int rank, int size, Status reason)
      : rank_(rank), size_(size), reason_(std::move(reason)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override {
    return fmt::format("rank {} of {}, without a world: {}", rank_, size_, reason_.message());
  }
  Expected<std::unique_ptr<PendingCollective>> start_all_reduce(void*, int64_t, DataType,
                                                                Reduction) override {
    return reason_;
  }
  Expected<std::unique_ptr<PendingCollective>> start_broadcast(void*, int64_t, int) override {
    return reason_;
  }
  Status barrier() override { return reason_; }

 private:
  int rank_;
  int size_;
  Status reason_;
};

// The integer in environment variable `name`, or `fallback` when it is unset or not one.
int int_from_environment(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  const std::string_view view(text);
  int value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  return error == std::errc() && end == view.data() + view.size() ? value : fallback;
}

std::unique_ptr<Communicator> make_default_communicator() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    return std::make_unique<LocalCommunicator>();
  }
  Expected<std::unique_ptr<Communicator>> mpi = make_mpi_communicator();
  if (mpi) return std::move(*mpi);
  return std::make_unique<FailedCommunicator>(int_from_environment("OMPI_COMM_WORLD_RANK", 0),
                                              world_size_from_environment(), mpi.status());
}

std::mutex default_mutex;
Communicator* replacement_communicator = nullptr;

}  // namespace

std::string_view data_type_name(DataType type) {
  switch (type) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
  }
  return "?";
}

std::string_view reduction_name(Reduction reduction) {
  return reduction == Reduction::sum ? "sum" : "mean";
}

Expected<Reduction> parse_reduction(std::string_view name) {
  if (name == "sum") return Reduction::sum;
  if (name == "mean") return Reduction::mean;
  return Status::errorf("unknown reduction '{}': the reductions are 'sum' and 'mean'", name);
}

int64_t data_type_bytes(DataType type) {
  return type == DataType::f64 ? 8 : type == DataType::f32 ? 4 : 2;
}

Status check_all_reduce_arguments(const void* data, int64_t count, DataType type) {
  if (type == DataType::f16 || type == DataType::bf16) {
    return Status::errorf(ErrorCode::unsupported,
                          "all_reduce of {} is not supported yet: MPI has no 16-bit float type",
                          data_type_name(type));
  }
  if (count < 0 || (count > 0 && data == nullptr)) {
    return Status::errorf("all_reduce of {} elements at {}: no such buffer", count, data);
  }
  return Status::ok();
}

Status check_broadcast_arguments(const void* data, int64_t bytes, int root, int size) {
  if (root < 0 || root >= size) {
    return Status::errorf("broadcast from rank {}: the world has ranks 0 to {}", root, size - 1);
  }
  if (bytes < 0 || (bytes > 0 && data == nullptr)) {
    return Status::errorf("broadcast of {} bytes at {}: no such buffer", bytes, data);
  }
  return Status::ok();
}

Status Communicator::all_reduce(void* data, int64_t count, DataType type, Reduction reduction) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PendingCollective> pending,
                        start_all_reduce(data, count, type, reduction));
  return pending->wait();
}

Status Communicator::broadcast(void* data, int64_t bytes, int root) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PendingCollective> pending,
                        start_broadcast(data, bytes, root));
  return pending->wait();
}

Expected<std::unique_ptr<PendingCollective>> LocalCommunicator::start_all_reduce(
    void* data, int64_t count, DataType type, Reduction) {
  KILN_RETURN_IF_ERROR(check_all_reduce_arguments(data, count, type));
  return done();
}

Expected<std::unique_ptr<PendingCollective>> LocalCommunicator::start_broadcast(void* data,
                                                                                int64_t bytes,
                                                                                int root) {
  KILN_RETURN_IF_ERROR(check_broadcast_arguments(data, bytes, root, 1));
  return done();
}

double collective_timeout_seconds() {
  static const double seconds = [] {
    const char* text = std::getenv("KILN_COMM_TIMEOUT_S");
    if (text == nullptr) return kDefaultTimeoutSeconds;
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    return end != text && *end == '\0' && value > 0 ? value : kDefaultTimeoutSeconds;
  }();
  return seconds;
}

int world_size_from_environment() {
  const int size = int_from_environment("OMPI_COMM_WORLD_SIZE", 1);
  return size > 0 ? size : 1;
}

Communicator& default_communicator() {
  static std::unique_ptr<Communicator> made;
  const std::lock_guard lock(default_mutex);
  if (replacement_communicator != nullptr) return *replacement_communicator;
  if (made == nullptr) made = make_default_communicator();
  return *made;
}

Communicator* replace_default_communicator(Communicator* replacement) {
  const std::lock_guard lock(default_mutex);
  Communicator* previous = replacement_communicator;
  replacement_communicator = replacement;
  return previous;
}

}  // namespace kiln::comm
