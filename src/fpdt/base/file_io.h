// File helpers shared by every on-disk format: whole-file writes that are atomic (temp file in the
// same directory, fsync, rename, fsync of the directory), so a crash or a full disk never leaves a
// half-written file in place of a good one.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace fpdt {

// Calls write_all(fd) on a fresh temp file next to `path`, then fsyncs and renames it over `path`.
// write_all must write everything through write_fully. On any failure the temp file is removed, the
// previous `path` (if any) is left untouched, and an fpdt::Error names the path and the OS error.
void write_file_atomic(const std::string& path, const std::function<void(int fd)>& write_all,
                       const std::string& module);

// Writes `bytes` bytes at the file's current position, retrying short writes; throws fpdt::Error
// naming `path` on failure (e.g. ENOSPC).
void write_fully(int fd, const void* data, size_t bytes, const std::string& path, const std::string& module);

// Reads exactly `bytes` bytes at `offset`; throws fpdt::Error naming `path` when the file is shorter.
void read_fully_at(int fd, void* data, size_t bytes, size_t offset, const std::string& path,
                   const std::string& module);

// Size of a regular file in bytes; throws fpdt::Error naming `path` when it cannot be opened.
size_t file_size(const std::string& path, const std::string& module);

// The whole file as text; throws fpdt::Error("cannot open <path>: <os error>", hint) when it cannot be
// read.
std::string read_text_file(const std::string& path, const std::string& module, const std::string& hint);

}  // namespace fpdt
