// Choosing the world communicator (MPI when a launcher started this process, local otherwise) and the
// one for a backend's compute-tier buffers (NCCL over device memory).
#include <cstdlib>

#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/mpi/mpi_world.h"

namespace fpdt::comm {

int launched_world_size() {
  // Open MPI (mpirun), MPICH / Intel MPI (Hydra's PMI), MVAPICH.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (const char* value = std::getenv(name)) {
      const int size = std::atoi(value);
      if (size > 0) return size;
    }
  }
  return 0;
}

bool mpi_built() { return mpi::built(); }

std::unique_ptr<Communicator> make_compute_comm(Communicator& world, bool device_buffers, void* cuda_stream) {
  if (device_buffers && world.size() > 1) return make_nccl(world, cuda_stream);
  return world.split(0, world.rank());
}

std::unique_ptr<Communicator> make_world(int* argc, char*** argv) {
  const int launched = launched_world_size();
  // A stub build started by `mpirun -np 1` runs locally; with more ranks it must refuse (each
  // process would otherwise train alone, silently).
  std::unique_ptr<Communicator> world =
      launched > 1 || (launched == 1 && mpi::built()) ? mpi::make_world(argc, argv) : make_local();
  log::set_rank(world->rank(), world->size());
  return world;
}

}  // namespace fpdt::comm
