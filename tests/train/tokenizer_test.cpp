// Tests of the byte tokenizer (exact round trips, special ids, safe rendering), FASTA parsing, and
// tokenize_files (stream order, train/val split, block-size independence, every input/output error).
#include "fpdt/train/tokenizer.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/train/shard.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;
using testing::write_text_file;

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<int32_t> read_all_tokens(const std::string& path) {
  const ShardReader reader(path);
  std::vector<int32_t> tokens(reader.token_count());
  reader.read(0, tokens.size(), tokens.data());
  return tokens;
}

std::string random_bytes(Rng& rng, size_t count) {
  std::string bytes(count, '\0');
  for (char& byte : bytes) byte = static_cast<char>(rng.below(256));
  return bytes;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

TEST(ByteTokenizer, RoundTripsEveryByteStringExactly) {
  Rng rng(fpdt::testing::fresh_seed());
  const ByteTokenizer tokenizer;
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte) every_byte.push_back(static_cast<char>(byte));
  for (const std::string& text : {std::string(), every_byte, std::string("<|eod|> is text, not a token"),
                                  random_bytes(rng, 1 + rng.below(5000))}) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    ASSERT_EQ(ids.size(), text.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_GE(ids[i], 0);
      ASSERT_LT(ids[i], kByteVocabSize);
    }
    EXPECT_EQ(tokenizer.decode(ids), text);
  }
}

TEST(ByteTokenizer, VocabularyAndSpecialTokens) {
  const ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.vocab_size(), 257);
  EXPECT_EQ(tokenizer.end_of_document_id(), 256);
  EXPECT_EQ(tokenizer.special_token_id("<|eod|>"), kEndOfDocumentId);
  EXPECT_TRUE(tokenizer.is_special(256));
  EXPECT_FALSE(tokenizer.is_special(255));
  EXPECT_FALSE(tokenizer.is_special(257));

  const ByteTokenizer extended({"<|pad|>", "<|sep|>"});
  EXPECT_EQ(extended.vocab_size(), 259);
  EXPECT_EQ(extended.special_token_id("<|pad|>"), 257);
  EXPECT_EQ(extended.special_token_id("<|sep|>"), 258);
  expect_contains(error_message([&] { (void)tokenizer.special_token_id("<|nope|>"); }), {"<|nope|>", "<|eod|>"});
  expect_contains(error_message([] { ByteTokenizer twice({"<|x|>", "<|x|>"}); }), {"<|x|>", "twice"});
  expect_contains(error_message([] { ByteTokenizer named_eod({"<|eod|>"}); }), {"<|eod|>", "twice"});
}

TEST(ByteTokenizer, DecodeNamesSpecialIdsAndReplacesUnknownIds) {
  const ByteTokenizer tokenizer;
  const std::vector<int32_t> ids = {'H', 'i', kEndOfDocumentId, 9999, -1, '!'};
  EXPECT_EQ(tokenizer.decode(ids), "Hi<|eod|>\xEF\xBF\xBD\xEF\xBF\xBD!");
}

TEST(ByteTokenizer, RenderIsValidUtf8WithoutControlCharacters) {
  const ByteTokenizer tokenizer;
  const std::string replacement = "\xEF\xBF\xBD";
  // Valid UTF-8 (2, 3 and 4 bytes), newline and tab pass through unchanged.
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\tline\n";
  EXPECT_EQ(tokenizer.render(tokenizer.encode(valid)), valid);
  // Invalid bytes and terminal controls become U+FFFD, one per offending byte or sequence.
  EXPECT_EQ(tokenizer.render(tokenizer.encode("a\xFF" "b")), "a" + replacement + "b");
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\x80")), replacement);                  // stray continuation
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\xC0\xAF")), replacement + replacement);  // overlong '/'
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\xED\xA0\x80")), replacement + replacement + replacement);  // surrogate
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\xE2\x82")), replacement + replacement);  // cut short
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\x1B[31mred")), replacement + "[31mred");  // ESC
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\xC2\x9B" "2J")), replacement + "2J");     // C1 CSI
  EXPECT_EQ(tokenizer.render(std::vector<int32_t>{kEndOfDocumentId}), "<|eod|>");

  // On random bytes: rendering is idempotent, i.e. the output holds nothing render would replace.
  Rng rng(fpdt::testing::fresh_seed());
  const std::string rendered = tokenizer.render(tokenizer.encode(random_bytes(rng, 4096)));
  EXPECT_EQ(tokenizer.render(tokenizer.encode(rendered)), rendered);
}

TEST(Fasta, ParsesTheTinyFixture) {
  const std::string text = read_text_file(std::string(FPDT_SOURCE_DIR) + "/tests/train/fixtures/tiny.fasta");
  ASSERT_FALSE(text.empty());
  const ByteTokenizer tokenizer;
  // Headers, blank lines and newlines dropped, upper-cased, EOD between records, the empty record
  // adds nothing and no EOD trails the last record.
  const std::vector<int32_t> want = concat({tokenizer.encode("ACGTACGTNN"), {kEndOfDocumentId},
                                            tokenizer.encode("ACGT"), {kEndOfDocumentId}, tokenizer.encode("TTAA")});
  EXPECT_EQ(tokenize_fasta(text), want);
}

TEST(Fasta, HandlesCrlfCommentsAndSequenceBeforeTheFirstHeader) {
  const ByteTokenizer tokenizer;
  EXPECT_EQ(tokenize_fasta("ac\r\n;comment\r\ngt\r\n>r2\r\nn n\r\n"),
            concat({tokenizer.encode("ACGT"), {kEndOfDocumentId}, tokenizer.encode("NN")}));
  EXPECT_TRUE(tokenize_fasta("").empty());
  EXPECT_TRUE(tokenize_fasta(">only a header\n").empty());
  // '>' inside a line is sequence, not a header.
  EXPECT_EQ(tokenize_fasta(">h\nA>C\n"), tokenizer.encode("A>C"));
}

TEST(Fasta, ExtensionDetection) {
  EXPECT_TRUE(has_fasta_extension("genome.fa"));
  EXPECT_TRUE(has_fasta_extension("/data/x.FASTA"));
  EXPECT_TRUE(has_fasta_extension("reads.fna"));
  EXPECT_FALSE(has_fasta_extension("notes.txt"));
  EXPECT_FALSE(has_fasta_extension("fa"));
  EXPECT_FALSE(has_fasta_extension("genome.fa.gz"));
}

TEST(TokenizeFiles, WritesTheStreamSplitIntoTrainAndVal) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  const ByteTokenizer tokenizer;
  const std::string text = random_bytes(rng, 200 + rng.below(300));
  const std::string fasta_by_extension = ">a\nacgt\n>b\nTTGG\n";
  const std::string fasta_by_content = ">c\nnnaa\n";
  write_text_file(dir.file("notes.txt"), "T" + text);  // never a leading '>' or gzip magic
  write_text_file(dir.file("genes.fasta"), fasta_by_extension);
  write_text_file(dir.file("reads.txt"), fasta_by_content);
  write_text_file(dir.file("empty.txt"), "");
  const std::string notes = read_text_file(dir.file("notes.txt"));
  std::filesystem::create_directory(dir.file("out"));

  const TokenizeSummary summary = tokenize_files(
      {dir.file("notes.txt"), dir.file("empty.txt"), dir.file("genes.fasta"), dir.file("reads.txt")}, dir.file("out"), 0.1);

  const std::vector<int32_t> want =
      concat({tokenizer.encode(notes), {kEndOfDocumentId}, tokenize_fasta(fasta_by_extension), {kEndOfDocumentId},
              tokenize_fasta(fasta_by_content)});
  const uint64_t want_val = want.size() / 10;  // floor(0.1 · N)
  EXPECT_EQ(summary.train_tokens + summary.val_tokens, want.size());
  EXPECT_EQ(summary.val_tokens, want_val);
  EXPECT_EQ(summary.documents, 4u);  // notes, a, b, c (the empty file is no document)
  EXPECT_EQ(summary.vocab_size, 257);
  EXPECT_EQ(summary.train_path, dir.file("out") + "/train.bin");
  EXPECT_EQ(summary.val_path, dir.file("out") + "/val.bin");

  const std::vector<int32_t> train = read_all_tokens(summary.train_path);
  const std::vector<int32_t> val = read_all_tokens(summary.val_path);
  EXPECT_EQ(concat({train, val}), want);
  EXPECT_EQ(val.size(), want_val);
  EXPECT_EQ(ShardReader(summary.train_path).vocab_size(), 257u);
  EXPECT_EQ(ShardReader(summary.train_path).token_width_bytes(), 2u);
  // Only the two shards: no temp files left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("out")), {}), 2);
}

TEST(TokenizeFiles, ResultDoesNotDependOnReadBlockBoundaries) {
  // A FASTA file larger than the 1 MiB read block, with records and lines that straddle blocks.
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  std::string fasta;
  const char letters[] = "acgtnACGTN";
  while (fasta.size() < (size_t{5} << 19)) {
    fasta += ">record " + std::to_string(rng.next_u64()) + "\n";
    const size_t lines = 1 + rng.below(2000);
    for (size_t line = 0; line < lines; ++line) {
      const size_t width = rng.below(120);
      for (size_t i = 0; i < width; ++i) fasta.push_back(letters[rng.below(10)]);
      fasta += rng.below(4) == 0 ? "\r\n" : "\n";
    }
  }
  write_text_file(dir.file("big.fa"), fasta);
  const TokenizeSummary summary = tokenize_files({dir.file("big.fa")}, dir.path(), 0.0);
  EXPECT_EQ(summary.val_tokens, 0u);
  EXPECT_EQ(read_all_tokens(summary.train_path), tokenize_fasta(fasta));
  EXPECT_EQ(ShardReader(summary.val_path).token_count(), 0u);
}

TEST(TokenizeFiles, InputErrorsNameTheFile) {
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string missing = dir.file("missing.txt");
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt"), missing}, dir.path(), 0.1); }),
                  {"[tokenize]", "cannot read input", missing, "No such file"});
  // Nothing was written when an input failed.
  EXPECT_FALSE(std::filesystem::exists(dir.file("train.bin")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);

  std::filesystem::create_directory(dir.file("subdir"));
  expect_contains(error_message([&] { tokenize_files({dir.file("subdir")}, dir.path(), 0.1); }),
                  {dir.file("subdir"), "is a directory"});

  write_text_file(dir.file("data.fa.gz"), std::string("\x1f\x8b\x08\x00", 4) + "compressed");
  expect_contains(error_message([&] { tokenize_files({dir.file("data.fa.gz")}, dir.path(), 0.1); }),
                  {dir.file("data.fa.gz"), "gzip", "gunzip"});

  write_text_file(dir.file("headers.fa"), ">just a header\n");
  expect_contains(error_message([&] { tokenize_files({dir.file("headers.fa")}, dir.path(), 0.1); }), {"no tokens"});
  expect_contains(error_message([&] { tokenize_files({}, dir.path(), 0.1); }), {"no input files"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.path(), 1.0); }), {"outside [0, 1)"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.path(), -0.5); }), {"outside [0, 1)"});
}

TEST(TokenizeFiles, OutputDirectoryErrorsNameTheDirectory) {
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string missing = dir.file("no/such/dir");
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, missing, 0.1); }),
                  {"[tokenize]", "output directory", missing, "hint:", "mkdir -p " + missing, "permissions"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.file("ok.txt"), 0.1); }),
                  {"output directory", dir.file("ok.txt"), "not a directory"});
}

TEST(TokenizeFiles, UnwritableOutputDirectoryIsAnError) {
  // sysfs refuses new files to every user, root included (EACCES, or EROFS where it is mounted
  // read-only), so this holds whoever runs the suite.
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string message = error_message([&] { tokenize_files({dir.file("ok.txt")}, "/sys", 0.1); });
  expect_contains(message, {"cannot", "/sys", "check its permissions"});
}

}  // namespace
}  // namespace fpdt::train
