// Byte-level tokenizer, FASTA parsing and the streaming `tokenize_files` (inputs → train/val shards).
// Parsing is a byte-at-a-time state machine fed in blocks, so inputs of any size stream through
// bounded memory and a block boundary never changes the result.
#include "fpdt/train/tokenizer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/train/shard.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "tokenizer";
constexpr const char* kTokenizeModule = "tokenize";
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
constexpr size_t kReadBlockBytes = size_t{1} << 20;

// Length of the valid UTF-8 sequence at text[0..available), or 0 when it is not valid UTF-8
// (stray continuation byte, overlong form, surrogate, above U+10FFFF, or cut short).
size_t utf8_sequence_bytes(const unsigned char* text, size_t available) {
  const unsigned char lead = text[0];
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead == 0xE0) {
    length = 3, second_min = 0xA0;
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    length = 3;
  } else if (lead == 0xED) {
    length = 3, second_max = 0x9F;
  } else if (lead == 0xF0) {
    length = 4, second_min = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    length = 4;
  } else if (lead == 0xF4) {
    length = 4, second_max = 0x8F;
  } else {
    return 0;
  }
  if (available < length || text[1] < second_min || text[1] > second_max) return 0;
  for (size_t i = 2; i < length; ++i)
    if (text[i] < 0x80 || text[i] > 0xBF) return 0;
  return length;
}

// Collects tokens and puts kEndOfDocumentId between documents: end_document() only marks a boundary,
// the separator is emitted lazily before the next document's first token (so none trails the last).
class DocumentEmitter {
 public:
  explicit DocumentEmitter(std::vector<int32_t>& out) : out_(out) {}
  void emit(int32_t token) {
    if (separator_pending_) {
      out_.push_back(kEndOfDocumentId);
      separator_pending_ = false;
    }
    out_.push_back(token);
    document_open_ = true;
  }
  void end_document() {
    if (!document_open_) return;
    document_open_ = false;
    separator_pending_ = true;
    ++documents_;
  }
  uint64_t documents() const { return documents_ + (document_open_ ? 1 : 0); }

 private:
  std::vector<int32_t>& out_;
  bool document_open_ = false;
  bool separator_pending_ = false;
  uint64_t documents_ = 0;  // closed documents
};

// FASTA state machine: feed() any split of the text, the result is the same.
class FastaParser {
 public:
  void feed(std::string_view text, DocumentEmitter& emitter) {
    for (const char c : text) {
      if (skipping_line_) {
        if (c == '\n') skipping_line_ = false, at_line_start_ = true;
        continue;
      }
      if (c == '\n') {
        at_line_start_ = true;
        continue;
      }
      if (at_line_start_ && (c == '>' || c == ';')) {
        if (c == '>') emitter.end_document();  // a header starts a record; ';' is a comment line
        skipping_line_ = true;
        at_line_start_ = false;
        continue;
      }
      at_line_start_ = false;
      if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') continue;
      const char upper = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
      emitter.emit(static_cast<unsigned char>(upper));
    }
  }

 private:
  bool at_line_start_ = true;
  bool skipping_line_ = false;
};

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

// Reads every input in order and hands its tokens to `sink` block by block. Returns the number of
// documents. `sink` sees the same stream however the files are split into blocks.
uint64_t stream_tokens(const std::vector<std::string>& input_paths,
                       const std::function<void(std::span<const int32_t>)>& sink) {
  std::vector<int32_t> tokens;
  tokens.reserve(kReadBlockBytes + 16);
  DocumentEmitter emitter(tokens);
  std::vector<char> block(kReadBlockBytes);
  for (const std::string& path : input_paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int error_number = errno;
      throw Error(kTokenizeModule, "cannot read input " + in_quotes(path) + ": " + std::strerror(error_number),
                  error_number == ENOENT ? "check the path" : "check the file's permissions");
    }
    struct stat info {};
    if (::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
      ::close(fd);
      throw Error(kTokenizeModule, "input " + in_quotes(path) + " is a directory, not a file",
                  "pass the files inside it");
    }
    bool first_block = true;
    bool fasta = has_fasta_extension(path);
    FastaParser parser;
    while (true) {
      const ssize_t got = ::read(fd, block.data(), block.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        const int error_number = errno;
        ::close(fd);
        throw Error(kTokenizeModule, "cannot read input " + in_quotes(path) + ": " + std::strerror(error_number),
                    "check the file and the device it is on");
      }
      if (got == 0) break;
      const std::string_view text(block.data(), static_cast<size_t>(got));
      if (first_block) {
        first_block = false;
        if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
            static_cast<unsigned char>(text[1]) == 0x8b) {
          ::close(fd);
          throw Error(kTokenizeModule, "input " + in_quotes(path) + " is gzip-compressed; only plain text and FASTA are read",
                      "decompress it first (gunzip -k " + path + ")");
        }
        if (text[0] == '>') fasta = true;
      }
      if (fasta) {
        parser.feed(text, emitter);
      } else {
        for (const char c : text) emitter.emit(static_cast<unsigned char>(c));
      }
      sink(tokens);
      tokens.clear();
    }
    ::close(fd);
    emitter.end_document();  // a file is never part of the next one's document
  }
  return emitter.documents();
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// ByteTokenizer

ByteTokenizer::ByteTokenizer(std::vector<std::string> extra_special_tokens) {
  special_names_.emplace_back(kEndOfDocumentName);
  for (std::string& name : extra_special_tokens) {
    FPDT_CHECK(!name.empty(), kModule, "special token names must not be empty", "");
    for (const std::string& existing : special_names_)
      FPDT_CHECK(existing != name, kModule, "special token " + in_quotes(name) + " is given twice",
                 "list each special token once");
    special_names_.push_back(std::move(name));
  }
}

int32_t ByteTokenizer::special_token_id(std::string_view name) const {
  for (size_t i = 0; i < special_names_.size(); ++i)
    if (special_names_[i] == name) return kByteVocabSize + static_cast<int32_t>(i);
  std::string known;
  for (const std::string& special : special_names_) known += (known.empty() ? "" : ", ") + special;
  throw Error(kModule, "no special token named " + in_quotes(std::string(name)), "the special tokens are " + known);
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id >= 0 && id < kByteVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (is_special(id)) {
      text += special_names_[static_cast<size_t>(id - kByteVocabSize)];
    } else {
      text += kReplacementCharacter;
    }
  }
  return text;
}

std::string ByteTokenizer::render(std::span<const int32_t> ids) const {
  const std::string raw = decode(ids);
  const auto* bytes = reinterpret_cast<const unsigned char*>(raw.data());
  std::string text;
  text.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const size_t length = utf8_sequence_bytes(bytes + i, raw.size() - i);
    const bool c0_control = length == 1 && (bytes[i] < 0x20 || bytes[i] == 0x7F) && bytes[i] != '\n' && bytes[i] != '\t';
    const bool c1_control = length == 2 && bytes[i] == 0xC2 && bytes[i + 1] < 0xA0;  // U+0080..U+009F
    if (length == 0 || c0_control || c1_control) {
      text += kReplacementCharacter;
      i += length == 0 ? 1 : length;
    } else {
      text.append(raw, i, length);
      i += length;
    }
  }
  return text;
}

// ---------------------------------------------------------------------------------------------
// FASTA and files

std::vector<int32_t> tokenize_fasta(std::string_view text) {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  DocumentEmitter emitter(tokens);
  FastaParser parser;
  parser.feed(text, emitter);
  return tokens;
}

bool has_fasta_extension(std::string_view path) {
  std::string extension = std::filesystem::path(path).extension().string();
  for (char& c : extension)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return extension == ".fa" || extension == ".fasta" || extension == ".fna";
}

TokenizeSummary tokenize_files(const std::vector<std::string>& input_paths, const std::string& output_dir,
                               double val_fraction) {
  FPDT_CHECK(!input_paths.empty(), kTokenizeModule, "no input files to tokenize", "pass one or more text or FASTA files");
  FPDT_CHECK(std::isfinite(val_fraction) && val_fraction >= 0.0 && val_fraction < 1.0, kTokenizeModule,
             "validation fraction " + std::to_string(val_fraction) + " is outside [0, 1)",
             "e.g. 0.01 keeps the last 1% of tokens for validation");
  check_output_directory(output_dir);
  const ByteTokenizer tokenizer;

  // Pass 1: count, so the split point is known before anything is written.
  uint64_t total_tokens = 0;
  stream_tokens(input_paths, [&](std::span<const int32_t> tokens) { total_tokens += tokens.size(); });
  FPDT_CHECK(total_tokens > 0, kTokenizeModule,
             "the inputs hold no tokens (empty files, or FASTA without sequence lines)",
             "check the input files");

  TokenizeSummary summary;
  summary.vocab_size = tokenizer.vocab_size();
  summary.val_tokens = static_cast<uint64_t>(std::floor(static_cast<double>(total_tokens) * val_fraction));
  if (summary.val_tokens >= total_tokens) summary.val_tokens = total_tokens - 1;  // rounding guard
  summary.train_tokens = total_tokens - summary.val_tokens;
  summary.train_path = (std::filesystem::path(output_dir) / "train.bin").string();
  summary.val_path = (std::filesystem::path(output_dir) / "val.bin").string();

  // Pass 2: the first train_tokens go to train.bin, the rest to val.bin.
  ShardWriter train(summary.train_path, static_cast<uint32_t>(summary.vocab_size));
  ShardWriter val(summary.val_path, static_cast<uint32_t>(summary.vocab_size));
  uint64_t seen_tokens = 0;
  summary.documents = stream_tokens(input_paths, [&](std::span<const int32_t> tokens) {
    const uint64_t to_train = seen_tokens < summary.train_tokens
                                  ? std::min<uint64_t>(tokens.size(), summary.train_tokens - seen_tokens)
                                  : 0;
    train.append(tokens.first(to_train));
    val.append(tokens.subspan(to_train));
    seen_tokens += tokens.size();
  });
  FPDT_CHECK(seen_tokens == total_tokens, kTokenizeModule,
             "the inputs changed while they were tokenized (" + std::to_string(total_tokens) + " tokens, then " +
                 std::to_string(seen_tokens) + ")",
             "do not modify the input files during `fpdt tokenize`");
  train.finish();
  val.finish();
  return summary;
}

}  // namespace fpdt::train
