// make_compute_comm, the choice of communicator for a backend's compute-tier buffers: host buffers get
// a working duplicate of the world (every collective of it checked), one rank needs no NCCL even for
// device buffers, and several ranks with device buffers get NCCL — in a build without it, one clear
// error on every rank, before any of them communicates (nothing hangs).
#include <gtest/gtest.h>

#include "comm/collective_checks.h"
#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "testing.h"

namespace fpdt::comm {
namespace {

TEST(ComputeComm, HostBuffersGetADuplicateOfTheWorld) {
  const uint64_t seed = fpdt::testing::fresh_seed();
  run_ranks(3, [&](Communicator& world) {
    const auto compute = make_compute_comm(world, false, nullptr);
    EXPECT_EQ(compute->backend(), "threads");
    EXPECT_EQ(compute->size(), 3);
    EXPECT_EQ(compute->rank(), world.rank());
    testing::check_all_collectives(*compute, seed);
  });
}

TEST(ComputeComm, OneRankNeedsNoNccl) {
  const auto world = make_local();
  const auto compute = make_compute_comm(*world, true, nullptr);
  EXPECT_EQ(compute->backend(), "local");
  EXPECT_EQ(compute->size(), 1);
}

TEST(ComputeComm, DeviceBuffersOnSeveralRanksAreNcclsOrOneClearError) {
  if (nccl_built()) {  // comm/nccl is compiled only beside the CUDA backend (CMakeLists.txt)
    EXPECT_TRUE(kernels::cuda_built());
    return;
  }
  run_ranks(2, [](Communicator& world) {
    try {
      make_compute_comm(world, true, nullptr);
      ADD_FAILURE() << "several ranks over device buffers need NCCL";
    } catch (const Error& error) {
      fpdt::testing::expect_contains(error.what(), {"[comm] collectives over GPU memory need NCCL", "hint:"});
    }
  });
}

}  // namespace
}  // namespace fpdt::comm
