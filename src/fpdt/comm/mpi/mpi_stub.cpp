// The MPI backend of a build without MPI (CMake compiles this file instead of
// mpi_communicator.cpp when find_package(MPI) fails): same entry points, a clear error.
#include "fpdt/base/error.h"
#include "fpdt/comm/mpi/mpi_world.h"
#include "fpdt/comm/text.h"

namespace fpdt::comm::mpi {

bool built() { return false; }

std::unique_ptr<Communicator> make_world(int* argc, char*** argv) {
  throw Error("comm",
              detail::cat("started by mpirun with ", launched_world_size(), " ranks, but fpdt was built without MPI"),
              "install libopenmpi-dev and rebuild (scripts/install_deps.sh installs it)");
}

}  // namespace fpdt::comm::mpi
