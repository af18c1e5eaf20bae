// What this process runs on: its OpenMP team, the fewest cores a rank of the job may run on (CPU
// affinity), and its peak resident memory. Read by train and eval alike; measures no rates (rates.h).
#pragma once

#include <cstddef>

#include "fpdt/comm/communicator.h"

namespace fpdt::machine {

// Sets the OpenMP team's thread count (0: all cores; the GEMMs run on it too) and returns it.
int set_threads(int threads);

// The fewest cores a rank may run on (its CPU affinity, sched_getaffinity) and the first rank with
// that few. A launcher's binding (Open MPI binds each rank to one core by default) or taskset can
// leave a rank fewer cores than its --threads.
struct RankCores {
  int cores = 0;  // 0: unknown
  int rank = 0;
};
// Collective over `world`, except in a dry run (this rank's own cores).
RankCores fewest_cores(comm::Communicator& world, bool dry_run);

// The process's peak resident set size (VmHWM from /proc/self/status), or 0 where unknown.
size_t peak_rss_bytes();

}  // namespace fpdt::machine
