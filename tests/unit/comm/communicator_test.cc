// The world of one, the process's communicator outside mpirun, and the link profile's model.
// The Open MPI communicator is tested across processes by tests/mpi/.
#include <gtest/gtest.h>

#include <vector>

#include "comm/communicator.h"
#include "comm/link_profile.h"
#include "unit/comm/simulated_peer.h"
#include "unit/test_util.h"

namespace kiln::comm {
namespace {

using kiln::testing::is_error_with;

TEST(LocalCommunicator, IsAWorldOfOneWhereCollectivesAreTheIdentity) {
  LocalCommunicator local;
  EXPECT_EQ(local.rank(), 0);
  EXPECT_EQ(local.size(), 1);
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f};
  std::vector<double> f64 = {0.1, 1e300, -0.0};
  const std::vector<float> f32_before = f32;
  const std::vector<double> f64_before = f64;
  ASSERT_TRUE(local.all_reduce(f32.data(), 3, DataType::f32, Reduction::sum));
  ASSERT_TRUE(local.all_reduce(f64.data(), 3, DataType::f64, Reduction::mean));
  ASSERT_TRUE(local.broadcast(f64.data(), 24, 0));
  ASSERT_TRUE(local.barrier());
  EXPECT_EQ(f32, f32_before);
  EXPECT_EQ(f64, f64_before);
}

TEST(LocalCommunicator, StartsWithoutBlockingAndIsWaitedOnLater) {
  LocalCommunicator local;
  std::vector<double> buffer = {4, 5};
  Expected<std::unique_ptr<PendingCollective>> pending =
      local.start_all_reduce(buffer.data(), 2, DataType::f64, Reduction::sum);
  ASSERT_TRUE(pending) << pending.status().message();
  EXPECT_TRUE((*pending)->wait());
  EXPECT_EQ(buffer, (std::vector<double>{4, 5}));
}

TEST(LocalCommunicator, RefusesSixteenBitFloatsAndBadArguments) {
  LocalCommunicator local;
  uint16_t halves[2] = {0, 0};
  const Status bf16 = local.all_reduce(halves, 2, DataType::bf16, Reduction::sum);
  EXPECT_TRUE(is_error_with(bf16, {"all_reduce of bf16 is not supported yet"}));
  EXPECT_EQ(bf16.code(), ErrorCode::unsupported);
  EXPECT_TRUE(is_error_with(local.all_reduce(nullptr, 3, DataType::f32, Reduction::sum),
                            {"no such buffer"}));
  float value = 1;
  EXPECT_TRUE(is_error_with(local.broadcast(&value, 4, 1),
                            {"broadcast from rank 1", "ranks 0 to 0"}));
  EXPECT_TRUE(is_error_with(local.broadcast(&value, -4, 0), {"no such buffer"}));
}

TEST(Reductions, ParseByName) {
  EXPECT_EQ(*parse_reduction("sum"), Reduction::sum);
  EXPECT_EQ(*parse_reduction("mean"), Reduction::mean);
  EXPECT_TRUE(is_error_with(parse_reduction("max").status(), {"unknown reduction 'max'"}));
}

// ctest runs the unit tests outside mpirun.
TEST(DefaultCommunicator, IsTheLocalOneOutsideMpirunAndCanBeReplacedForTests) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr);
  EXPECT_EQ(default_communicator().size(), 1);
  EXPECT_EQ(default_communicator().description(), "world of one");
  EXPECT_EQ(world_size_from_environment(), 1);
  kiln::testing::SimulatedPeerCommunicator peer;
  {
    const kiln::testing::ScopedCommunicator scoped(peer);
    EXPECT_EQ(&default_communicator(), &peer);
  }
  EXPECT_EQ(default_communicator().size(), 1);
}

TEST(CollectiveTimeout, DefaultsToFiveMinutes) {
  ASSERT_EQ(std::getenv("KILN_COMM_TIMEOUT_S"), nullptr);
  EXPECT_EQ(collective_timeout_seconds(), 300);
}

TEST(LinkProfile, AWorldOfOneCostsNothing) {
  const LinkProfile link = shared_memory_link_profile();
  EXPECT_EQ(all_reduce_seconds(link, 1 << 20, 1), 0);
  EXPECT_EQ(broadcast_seconds(link, 1 << 20, 1), 0);
}

TEST(LinkProfile, PricesARingAllReduceAndATreeBroadcast) {
  const LinkProfile link{.latency_seconds = 1e-6, .bytes_per_second = 1e9};
  // Two ranks: two messages in sequence, each rank sending the whole buffer once in halves.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(link, 1000000, 2), 2e-6 + 1e-3);
  // Four ranks: six messages; each rank sends 2 * 3/4 of the buffer.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(link, 1000000, 4), 6e-6 + 1.5e-3);
  // Three ranks: two rounds of the tree, each sending the whole buffer.
  EXPECT_DOUBLE_EQ(broadcast_seconds(link, 1000000, 3), 2 * (1e-6 + 1e-3));
}

TEST(LinkProfile, MeasuringNeedsTwoRanks) {
  LocalCommunicator local;
  EXPECT_TRUE(is_error_with(measure_link_profile(local).status(), {"two or more, not 1"}));
}

}  // namespace
}  // namespace kiln::comm
