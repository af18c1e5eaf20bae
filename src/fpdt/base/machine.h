// What this machine has, as the OS reports it: its online cores and its physical memory. Options and
// checks that bound a request by the machine (--threads, buffers sized by --seq or --context) read
// these, so that one number means one thing everywhere.
#pragma once

#include <cstddef>

namespace fpdt {

// Cores online on this machine (sysconf _SC_NPROCESSORS_ONLN); at least 1.
int machine_cores();

// Bytes of physical memory (sysconf _SC_PHYS_PAGES · _SC_PAGE_SIZE); 0 when the OS does not say.
size_t machine_memory_bytes();

}  // namespace fpdt
