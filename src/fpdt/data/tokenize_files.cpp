// The streaming `tokenize_files` (inputs → train/val shards + the tokenizer's files; see
// tokenize_files.h). Inputs are read in blocks; a document (a text file, a FASTA record) is encoded whole, as the library
// would encode it, and its tokens stream out, so memory is the largest document plus the blocks.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/data/fasta.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/text/unicode.h"
#include "fpdt/data/tokenize_files.h"
#include "fpdt/data/tokenizer.h"

namespace fpdt::data {

namespace {

constexpr const char* kTokenizeModule = "tokenize";
constexpr size_t kReadBlockBytes = size_t{1} << 20;

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

// Reads every input in order and hands each non-empty document to `on_document` with its file.
void for_each_document(const std::vector<std::string>& input_paths,
                       const std::function<void(const std::string& document, const std::string& path)>& on_document) {
  std::vector<char> block(kReadBlockBytes);
  std::string text;
  for (const std::string& path : input_paths) {
    // A pipe (`<(zcat x.gz)`) is taken too: every input is read once, front to back.
    const InputFile input(path, kTokenizeModule, "input",
                          "check the path; inputs are text or FASTA files, or pipes such as <(zcat FILE.gz)",
                          InputKinds::file_or_pipe);
    const int fd = input.fd();
    bool first_block = true;
    bool fasta = has_fasta_extension(path);
    FastaParser parser([&](const std::string& record) { on_document(record, path); });
    text.clear();
    while (true) {
      const ssize_t got = ::read(fd, block.data(), block.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int error_number = errno;
        throw Error(kTokenizeModule, "cannot read input " + in_quotes(path) + ": " + std::strerror(error_number),
                    "check the file and the device it is on");
      }
      if (got == 0) break;
      const std::string_view data(block.data(), static_cast<size_t>(got));
      if (first_block) {
        first_block = false;
        if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b)
          throw Error(kTokenizeModule, "input " + in_quotes(path) + " is gzip-compressed; only plain text and FASTA are read",
                      "decompress it first (gunzip -k " + path + "), or pass it through a pipe: <(zcat " + path + ")");
        if (data[0] == '>') fasta = true;
      }
      if (fasta) parser.feed(data);
      else text.append(data);
    }
    if (fasta) parser.finish();
    else if (!text.empty()) on_document(text, path);
  }
}

// Encodes every document of the inputs and hands the tokens to `sink`, with the end-of-document token
// between documents. Returns the number of documents.
uint64_t stream_tokens(const std::vector<std::string>& input_paths, const Tokenizer& tokenizer, const TokenSink& sink) {
  uint64_t documents = 0;
  const int32_t separator = tokenizer.end_of_document_id();
  for_each_document(input_paths, [&](const std::string& document, const std::string& path) {
    if (!tokenizer.accepts_any_bytes()) {
      const size_t bad = text::first_invalid_utf8(document);
      if (bad != document.size())
        throw Error(kTokenizeModule,
                    "input " + in_quotes(path) + " is not UTF-8 text (an invalid byte in document " +
                        std::to_string(documents + 1) + " at byte " + std::to_string(bad) + "), which this tokenizer cannot encode",
                    "convert it to UTF-8 (iconv -f LATIN1 -t UTF-8), or tokenize it with the byte tokenizer");
    }
    if (documents > 0) sink(std::span<const int32_t>(&separator, 1));
    tokenizer.encode(document, sink);
    ++documents;
  });
  return documents;
}

// Throws unless `directory` exists, is a directory and can be written.
void check_output_directory(const std::string& directory) {
  const std::string create_hint = "create it (mkdir -p " + directory + ") or check its permissions";
  struct stat info {};
  if (::stat(directory.c_str(), &info) != 0) {
    const int error_number = errno;
    throw Error(kTokenizeModule,
                "cannot write to output directory " + in_quotes(directory) + ": " + std::strerror(error_number),
                create_hint);
  }
  if (!S_ISDIR(info.st_mode))
    throw Error(kTokenizeModule, "output directory " + in_quotes(directory) + " is not a directory",
                "pass a directory for the shards, e.g. a new one made with mkdir -p");
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    const int error_number = errno;
    throw Error(kTokenizeModule,
                "cannot write to output directory " + in_quotes(directory) + ": " + std::strerror(error_number),
                create_hint);
  }
}

// Throws when `directory` holds shards, or tokenizer files other than `tokenizer`'s, that a run would
// replace, unless `overwrite`.
void check_nothing_replaced(const std::string& directory, const Tokenizer& tokenizer, bool overwrite) {
  if (overwrite) return;
  std::string replaced;
  const auto add = [&](const char* name) { replaced.append(replaced.empty() ? "" : ", ").append(name); };
  for (const char* shard : {"train.bin", "val.bin"})
    if (std::filesystem::exists(path_in(directory, shard))) add(shard);
  for (const auto& [name, text] : {std::pair{kTokenizerFile, &tokenizer.tokenizer_json()},
                                   std::pair{kTokenizerConfigFile, &tokenizer.config_json()}}) {
    const std::string path = path_in(directory, name);
    if (std::filesystem::exists(path) && read_text_file(path, kTokenizeModule, "") != *text) add(name);
  }
  if (!replaced.empty())
    throw Error(kTokenizeModule, "output directory " + in_quotes(directory) + " already holds " + replaced,
                "add --overwrite to replace them, or choose another --out");
}

}  // namespace

TokenizeSummary tokenize_files(const std::vector<std::string>& input_paths, const std::string& output_dir,
                               double val_fraction, const Tokenizer& tokenizer, bool overwrite) {
  FPDT_CHECK(!input_paths.empty(), kTokenizeModule, "no input files to tokenize", "pass one or more text or FASTA files");
  FPDT_CHECK(std::isfinite(val_fraction) && val_fraction >= 0.0 && val_fraction < 1.0, kTokenizeModule,
             "validation fraction " + std::to_string(val_fraction) + " is outside [0, 1)",
             "e.g. 0.01 keeps the last 1% of tokens for validation");
  check_output_directory(output_dir);
  check_nothing_replaced(output_dir, tokenizer, overwrite);

  TokenizeSummary summary;
  summary.vocab_size = tokenizer.vocab_size();
  summary.train_path = path_in(output_dir, "train.bin");
  summary.val_path = path_in(output_dir, "val.bin");
  // One pass (an input may be a pipe): every token goes to train.bin's temp file; once the count is
  // known, the last floor(val_fraction · tokens) move to val.bin.
  const ShardTokenizer identity{tokenizer.fingerprint(), static_cast<uint32_t>(tokenizer.end_of_document_id())};
  ShardWriter train(summary.train_path, static_cast<uint32_t>(summary.vocab_size), identity);
  ShardWriter val(summary.val_path, static_cast<uint32_t>(summary.vocab_size), identity);
  summary.documents = stream_tokens(input_paths, tokenizer, [&](std::span<const int32_t> tokens) { train.append(tokens); });
  const uint64_t total_tokens = train.token_count();
  FPDT_CHECK(total_tokens > 0, kTokenizeModule, "the inputs hold no tokens (empty files or FASTA without sequence)",
             "pass files with text or sequence in them");
  summary.val_tokens = static_cast<uint64_t>(std::floor(static_cast<double>(total_tokens) * val_fraction));
  if (summary.val_tokens >= total_tokens) summary.val_tokens = total_tokens - 1;  // rounding guard
  summary.train_tokens = total_tokens - summary.val_tokens;
  train.move_last_tokens_to(val, summary.val_tokens);
  train.finish();
  val.finish();
  tokenizer.save(output_dir);
  return summary;
}

}  // namespace fpdt::data
