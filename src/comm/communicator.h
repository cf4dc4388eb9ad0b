// Collective communication between the ranks of a data-parallel job: the one interface the
// interpreter (interp/interpreter.h) and the runtime (runtime/executor.h) run the graph's
// collectives through, whatever the transport.
//
// A Communicator is one rank's view of a world of `size()` ranks. It sums or averages a
// buffer in place across the ranks (all-reduce), copies the root's buffer to every rank
// (broadcast), and waits for every rank (barrier). The collectives start without blocking and
// return a handle that is waited on later, so that a step can compute while the bytes move;
// the blocking forms are a start and a wait.
//
// Two implementations: LocalCommunicator, a world of one, where every collective is the
// identity; and the Open MPI one (comm/mpi_communicator.h). default_communicator() picks
// between them for the process: MPI when it runs under mpirun, the local one otherwise.
//
// Failures never hang and never abort: a wait that outlasts collective_timeout_seconds() (a
// peer died, or never joined) returns an error naming this rank and the collective, and an
// MPI error returns MPI's own message. After a failure a communicator is broken: every later
// collective fails at once, since the ranks no longer agree on which collective comes next.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::comm {

// Element types a buffer is reduced in. MPI has no 16-bit float types, so f16 and bf16 are
// refused for now (they would be reduced in f32 by a later step of issue 50).
enum class DataType : uint8_t { f32, f64, f16, bf16 };
enum class Reduction : uint8_t { sum, mean };

std::string_view data_type_name(DataType type);  // "f32", ...
std::string_view reduction_name(Reduction reduction);  // "sum", "mean"
Expected<Reduction> parse_reduction(std::string_view name);
int64_t data_type_bytes(DataType type);

// A collective in flight. wait() returns once this rank's buffer holds the result, or with
// the error that stopped it (a timeout included); it may be called once. Destroying a handle
// that was never waited on waits for it, ignoring the result: MPI must finish a request
// before its buffer is reused.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual Status wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // For reports and errors: "world of one", "Open MPI, rank 1 of 3".
  virtual std::string description() const = 0;

  // Starts reducing `count` elements of `type` at `data` across the ranks, in place; with
  // `mean`, the sum is divided by size(). Every rank must start the same collectives in the
  // same order, with equal counts and types.
  virtual Expected<std::unique_ptr<PendingCollective>> start_all_reduce(
      void* data, int64_t count, DataType type, Reduction reduction) = 0;
  // Starts copying `bytes` at `data` on rank `root` to `data` on every other rank.
  virtual Expected<std::unique_ptr<PendingCollective>> start_broadcast(void* data,
                                                                       int64_t bytes,
                                                                       int root) = 0;
  // Returns once every rank has called it.
  virtual Status barrier() = 0;

  // The blocking forms: a start, then its wait.
  Status all_reduce(void* data, int64_t count, DataType type, Reduction reduction);
  Status broadcast(void* data, int64_t bytes, int root);
};

// A world of one: rank 0 of 1. Every collective is the identity (a mean over one rank is the
// value itself), completes at once, and checks only its arguments.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string description() const override { return "world of one"; }
  Expected<std::unique_ptr<PendingCollective>> start_all_reduce(void* data, int64_t count,
                                                                DataType type,
                                                                Reduction reduction) override;
  Expected<std::unique_ptr<PendingCollective>> start_broadcast(void* data, int64_t bytes,
                                                               int root) override;
  Status barrier() override { return Status::ok(); }
};

// Checks shared by every communicator: a count and a type it can reduce, a root in the world.
Status check_all_reduce_arguments(const void* data, int64_t count, DataType type);
Status check_broadcast_arguments(const void* data, int64_t bytes, int root, int size);

// How long a collective may wait for its peers before it fails: $KILN_COMM_TIMEOUT_S seconds
// (a positive number), 300 when unset or not a positive number. Read once per process.
double collective_timeout_seconds();

// The number of ranks mpirun started this process among ($OMPI_COMM_WORLD_SIZE), without
// starting MPI; 1 outside mpirun. For the cost model, which prices collectives at compile
// time and must not start MPI to do so.
int world_size_from_environment();

// The process's communicator, made on first use: under mpirun ($OMPI_COMM_WORLD_SIZE set),
// Open MPI's world (starting MPI unless the program already did), else a LocalCommunicator.
// When MPI cannot start, or Kiln was built without it, the communicator returned fails every
// collective with that reason ("built without MPI") but still reports mpirun's rank and size.
// Safe to call from any thread; the collectives of one communicator must not overlap in time
// from two threads (MPI is started for serialized calls).
Communicator& default_communicator();

// Makes `replacement` the process's communicator until the returned previous one is put back
// (null: the next default_communicator() call makes the usual one). For tests, which check
// that the interpreter and the executor go through the communicator; the caller keeps
// ownership of `replacement`.
Communicator* replace_default_communicator(Communicator* replacement);

}  // namespace kiln::comm
