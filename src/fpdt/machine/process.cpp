// The process's OpenMP team, its ranks' CPU affinity and its peak resident set (see process.h).
#include "fpdt/machine/process.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace fpdt::machine {

int set_threads(int threads) {
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);  // every kernel's team, GEMMs included (OpenBLAS itself runs single-threaded)
  return threads;
}

RankCores fewest_cores(comm::Communicator& world, bool dry_run) {
  constexpr int kMaxCpus = 8192;
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const size_t bytes = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(bytes, set);
  const int own = ::sched_getaffinity(0, bytes, set) == 0 ? CPU_COUNT_S(bytes, set) : 0;
  CPU_FREE(set);
  if (dry_run || world.size() == 1) return {own, world.rank()};
  std::vector<double> cores(static_cast<size_t>(world.size()), 0.0);
  cores[static_cast<size_t>(world.rank())] = own;
  world.all_reduce_sum(cores.data(), cores.size());
  const auto fewest = std::min_element(cores.begin(), cores.end());
  return {static_cast<int>(*fewest), static_cast<int>(fewest - cores.begin())};
}

size_t peak_rss_bytes() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, status))
    if (std::sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
  std::fclose(status);
  return kib * 1024;
}

}  // namespace fpdt::machine
