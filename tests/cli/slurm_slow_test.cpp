// A real cluster manager (issue 45): Slurm from Debian's packages runs the README's batch script,
// scripts/fpdt_train.sbatch (2 ranks by `srun --mpi=pmix`, `--resume`, a requeue when fpdt exits 75). The
// job's 1-minute time limit sends SIGUSR1 mid-run: the run saves its step and exits 75, the script requeues
// the job. The requeued run resumes; the test then requeues the job as a cluster preempting it does
// (SIGTERM): the run saves again and exits 75. Every step logged, the weights and the optimizer state of that
// last checkpoint are an uninterrupted srun run's to the same step, bitwise. The test starts munged,
// slurmctld and slurmd itself on a slurm.conf and munge key of its own (a temp folder, free ports: the
// system's configuration is not read) and stops them, and everything they started, at the end. Needs root
// and Debian's slurmctld, slurmd, slurm-client and munge (scripts/install_deps.sh, which `make test` runs).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "fpdt/comm/communicator.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Two TCP ports free on the loopback now (bound together, so they differ), for slurmctld and slurmd.
std::pair<int, int> free_ports() {
  int sockets[2], ports[2];
  for (int i = 0; i < 2; ++i) {
    sockets[i] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (sockets[i] < 0 || ::bind(sockets[i], reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(sockets[i], reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("no free port on 127.0.0.1");
    ports[i] = ntohs(address.sin_port);
  }
  for (int fd : sockets) ::close(fd);
  return {ports[0], ports[1]};
}

// Ends process `pid` (a child of this one): SIGTERM, then SIGKILL after `grace_seconds`; reaps it.
void stop_child(pid_t pid, double grace_seconds) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  const auto start = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (seconds_since(start) > grace_seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// One Slurm cluster of one node on this machine: munged, slurmctld and slurmd in the foreground as children
// of this process, configured by files in `dir` alone. SLURM_CONF points this process (and so the sbatch,
// srun and scontrol it runs) at it while it lives.
class SlurmCluster {
 public:
  explicit SlurmCluster(std::string dir) : dir_(std::move(dir)), conf_(dir_ + "/slurm.conf") {}
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;
  ~SlurmCluster() { stop(); }

  // Starts the daemons and waits (up to 30 s) for the node to take jobs: "" then, else what went wrong
  // with the daemons' logs.
  std::string start() {
    for (const char* program : {"munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo"})
      if (run_command(std::string("command -v ") + program).exit_status != 0)
        return std::string(program) + " is not on PATH: scripts/install_deps.sh installs Slurm and munge (`make test` runs it)";
    const std::string key = dir_ + "/munge.key";
    {
      std::string bytes(1024, '\0');
      std::ifstream("/dev/urandom", std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      write_text_file(key, bytes);
      std::filesystem::permissions(key, std::filesystem::perms::owner_read);  // munged wants it private
    }
    const std::string socket = dir_ + "/munge.socket";
    // -f: munged refuses a socket folder that others cannot traverse (the test's is private) unless forced.
    munged_ = start_program("munged", {"-F", "-f", "--key-file=" + key, "--socket=" + socket, "--pid-file=" + dir_ + "/munged.pid",
                                       "--seed-file=" + dir_ + "/munged.seed", "--log-file=" + dir_ + "/munged.log"},
                            dir_ + "/munged.out");
    if (!wait_until([&] { return std::filesystem::exists(socket); }, 10))
      return "munged did not start within 10 s\n" + logs();
    const auto [controller_port, node_port] = free_ports();
    std::filesystem::create_directories(dir_ + "/state");
    std::filesystem::create_directories(dir_ + "/spool");
    // One node of 4 CPUs whatever the machine has (config_overrides): the job's 2 ranks and the reference
    // run's 2 fit beside each other. No cgroups, accounting or mail: nothing outside `dir` is touched.
    write_text_file(conf_, "ClusterName=fpdt-test\nSlurmctldHost=localhost(127.0.0.1)\n"
                           "SlurmctldPort=" + std::to_string(controller_port) + "\nSlurmdPort=" + std::to_string(node_port) +
                           "\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n"
                           "AuthInfo=socket=" + socket + "\nStateSaveLocation=" + dir_ + "/state\nSlurmdSpoolDir=" + dir_ +
                           "/spool\nSlurmctldPidFile=" + dir_ + "/slurmctld.pid\nSlurmdPidFile=" + dir_ + "/slurmd.pid\n"
                           "SlurmctldLogFile=" + dir_ + "/slurmctld.log\nSlurmdLogFile=" + dir_ + "/slurmd.log\n"
                           "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
                           "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\nMailProg=/bin/true\n"
                           "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
                           "SlurmdParameters=config_overrides\nMpiDefault=none\nReturnToService=2\nKillWait=10\n"
                           "NodeName=fpdt-node NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN\n"
                           "PartitionName=test Nodes=fpdt-node Default=YES MaxTime=INFINITE State=UP\n");
    ::setenv("SLURM_CONF", conf_.c_str(), 1);
    slurmctld_ = start_program("slurmctld", {"-D", "-i", "-f", conf_}, dir_ + "/slurmctld.out");
    slurmd_ = start_program("slurmd", {"-D", "-N", "fpdt-node", "-f", conf_}, dir_ + "/slurmd.out");
    if (!wait_until([&] { return command("sinfo -h -o %t").output == "idle\n"; }, 30))
      return "Slurm's node did not become idle within 30 s (sinfo: " + command("sinfo -h -o %t").output + ")\n" + logs();
    return "";
  }

  // `words` run by the shell with a 30 s limit (Slurm's clients retry a controller that does not answer).
  ProgramResult command(const std::string& words) const { return run_command("timeout 30 " + words); }

  // The fields of `scontrol show job` (JobState, Reason, Restarts, ExitCode, ...); empty when it is not known.
  std::map<std::string, std::string> job(const std::string& id) const {
    std::map<std::string, std::string> fields;
    std::istringstream words(command("scontrol show job -o " + id).output);
    for (std::string word; words >> word;)
      if (const size_t equals = word.find('='); equals != std::string::npos)
        fields.emplace(word.substr(0, equals), word.substr(equals + 1));
    return fields;
  }

  // Every daemon's output and log, for a failure message.
  std::string logs() const {
    std::string text;
    for (const char* name : {"munged.out", "munged.log", "slurmctld.out", "slurmctld.log", "slurmd.out", "slurmd.log"})
      text += std::string("--- ") + name + "\n" + file_bytes(dir_ + "/" + name);
    return text;
  }

 private:
  template <typename Ready>
  static bool wait_until(Ready ready, double seconds) {
    const auto start = Clock::now();
    while (!ready()) {
      if (seconds_since(start) > seconds) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  // Cancels every job, stops the daemons, then kills whatever they left (a job's slurmstepd or task, found
  // by this cluster's SLURM_CONF in its environment).
  void stop() {
    if (slurmctld_ > 0) {
      command("scancel --user=root");
      wait_until([&] { return command("squeue -h").output.empty(); }, 15);
    }
    for (pid_t* daemon : {&slurmd_, &slurmctld_, &munged_}) {
      stop_child(*daemon, 10);
      *daemon = 0;
    }
    const std::string marker = "SLURM_CONF=" + conf_ + '\0';
    wait_until([&] {
      bool any = false;
      for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos || std::stol(name) == ::getpid()) continue;
        if (file_bytes(entry.path() / "environ").find(marker) == std::string::npos) continue;
        ::kill(static_cast<pid_t>(std::stol(name)), SIGKILL);
        any = true;
      }
      return !any;
    }, 10);
    ::unsetenv("SLURM_CONF");
  }

  std::string dir_, conf_;
  pid_t munged_ = 0, slurmctld_ = 0, slurmd_ = 0;
};

// The step of the last "preempted (SIG...) after step K" line of a job's log and its signal ("" when none).
std::pair<std::string, int64_t> last_preemption(const std::string& log) {
  const std::string mark = "preempted (";
  const size_t at = log.rfind(mark);
  if (at == std::string::npos) return {"", 0};
  const size_t close = log.find(") after step ", at);
  if (close == std::string::npos) return {"", 0};
  return {log.substr(at + mark.size(), close - at - mark.size()), std::atoll(log.c_str() + close + 13)};
}

TEST(Slurm, TimeLimitSignalAndRequeuePreemptTheJobItsRunsResumeAndItsStepsAreTheUninterruptedRunsBitwise) {
  if (::geteuid() != 0) GTEST_SKIP() << "Slurm's daemons run as root (as `make test` does)";
  if (!comm::mpi_built()) GTEST_SKIP() << "fpdt was built without MPI: srun's ranks could not talk";
  const std::string script = std::string(FPDT_SOURCE_DIR) + "/scripts/fpdt_train.sbatch";
  // The README shows the script users copy: this one, as it is.
  EXPECT_NE(file_bytes(std::string(FPDT_SOURCE_DIR) + "/README.md").find(file_bytes(script)), std::string::npos)
      << "README.md does not show scripts/fpdt_train.sbatch as it is";
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  SlurmCluster cluster(dir.path());
  const auto cluster_start = Clock::now();
  ASSERT_EQ(cluster.start(), "") << "Slurm did not start";
  std::printf("[ slurm    ] munged, slurmctld and slurmd up in %.1f s\n", seconds_since(cluster_start));

  // fpdt train's arguments after the script's `train --resume`: 2 ranks of sequence parallelism, more steps
  // than any machine runs in this test (the job never ends by itself: the test ends it), checkpoints only
  // when preempted, no validation.
  const std::string preempted = dir.file("preempted"), straight = dir.file("straight"), log = dir.file("job.log");
  auto args = [&](const std::string& out) {
    return std::vector<std::string>{"--model", setup.config_path, "--data", setup.data_dir, "--out", out, "--steps",
                                    "10000000", "--batch", "1", "--seq", "256", "--sp", "2", "--chunks", "2", "--threads",
                                    "1", "--warmup", "3", "--lr", "1e-3", "--eval-every", "0", "--eval-batches", "0",
                                    "--save-every", "0", "--peak-gflops", "100"};
  };
  // A 1-minute limit whose signal comes 20 s before it: Slurm checks limits every 30 s from slurmctld's
  // start and sends a signal up to 30 s early, so USR1 comes 10-40 s into each run (~28 s into the first).
  const ProgramResult submitted =
      cluster.command("env FPDT='" + fpdt_binary() + "' sbatch --parsable --time=1 --signal=USR1@20 --output=" + log +
                      " " + script + " " + join_args(args(preempted)));
  ASSERT_EQ(submitted.exit_status, 0) << submitted.output << cluster.logs();
  const std::string job = submitted.output.substr(0, submitted.output.find_first_of(";\n"));
  const auto job_start = Clock::now();

  // Waits up to `seconds` for `done`; false (with the job's state, log and the daemons' logs as `failure`)
  // when it did not come. A job the script requeued waits 2 minutes (its BeginTime: Slurm's delay before a
  // requeued batch job runs again); it is let start 3 s after (as an idle cluster's administrator would;
  // at once, slurmd refuses it: the credential of the run it just ended is revoked for that second).
  std::string failure;
  auto wait_for = [&](const std::string& what, double seconds, const std::function<bool()>& done) {
    const auto start = Clock::now();
    while (!done()) {
      std::map<std::string, std::string> fields = cluster.job(job);
      // Only a final state ends the wait: the job passes through others on its way (SIGNALING while the time
      // limit's signal is sent, COMPLETING, REQUEUED, CONFIGURING), and a failed scontrol reads as none.
      static const std::set<std::string> kFinal = {"BOOT_FAIL", "CANCELLED", "COMPLETED",    "DEADLINE",
                                                   "FAILED",    "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                                                   "REVOKED",   "SPECIAL_EXIT", "TIMEOUT"};
      if (kFinal.count(fields["JobState"]) != 0) {
        failure = "job " + job + " ended (" + fields["JobState"] + ") waiting for " + what;
        break;
      }
      if (seconds_since(start) > seconds) {
        failure = "no " + what + " within " + std::to_string(static_cast<int>(seconds)) + " s (job " + job + " " +
                  fields["JobState"] + ", reason " + fields["Reason"] + ")";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!failure.empty()) failure += "\n--- job log\n" + file_bytes(log) + cluster.logs();
    return failure.empty();
  };
  auto let_requeued_job_start = [&] {
    return wait_for("requeued job", 30, [&] { return cluster.job(job)["Reason"] == "BeginTime"; }) &&
           cluster.command("scontrol update JobId=" + job + " StartTime=now+3").exit_status == 0;
  };

  // 1. The time limit's signal: the run saves its step k1 and exits 75; the script requeues the job.
  ASSERT_TRUE(wait_for("preemption by the time limit's signal", 90,
                       [&] { return last_preemption(file_bytes(log)).second > 0; })) << failure;
  const auto [first_signal, first_step] = last_preemption(file_bytes(log));
  const int64_t k1 = first_step;  // a variable, not a binding: clang before 16 captures no binding in a lambda
  EXPECT_EQ(first_signal, "SIGUSR1");
  std::printf("[ run 1    ] preempted by %s after step %lld, %.0f s into the job\n", first_signal.c_str(),
              static_cast<long long>(k1), seconds_since(job_start));
  EXPECT_EQ(latest_of(preempted), "step_" + std::to_string(k1));
  ASSERT_TRUE(let_requeued_job_start()) << failure;

  // 2. The requeued run resumes from k1; 20 steps on, the job is requeued as a cluster preempting it for
  // another job does (SIGTERM): the run saves its step k2 and exits 75.
  ASSERT_TRUE(wait_for("20 steps of the requeued run", 90, [&] { return last_logged_step(preempted) >= k1 + 20; })) << failure;
  EXPECT_NE(file_bytes(log).find("resumed from " + preempted + "/step_" + std::to_string(k1) + " at step " +
                                 std::to_string(k1)),
            std::string::npos);
  const ProgramResult requeued = cluster.command("scontrol requeue " + job);
  ASSERT_TRUE(wait_for("preemption of the requeued run", 60, [&] { return last_preemption(file_bytes(log)).second > k1; }))
      << failure;
  const auto [second_signal, k2] = last_preemption(file_bytes(log));
  // SIGTERM from the requeue; SIGUSR1 if the time limit's signal came first (a machine so loaded that 20
  // steps took the next check's time): either is a preemption the run must survive.
  EXPECT_TRUE(second_signal == "SIGTERM" || (second_signal == "SIGUSR1" && requeued.exit_status != 0))
      << second_signal << "\n" << requeued.output;
  std::printf("[ run 2    ] resumed at step %lld, preempted by %s after step %lld\n", static_cast<long long>(k1),
              second_signal.c_str(), static_cast<long long>(k2));
  EXPECT_EQ(latest_of(preempted), "step_" + std::to_string(k2));
  ASSERT_TRUE(wait_for("requeued job", 30, [&] { return cluster.job(job)["Reason"] == "BeginTime"; })) << failure;
  ASSERT_EQ(cluster.command("scancel " + job).exit_status, 0);
  const std::map<std::string, std::string> fields = cluster.job(job);
  EXPECT_EQ(fields.at("Restarts"), "2");

  // 3. The uninterrupted run to step k2, as srun launches it: the same steps and checkpoint, bitwise.
  std::vector<std::string> reference = {"--mpi=pmix", "-n", "2", fpdt_binary(), "train", "--resume"};
  for (const std::string& word : args(straight)) reference.push_back(word);
  reference.insert(reference.end(), {"--save-every", std::to_string(k2), "--stop-after", std::to_string(k2)});
  const ProgramResult uninterrupted = run_command("timeout 300 srun " + join_args(reference));
  ASSERT_EQ(uninterrupted.exit_status, 0) << uninterrupted.output;
  std::printf("[ done     ] %.0f s\n", seconds_since(cluster_start));

  // Every step logged once with the uninterrupted run's loss, learning rate and gradient norm; the weights
  // and the optimizer state.
  const auto want = logged_steps(straight + "/metrics.jsonl");
  const auto got = logged_steps(preempted + "/metrics.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(k2));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second, want[i].second) << "step " << want[i].first;
  }
  const std::string step = "/step_" + std::to_string(k2) + "/";
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(straight + step)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".safetensors")) continue;
    EXPECT_EQ(file_bytes(preempted + step + name), file_bytes(straight + step + name)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 2) << "model.safetensors and the optimizer state (ZeRO 0: one file)";
}

}  // namespace
}  // namespace fpdt::testing
