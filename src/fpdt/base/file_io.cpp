// The checked open, atomic writes and checked reads (see file_io.h).
#include "fpdt/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "fpdt/base/error.h"

namespace fpdt {

namespace {
std::string os_error() { return std::strerror(errno); }

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// What a non-regular file is, for "<path> is a pipe, not a regular file".
const char* kind_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}
}  // namespace

InputFile::InputFile(std::string path, const std::string& module, const std::string& what, const std::string& hint,
                     InputKinds kinds)
    : path_(std::move(path)) {
  const std::string named = what.empty() ? path_ : what + " " + path_;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int error_number = errno;
    throw Error(module, "cannot open " + named + ": " + std::strerror(error_number),
                error_number == EACCES ? "check the file's permissions" : hint);
  }
  struct stat info {};
  std::string refusal;
  if (::fstat(fd_, &info) != 0) refusal = "cannot stat " + named + ": " + os_error();
  else if (S_ISDIR(info.st_mode)) refusal = named + " is a directory, not a file";
  else if (S_ISFIFO(info.st_mode) && kinds == InputKinds::file_or_pipe) is_pipe_ = true;
  else if (!S_ISREG(info.st_mode)) refusal = named + " is " + kind_name(info.st_mode) + ", not a regular file";
  // A pipe is read as `cat` reads it: blocking, until its writers close it.
  if (refusal.empty() && is_pipe_ && ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK) != 0)
    refusal = "cannot read " + named + ": " + os_error();
  if (!refusal.empty()) {
    ::close(fd_);
    throw Error(module, refusal, hint);
  }
  size_bytes_ = is_pipe_ ? 0 : static_cast<size_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

std::string path_in(const std::string& folder, const std::string& name) {
  size_t end = folder.size();
  while (end > 1 && folder[end - 1] == '/') --end;
  if (end == 0) return name;
  return folder.substr(0, end) + (folder[end - 1] == '/' ? "" : "/") + name;
}

void create_folder(const std::string& folder, const std::string& module, const std::string& what) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error)
    throw Error(module, "cannot create " + what + " " + folder + ": " + error.message(),
                error == std::errc::read_only_file_system ? "choose a folder on a writable file system"
                : error == std::errc::not_a_directory || error == std::errc::file_exists
                    ? "a file is in the way: choose another folder, or move the file"
                    : "check the path and its permissions");
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    const int error_number = errno;
    throw Error(module, "cannot write into " + what + " " + folder + ": " + std::strerror(error_number),
                error_number == EROFS ? "choose a folder on a writable file system" : "check its permissions");
  }
}

void write_fully(int fd, const void* data, size_t bytes, const std::string& path, const std::string& module) {
  const char* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, cursor, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(module, "cannot write " + path + ": " + os_error(),
                  errno == ENOSPC ? "the disk is full; free space or choose another directory" : "");
    }
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

void read_fully_at(int fd, void* data, size_t bytes, size_t offset, const std::string& path,
                   const std::string& module) {
  char* cursor = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, cursor, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(module, "cannot read " + path + ": " + os_error());
    }
    if (got == 0) throw Error(module, path + " ends early: it is truncated", "re-create the file");
    cursor += got;
    offset += static_cast<size_t>(got);
    bytes -= static_cast<size_t>(got);
  }
}

size_t file_size(const std::string& path, const std::string& module) {
  return InputFile(path, module, "", "check the path").size_bytes();
}

std::string read_text_file(const std::string& path, const std::string& module, const std::string& hint) {
  const InputFile file(path, module, "", hint);
  // To the end, not to the size fstat gave: a file may grow while it is read.
  std::string text(file.size_bytes(), '\0');
  size_t have = 0;
  while (true) {
    if (have == text.size()) text.resize(text.size() + 4096);
    const ssize_t got = ::read(file.fd(), text.data() + have, text.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(module, "cannot read " + path + ": " + os_error(), hint);
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  text.resize(have);
  return text;
}

void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write_all,
                       const std::string& module) {
  const std::string directory = directory_of(path);
  std::string temp_path = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp_path.data());
  if (fd < 0)
    throw Error(module, "cannot write into directory " + directory + ": " + os_error(),
                "create it, or check its permissions and free space");
  try {
    write_all(fd);
    if (::fsync(fd) != 0) throw Error(module, "cannot flush " + temp_path + ": " + os_error());
    if (::fchmod(fd, 0644) != 0) throw Error(module, "cannot set permissions of " + temp_path + ": " + os_error());
    if (::close(fd) != 0) throw Error(module, "cannot close " + temp_path + ": " + os_error());
  } catch (...) {
    ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    const std::string reason = os_error();
    ::unlink(temp_path.c_str());
    throw Error(module, "cannot rename " + temp_path + " to " + path + ": " + reason);
  }
  const int directory_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (directory_fd >= 0) {
    ::fsync(directory_fd);
    ::close(directory_fd);
  }
}

void write_text_file_atomic(const std::string& path, const std::string& text, const std::string& module) {
  write_file_atomic(path, [&](int fd) { write_fully(fd, text.data(), text.size(), path, module); }, module);
}

}  // namespace fpdt
