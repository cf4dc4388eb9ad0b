// One rank of the multi-process tests (mpi_test.sh starts several under mpirun). Each case
// checks this rank's results itself, prints "rank R: ok" and exits 0, or prints what went
// wrong and exits 1:
//   collectives   all-reduces (sum, mean; f32, f64; blocking and started together) and
//                 broadcasts through the process's communicator, and a compiled graph with an
//                 all_reduce step against the value every rank must get
//   dead-peer     the last rank kills itself before an all-reduce the others wait on
//   silent-peer   the last rank sleeps past the timeout instead of joining: the others' wait
//                 fails with the timeout's error
// `built-with-mpi`, run without mpirun, exits 0 when this build has MPI and 1 otherwise.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "compiler/pipeline.h"
#include "compiler/run.h"
#include "interp/interpreter.h"
#include "ir/parser.h"
#include "target/target.h"

namespace kiln {
namespace {

// Fails the rank with `message` unless `ok`.
void require(bool ok, std::string_view message, const comm::Communicator& comm) {
  if (ok) return;
  fmt::print(stderr, "rank {}: {}\n", comm.rank(), message);
  std::exit(1);
}

void require_ok(const Status& status, std::string_view what, const comm::Communicator& comm) {
  require(status.is_ok(), fmt::format("{}: {}", what, status.message()), comm);
}

// Rank r's element i: distinct on every rank and every element.
double element(int rank, int64_t i) { return rank + 1 + 0.5 * static_cast<double>(i); }

// The sum over the ranks of element(r, i).
double sum_over_ranks(int ranks, int64_t i) {
  double sum = 0;
  for (int r = 0; r < ranks; ++r) sum += element(r, i);
  return sum;
}

template <typename T>
std::vector<T> rank_buffer(int rank, int64_t count) {
  std::vector<T> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = T(element(rank, i));
  return values;
}

template <typename T>
void check_all_reduce(comm::Communicator& comm, comm::DataType type, comm::Reduction reduction) {
  constexpr int64_t kCount = 1000;
  std::vector<T> values = rank_buffer<T>(comm.rank(), kCount);
  require_ok(comm.all_reduce(values.data(), kCount, type, reduction), "all_reduce", comm);
  for (int64_t i = 0; i < kCount; ++i) {
    double want = sum_over_ranks(comm.size(), i);
    if (reduction == comm::Reduction::mean) want /= comm.size();
    require(std::abs(values[static_cast<size_t>(i)] - want) <= 1e-6 * std::abs(want),
            fmt::format("all_reduce ({}, {}) element {} is {}, not {}",
                        comm::reduction_name(reduction), comm::data_type_name(type), i,
                        double(values[static_cast<size_t>(i)]), want),
            comm);
  }
}

void check_broadcast(comm::Communicator& comm) {
  const int root = comm.size() - 1;
  std::vector<double> values = rank_buffer<double>(comm.rank(), 77);
  require_ok(comm.broadcast(values.data(), 77 * 8, root), "broadcast", comm);
  require(values == rank_buffer<double>(root, 77), "broadcast: not the root's values", comm);
  std::vector<float> floats = rank_buffer<float>(comm.rank(), 5);
  require_ok(comm.broadcast(floats.data(), 5 * 4, 0), "broadcast", comm);
  require(floats == rank_buffer<float>(0, 5), "broadcast: not rank 0's values", comm);
}

// Two all-reduces in flight at once, waited on in the other order.
void check_started_together(comm::Communicator& comm) {
  std::vector<double> first = rank_buffer<double>(comm.rank(), 10);
  std::vector<double> second = rank_buffer<double>(comm.rank(), 10);
  auto a = comm.start_all_reduce(first.data(), 10, comm::DataType::f64, comm::Reduction::sum);
  auto b = comm.start_all_reduce(second.data(), 10, comm::DataType::f64, comm::Reduction::mean);
  require(a && b, "start_all_reduce failed", comm);
  require_ok((*b)->wait(), "wait", comm);
  require_ok((*a)->wait(), "wait", comm);
  for (int64_t i = 0; i < 10; ++i) {
    const double sum = sum_over_ranks(comm.size(), i);
    const size_t e = static_cast<size_t>(i);
    require(first[e] == sum && second[e] == sum / comm.size(),
            "all-reduces started together give other values", comm);
  }
}

// y = 2 * mean over the ranks of x + 1, compiled and run by the CPU executor, and by the
// interpreter: both through the communicator.
void check_compiled_graph(comm::Communicator& comm) {
  Expected<Graph> graph = parse_graph(R"(graph @g(%x: f32[4,3]) {
    %c = constant() {value = tensor<f32[]>[2]} : f32[]
    %a = mul(%x, %c) : f32[4,3]
    %m = all_reduce(%a) {reduction = "mean"} : f32[4,3]
    %one = constant() {value = tensor<f32[]>[1]} : f32[]
    %y = add(%m, %one) : f32[4,3]
    return %y
  })");
  require_ok(graph.status(), "parse", comm);
  const std::vector<float> x = rank_buffer<float>(comm.rank(), 12);
  const Array input(DType::f32, Shape({4, 3}), std::vector<double>(x.begin(), x.end()));
  const CompileOptions options;
  Expected<CompiledGraph> compiled = compile_graph(*graph, options);
  require_ok(compiled.status(), "compile", comm);
  auto executor = target_of(options).make_executor(*compiled, options.device);
  require_ok(executor.status(), "executor", comm);
  Expected<std::vector<Array>> ran = run_compiled(*graph, **executor, std::vector<Array>{input});
  require_ok(ran.status(), "run", comm);
  Expected<std::vector<Array>> interpreted = interpret(*graph, std::vector<Array>{input});
  require_ok(interpreted.status(), "interpret", comm);
  for (int64_t i = 0; i < 12; ++i) {
    const double want = 2 * sum_over_ranks(comm.size(), i) / comm.size() + 1;
    for (const Array* got : {&(*ran)[0], &(*interpreted)[0]}) {
      require(std::abs((*got)[i] - want) <= 1e-5 * want,
              fmt::format("compiled graph: element {} is {}, not {}", i, (*got)[i], want), comm);
    }
  }
}

int collectives(comm::Communicator& comm) {
  check_all_reduce<float>(comm, comm::DataType::f32, comm::Reduction::sum);
  check_all_reduce<float>(comm, comm::DataType::f32, comm::Reduction::mean);
  check_all_reduce<double>(comm, comm::DataType::f64, comm::Reduction::sum);
  check_all_reduce<double>(comm, comm::DataType::f64, comm::Reduction::mean);
  check_broadcast(comm);
  check_started_together(comm);
  require_ok(comm.barrier(), "barrier", comm);
  check_compiled_graph(comm);
  fmt::print("rank {}: ok\n", comm.rank());
  return 0;
}

// The last rank leaves (killed, or silent for longer than the timeout); the others must
// fail, not hang.
int missing_peer(comm::Communicator& comm, bool killed) {
  std::vector<double> values = rank_buffer<double>(comm.rank(), 100);
  require_ok(comm.barrier(), "barrier", comm);
  if (comm.rank() == comm.size() - 1) {
    if (killed) std::raise(SIGKILL);
    const double seconds = comm::collective_timeout_seconds() + 60;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return 0;
  }
  const Status status =
      comm.all_reduce(values.data(), 100, comm::DataType::f64, comm::Reduction::sum);
  require(!status.is_ok(), "an all-reduce without a peer succeeded", comm);
  fmt::print(stderr, "{}\n", status.message());
  // A failed rank exits without finalizing MPI (mpi_communicator.h), as a program would.
  std::fflush(stderr);
  std::_Exit(3);
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  const std::string_view test = argc > 1 ? argv[1] : "";
  if (test == "built-with-mpi") return kiln::comm::built_with_mpi() ? 0 : 1;
  kiln::comm::Communicator& comm = kiln::comm::default_communicator();
  if (comm.size() < 2) {
    fmt::print(stderr, "run under mpirun with two or more ranks ({})\n", comm.description());
    return 1;
  }
  if (test == "collectives") return kiln::collectives(comm);
  if (test == "dead-peer") return kiln::missing_peer(comm, true);
  if (test == "silent-peer") return kiln::missing_peer(comm, false);
  fmt::print(stderr, "usage: mpi_check built-with-mpi|collectives|dead-peer|silent-peer\n");
  return 2;
}
