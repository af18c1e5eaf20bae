// Run-folder ownership (see run_folder.h).
#include "fpdt/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"

namespace fpdt::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModule = "train";

bool is_step_folder(const std::string& name) {
  return name.size() > 5 && name.starts_with("step_") &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Entries of the run itself: what --overwrite deletes and what makes a fresh start refuse.
bool is_run_entry(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  return name == "latest" || name == "metrics.jsonl" || (entry.is_directory() && is_step_folder(name));
}

// What a writer that died left: temp files of atomic writes (file_io.h) and unfinished step folders.
bool is_leftover(const fs::directory_entry& entry) {
  const std::string name = entry.path().filename().string();
  if (entry.is_directory()) return name.starts_with("step_") && name.ends_with(".partial");
  return entry.is_regular_file() && name.find(".tmp.") != std::string::npos;
}

// Removes the entries of `dir` that `select` picks; returns their names, sorted.
template <class Select>
std::vector<std::string> remove_entries(const std::string& dir, Select select) {
  std::vector<fs::path> doomed;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (select(entry)) doomed.push_back(entry.path());
  std::vector<std::string> names;
  for (const fs::path& path : doomed) {
    fs::remove_all(path, error);
    if (error)
      throw Error(kModule, "cannot remove " + path.string() + ": " + error.message(),
                  "check the run directory's permissions");
    names.push_back(path.filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string listed(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// Whether `dir` holds a run: a `latest` pointer, a metrics.jsonl or a step_<N> folder.
bool holds_run(const std::string& dir) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error))
    if (is_run_entry(entry)) return true;
  return false;
}

}  // namespace

RunFolder::RunFolder(const std::string& dir, RunStart start) : dir_(dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw Error(kModule, "cannot create the run directory " + dir + ": " + error.message(),
                "choose another --out directory or check its permissions");
  lock_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ < 0)
    throw Error(kModule, "cannot open the run directory " + dir + ": " + std::strerror(errno),
                "choose another --out directory or check its permissions");
  try {
    // A file system without locks (some network ones) reports ENOLCK or EOPNOTSUPP: go on unlocked.
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
      throw Error(kModule, "another fpdt train is writing to " + dir,
                  "wait until it ends, or choose another --out directory");
    const std::vector<std::string> leftovers = remove_entries(dir, is_leftover);
    if (!leftovers.empty()) log::info("removed what an interrupted run left in " + dir + ": " + listed(leftovers));
    if (start == RunStart::fresh && holds_run(dir))
      throw Error(kModule, dir + " already holds a run (a latest checkpoint, step folders or metrics.jsonl)",
                  "add --resume to continue it, or --overwrite to delete it and start afresh");
    if (start == RunStart::overwrite) {
      const std::vector<std::string> removed = remove_entries(dir, is_run_entry);
      if (!removed.empty()) log::info("--overwrite: deleted the previous run in " + dir + ": " + listed(removed));
    }
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
}

RunFolder::~RunFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

}  // namespace fpdt::train
