// Run-folder ownership (see run_folder.h).
#include "fpdt/train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/train/checkpoint.h"

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

std::string resume_checkpoint(const std::string& dir) {
  const std::string latest = latest_checkpoint(dir);
  if (!latest.empty()) return latest;
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int64_t step = std::numeric_limits<int64_t>::max();  // for digits beyond 64 bits
    std::from_chars(name.data() + 5, name.data() + name.size(), step);
    if (entry.is_directory() && is_step_folder(name)) steps.emplace_back(step, name);
  }
  if (steps.empty()) return "";
  std::sort(steps.begin(), steps.end());
  if (fs::exists(fs::path(dir) / "latest")) {  // "none": the first save's folder is complete, its pointer not
    log::info("resuming from " + steps.back().second + ": the first save completed it and was stopped before " +
              (fs::path(dir) / "latest").string() + " named it");
    return (fs::path(dir) / steps.back().second).string();
  }
  std::vector<std::string> names;
  for (const auto& [step, name] : steps) names.push_back(name);
  throw Error(kModule,
              "cannot resume the run in " + dir + ": it holds " + listed(names) +
                  " but no 'latest' file naming the checkpoint to continue from",
              "write that step folder's name into " + (fs::path(dir) / "latest").string() + " (e.g. echo " +
                  steps.back().second + " > " + (fs::path(dir) / "latest").string() +
                  "), or give --overwrite instead of --resume to delete the run and start afresh");
}

namespace {

// The probe files of check_shared_run_folder: "<dir>/.fpdt-probe.tmp.<token>.rank<r>" (a name that
// RunFolder sweeps as a leftover, should a killed job leave one).
std::string probe_path(const std::string& dir, const std::string& token, int rank) {
  return (fs::path(dir) / (".fpdt-probe.tmp." + token + ".rank" + std::to_string(rank))).string();
}

// Writes `text` into a new file at `path`; 0, or the errno of what failed.
int write_probe(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = written ? 0 : errno != 0 ? errno : EIO;
  return ::close(fd) != 0 && error == 0 ? errno : error;
}

bool holds_probe(const std::string& path, const std::string& text) {
  std::ifstream file(path, std::ios::binary);
  const std::string read((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return file.is_open() && read == text;
}

}  // namespace

void check_shared_run_folder(const std::string& dir, comm::Communicator& world) {
  if (world.size() == 1) return;
  const int rank = world.rank(), ranks = world.size();
  uint64_t token_bits = 0;  // rank 0's, so that no earlier job's probe passes for this one's
  if (rank == 0) token_bits = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^ uint64_t(::getpid());
  world.broadcast(&token_bits, sizeof token_bits, 0);
  char token[24];
  std::snprintf(token, sizeof token, "%016llx", static_cast<unsigned long long>(token_bits));
  const std::string hint =
      "every rank writes into --out (checkpoints, optimizer shards): put it on a file system that every rank's "
      "host sees at the same path (NFS, Lustre, ...)";
  if (rank == 0) {
    if (const int error = write_probe(probe_path(dir, token, 0), token))
      throw Error(kModule, "cannot write into the run directory " + dir + ": " + std::strerror(error), hint);
  }
  world.barrier();
  // One slot per rank: 0 fine; 1 it cannot read rank 0's probe; 2·1000 + errno it cannot write its own;
  // 3 rank 0 does not see the one it wrote.
  std::vector<double> verdict(static_cast<size_t>(ranks), 0.0);
  if (rank != 0) {
    if (!holds_probe(probe_path(dir, token, 0), token))
      verdict[static_cast<size_t>(rank)] = 1;
    else if (const int error = write_probe(probe_path(dir, token, rank), token))
      verdict[static_cast<size_t>(rank)] = 2000 + error;
  }
  world.all_reduce_sum(verdict.data(), verdict.size());
  std::vector<double> unseen(static_cast<size_t>(ranks), 0.0);
  if (rank == 0)
    for (int other = 1; other < ranks; ++other)
      if (verdict[static_cast<size_t>(other)] == 0 && !holds_probe(probe_path(dir, token, other), token))
        unseen[static_cast<size_t>(other)] = 3;
  world.all_reduce_sum(unseen.data(), unseen.size());
  std::error_code ignored;
  fs::remove(probe_path(dir, token, rank), ignored);
  std::string failure;  // the first rank's that failed, alike on every rank
  for (int other = 1; other < ranks && failure.empty(); ++other) {
    const int code = static_cast<int>(verdict[static_cast<size_t>(other)] + unseen[static_cast<size_t>(other)]);
    const std::string who = "rank " + std::to_string(other);
    if (code == 1)
      failure = who + " does not see the run directory " + dir + " that rank 0 writes (it cannot read " +
                probe_path(dir, token, 0) + ")";
    else if (code >= 2000)
      failure = who + " cannot write into the run directory " + dir + ": " + std::strerror(code - 2000);
    else if (code == 3)
      failure = "rank 0 does not see what " + who + " writes into the run directory " + dir + " (" +
                probe_path(dir, token, other) + ")";
  }
  if (failure.empty()) return;
  // Rank 0 reports it and ends the job; the others wait for that in a barrier it never joins (the
  // threads backend fails them there), so the error is printed once.
  if (rank != 0) world.barrier();
  throw Error(kModule, failure, hint);
}

RunFolder::RunFolder(const std::string& dir, RunStart start) : dir_(dir), start_(start) {
  std::error_code error;
  created_ = !fs::exists(dir, error);
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
  } catch (...) {
    ::close(lock_fd_);
    throw;
  }
}

void RunFolder::start_run() {
  if (start_ != RunStart::overwrite) return;
  start_ = RunStart::fresh;  // deleted once
  const std::vector<std::string> removed = remove_entries(dir_, is_run_entry);
  if (!removed.empty()) log::info("--overwrite: deleted the previous run in " + dir_ + ": " + listed(removed));
}

RunFolder::~RunFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
  // A folder this run made and left empty (it was refused before writing anything) goes with it. Never
  // throws: remove() of a folder that holds something fails, and the folder stays.
  std::error_code error;
  if (created_ && fs::is_empty(dir_, error) && !error) fs::remove(dir_, error);
}

}  // namespace fpdt::train
