// Which GPU a process of a multi-GPU job takes: the launcher's local rank (the rank's index among the
// ranks of its node) picks one of the visible devices, so rank r of a node takes GPU r rather than every
// rank taking GPU 0. Free of CUDA types (the CPU tests check it); the CUDA backend calls cudaSetDevice
// with the result when it is made.
#pragma once

#include <cstdlib>
#include <string>

#include "fpdt/base/error.h"

namespace fpdt::kernels::cuda {

// The local rank the launcher announced (Open MPI, MPICH/Hydra, MVAPICH, Slurm, torchrun-style), or 0
// when none did (a plain run).
inline int local_rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                           "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      FPDT_CHECK(end != value && *end == '\0' && rank >= 0 && rank < (1 << 20), "cuda",
                 std::string("the launcher's ") + name + "=" + value + " is not a local rank",
                 "unset it or start the job with mpirun");
      return static_cast<int>(rank);
    }
  }
  return 0;
}

// The device of `local_rank` among `devices` visible ones. One visible device is every rank's (the
// launcher gave each rank its own, e.g. CUDA_VISIBLE_DEVICES per rank); otherwise local rank r takes
// device r, and more ranks than devices on a node is an error, not two ranks on one GPU.
inline int device_for_local_rank(int local_rank, int devices) {
  FPDT_CHECK(devices > 0, "cuda", "no CUDA device is visible", "check nvidia-smi and CUDA_VISIBLE_DEVICES");
  if (devices == 1) return 0;
  FPDT_CHECK(local_rank < devices, "cuda",
             "local rank " + std::to_string(local_rank) + " but only " + std::to_string(devices) +
                 " GPUs are visible on this node",
             "start at most " + std::to_string(devices) +
                 " ranks per node, or give each rank one GPU (CUDA_VISIBLE_DEVICES)");
  return local_rank;
}

}  // namespace fpdt::kernels::cuda
