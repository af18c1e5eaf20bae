// `fpdt train` under mpirun, where the ranks' hosts differ: a rank bound to fewer cores than --threads
// (Open MPI binds each rank to one core by default) is said in the start-up table with the launcher's
// fix; a run folder that some rank does not see (not shared between hosts) is an error naming the rank
// and the path before the first step, for a fresh run and for a resume, which leaves the folder as it
// was. Two hosts on one machine: rank 1 runs in a mount namespace of its own (unshare -m) with an empty
// tmpfs over the run folder, the view a host without the shared file system has.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "mpirun_program.h"

namespace fpdt::testing {
namespace {

namespace fs = std::filesystem;

int own_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

std::vector<std::string> two_replicas(const TinySetup& setup, const std::string& out, int threads) {
  std::vector<std::string> args = setup.train_args(out, 2);
  args.insert(args.end(), {"--dp", "2", "--zero", "1", "--save-every", "1", "--threads", std::to_string(threads)});
  return args;
}

TEST(RefusalsMpirun, RanksBoundToFewerCoresThanThreadsAreSaidWithTheFix) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const int cores = own_cores();
  std::vector<std::string> bound = mpirun_prefix(2);
  bound.insert(bound.end(), {"--bind-to", "core:overload-allowed"});  // one core a rank, as Open MPI's default
  const int threads = std::max(2, cores);
  const ProgramResult pinned = run_mpi(bound, two_replicas(setup, dir.file("pinned"), threads));
  EXPECT_EQ(pinned.exit_status, 0) << pinned.output;
  expect_contains(pinned.output, {"| cores per rank         | 1 (CPU affinity of rank 0): fewer than " +
                                      std::to_string(threads) + " threads",
                                  "mpirun --bind-to none, or --map-by slot:PE=" + std::to_string(threads)});
  EXPECT_EQ(pinned.output.find("[internal]"), std::string::npos) << pinned.output;
  std::vector<std::string> unbound = mpirun_prefix(2);
  unbound.insert(unbound.end(), {"--bind-to", "none"});
  const ProgramResult free_ranks = run_mpi(unbound, two_replicas(setup, dir.file("free"), cores));
  EXPECT_EQ(free_ranks.exit_status, 0) << free_ranks.output;
  expect_contains(free_ranks.output, {"| cores per rank         | " + std::to_string(cores) + " (CPU affinity of rank"});
  EXPECT_EQ(free_ranks.output.find("fewer than"), std::string::npos) << free_ranks.output;
}

// Every entry under `dir` by relative path: a file's bytes, "<folder>" for a folder.
std::map<std::string, std::string> folder_contents(const std::string& dir) {
  std::map<std::string, std::string> contents;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir))
    contents[fs::relative(entry.path(), dir).string()] =
        entry.is_directory() ? "<folder>" : file_bytes(entry.path().string());
  return contents;
}

class UnsharedRunFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run_command("unshare -m true").exit_status != 0)
      GTEST_SKIP() << "needs `unshare -m` (root or CAP_SYS_ADMIN) to give rank 1 a view of its own";
    setup_ = std::make_unique<TinySetup>(dir_, fresh_seed());
    // The launcher's wrapper: rank 1 starts in its own mount namespace, an empty tmpfs over $RUN_DIR.
    wrapper_ = dir_.file("rank1_private.sh");
    write_text_file(wrapper_,
                    "#!/bin/sh\n"
                    "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then\n"
                    "  exec unshare -m sh -c 'mount -t tmpfs none \"$0\" && exec \"$@\"' \"$RUN_DIR\" \"$@\"\n"
                    "fi\n"
                    "exec \"$@\"\n");
    fs::permissions(wrapper_, fs::perms::owner_all);
  }
  // mpirun -np 2 -x RUN_DIR <wrapper> fpdt <args>, rank 1 blind to `run`.
  ProgramResult run_blind(const std::string& run, const std::vector<std::string>& args) const {
    ::setenv("RUN_DIR", run.c_str(), 1);
    std::vector<std::string> prefix = mpirun_prefix(2);
    prefix.insert(prefix.end(), {"-x", "RUN_DIR", wrapper_});
    return run_mpi(prefix, args);
  }
  void expect_refused(const ProgramResult& result, const std::string& run) const {
    EXPECT_NE(result.exit_status, 0) << result.output;
    expect_contains(result.output, {"[train] rank 1 does not see the run directory " + run + " that rank 0 writes",
                                    run + "/.fpdt-probe.tmp.", "hint:", "file system that every rank"});
    const std::string error = "rank 0: [train] rank 1 does not see";  // printed once, by rank 0
    const size_t first = result.output.find(error);
    EXPECT_EQ(result.output.find(error, first + 1), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("[train]", result.output.find("[train]") + 1), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("step     1/"), std::string::npos) << "a step ran:\n" << result.output;
    EXPECT_EQ(result.output.find("[internal]"), std::string::npos) << result.output;
  }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  std::string wrapper_;
};

TEST_F(UnsharedRunFolder, FreshRunIsRefusedBeforeTheFirstStep) {
  const std::string run = dir_.file("run");
  fs::create_directories(run);  // the mount point
  expect_refused(run_blind(run, two_replicas(*setup_, run, 1)), run);
  EXPECT_TRUE(fs::is_empty(run)) << "the probes were left behind";
}

TEST_F(UnsharedRunFolder, ResumeIsRefusedAndLeavesTheFolderAsItWas) {
  const std::string run = dir_.file("run");
  const ProgramResult first = run_mpi(mpirun_prefix(2), two_replicas(*setup_, run, 1));
  ASSERT_EQ(first.exit_status, 0) << first.output;
  const auto before = folder_contents(run);
  std::vector<std::string> args = two_replicas(*setup_, run, 1);
  args[std::find(args.begin(), args.end(), "--steps") - args.begin() + 1] = "4";
  args.push_back("--resume");
  expect_refused(run_blind(run, args), run);
  EXPECT_EQ(folder_contents(run), before);
}

}  // namespace
}  // namespace fpdt::testing
