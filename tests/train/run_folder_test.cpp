// The run folder's checks (train/run_folder.h): the checkpoint a --resume continues, and a refusal of
// step folders left without `latest`; every rank of a job seeing the folder rank 0 took (thread ranks
// share one, so the check passes and leaves nothing behind; tests/cli/refusals_run_mpirun_test.cpp
// gives a rank a view of its own).
#include <gtest/gtest.h>

#include <filesystem>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/train/run_folder.h"
#include "testing.h"

namespace fpdt::train {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(RunFolderChecks, ResumeContinuesLatestAndRefusesStepFoldersWithoutIt) {
  TempDir dir;
  EXPECT_EQ(resume_checkpoint(dir.file("none")), "");  // no folder: a new run
  fs::create_directories(dir.file("run"));
  testing::write_text_file(dir.file("run/metrics.jsonl"), "");
  EXPECT_EQ(resume_checkpoint(dir.file("run")), "");  // a run that died before its first checkpoint
  for (const char* step : {"step_10", "step_9", "step_10.partial", "step_x"}) fs::create_directories(dir.file("run/") + step);
  testing::expect_contains(testing::error_message([&] { resume_checkpoint(dir.file("run")); }),
                           {"[train] cannot resume the run in " + dir.file("run") + ": it holds step_9, step_10 but no "
                            "'latest'",
                            "echo step_10 > " + dir.file("run/latest"), "--overwrite"});
  testing::write_text_file(dir.file("run/latest"), "step_9\n");
  EXPECT_EQ(resume_checkpoint(dir.file("run")), dir.file("run/step_9"));
}

TEST(RunFolderChecks, RanksThatShareTheFolderPassAndLeaveNoProbe) {
  TempDir dir;
  for (int ranks : {1, 2, 4})
    comm::run_ranks(ranks, [&](comm::Communicator& world) { check_shared_run_folder(dir.path(), world); });
  EXPECT_EQ(dir.entries(), 0u);
}

}  // namespace
}  // namespace fpdt::train
