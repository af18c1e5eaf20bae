// The main of every GoogleTest program of the suite but the *_mpi_test.cpp ones (tests/comm/mpi_test_main.cpp):
// GoogleTest's own, after choosing the OpenBLAS kernel set the fpdt program would run (blas_test_core.h).
#include <gtest/gtest.h>

#include "blas_test_core.h"

int main(int argc, char** argv) {
  if (!fpdt::testing::run_the_programs_blas_core(argv)) return 1;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
