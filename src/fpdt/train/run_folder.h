// A run folder (--out) belongs to one run and one live writer. Taking it: creates it, locks it (a
// second live `fpdt train` into the same folder is refused; the lock dies with its process), refuses
// a fresh run into a folder that holds a run unless asked to resume or to overwrite, and removes what
// writers that died left behind (`*.tmp.*` files of atomic writes, `step_<N>.partial` folders).
// Overwrite deletes only the run's own entries (step folders, `latest`, metrics.jsonl) and says which.
#pragma once

#include <string>

namespace fpdt::train {

enum class RunStart { fresh, resume, overwrite };

class RunFolder {
 public:
  // Throws fpdt::Error naming the folder when it cannot be created or locked, or holds a run that a
  // fresh start would silently replace.
  RunFolder(const std::string& dir, RunStart start);
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int lock_fd_ = -1;
};

}  // namespace fpdt::train
