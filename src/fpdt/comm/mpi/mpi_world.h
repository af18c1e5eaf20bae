// The MPI backend's entry points, implemented twice: mpi_communicator.cpp (MPI found) and
// mpi_stub.cpp (no MPI: same functions, a clear error). CMake compiles exactly one of them, so
// no caller ever needs an #ifdef. Callers use comm::make_world (communicator.h), not these.
#pragma once

#include <memory>

#include "fpdt/comm/communicator.h"

namespace fpdt::comm::mpi {

// Whether this build has the MPI backend.
bool built();

// Initialises MPI once (MPI_Init_thread, MPI_THREAD_MULTIPLE requested; MPI_Finalize registered
// to run at exit) and returns a communicator over a duplicate of MPI_COMM_WORLD. The stub throws
// fpdt::Error "built without MPI; hint: install libopenmpi-dev and rebuild".
std::unique_ptr<Communicator> make_world(int* argc, char*** argv);

}  // namespace fpdt::comm::mpi
