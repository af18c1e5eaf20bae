// Helpers for tests that launch `fpdt` under mpirun themselves (*_mpirun_test.cpp, which CMake gives
// FPDT_MPIEXEC, FPDT_MPIEXEC_NUMPROC_FLAG and FPDT_MPIEXEC_FLAGS).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "fpdt_program.h"

namespace fpdt::testing {

// mpirun -n RANKS with the suite's flags.
inline std::vector<std::string> mpirun_prefix(int ranks) {
  std::vector<std::string> args = {FPDT_MPIEXEC, FPDT_MPIEXEC_NUMPROC_FLAG, std::to_string(ranks)};
  std::istringstream flags(FPDT_MPIEXEC_FLAGS);
  for (std::string flag; flags >> flag;) args.push_back(flag);
  return args;
}

// Runs `prefix fpdt args` to completion (as root too) and captures its output.
inline ProgramResult run_mpi(const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::string command;
  for (const std::string& word : prefix) command += "'" + word + "' ";
  return run_command(command + "'" + fpdt_binary() + "' " + join_args(args));
}

}  // namespace fpdt::testing
