// Only in builds without MPI (CMake registers *_nompi_test.cpp there alone): such a build refuses to
// run as one of several ranks started by mpirun (each would otherwise train alone, silently).
#include <gtest/gtest.h>

#include <cstdlib>

#include "fpdt/comm/communicator.h"
#include "testing.h"

namespace fpdt::comm {
namespace {

TEST(Local, BuildWithoutMpiRefusesAMultiRankLaunch) {
  ASSERT_FALSE(mpi_built()) << "CMake registers this test only when it builds without MPI";
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  const std::string message = fpdt::testing::error_message([] { make_world(nullptr, nullptr); });
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  fpdt::testing::expect_contains(message, {"[comm] started by mpirun with 2 ranks, but fpdt was built without MPI",
                                           "hint: install libopenmpi-dev and rebuild"});
}

}  // namespace
}  // namespace fpdt::comm
