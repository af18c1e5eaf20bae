// For *_mpi_test.cpp programs (run under mpirun by ctest, with tests/comm/mpi_test_main.cpp as
// their main): the world communicator, and a seed chosen by rank 0 that every rank agrees on.
#pragma once

#include <cstdint>

#include "fpdt/comm/communicator.h"
#include "testing.h"

namespace fpdt::comm::testing {

// The world of this test program (MPI under mpirun, local when run directly).
Communicator& world();

// A fresh seed (printed by rank 0; FPDT_TEST_SEED replays it), broadcast from rank 0.
inline uint64_t agreed_seed(Communicator& comm) {
  uint64_t seed = comm.rank() == 0 ? fpdt::testing::fresh_seed() : 0;
  comm.broadcast(&seed, sizeof seed, 0);
  return seed;
}

}  // namespace fpdt::comm::testing
