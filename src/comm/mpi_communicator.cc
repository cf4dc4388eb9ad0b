#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>

namespace kiln::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

// Tests `request` until it completes, fails, or `seconds` pass. The first millisecond spins
// (a collective on one machine often completes within it); then the loop sleeps briefly
// between tests, so a long wait leaves the core to the kernels.
Status wait_with_deadline(MPI_Request& request, double seconds, const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  const auto spin_until = start + std::chrono::milliseconds(1);
  while (true) {
    int done = 0;
    const int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) return Status::errorf("{} failed: {}", what, mpi_error_text(code));
    if (done != 0) return Status::ok();
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status::errorf(ErrorCode::resource_exhausted,
                            "{} did not complete within {} s ($KILN_COMM_TIMEOUT_S): a peer rank "
                            "died, or never started it",
                            what, seconds);
    }
    if (now < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

class MpiCommunicator;

class MpiPending final : public PendingCollective {
 public:
  // `scale`: what each element is divided by on completion (a mean's size), 1 for none.
  MpiPending(MpiCommunicator& owner, MPI_Request request, std::string what, void* data,
             int64_t count, DataType type, int scale)
      : owner_(owner), request_(request), what_(std::move(what)), data_(data), count_(count),
        type_(type), scale_(scale) {}
  ~MpiPending() override {
    if (!waited_) (void)wait();
  }
  Status wait() override;

 private:
  void divide_by_scale() const;

  MpiCommunicator& owner_;
  MPI_Request request_;
  std::string what_;
  void* data_;
  int64_t count_;
  DataType type_;
  int scale_;
  bool waited_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, bool finalize)
      : comm_(comm), rank_(rank), size_(size), finalize_(finalize) {}

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0 || !failure_.is_ok()) return;
    MPI_Comm_free(&comm_);
    if (finalize_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string description() const override {
    return fmt::format("Open MPI, rank {} of {}", rank_, size_);
  }

  Expected<std::unique_ptr<PendingCollective>> start_all_reduce(void* data, int64_t count,
                                                                DataType type,
                                                                Reduction reduction) override {
    KILN_RETURN_IF_ERROR(usable());
    KILN_RETURN_IF_ERROR(check_all_reduce_arguments(data, count, type));
    const std::string what =
        fmt::format("rank {} of {}: all_reduce ({}) of {} {} elements", rank_, size_,
                    reduction_name(reduction), count, data_type_name(type));
    KILN_RETURN_IF_ERROR(fits_mpi_count(count, what));
    MPI_Request request = MPI_REQUEST_NULL;
    const MPI_Datatype datatype = type == DataType::f64 ? MPI_DOUBLE : MPI_FLOAT;
    const int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype,
                                    MPI_SUM, comm_, &request);
    KILN_RETURN_IF_ERROR(started(code, what));
    const int scale = reduction == Reduction::mean ? size_ : 1;
    return pending(request, what, data, count, type, scale);
  }

  Expected<std::unique_ptr<PendingCollective>> start_broadcast(void* data, int64_t bytes,
                                                               int root) override {
    KILN_RETURN_IF_ERROR(usable());
    KILN_RETURN_IF_ERROR(check_broadcast_arguments(data, bytes, root, size_));
    const std::string what =
        fmt::format("rank {} of {}: broadcast of {} bytes from rank {}", rank_, size_, bytes, root);
    KILN_RETURN_IF_ERROR(fits_mpi_count(bytes, what));
    MPI_Request request = MPI_REQUEST_NULL;
    const int code = MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, &request);
    KILN_RETURN_IF_ERROR(started(code, what));
    return pending(request, what, data, bytes, DataType::f32, 1);
  }

  Status barrier() override {
    KILN_RETURN_IF_ERROR(usable());
    const std::string what = fmt::format("rank {} of {}: barrier", rank_, size_);
    MPI_Request request = MPI_REQUEST_NULL;
    KILN_RETURN_IF_ERROR(started(MPI_Ibarrier(comm_, &request), what));
    return finish(request, what);
  }

  // Waits for `request` and remembers a failure: after one, the ranks no longer agree on which
  // collective comes next, so every later one fails at once.
  Status finish(MPI_Request& request, const std::string& what) {
    Status status = wait_with_deadline(request, collective_timeout_seconds(), what);
    if (!status.is_ok() && failure_.is_ok()) failure_ = status;
    return status;
  }

 private:
  Expected<std::unique_ptr<PendingCollective>> pending(MPI_Request request, const std::string& what,
                                                       void* data, int64_t count, DataType type,
                                                       int scale) {
    return std::unique_ptr<PendingCollective>(
        std::make_unique<MpiPending>(*this, request, what, data, count, type, scale));
  }

  Status usable() const {
    if (failure_.is_ok()) return Status::ok();
    return Status::errorf(failure_.code(),
                          "rank {} of {}: the communicator stopped at an earlier failure: {}",
                          rank_, size_, failure_.message());
  }

  static Status fits_mpi_count(int64_t count, const std::string& what) {
    if (count <= INT_MAX) return Status::ok();
    return Status::errorf(ErrorCode::unsupported,
                          "{}: MPI counts are 32-bit, and splitting larger buffers is not "
                          "supported yet",
                          what);
  }

  Status started(int code, const std::string& what) {
    if (code == MPI_SUCCESS) return Status::ok();
    failure_ = Status::errorf("{} could not start: {}", what, mpi_error_text(code));
    return failure_;
  }

  MPI_Comm comm_;
  int rank_;
  int size_;
  bool finalize_;
  Status failure_;
};

Status MpiPending::wait() {
  if (waited_) return Status::errorf("{}: waited on twice", what_);
  waited_ = true;
  KILN_RETURN_IF_ERROR(owner_.finish(request_, what_));
  if (scale_ != 1) divide_by_scale();
  return Status::ok();
}

void MpiPending::divide_by_scale() const {
  if (type_ == DataType::f64) {
    auto* values = static_cast<double*>(data_);
    for (int64_t i = 0; i < count_; ++i) values[i] /= scale_;
  } else {
    auto* values = static_cast<float*>(data_);
    for (int64_t i = 0; i < count_; ++i) values[i] /= static_cast<float>(scale_);
  }
}

}  // namespace

bool built_with_mpi() { return true; }

Expected<std::unique_ptr<Communicator>> make_mpi_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  const bool starts_mpi = initialized == 0;
  if (starts_mpi) {
    int provided = 0;
    const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (code != MPI_SUCCESS) {
      return Status::errorf("MPI could not start: {}", mpi_error_text(code));
    }
    // Kiln started MPI, so the world's failures are Kiln's to report as well.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The duplicate is made without blocking, so that a peer that never joins cannot hang it.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  const std::string what = fmt::format("rank {} of {}: joining the MPI world", rank, size);
  if (const int code = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &request); code != MPI_SUCCESS) {
    return Status::errorf("{} failed: {}", what, mpi_error_text(code));
  }
  KILN_RETURN_IF_ERROR(wait_with_deadline(request, collective_timeout_seconds(), what));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(comm, rank, size, starts_mpi));
}

}  // namespace kiln::comm
