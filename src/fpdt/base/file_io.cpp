// Atomic writes and checked reads (see file_io.h).
#include "fpdt/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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
}  // namespace

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
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    throw Error(module, "cannot open " + path + ": " + os_error(), "check the path");
  if (!S_ISREG(info.st_mode)) throw Error(module, path + " is not a regular file");
  return static_cast<size_t>(info.st_size);
}

std::string read_text_file(const std::string& path, const std::string& module, const std::string& hint) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(module, "cannot open " + path + ": " + os_error(), hint);
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) throw Error(module, "cannot read " + path + ": " + os_error(), hint);
  return text.str();
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

}  // namespace fpdt
