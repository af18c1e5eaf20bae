// Helpers for tests that run `fpdt` under mpirun (*_mpirun_test.cpp, which CMake gives FPDT_MPIEXEC,
// FPDT_MPIEXEC_NUMPROC_FLAG and FPDT_MPIEXEC_FLAGS): the launcher's command prefix, running a job to
// completion, starting one in the background, finding the process of one rank, waiting with a timeout,
// and saying what each process of a job that did not end was doing (state, wait channel, stacks).
// (mpirun ends once it has signalled its ranks, without waiting for them to exit.)
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
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

// The text of a /proc file, empty when the process is gone or the file unreadable. (POSIX reads: a
// std::ifstream throws from its buffer when the process exits during the read, "No such process".)
inline std::string proc_text(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(got));
  ::close(fd);
  return text;
}

// The parent of process `pid` (from /proc/<pid>/stat: the field after the command name, which is in
// parentheses and may itself hold spaces or parentheses), or 0 when it has gone.
inline pid_t parent_of(pid_t pid) {
  const std::string line = proc_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t name_end = line.rfind(')');
  if (name_end == std::string::npos || name_end + 4 > line.size()) return 0;
  return static_cast<pid_t>(std::atol(line.c_str() + name_end + 4));  // ") S <ppid>"
}

// The pid of the fpdt process of MPI rank `rank` that the mpirun `job` started (one of its children), or
// 0. Only the job's own children: a rank of an earlier job on the same run folder can outlive its mpirun
// (mpirun ends once it has sent the kill, and a process in uninterruptible disk I/O dies only when the I/O
// is done), and killing that one would leave this job running.
inline pid_t find_rank_process(int rank, pid_t job) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (parent_of(pid) != job) continue;
    const std::string command = proc_text(entry.path() / "cmdline");
    const std::string environment = proc_text(entry.path() / "environ");
    // mpirun's forked child has its environment until it execs fpdt with the rank's.
    if (command.rfind(fpdt_binary() + '\0', 0) != 0) continue;
    if (environment.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos) return pid;
  }
  return 0;
}

// Waits up to timeout_seconds until no live process (zombies are dead) has `marker` in its command line;
// whether none has.
inline bool wait_until_no_process_mentions(const std::string& marker, double timeout_seconds) {
  auto any_alive = [&] {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string command = proc_text(entry.path() / "cmdline");  // empty for a zombie
      if (command.find(marker) != std::string::npos) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (any_alive()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// What process `pid` is doing, for a test's failure message: pid, parent, state (R running, S sleeping,
// D uninterruptible I/O, Z zombie, T stopped), name, its pending signals, and each thread's state, kernel
// wait channel and (where readable) kernel stack.
inline std::string describe_process(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::string stat = proc_text(dir + "/stat");
  if (stat.empty()) return "  pid " + std::to_string(pid) + ": gone\n";
  std::string text = "  pid " + std::to_string(pid) + " parent " + std::to_string(parent_of(pid)) + ": " +
                     stat.substr(0, stat.find(')') + 3) + "\n";
  std::istringstream status(proc_text(dir + "/status"));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("SigPnd") || line.starts_with("ShdPnd")) text += "    " + line + "\n";
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(dir + "/task", error)) {
    const std::string task_stat = proc_text(task.path() / "stat");
    const size_t name_end = task_stat.rfind(')');
    text += "    thread " + task.path().filename().string() + " " +
            (name_end == std::string::npos ? "gone" : task_stat.substr(name_end + 2, 1)) + " wchan " +
            proc_text(task.path() / "wchan") + "\n";
    std::istringstream stack(proc_text(task.path() / "stack"));
    for (std::string frame; std::getline(stack, frame);) text += "      " + frame + "\n";
  }
  return text;
}

// Each thread's user-space call stack of process `pid` (gdb's "thread apply all bt"), where gdb is
// installed and may attach; empty otherwise.
inline std::string user_stacks(pid_t pid) {
  const std::string output = run_command("command -v gdb >/dev/null && timeout 30 gdb -p " + std::to_string(pid) +
                                         " -batch -ex 'thread apply all bt' </dev/null").output;
  std::istringstream lines(output);
  std::string text;
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("Thread ") || line.starts_with("#")) text += "      " + line + "\n";
  return text;
}

// Every process under `root` (its children, theirs, ...), parents before children.
inline std::vector<pid_t> descendants(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> all;  // (pid, parent)
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    all.emplace_back(pid, parent_of(pid));
  }
  std::vector<pid_t> tree = {root};
  for (size_t i = 0; i < tree.size(); ++i)
    for (const auto& [pid, parent] : all)
      if (parent == tree[i]) tree.push_back(pid);
  tree.erase(tree.begin());
  return tree;
}

// describe_process and user_stacks for `root`, every process under it, and every other process whose
// command line holds `marker` (a rank that lost its parent); root 0: only those.
inline std::string describe_processes(pid_t root, const std::string& marker) {
  std::vector<pid_t> shown;
  if (root > 0) {
    shown = descendants(root);
    shown.insert(shown.begin(), root);
  }
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (std::find(shown.begin(), shown.end(), pid) == shown.end() &&
        proc_text(entry.path() / "cmdline").find(marker) != std::string::npos)
      shown.push_back(pid);
  }
  std::string text;
  for (pid_t pid : shown) text += describe_process(pid) + user_stacks(pid);
  return text;
}

// Whether some process under `root` is alive (a zombie is dead: it only waits to be reaped).
inline bool any_descendant_alive(pid_t root) {
  for (pid_t pid : descendants(root)) {
    const std::string stat = proc_text("/proc/" + std::to_string(pid) + "/stat");
    const size_t name_end = stat.rfind(')');
    if (name_end != std::string::npos && name_end + 2 < stat.size() && stat[name_end + 2] != 'Z') return true;
  }
  return false;
}

// SIGKILLs `root` (a child of this process) and every process under it; reaps `root`, returns its status.
inline int kill_job(pid_t root) {
  const std::vector<pid_t> below = descendants(root);
  ::kill(root, SIGKILL);
  for (pid_t pid : below) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(root, &status, 0);
  return status;
}

struct JobEnd {
  bool ended = false;        // false: still running at the timeout (then killed)
  int status = 0;            // waitpid status
  double seconds = 0;        // from the call to the end (or the timeout)
  std::string processes;     // at a timeout: describe_processes of the job before it was killed
  bool ranks_alive = false;  // at a timeout: whether any process under it (a rank) was still alive
};

// Waits up to timeout_seconds for the process `pid` to end; if it does not, describes it, its descendants
// and the processes naming `marker` (describe_processes; default: any fpdt), then kills it and its
// descendants (kill_job).
inline JobEnd wait_for_job(pid_t pid, double timeout_seconds, const std::string& marker = "") {
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
    end.ranks_alive = any_descendant_alive(pid);
    end.processes = describe_processes(pid, marker.empty() ? fpdt_binary() : marker);
    end.status = kill_job(pid);
  }
  return end;
}

}  // namespace fpdt::testing
