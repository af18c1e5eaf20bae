// Tests of the tokenizers: every Hugging Face fixture (GPT-2, Llama 3, Qwen2 styles, split behaviours,
// the byte tokenizer) against golden ids and decodes from the `tokenizers` library
// (tools/make_tokenizer_fixtures.py); refusals of what is not implemented and of malformed files; FASTA
// parsing; and tokenize_files (stream order, train/val split, the tokenizer recorded, input errors).
#include "fpdt/data/tokenizer.h"

#include <dlfcn.h>
#include <regex.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/data/fasta.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/text/normalize.h"
#include "fpdt/data/text/oniguruma.h"
#include "fpdt/data/tokenize_files.h"
#include "testing.h"

namespace fpdt::data {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;
using testing::write_text_file;

const std::string kFixtures = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers";

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

const nlohmann::json& golden() {
  static const nlohmann::json json = nlohmann::json::parse(read_text_file(kFixtures + "/golden.json"));
  return json;
}

// Every golden text encodes to the library's ids, and every golden id sequence decodes to the
// library's text — exact equality, no tolerance: ids are integers and decoding is deterministic.
class LibraryGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LibraryGolden, EncodeAndDecodeEqualTheLibrary) {
  const std::string name = GetParam();
  const Tokenizer tokenizer = Tokenizer::load(kFixtures + "/" + name);
  const nlohmann::json& want = golden().at("tokenizers").at(name);
  EXPECT_EQ(tokenizer.vocab_size(), want.at("vocab_size").get<int32_t>());
  const auto& texts = golden().at("texts");
  ASSERT_EQ(texts.size(), want.at("ids").size());
  size_t checked = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    EXPECT_EQ(tokenizer.encode(text), want.at("ids")[i].get<std::vector<int32_t>>()) << name << " text " << i << ": '" << text << "'";
    ++checked;
  }
  for (const auto& decode : want.at("decode")) {
    const std::vector<int32_t> ids = decode.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer.decode(ids), decode.at("text").get<std::string>()) << name << " ids " << decode.at("ids").dump();
    ++checked;
  }
  std::printf("[ measured ] %s: %zu encodes and decodes equal the library's\n", name.c_str(), checked);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LibraryGolden,
                         ::testing::Values("gpt2", "gpt2_prefix", "llama3", "qwen2", "qwen2_nfc", "splits", "bytes"));

TEST(Tokenizer, ByteLevelBpeRoundTripsRandomUtf8) {
  // Byte-level BPE loses nothing: decode(encode(text)) == text for any UTF-8 text (its NFC for a
  // tokenizer that normalizes), special tokens included. Long runs of one class (a million spaces) are matched in one piece.
  Rng rng(fpdt::testing::fresh_seed());
  const std::vector<std::string> pool = {"a", "Z", "7", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", ".", "é",
                                         "ж", "中", "😀", "\u00a0", "\u3000", "<|endoftext|>", "\u0301", "1234"};
  for (const char* name : {"gpt2", "gpt2_prefix", "llama3", "qwen2", "qwen2_nfc"}) {
    const Tokenizer tokenizer = Tokenizer::load(kFixtures + "/" + name);
    for (int trial = 0; trial < 20; ++trial) {
      std::string text;
      const size_t pieces = rng.below(300);
      for (size_t i = 0; i < pieces; ++i) text += pool[rng.below(pool.size())];
      const std::string want = std::string(name) == "qwen2_nfc" ? text::nfc(text) : text;
      if (std::string(name) != "gpt2_prefix") {  // add_prefix_space adds spaces, checked by the golden ids
        EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), want) << name;
      }
    }
    const std::string runs = "a" + std::string(1 << 20, ' ') + "b" + std::string(1 << 20, 'x') + "\n";
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(runs)), std::string(name) == "gpt2_prefix" ? " " + runs : runs) << name;
  }
}

TEST(Tokenizer, NfcIsTheLibrarysUnicode9Nfc) {
  // Spot checks; tools/make_unicode_tables.py compares the tables with the library's NFC on 1.1M texts.
  EXPECT_EQ(text::nfc("e\u0301"), "\u00e9");                             // composition
  EXPECT_EQ(text::nfc("\u212b"), "\u00c5");                              // singleton (Angstrom sign)
  EXPECT_EQ(text::nfc("\u1100\u1161\u11a8"), "\uac01");                  // Hangul LVT
  EXPECT_EQ(text::nfc("a\u0301\u0316"), "\u00e1\u0316");                 // reordered, then composed
  EXPECT_EQ(text::nfc("\u0958"), "\u0915\u093c");                         // composition exclusion
  EXPECT_EQ(text::nfc("a\u0345\u1df6"), "a\u0345\u1df6");                // U+1DF6 (Unicode 10) has no class in 9.0
  EXPECT_EQ(text::nfc(""), "");
}

TEST(Tokenizer, ByteTokenizerIsItsTokenizerJson) {
  // The built-in byte tokenizer's tokenizer.json is the committed fixture the library was checked on,
  // and its general (BPE) path gives the fast path's ids on any bytes.
  const Tokenizer bytes = Tokenizer::bytes();
  EXPECT_EQ(bytes.tokenizer_json(), read_text_file(kFixtures + "/bytes/tokenizer.json"));
  EXPECT_TRUE(bytes.is_byte_tokenizer());
  EXPECT_TRUE(bytes.accepts_any_bytes());
  EXPECT_EQ(bytes.vocab_size(), 257);
  EXPECT_EQ(bytes.end_of_document_id(), kEndOfDocumentId);
  EXPECT_EQ(bytes.end_of_document_token(), kEndOfDocumentName);
  EXPECT_EQ(bytes.token_id("<|eod|>"), 256);
  EXPECT_EQ(bytes.token_id("<|nope|>"), -1);
  // Its tokenizer.json read back is the byte tokenizer; the same JSON written otherwise runs the general path.
  EXPECT_TRUE(Tokenizer::from_json(bytes.tokenizer_json(), "", "", "test").is_byte_tokenizer());
  const Tokenizer general = Tokenizer::from_json(nlohmann::json::parse(bytes.tokenizer_json()).dump(), "", "", "test");
  EXPECT_FALSE(general.is_byte_tokenizer());
  EXPECT_EQ(general.end_of_document_id(), kEndOfDocumentId);
  Rng rng(fpdt::testing::fresh_seed());
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte) every_byte.push_back(static_cast<char>(byte));
  for (const std::string& text : {std::string(), every_byte, std::string("a<|eod|>b"), random_bytes(rng, 1 + rng.below(5000))}) {
    const std::vector<int32_t> ids = bytes.encode(text);
    EXPECT_EQ(general.encode(text), ids);
    // Bytes map to their ids; "<|eod|>" in the text is the special token, as in the library.
    std::vector<int32_t> want;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 7, "<|eod|>") == 0) want.push_back(kEndOfDocumentId), i += 6;
      else want.push_back(static_cast<unsigned char>(text[i]));
    }
    EXPECT_EQ(ids, want);
  }
}

TEST(Tokenizer, DecodeAndRenderFollowTheLibrary) {
  const Tokenizer tokenizer = Tokenizer::bytes();
  const std::string replacement = "\xEF\xBF\xBD";
  // Unknown ids are dropped; special ids decode to their text.
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{'H', 'i', kEndOfDocumentId, 9999, -1, '!'}), "Hi<|eod|>!");
  // Invalid UTF-8 becomes one U+FFFD per maximal invalid subsequence (Rust's from_utf8_lossy).
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("a\xFF" "b")), "a" + replacement + "b");
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\x80")), replacement);                              // stray continuation
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xC0\xAF")), replacement + replacement);             // overlong '/'
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xED\xA0\x80")), replacement + replacement + replacement);  // surrogate
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xE2\x82")), replacement);                          // cut short
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("\xE2\x82" "A")), replacement + "A");
  // render also hides terminal controls; valid text, newline and tab pass through.
  const std::string valid = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\tline\n";
  EXPECT_EQ(tokenizer.render(tokenizer.encode(valid)), valid);
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\x1B[31mred")), replacement + "[31mred");  // ESC
  EXPECT_EQ(tokenizer.render(tokenizer.encode("\xC2\x9B" "2J")), replacement + "2J");     // C1 CSI
  Rng rng(fpdt::testing::fresh_seed());
  const std::string rendered = tokenizer.render(tokenizer.encode(random_bytes(rng, 4096)));
  EXPECT_EQ(tokenizer.render(tokenizer.encode(rendered)), rendered);  // nothing left to replace
}

TEST(Tokenizer, EndOfDocumentToken) {
  // tokenizer_config.json's eos_token, else the only special token, else the name given.
  EXPECT_EQ(Tokenizer::load(kFixtures + "/llama3").end_of_document_token(), "<|end_of_text|>");
  EXPECT_EQ(Tokenizer::load(kFixtures + "/gpt2/tokenizer.json").end_of_document_token(), "<|endoftext|>");
  const Tokenizer qwen = Tokenizer::load(kFixtures + "/qwen2");  // three specials, one a known name
  EXPECT_EQ(qwen.end_of_document_token(), "<|endoftext|>");
  EXPECT_EQ(qwen.end_of_document_id(), qwen.token_id("<|endoftext|>"));
  EXPECT_EQ(Tokenizer::load(kFixtures + "/qwen2", "<|im_end|>").end_of_document_token(), "<|im_end|>");
  expect_contains(error_message([] { Tokenizer::load(kFixtures + "/qwen2", "<|nope|>"); }),
                  {"[tokenizer]", "no token '<|nope|>'", "--eos-token"});
  // tokenizer_config.json's bos_token and pad_token (a string or {"content": ...}), -1 when it names none
  // or a token the tokenizer lacks: what a checkpoint's config.json states when the model config does not.
  const Tokenizer llama3 = Tokenizer::load(kFixtures + "/llama3");
  EXPECT_EQ(llama3.begin_of_text_id(), llama3.token_id("<|begin_of_text|>"));
  EXPECT_GE(llama3.begin_of_text_id(), 0);
  EXPECT_EQ(llama3.padding_id(), -1);
  EXPECT_EQ(Tokenizer::bytes().begin_of_text_id(), -1);
  EXPECT_EQ(Tokenizer::bytes().padding_id(), -1);
  const std::string config = R"({"bos_token": "<|nope|>", "pad_token": {"content": "<|endoftext|>"}})";
  const Tokenizer padded = Tokenizer::from_json(read_text_file(kFixtures + "/gpt2/tokenizer.json"), config, "", "test");
  EXPECT_EQ(padded.begin_of_text_id(), -1);
  EXPECT_EQ(padded.padding_id(), padded.token_id("<|endoftext|>"));
  // Fingerprints tell tokenizers apart.
  EXPECT_NE(Tokenizer::load(kFixtures + "/gpt2").fingerprint(), Tokenizer::load(kFixtures + "/gpt2_prefix").fingerprint());
}

// libonig exports regcomp, regexec and regfree too (cmake/dependencies.cmake): in a program that links
// it, the process's POSIX regex functions must stay glibc's (GoogleTest's death-test matchers call them).
TEST(Tokenizer, PosixRegexFunctionsStayGlibcsBesideOniguruma) {
  for (const char* name : {"regcomp", "regexec", "regfree"}) {
    Dl_info info{};
    void* found = dlsym(RTLD_DEFAULT, name);
    ASSERT_NE(found, nullptr) << name;
    ASSERT_NE(dladdr(found, &info), 0) << name;
    EXPECT_NE(std::string(info.dli_fname).find("libc.so"), std::string::npos) << name << " comes from " << info.dli_fname;
  }
  regex_t compiled;
  ASSERT_EQ(regcomp(&compiled, "b+c", REG_EXTENDED), 0);
  regmatch_t match{};
  EXPECT_EQ(regexec(&compiled, "abbbcd", 1, &match, 0), 0);
  EXPECT_EQ(match.rm_so, 1);
  EXPECT_EQ(match.rm_eo, 5);
  regfree(&compiled);
  // The tokenizer's own patterns go through onig_new, unaffected.
  EXPECT_EQ(text::Regex("\\p{L}+").find_all("ab 12 cd").size(), 2u);
}

TEST(Tokenizer, RefusesWhatItDoesNotImplementWithOneClearError) {
  expect_contains(error_message([] { Tokenizer::load(kFixtures + "/wordpiece"); }),
                  {"[tokenizer]", "wordpiece/tokenizer.json", "model type 'WordPiece' is not supported", "hint:"});
  expect_contains(error_message([] { Tokenizer::load(kFixtures + "/unigram"); }),
                  {"model type 'Unigram' is not supported"});
  expect_contains(error_message([] { Tokenizer::load(kFixtures); }), {"holds no tokenizer.json"});
  expect_contains(error_message([] { Tokenizer::load(kFixtures + "/none.json"); }), {"[tokenizer]", "cannot open", "none.json", "No such file"});

  // Edits of a good file, each refused naming what is wrong.
  const nlohmann::json good = nlohmann::json::parse(read_text_file(kFixtures + "/llama3/tokenizer.json"));
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json bad = good;
    edit(bad);
    return error_message([&] { Tokenizer::from_json(bad.dump(), "", "", "edited.json"); });
  };
  expect_contains(refused([](auto& j) { j["normalizer"] = {{"type", "Lowercase"}}; }), {"edited.json", "normalizer 'Lowercase'"});
  expect_contains(refused([](auto& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKC"}}}}}; }),
                  {"normalizer 'NFKC'"});
  expect_contains(refused([](auto& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), {"'Whitespace' is not supported"});
  expect_contains(refused([](auto& j) { j["decoder"] = {{"type", "WordPiece"}}; }), {"decoder 'WordPiece'"});
  expect_contains(refused([](auto& j) { j["model"]["dropout"] = 0.1; }), {"dropout"});
  expect_contains(refused([](auto& j) { j["added_tokens"][0]["single_word"] = true; }), {"single_word"});
  expect_contains(refused([](auto& j) { j["model"]["merges"][0] = "Ġ"; }), {"merges[0]", "two tokens"});
  expect_contains(refused([](auto& j) { j["model"]["merges"][1] = {"no-such", "token"}; }), {"merges[1]", "not in the vocabulary"});
  expect_contains(refused([](auto& j) { j["model"]["vocab"]["x"] = -5; }), {"not a valid id"});
  // A float id beyond int64 made nlohmann's conversion undefined (UBSan, fuzz/tokenizer_fuzz.cpp).
  expect_contains(refused([](auto& j) { j["model"]["vocab"]["x"] = 6e37; }), {"model.vocab['x'] is 6e+37, not a whole number"});
  expect_contains(refused([](auto& j) { j["added_tokens"][0]["id"] = 2.5; }), {"added_tokens[].id is 2.5"});
  // Values a message quotes are bounded excerpts, however long they are.
  const std::string message = refused([](auto& j) { j["decoder"] = {{"type", std::string(100000, 'W')}}; });
  expect_contains(message, {"decoder 'WWWW", "...' is not supported"});
  EXPECT_LT(message.size(), 1000u);
  // So is a long pattern Oniguruma refuses (found by the in-suite fuzz replay), with Oniguruma's reason.
  const std::string pattern_message = refused([](auto& j) {
    std::string pattern = "[^\\r\\n";
    for (int i = 0; i < 2000; ++i) pattern += "\\p{Ln";
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern + "}]";
  });
  expect_contains(pattern_message, {"pre-tokenizer regex '[^\\\\r\\\\n\\\\p{Ln\\\\p{Ln", "...' is not valid"});
  EXPECT_LT(pattern_message.size(), 1000u);
  expect_contains(refused([](auto& j) { j.erase("model"); }), {"has no \"model\""});
  expect_contains(refused([](auto& j) { j["model"]["vocab"] = "oops"; }), {"edited.json", "not a valid tokenizer.json"});
  expect_contains(refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{NoSuch}+"; }),
                  {"edited.json pre_tokenizer.pretokenizers[].pattern", "regex '\\\\p{NoSuch}+' is not valid",
                   "invalid character property name {NoSuch}", "Oniguruma syntax"});
  expect_contains(refused([](auto& j) { j["model"]["vocab"]["x"] = 1 << 30; }), {"id of 1073741824", "limit"});
  expect_contains(refused([](auto& j) { j["model"]["vocab"] = nlohmann::json::object(); j["added_tokens"] = nlohmann::json::array(); j["model"]["merges"] = nlohmann::json::array(); }),
                  {"empty vocabulary"});
  // Malformed text: truncated, not an object, nested past the depth limit.
  const std::string text = good.dump();
  expect_contains(error_message([&] { Tokenizer::from_json(text.substr(0, text.size() / 2), "", "", "cut.json"); }),
                  {"[tokenizer]", "cut.json", "not a valid tokenizer.json"});
  expect_contains(error_message([] { Tokenizer::from_json("[1, 2]", "", "", "array.json"); }), {"not a JSON object"});
  expect_contains(error_message([] { Tokenizer::from_json(std::string(100000, '[') + std::string(100000, ']'), "", "", "deep.json"); }),
                  {"deep.json", "nests", "deep"});
  expect_contains(error_message([&] { Tokenizer::from_json(text, "{not json", "", "x.json"); }), {"tokenizer_config.json is not valid JSON"});
  // A pathological pattern is an error on the text that exposes it, never a hang or a crash: exponential
  // backtracking at one position (Oniguruma's retry limit, the library's too), and a pattern that costs
  // ~2^14 retries at every position (under that limit) over a long text (fpdt's budget per byte).
  nlohmann::json nested = good;
  nested["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a|a)*(?:a|a)*(?:a|a)*b|.";
  const Tokenizer exponential = Tokenizer::from_json(nested.dump(), "", "", "nested.json");
  expect_contains(error_message([&] { (void)exponential.encode(std::string(40, 'a')); }),
                  {"backtracks too much on a text of 40 bytes", "searching from byte 0"});
  nested["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a|a){14}b|.";
  const Tokenizer costly = Tokenizer::from_json(nested.dump(), "", "", "costly.json");
  EXPECT_EQ(costly.decode(costly.encode("aaab")), "aaab");
  expect_contains(error_message([&] { (void)costly.encode(std::string(100000, 'a')); }),
                  {"backtracks too much on a text of 100000 bytes", "1000 per byte of the text"});
  // Patterns beyond GPT-2's, Llama 3's and Qwen2's work as in the library: lookbehind, \\w, a group
  // repeated 20,000 times.
  for (const std::string pattern : {"(?<=a)b", "\\w+", "(?:ab)+|."}) {
    nested["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern;
    const Tokenizer other = Tokenizer::from_json(nested.dump(), "", "", "other.json");
    std::string long_run = "abab x ";
    for (int i = 0; i < 20000; ++i) long_run += "ab";
    EXPECT_EQ(other.decode(other.encode(long_run)), long_run) << pattern;
  }
  // Text that is not UTF-8 cannot be split by regex.
  const Tokenizer gpt2 = Tokenizer::load(kFixtures + "/gpt2");
  EXPECT_FALSE(gpt2.accepts_any_bytes());
  expect_contains(error_message([&] { (void)gpt2.encode("abc\xFF" "def"); }), {"not valid UTF-8 at byte 3", "iconv"});
}

TEST(Fasta, ParsesTheTinyFixture) {
  const std::string text = read_text_file(std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tiny.fasta");
  ASSERT_FALSE(text.empty());
  const Tokenizer tokenizer = Tokenizer::bytes();
  // Headers, blank lines and newlines dropped, upper-cased, EOD between records, the empty record
  // adds nothing and no EOD trails the last record.
  const std::vector<int32_t> want = concat({tokenizer.encode("ACGTACGTNN"), {kEndOfDocumentId},
                                            tokenizer.encode("ACGT"), {kEndOfDocumentId}, tokenizer.encode("TTAA")});
  EXPECT_EQ(tokenize_fasta(text), want);
}

TEST(Fasta, HandlesCrlfCommentsAndSequenceBeforeTheFirstHeader) {
  const Tokenizer tokenizer = Tokenizer::bytes();
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
  const Tokenizer tokenizer = Tokenizer::bytes();
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
      {dir.file("notes.txt"), dir.file("empty.txt"), dir.file("genes.fasta"), dir.file("reads.txt")}, dir.file("out"), 0.1,
      tokenizer);

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
  EXPECT_EQ(ShardReader(summary.val_path).tokenizer(), (ShardTokenizer{tokenizer.fingerprint(), kEndOfDocumentId}));
  // The shards and the tokenizer's two files; no temp files left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("out")), {}), 4);
  EXPECT_EQ(Tokenizer::load(dir.file("out")).fingerprint(), tokenizer.fingerprint());
}

TEST(TokenizeFiles, WritesHuggingFaceTokensWithTheEndOfDocumentTokenBetweenDocuments) {
  TempDir dir;
  const Tokenizer tokenizer = Tokenizer::load(kFixtures + "/llama3");
  const auto& texts = golden().at("texts");
  std::vector<std::string> paths;
  std::vector<int32_t> want;
  for (size_t i = 0; i < 6; ++i) {  // six non-empty golden texts, one file each
    const std::string text = texts[i].get<std::string>();
    paths.push_back(dir.file("doc" + std::to_string(i) + ".txt"));
    write_text_file(paths.back(), text);
    if (i > 0) want.push_back(tokenizer.end_of_document_id());
    const auto ids = golden().at("tokenizers").at("llama3").at("ids")[i].get<std::vector<int32_t>>();
    want.insert(want.end(), ids.begin(), ids.end());
  }
  std::filesystem::create_directory(dir.file("out"));
  const TokenizeSummary summary = tokenize_files(paths, dir.file("out"), 0.25, tokenizer);
  EXPECT_EQ(summary.documents, 6u);
  EXPECT_EQ(summary.vocab_size, tokenizer.vocab_size());
  EXPECT_EQ(concat({read_all_tokens(summary.train_path), read_all_tokens(summary.val_path)}), want);
  const ShardReader shard(summary.train_path);
  EXPECT_EQ(shard.tokenizer().fingerprint, tokenizer.fingerprint());
  EXPECT_EQ(shard.tokenizer().end_of_document_id, static_cast<uint32_t>(tokenizer.token_id("<|end_of_text|>")));
  // The folder's tokenizer files are the tokenizer's own (tokenizer_config.json included).
  EXPECT_EQ(read_text_file(dir.file("out/tokenizer.json")), tokenizer.tokenizer_json());
  EXPECT_EQ(read_text_file(dir.file("out/tokenizer_config.json")), read_text_file(kFixtures + "/llama3/tokenizer_config.json"));

  // A file that is not UTF-8 is refused naming it, before anything is written.
  write_text_file(dir.file("latin1.txt"), "caf\xE9");
  std::filesystem::create_directory(dir.file("out2"));
  expect_contains(error_message([&] { tokenize_files({paths[0], dir.file("latin1.txt")}, dir.file("out2"), 0.1, tokenizer); }),
                  {"[tokenize]", "latin1.txt", "not UTF-8", "byte 3", "iconv"});
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("out2")), {}), 0);
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
  const TokenizeSummary summary = tokenize_files({dir.file("big.fa")}, dir.path(), 0.0, Tokenizer::bytes());
  EXPECT_EQ(summary.val_tokens, 0u);
  EXPECT_EQ(read_all_tokens(summary.train_path), tokenize_fasta(fasta));
  EXPECT_EQ(ShardReader(summary.val_path).token_count(), 0u);
}

TEST(TokenizeFiles, InputErrorsNameTheFile) {
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string missing = dir.file("missing.txt");
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt"), missing}, dir.path(), 0.1, Tokenizer::bytes()); }),
                  {"[tokenize]", "cannot open input", missing, "No such file"});
  // Nothing was written when an input failed.
  EXPECT_FALSE(std::filesystem::exists(dir.file("train.bin")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);

  std::filesystem::create_directory(dir.file("subdir"));
  expect_contains(error_message([&] { tokenize_files({dir.file("subdir")}, dir.path(), 0.1, Tokenizer::bytes()); }),
                  {dir.file("subdir"), "is a directory"});

  write_text_file(dir.file("data.fa.gz"), std::string("\x1f\x8b\x08\x00", 4) + "compressed");
  expect_contains(error_message([&] { tokenize_files({dir.file("data.fa.gz")}, dir.path(), 0.1, Tokenizer::bytes()); }),
                  {dir.file("data.fa.gz"), "gzip", "gunzip"});

  write_text_file(dir.file("headers.fa"), ">just a header\n");
  expect_contains(error_message([&] { tokenize_files({dir.file("headers.fa")}, dir.path(), 0.1, Tokenizer::bytes()); }), {"no tokens"});
  expect_contains(error_message([&] { tokenize_files({}, dir.path(), 0.1, Tokenizer::bytes()); }), {"no input files"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.path(), 1.0, Tokenizer::bytes()); }), {"outside [0, 1)"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.path(), -0.5, Tokenizer::bytes()); }), {"outside [0, 1)"});
}

TEST(TokenizeFiles, OutputDirectoryErrorsNameTheDirectory) {
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string missing = dir.file("no/such/dir");
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, missing, 0.1, Tokenizer::bytes()); }),
                  {"[tokenize]", "output directory", missing, "hint:", "mkdir -p " + missing, "permissions"});
  expect_contains(error_message([&] { tokenize_files({dir.file("ok.txt")}, dir.file("ok.txt"), 0.1, Tokenizer::bytes()); }),
                  {"output directory", dir.file("ok.txt"), "not a directory"});
}

TEST(TokenizeFiles, UnwritableOutputDirectoryIsAnError) {
  // sysfs refuses new files to every user, root included (EACCES, or EROFS where it is mounted
  // read-only), so this holds whoever runs the suite.
  TempDir dir;
  write_text_file(dir.file("ok.txt"), "hello");
  const std::string message = error_message([&] { tokenize_files({dir.file("ok.txt")}, "/sys", 0.1, Tokenizer::bytes()); });
  expect_contains(message, {"cannot", "/sys", "check its permissions"});
}

}  // namespace
}  // namespace fpdt::data
