// Helpers for tests that run `fpdt` under mpirun (*_mpirun_test.cpp, which CMake gives FPDT_MPIEXEC,
// FPDT_MPIEXEC_NUMPROC_FLAG and FPDT_MPIEXEC_FLAGS): the launcher's command prefix, running a job to
// completion, starting one in the background, finding the process of one rank, waiting with a timeout.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fpdt_program.h"

namespace fpdt::testing {

// mpirun -np <ranks> <FPDT_MPIEXEC_FLAGS...>; also lets mpirun run as root (containers).
inline std::vector<std::string> mpirun_prefix(int ranks) {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::vector<std::string> args = {FPDT_MPIEXEC, FPDT_MPIEXEC_NUMPROC_FLAG, std::to_string(ranks)};
  std::istringstream flags(FPDT_MPIEXEC_FLAGS);
  for (std::string flag; flags >> flag;) args.push_back(flag);
  return args;
}

// Runs `prefix fpdt args` to completion and captures its output.
inline ProgramResult run_mpi(const std::vector<std::string>& prefix, const std::vector<std::string>& args) {
  std::string command;
  for (const std::string& word : prefix) command += "'" + word + "' ";
  return run_command(command + "'" + fpdt_binary() + "' " + join_args(args));
}

// Starts `mpirun -np <ranks> fpdt <args...>` in the background, output to log_path; returns its pid.
inline pid_t start_fpdt_mpirun(int ranks, const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> command = mpirun_prefix(ranks);
  command.push_back(fpdt_binary());
  command.insert(command.end(), args.begin(), args.end());
  return start_program(command[0], std::vector<std::string>(command.begin() + 1, command.end()), log_path);
}

// The pid of the process of MPI rank `rank` whose command line mentions `marker`, or 0.
inline pid_t find_rank_process(int rank, const std::string& marker) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline"), environ(entry.path() / "environ");
    const std::string command((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    const std::string environment((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    if (command.find(marker) == std::string::npos || command.find("fpdt") == std::string::npos) continue;
    if (environment.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

struct JobEnd {
  bool ended = false;  // false: still running at the timeout (then killed)
  int status = 0;      // waitpid status
  double seconds = 0;  // from the call to the end (or the timeout)
};

// Waits up to timeout_seconds for the process `pid` to end; kills it (SIGKILL) if it does not.
inline JobEnd wait_for_job(pid_t pid, double timeout_seconds) {
  JobEnd end;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while (elapsed() < timeout_seconds) {
    if (::waitpid(pid, &end.status, WNOHANG) == pid) {
      end.ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  end.seconds = elapsed();
  if (!end.ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &end.status, 0);
  }
  return end;
}

}  // namespace fpdt::testing
