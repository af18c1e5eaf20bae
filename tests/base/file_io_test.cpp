// The one checked open (InputFile) and the helpers beside it: a regular file opens with its size; a
// directory, a FIFO (without blocking, writer or not), a device and a missing path are refused with one
// error naming the file; a pipe is taken only where pipes are (file_or_pipe) and reads to its end;
// read_text_file reads through it; path_in joins with one '/'; create_folder names what is in the way.
#include "fpdt/base/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "testing.h"

namespace fpdt {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;

TEST(InputFile, ARegularFileOpensWithItsSize) {
  TempDir dir;
  Rng rng(testing::fresh_seed());
  const std::string text(static_cast<size_t>(1 + rng.below(100000)), 'x');
  testing::write_text_file(dir.file("a.txt"), text);
  const InputFile file(dir.file("a.txt"), "test");
  EXPECT_GE(file.fd(), 0);
  EXPECT_FALSE(file.is_pipe());
  EXPECT_EQ(file.size_bytes(), text.size());
  EXPECT_EQ(read_text_file(dir.file("a.txt"), "test", ""), text);
  EXPECT_EQ(file_size(dir.file("a.txt"), "test"), text.size());
}

TEST(InputFile, WhatIsNotAFileIsRefusedNamingIt) {
  TempDir dir;
  expect_contains(error_message([&] { InputFile file(dir.file("missing"), "test", "model config", "give a path"); }),
                  {"[test]", "cannot open model config " + dir.file("missing"), "No such file", "hint: give a path"});
  expect_contains(error_message([&] { InputFile file(dir.path(), "test", "token shard"); }),
                  {"[test]", "token shard " + dir.path() + " is a directory, not a file"});
  expect_contains(error_message([&] { InputFile file("/dev/null", "test"); }),
                  {"[test]", "/dev/null is a character device, not a regular file"});
  // A FIFO nobody writes: refused at once, also where pipes are taken is it opened without waiting.
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  expect_contains(error_message([&] { InputFile file(dir.file("fifo"), "test", "", "pass a file"); }),
                  {"[test]", dir.file("fifo") + " is a pipe, not a regular file", "hint: pass a file"});
  expect_contains(error_message([&] { (void)read_text_file(dir.file("fifo"), "test", ""); }), {"is a pipe"});
  expect_contains(error_message([&] { (void)file_size(dir.file("fifo"), "test"); }), {"is a pipe"});
  const InputFile unwritten(dir.file("fifo"), "test", "", "", InputKinds::file_or_pipe);
  EXPECT_TRUE(unwritten.is_pipe());
  char byte = 0;
  EXPECT_EQ(::read(unwritten.fd(), &byte, 1), 0);  // no writer: the end, not a wait
}

TEST(InputFile, APipeIsReadToItsEndWhereTaken) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const std::string text = "through a pipe\n";
  ASSERT_EQ(::write(ends[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(ends[1]);
  const std::string path = "/proc/self/fd/" + std::to_string(ends[0]);
  expect_contains(error_message([&] { InputFile file(path, "test"); }), {"is a pipe, not a regular file"});
  {
    const InputFile file(path, "test", "input", "", InputKinds::file_or_pipe);
    EXPECT_TRUE(file.is_pipe());
    EXPECT_EQ(file.size_bytes(), 0u);
    std::string got(64, '\0');
    const ssize_t read_bytes = ::read(file.fd(), got.data(), got.size());
    ASSERT_GE(read_bytes, 0);
    got.resize(static_cast<size_t>(read_bytes));
    EXPECT_EQ(got, text);
  }
  ::close(ends[0]);
}

TEST(PathIn, JoinsWithOneSlash) {
  EXPECT_EQ(path_in("dir", "config.json"), "dir/config.json");
  EXPECT_EQ(path_in("dir/", "config.json"), "dir/config.json");
  EXPECT_EQ(path_in("dir//", "config.json"), "dir/config.json");
  EXPECT_EQ(path_in("/", "config.json"), "/config.json");
  EXPECT_EQ(path_in("", "config.json"), "config.json");
}

TEST(CreateFolder, MakesParentsAndNamesWhatIsInTheWay) {
  TempDir dir;
  create_folder(dir.file("a/b/c"), "test", "output folder");
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("a/b/c")));
  create_folder(dir.file("a/b/c"), "test", "output folder");  // already there: fine
  testing::write_text_file(dir.file("file"), "x");
  expect_contains(error_message([&] { create_folder(dir.file("file"), "test", "output folder"); }),
                  {"[test]", "cannot create output folder " + dir.file("file"), "hint: a file is in the way"});
  expect_contains(error_message([&] { create_folder(dir.file("file/sub"), "test", "output folder"); }),
                  {"[test]", dir.file("file/sub"), "Not a directory"});
}

}  // namespace
}  // namespace fpdt
