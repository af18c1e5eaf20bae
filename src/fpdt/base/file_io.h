// File helpers shared by every on-disk format: the one checked open every file read of fpdt goes
// through (it never blocks on a FIFO and refuses what is not a file), whole-file writes that are atomic
// (temp file in the same directory, fsync, rename, fsync of the directory), so a crash or a full disk
// never leaves a half-written file in place of a good one, and the joining of paths for messages.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace fpdt {

// What a reader takes besides a regular file. Only `fpdt tokenize` reads pipes (`<(zcat x.gz)`), once,
// front to back; every other format is read at offsets or mapped.
enum class InputKinds : unsigned char { regular_file, file_or_pipe };

// A file opened for reading. The open is O_NONBLOCK, so a FIFO with no writer cannot block it; fstat
// then refuses a directory, a device, a socket, and a pipe unless `kinds` allows it (a pipe is then
// read blocking, as `cat` would). Every error is one fpdt::Error of `module` naming `what` and the
// path; `hint` is said when the path is missing or is not a file. Owns its descriptor.
class InputFile {
 public:
  // `what` names the file in messages ("token shard"); "" names it by its path alone.
  InputFile(std::string path, const std::string& module, const std::string& what = "",
            const std::string& hint = "", InputKinds kinds = InputKinds::regular_file);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool is_pipe() const { return is_pipe_; }
  size_t size_bytes() const { return size_bytes_; }  // of a regular file at open; 0 for a pipe

 private:
  std::string path_;
  int fd_ = -1;
  bool is_pipe_ = false;
  size_t size_bytes_ = 0;
};

// `folder`/`name`, with one '/' between them whatever `folder` ends with ("dir/" + "config.json" is
// "dir/config.json").
std::string path_in(const std::string& folder, const std::string& name);

// Creates `folder` and its parents when missing and checks that it can be written into; throws
// fpdt::Error of `module` naming `what` ("output folder"), the folder and the OS error (a read-only
// file system, a file in the way) otherwise.
void create_folder(const std::string& folder, const std::string& module, const std::string& what);

// Calls write_all(fd) on a fresh temp file next to `path`, then fsyncs and renames it over `path`.
// write_all must write everything through write_fully. On any failure the temp file is removed, the
// previous `path` (if any) is left untouched, and an fpdt::Error names the path and the OS error.
void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write_all,
                       const std::string& module);

// write_file_atomic of a whole text.
void write_text_file_atomic(const std::string& path, const std::string& text, const std::string& module);

// Writes `bytes` bytes at the file's current position, retrying short writes; throws fpdt::Error
// naming `path` on failure (e.g. ENOSPC).
void write_fully(int fd, const void* data, size_t bytes, const std::string& path, const std::string& module);

// Reads exactly `bytes` bytes at `offset`; throws fpdt::Error naming `path` when the file is shorter.
void read_fully_at(int fd, void* data, size_t bytes, size_t offset, const std::string& path,
                   const std::string& module);

// Size of a regular file in bytes (InputFile's checks); throws fpdt::Error naming `path` otherwise.
size_t file_size(const std::string& path, const std::string& module);

// The whole regular file as text, opened as InputFile; throws fpdt::Error("cannot open <path>: <os
// error>", hint) when it cannot be read, and when it is not a regular file.
std::string read_text_file(const std::string& path, const std::string& module, const std::string& hint);

}  // namespace fpdt
