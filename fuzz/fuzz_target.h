// What every fuzz target shares. A target feeds one input format to the entry point the program
// uses and checks the contract of every reader: bad input gives one fpdt::Error with a bounded
// message, never another exception, an [internal] error, a crash or a sanitizer report.
// Built two ways (CMakeLists.txt): with libFuzzer (clang, the ASan build) or with replay_main.cpp.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "fpdt/base/error.h"

namespace fpdt::fuzz {

// Longest message an input may cause: a path, a few numbers and excerpts (json.h) — never the input.
inline constexpr size_t kMaxMessageChars = 2048;

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs body(); an fpdt::Error is a correct answer to bad input, anything else is a finding.
template <typename Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    if (error.module() == "internal") finding(std::string("an [internal] error: ") + error.what());
    if (std::string_view(error.what()).size() > kMaxMessageChars)
      finding("an error message of " + std::to_string(std::string_view(error.what()).size()) +
              " characters: " + std::string(std::string_view(error.what()).substr(0, 300)));
  } catch (const std::exception& error) {
    finding(std::string("an exception that is not an fpdt::Error: ") + error.what());
  }
}

// One in-memory file (memfd), rewritten per input, for entry points that take a path.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("fpdt-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) finding("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  // Replaces the file's contents; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) finding("ftruncate failed");
    size_t done = 0;
    while (done < size) {
      const ssize_t wrote = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (wrote <= 0) finding("pwrite failed");
      done += static_cast<size_t>(wrote);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace fpdt::fuzz
