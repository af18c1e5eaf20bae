// Choosing the world communicator (MPI when a launcher started this process, local otherwise) and the
// one for a backend's compute-tier buffers (NCCL over device memory).
#include <cstdlib>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/comm/mpi/mpi_world.h"

namespace fpdt::comm {

namespace {

int positive_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 0;
}

// The tasks of the Slurm job step this process is one of (srun), 0 outside one. (A batch script is no
// step: its processes are not ranks.)
int srun_tasks() { return positive_env("SLURM_STEP_NUM_TASKS"); }

}  // namespace

int launched_world_size() {
  // Open MPI (mpirun), MPICH / Intel MPI (Hydra's PMI, Slurm's srun --mpi=pmi2), MVAPICH.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"})
    if (const int size = positive_env(name)) return size;
  // Slurm's srun --mpi=pmix: PMIx tells MPI_Init the ranks, and the environment only the step's size.
  if (std::getenv("PMIX_RANK") != nullptr) return srun_tasks();
  return 0;
}

bool mpi_built() { return mpi::built(); }

std::unique_ptr<Communicator> make_compute_comm(Communicator& world, bool device_buffers, void* cuda_stream) {
  if (device_buffers && world.size() > 1) return make_nccl(world, cuda_stream);
  return world.split(0, world.rank());
}

std::unique_ptr<Communicator> make_world(int* argc, char*** argv) {
  const int launched = launched_world_size();
  // srun without a process-management interface: MPI cannot find its peers, and each task alone would
  // train the whole run into the same folder.
  if (launched == 0 && srun_tasks() > 1)
    throw Error("comm",
                "srun started " + std::to_string(srun_tasks()) +
                    " tasks without a process-management interface, so they cannot find each other",
                "srun --mpi=pmix (srun --mpi=list shows what this Slurm has; MpiDefault=pmix in slurm.conf makes it "
                "the default)");
  // A stub build started by `mpirun -np 1` runs locally; with more ranks it must refuse (each
  // process would otherwise train alone, silently).
  std::unique_ptr<Communicator> world =
      launched > 1 || (launched == 1 && mpi::built()) ? mpi::make_world(argc, argv) : make_local();
  log::set_rank(world->rank(), world->size());
  return world;
}

}  // namespace fpdt::comm
