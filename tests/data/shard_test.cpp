// Tests of token shards: uint16 and uint32 round trips, the exact header layout (version 2, with the
// tokenizer that made the shard; version 1 still read), atomic writes, and one clear fpdt::Error (file
// name + the specific problem) for every way a shard file can be bad.
#include "fpdt/data/shard.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "testing.h"

namespace fpdt::data {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void put_u32(std::vector<unsigned char>& bytes, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<unsigned char>(value >> (8 * i));
}

std::vector<int32_t> random_tokens(Rng& rng, size_t count, uint32_t vocab_size) {
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = static_cast<int32_t>(rng.below(vocab_size));
  return tokens;
}

void expect_round_trip(const std::string& path, const std::vector<int32_t>& tokens, uint32_t vocab_size,
                       uint32_t want_width_bytes, Rng& rng) {
  write_shard(path, tokens, vocab_size);
  EXPECT_EQ(std::filesystem::file_size(path), kShardHeaderBytes + tokens.size() * want_width_bytes);
  const ShardReader reader(path);
  EXPECT_EQ(reader.token_count(), tokens.size());
  EXPECT_EQ(reader.vocab_size(), vocab_size);
  EXPECT_EQ(reader.token_width_bytes(), want_width_bytes);
  EXPECT_EQ(reader.path(), path);
  std::vector<int32_t> all(tokens.size());
  reader.read(0, all.size(), all.data());
  EXPECT_EQ(all, tokens);
  for (int trial = 0; trial < 20 && !tokens.empty(); ++trial) {
    const uint64_t begin = rng.below(tokens.size());
    const uint64_t count = rng.below(tokens.size() - begin + 1);
    std::vector<int32_t> part(count);
    reader.read(begin, count, part.data());
    ASSERT_TRUE(std::equal(part.begin(), part.end(), tokens.begin() + static_cast<std::ptrdiff_t>(begin)))
        << "range [" << begin << ", " << begin + count << ")";
  }
}

TEST(Shard, RoundTripUint16) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  expect_round_trip(dir.file("bytes.bin"), random_tokens(rng, 1 + rng.below(100000), 257), 257, 2, rng);
  // The largest vocabulary that still fits 2 bytes, with its largest token.
  std::vector<int32_t> tokens = random_tokens(rng, 1000, 65536);
  tokens.push_back(65535);
  expect_round_trip(dir.file("wide16.bin"), tokens, 65536, 2, rng);
}

// A split known only at the end of a stream (fpdt tokenize's val.bin): the last n tokens move to another
// writer, and the two shards are the stream cut at n from the end, in both token widths.
TEST(Shard, LastTokensMoveToAnotherWriter) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  for (const uint32_t vocab_size : {257u, 70000u}) {
    SCOPED_TRACE(vocab_size);
    // More than one staging block of tokens (1 MiB), so the move reads back in several blocks.
    const std::vector<int32_t> tokens = random_tokens(rng, 300000 + rng.below(400000), vocab_size);
    const uint64_t moved = rng.below(tokens.size() + 1);
    const std::string head_path = dir.file("head.bin"), tail_path = dir.file("tail.bin");
    {
      ShardWriter head(head_path, vocab_size), tail(tail_path, vocab_size);
      for (size_t begin = 0; begin < tokens.size();) {  // appended in pieces of any size
        const size_t count = std::min<size_t>(tokens.size() - begin, 1 + rng.below(100000));
        head.append(std::span<const int32_t>(tokens).subspan(begin, count));
        begin += count;
      }
      head.move_last_tokens_to(tail, moved);
      EXPECT_EQ(head.finish(), tokens.size() - moved);
      EXPECT_EQ(tail.finish(), moved);
    }
    const ShardReader head(head_path), tail(tail_path);
    std::vector<int32_t> all(tokens.size());
    head.read(0, head.token_count(), all.data());
    tail.read(0, tail.token_count(), all.data() + head.token_count());
    EXPECT_EQ(all, tokens);
    EXPECT_EQ(std::filesystem::file_size(head_path), kShardHeaderBytes + head.token_count() * head.token_width_bytes());
  }
}

TEST(Shard, RoundTripUint32) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  expect_round_trip(dir.file("llama.bin"), random_tokens(rng, 1 + rng.below(100000), 128256), 128256, 4, rng);
  std::vector<int32_t> tokens = {65536, 0, 65535};
  expect_round_trip(dir.file("just_over.bin"), tokens, 65537, 4, rng);
}

TEST(Shard, EmptyShardRoundTrips) {
  TempDir dir;
  Rng rng(1);
  expect_round_trip(dir.file("empty.bin"), {}, 257, 2, rng);
}

TEST(Shard, HeaderLayoutIsLittleEndianAsSpecified) {
  TempDir dir;
  const ShardTokenizer tokenizer{0x0807060504030201ull, 299};
  write_shard(dir.file("s.bin"), std::vector<int32_t>{1, 256, 0x0102}, 300, tokenizer);
  const std::vector<unsigned char> bytes = read_bytes(dir.file("s.bin"));
  const std::vector<unsigned char> want = {
      'F', 'P', 'D', 'T', 'S', 'H', 'R', 'D',  // magic
      2, 0, 0, 0,                              // version
      2, 0, 0, 0,                              // token width
      3, 0, 0, 0, 0, 0, 0, 0,                  // token count
      44, 1, 0, 0,                             // vocab size 300
      43, 1, 0, 0,                             // end-of-document id 299
      1, 2, 3, 4, 5, 6, 7, 8,                  // tokenizer fingerprint
      0, 0, 0, 0, 0, 0, 0, 0,                  // reserved
      1, 0, 0, 1, 2, 1};                       // tokens 1, 256, 0x0102
  EXPECT_EQ(bytes, want);
  EXPECT_EQ(ShardReader(dir.file("s.bin")).tokenizer(), tokenizer);
  // Not given: not recorded.
  write_shard(dir.file("t.bin"), std::vector<int32_t>{1}, 300);
  EXPECT_EQ(ShardReader(dir.file("t.bin")).tokenizer(), (ShardTokenizer{0, kNoEndOfDocument}));
}

TEST(Shard, ReadsVersionOneShards) {
  // The 32-byte header of version 1 (its last word reserved); the tokenizer is not recorded.
  TempDir dir;
  const std::vector<unsigned char> v1 = {
      'F', 'P', 'D', 'T', 'S', 'H', 'R', 'D', 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
      44, 1, 0, 0, 0, 0, 0, 0,
      1, 0, 0, 1, 2, 1};
  write_bytes(dir.file("v1.bin"), v1);
  const ShardReader reader(dir.file("v1.bin"));
  EXPECT_EQ(reader.header().version, 1u);
  EXPECT_EQ(reader.vocab_size(), 300u);
  EXPECT_EQ(reader.tokenizer(), (ShardTokenizer{0, kNoEndOfDocument}));
  std::vector<int32_t> tokens(3);
  reader.read(0, 3, tokens.data());
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 256, 0x0102}));
  // Its size is checked against the 32-byte header.
  std::vector<unsigned char> longer = v1;
  longer.push_back(0);
  write_bytes(dir.file("v1long.bin"), longer);
  expect_contains(error_message([&] { ShardReader bad(dir.file("v1long.bin")); }), {"trailing data", "expected 38 bytes"});
}

TEST(Shard, WritesAreAtomic) {
  TempDir dir;
  const std::string path = dir.file("s.bin");
  write_shard(path, std::vector<int32_t>{1, 2, 3}, 257);
  write_shard(path, std::vector<int32_t>{4, 5}, 257);  // replaces the old file
  EXPECT_EQ(ShardReader(path).token_count(), 2u);
  EXPECT_EQ(dir.entries(), 1u);  // no temp files left behind

  {  // An unfinished writer leaves the old file alone and removes its temp file.
    ShardWriter writer(path, 257);
    writer.append(std::vector<int32_t>{7, 7, 7, 7});
  }
  EXPECT_EQ(ShardReader(path).token_count(), 2u);
  EXPECT_EQ(dir.entries(), 1u);

  // A token outside the vocabulary fails the write, and the old file stays.
  expect_contains(error_message([&] { write_shard(path, std::vector<int32_t>{1, 300}, 257); }),
                  {"[shard]", path, "token 300 at index 1", "[0, 257)"});
  expect_contains(error_message([&] { write_shard(path, std::vector<int32_t>{-1}, 257); }), {"token -1 at index 0"});
  EXPECT_EQ(ShardReader(path).token_count(), 2u);
  EXPECT_EQ(dir.entries(), 1u);
}

TEST(Shard, StreamedWriterMatchesOneShotWrite) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  const std::vector<int32_t> tokens = random_tokens(rng, 1'500'000, 50000);  // > the 1 MiB staging buffer
  ShardWriter writer(dir.file("streamed.bin"), 50000);
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t count = std::min<size_t>(tokens.size() - begin, 1 + rng.below(300000));
    writer.append(std::span<const int32_t>(tokens).subspan(begin, count));
    begin += count;
  }
  EXPECT_EQ(writer.finish(), tokens.size());
  write_shard(dir.file("oneshot.bin"), tokens, 50000);
  EXPECT_EQ(read_bytes(dir.file("streamed.bin")), read_bytes(dir.file("oneshot.bin")));
}

TEST(Shard, WriterErrorNamesTheDirectory) {
  TempDir dir;
  const std::string missing = dir.file("no_such_dir");
  expect_contains(error_message([&] { write_shard(missing + "/train.bin", std::vector<int32_t>{1}, 257); }),
                  {"[shard]", missing + "/train.bin", "No such file", "mkdir -p " + missing});
  expect_contains(error_message([&] { write_shard(dir.file("x.bin"), std::vector<int32_t>{}, 0); }), {"vocab size 0"});
}

// One bad file per case; each error names the file and says what is wrong.
class ShardErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = dir_.file("good.bin");
    write_shard(good_, std::vector<int32_t>{10, 20, 30, 40, 50}, 257);
    bytes_ = read_bytes(good_);
  }
  // Writes `bytes` as a new file and returns the message of opening it.
  std::string open_error(const std::string& name, const std::vector<unsigned char>& bytes) {
    const std::string path = dir_.file(name);
    write_bytes(path, bytes);
    return error_message([&] { ShardReader reader(path); });
  }

  TempDir dir_;
  std::string good_;
  std::vector<unsigned char> bytes_;
};

TEST_F(ShardErrors, MissingFile) {
  const std::string path = dir_.file("absent.bin");
  expect_contains(error_message([&] { ShardReader reader(path); }),
                  {"[shard]", "cannot open token shard", path, "No such file", "hint:"});
}

TEST_F(ShardErrors, Directory) {
  expect_contains(error_message([&] { ShardReader reader(dir_.path()); }), {dir_.path(), "is a directory"});
}

TEST_F(ShardErrors, ShorterThanTheHeader) {
  expect_contains(open_error("short.bin", std::vector<unsigned char>(bytes_.begin(), bytes_.begin() + 10)),
                  {dir_.file("short.bin"), "10 bytes", "shorter than the 32-byte shard header"});
  expect_contains(open_error("empty.bin", {}), {dir_.file("empty.bin"), "0 bytes", "shorter than"});
}

TEST_F(ShardErrors, WrongMagic) {
  std::vector<unsigned char> bytes = bytes_;
  std::memcpy(bytes.data(), "GPT2DATA", 8);
  expect_contains(open_error("magic.bin", bytes), {dir_.file("magic.bin"), "not an fpdt token shard"});
}

TEST_F(ShardErrors, UnsupportedVersion) {
  std::vector<unsigned char> bytes = bytes_;
  put_u32(bytes, 8, 7);
  expect_contains(open_error("version.bin", bytes),
                  {dir_.file("version.bin"), "format version 7", "reads versions 1 and 2"});
}

TEST_F(ShardErrors, BadTokenWidth) {
  std::vector<unsigned char> bytes = bytes_;
  put_u32(bytes, 12, 3);
  expect_contains(open_error("width.bin", bytes), {dir_.file("width.bin"), "bad token width of 3 bytes", "2 (uint16)"});
  // Width 2 cannot hold a vocabulary above 65536.
  bytes = bytes_;
  put_u32(bytes, 24, 70000);
  expect_contains(open_error("width_vocab.bin", bytes), {dir_.file("width_vocab.bin"), "bad token width", "70000"});
}

TEST_F(ShardErrors, TruncatedSaysExpectedAndActualBytes) {
  // 5 tokens × 2 bytes + 48 = 58 bytes expected; cut to 55.
  const std::vector<unsigned char> cut(bytes_.begin(), bytes_.end() - 3);
  expect_contains(open_error("cut.bin", cut),
                  {dir_.file("cut.bin"), "truncated", "5 tokens", "expected 58 bytes", "has 55 bytes"});
  std::vector<unsigned char> longer = bytes_;
  longer.push_back(0);
  expect_contains(open_error("long.bin", longer),
                  {dir_.file("long.bin"), "trailing data", "expected 58 bytes", "has 59 bytes"});
  // A version-2 header cut inside its last 16 bytes.
  expect_contains(open_error("head.bin", std::vector<unsigned char>(bytes_.begin(), bytes_.begin() + 40)),
                  {dir_.file("head.bin"), "40 bytes", "shorter than the 48-byte shard header"});
}

TEST_F(ShardErrors, TokenCountWhoseSizeOverflowsIsTruncationNotWraparound) {
  // 2^63 tokens of 2 bytes is 2^64 bytes: in 64-bit arithmetic 48 + 2^64 would wrap to 48.
  for (const uint64_t count : {uint64_t{1} << 63, UINT64_MAX, (UINT64_MAX - kShardHeaderBytes) / 2 + 1}) {
    std::vector<unsigned char> bytes(bytes_.begin(), bytes_.begin() + kShardHeaderBytes);
    for (int i = 0; i < 8; ++i) bytes[16 + static_cast<size_t>(i)] = static_cast<unsigned char>(count >> (8 * i));
    expect_contains(open_error("huge_count.bin", bytes),
                    {dir_.file("huge_count.bin"), "truncated", std::to_string(count) + " tokens", "more than 2^64"});
  }
}

TEST_F(ShardErrors, FifoIsRefusedWithoutWaitingForAWriter) {
  const std::string path = dir_.file("pipe.bin");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  expect_contains(error_message([&] { ShardReader reader(path); }), {path, "is a pipe, not a regular file"});
}

TEST_F(ShardErrors, TokenOutsideTheVocabularyNamesItsOffset) {
  std::vector<unsigned char> bytes = bytes_;
  bytes[48 + 2 * 3] = 0x2C;  // token index 3 := 300 (0x012C) ≥ vocab 257
  bytes[48 + 2 * 3 + 1] = 0x01;
  const std::string message = open_error("corrupt.bin", bytes);
  expect_contains(message, {dir_.file("corrupt.bin"), "corrupt", "token 300 at index 3", "byte offset 54",
                            "vocab size 257"});
  // A header-only check opens it; reading still works.
  const ShardReader reader(dir_.file("corrupt.bin"), ShardCheck::header);
  int32_t token = 0;
  reader.read(3, 1, &token);
  EXPECT_EQ(token, 300);
}

TEST_F(ShardErrors, ReadOutsideTheShard) {
  const ShardReader reader(good_);
  std::vector<int32_t> out(8);
  expect_contains(error_message([&] { reader.read(3, 3, out.data()); }), {good_, "[3, 6)", "5 tokens"});
  expect_contains(error_message([&] { reader.read(6, 0, out.data()); }), {good_, "outside"});
  reader.read(5, 0, out.data());  // an empty read at the end is fine
}

TEST(Shard, ReaderMoves) {
  TempDir dir;
  write_shard(dir.file("s.bin"), std::vector<int32_t>{3, 1, 4}, 257);
  ShardReader first(dir.file("s.bin"));
  ShardReader second(std::move(first));
  ShardReader third;
  third = std::move(second);
  int32_t tokens[3];
  third.read(0, 3, tokens);
  EXPECT_EQ(tokens[2], 4);
  EXPECT_EQ(second.token_count(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

}  // namespace
}  // namespace fpdt::data
