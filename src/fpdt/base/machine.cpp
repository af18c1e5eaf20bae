// Cores and memory of this machine (see machine.h).
#include "fpdt/base/machine.h"

#include <unistd.h>

namespace fpdt {

int machine_cores() {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? static_cast<int>(cores) : 1;
}

size_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_bytes) : 0;
}

}  // namespace fpdt
