// The OpenBLAS kernel set a test program runs: the fpdt program's (its restart rule, blas_core.h, applied
// first thing in main), unless OPENBLAS_CORETYPE is set — by the user, or by a ctest registration that
// runs the program under one kernel set (CMakeLists.txt, "blas.<set>.…"), which also names the set in
// FPDT_TEST_BLAS_CORE so that a library that loads another one fails the program instead of testing it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fpdt/kernels/cpu/blas_core.h"

namespace fpdt::testing {

// Call first in main, with main's argv untouched. Returns false (after saying why on stderr) when the
// program must not go on: FPDT_TEST_BLAS_CORE names a kernel set the library did not load.
inline bool run_the_programs_blas_core(char** argv) {
  kernels::cpu::restart_with_matching_blas_core(argv);
  const char* wanted = std::getenv("FPDT_TEST_BLAS_CORE");
  if (wanted == nullptr || kernels::cpu::loaded_blas_core() == wanted) return true;
  std::fprintf(stderr, "[test] this run is registered for OpenBLAS's %s kernels but the library loaded %s "
               "(OPENBLAS_CORETYPE=%s); hint: rerun ctest, which lists the kernel sets afresh\n", wanted,
               kernels::cpu::loaded_blas_core().c_str(), std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "");
  return false;
}

}  // namespace fpdt::testing
