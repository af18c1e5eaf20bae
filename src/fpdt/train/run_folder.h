// A run folder (--out) belongs to one run and one live writer. Taking it: creates it, locks it (a
// second live `fpdt train` into the same folder is refused; the lock dies with its process), refuses
// a fresh run into a folder that holds a run unless asked to resume or to overwrite, and removes what
// writers that died left behind (`*.tmp.*` files of atomic writes, `step_<N>.partial` folders).
// Overwrite deletes only the run's own entries (step folders, `latest`, metrics.jsonl) and says which,
// and only when told that the new run starts (start_run): every check that can refuse comes first.
#pragma once

#include <string>

#include "fpdt/comm/communicator.h"

namespace fpdt::train {

// The checkpoint `--resume` continues in the run folder `dir`: the step folder `latest` names, or ""
// when the run has none yet (no folder, or no step folder). When `latest` still says the run has no
// checkpoint (checkpoint.h kNoCheckpointYet) but a step folder is there, the first save was killed
// between completing its folder and moving the pointer: the newest step folder. Throws fpdt::Error
// naming the step folders when they remain but `latest` is gone: a resume would start a new run over them.
std::string resume_checkpoint(const std::string& dir);

// Every rank of `world` must see and write the run folder `dir` that rank 0 took (checkpoints hold
// every rank's optimizer shard; a resume reads them on every rank): rank 0 writes a probe file with a
// token of this job, each rank reads it and writes its own, rank 0 reads those; the verdict is agreed
// and the probes removed. Collective; throws one fpdt::Error from rank 0 (the other ranks wait for
// the job to end), naming the first rank that fails and the path. Nothing to check for one rank.
void check_shared_run_folder(const std::string& dir, comm::Communicator& world);

enum class RunStart { fresh, resume, overwrite };

class RunFolder {
 public:
  // Throws fpdt::Error naming the folder when it cannot be created or locked, or holds a run that a
  // fresh start would silently replace.
  // fresh start would silently replace. Nothing of a previous run is deleted yet.
  RunFolder(const std::string& dir, RunStart start);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  const std::string& dir() const { return dir_; }
  // The new run starts: with RunStart::overwrite, the previous run's entries are deleted now (once).
  void start_run();

 private:
  std::string dir_;
  RunStart start_;
  bool created_ = false;  // the folder did not exist before this run
  int lock_fd_ = -1;
};

}  // namespace fpdt::train
