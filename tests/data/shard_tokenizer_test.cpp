// The one rule of which tokenizer made a shard (data/shard_tokenizer.h): the fingerprint a shard
// records; a version 1 shard (none recorded) is the byte tokenizer's when its ids fit it; the error of
// a mismatch names both tokenizers and vocabularies, and the shards of a data folder resolve to its
// tokenizer.json (or the byte tokenizer without one).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fpdt/data/shard_tokenizer.h"
#include "testing.h"

namespace fpdt::data {
namespace {

using testing::TempDir;

const std::string kFixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/";

// A version 1 shard (32-byte header, no tokenizer recorded) of `vocab` with one token, 1.
void write_v1_shard(const std::string& path, uint32_t vocab) {
  std::vector<unsigned char> bytes = {'F', 'P', 'D', 'T', 'S', 'H', 'R', 'D', 1, 0, 0, 0, 2, 0, 0, 0,
                                      1,   0,   0,   0,   0,   0,   0,   0};
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<unsigned char>(vocab >> (8 * i)));
  bytes.insert(bytes.end(), {0, 0, 0, 0, 1, 0});
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(ShardTokenizer, OneRuleForRecordedAndUnrecordedTokenizers) {
  TempDir dir;
  const Tokenizer bytes = Tokenizer::bytes();
  const Tokenizer gpt2 = Tokenizer::load(kFixtures + "gpt2");
  const std::vector<int32_t> one = {1};
  write_shard(dir.file("bytes.bin"), one, static_cast<uint32_t>(bytes.vocab_size()),
              {bytes.fingerprint(), static_cast<uint32_t>(bytes.end_of_document_id())});
  write_shard(dir.file("gpt2.bin"), one, static_cast<uint32_t>(gpt2.vocab_size()),
              {gpt2.fingerprint(), static_cast<uint32_t>(gpt2.end_of_document_id())});
  write_v1_shard(dir.file("v1_257.bin"), 257);
  write_v1_shard(dir.file("v1_256.bin"), 256);  // before the separator had an id
  write_v1_shard(dir.file("v1_500.bin"), 500);
  EXPECT_TRUE(made_by(ShardReader(dir.file("bytes.bin")), bytes));
  EXPECT_FALSE(made_by(ShardReader(dir.file("bytes.bin")), gpt2));
  EXPECT_TRUE(made_by(ShardReader(dir.file("gpt2.bin")), gpt2));
  EXPECT_FALSE(made_by(ShardReader(dir.file("gpt2.bin")), bytes));
  EXPECT_TRUE(made_by(ShardReader(dir.file("v1_257.bin")), bytes));
  EXPECT_TRUE(made_by(ShardReader(dir.file("v1_256.bin")), bytes));
  EXPECT_FALSE(made_by(ShardReader(dir.file("v1_500.bin")), bytes));  // ids the bytes do not have
  EXPECT_FALSE(made_by(ShardReader(dir.file("v1_257.bin")), gpt2));

  testing::expect_contains(
      testing::error_message([&] { check_made_by("eval", ShardReader(dir.file("v1_257.bin")), gpt2, "ckpt"); }),
      {"[eval] " + dir.file("v1_257.bin") + " was made by tokenizer bytes (not recorded; vocabulary 257)",
       "but ckpt's model was trained with tokenizer " + fingerprint_string(gpt2.fingerprint()) + " (vocabulary 500)",
       "hint: tokenize the text with the model's own tokenizer: fpdt tokenize --tokenizer ckpt"});
  EXPECT_NO_THROW(check_made_by("eval", ShardReader(dir.file("gpt2.bin")), gpt2, "ckpt"));
}

TEST(ShardTokenizer, TheShardsOfADataFolderResolveToItsTokenizer) {
  TempDir dir;
  const Tokenizer gpt2 = Tokenizer::load(kFixtures + "gpt2");
  const std::vector<int32_t> one = {1};
  write_v1_shard(dir.file("train.bin"), 257);
  const ShardReader v1(dir.file("train.bin"));
  EXPECT_TRUE(shards_tokenizer("train", dir.path(), v1, nullptr).is_byte_tokenizer());  // no tokenizer.json
  gpt2.save(dir.path());
  testing::expect_contains(testing::error_message([&] { shards_tokenizer("train", dir.path(), v1, nullptr); }),
                           {"[train]", "train.bin was made by another tokenizer (bytes (not recorded; vocabulary 257))",
                            "tokenizer.json"});
  write_shard(dir.file("gpt2.bin"), one, 500, {gpt2.fingerprint(), static_cast<uint32_t>(gpt2.end_of_document_id())});
  const ShardReader made(dir.file("gpt2.bin"));
  EXPECT_EQ(shards_tokenizer("train", dir.path(), made, &made).fingerprint(), gpt2.fingerprint());
  testing::expect_contains(testing::error_message([&] { shards_tokenizer("train", dir.path(), made, &v1); }),
                           {"[train]", "were made by different tokenizers"});
}

}  // namespace
}  // namespace fpdt::data
