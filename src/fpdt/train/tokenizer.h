// Byte-level tokenizer (ids 0..255 are the bytes, then special tokens: end-of-document = 256), FASTA
// parsing, and `tokenize_files`, which turns text/FASTA inputs into train.bin and val.bin shards.
// encode/decode round-trip every byte string exactly; encode never produces a special id.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fpdt::train {

inline constexpr int32_t kByteVocabSize = 256;
inline constexpr int32_t kEndOfDocumentId = 256;
inline constexpr std::string_view kEndOfDocumentName = "<|eod|>";

class ByteTokenizer {
 public:
  // Ids: bytes 0..255, kEndOfDocumentId = 256, then `extra_special_tokens` as 257, 258, ...
  // (names must be unique and non-empty). The default vocabulary has 257 ids.
  explicit ByteTokenizer(std::vector<std::string> extra_special_tokens = {});

  int32_t vocab_size() const { return kByteVocabSize + static_cast<int32_t>(special_names_.size()); }
  int32_t end_of_document_id() const { return kEndOfDocumentId; }
  // Id of a special token by name ("<|eod|>" → 256); throws fpdt::Error when there is none.
  int32_t special_token_id(std::string_view name) const;
  bool is_special(int32_t id) const { return id >= kByteVocabSize && id < vocab_size(); }

  // One id per byte.
  std::vector<int32_t> encode(std::string_view text) const;
  // Exact inverse of encode: byte ids become their bytes, special ids their names, and ids outside
  // the vocabulary U+FFFD (the replacement character), so any id sequence decodes without error.
  std::string decode(std::span<const int32_t> ids) const;
  // decode for printing: always valid UTF-8 without terminal control characters. Bytes that are not
  // part of valid UTF-8, and control bytes other than '\n' and '\t', become U+FFFD.
  std::string render(std::span<const int32_t> ids) const;

 private:
  std::vector<std::string> special_names_;  // index i ↔ id kByteVocabSize + i
};

// Tokens of a FASTA text: sequence lines only ('>' headers, ';' comments and blank lines skipped),
// without newlines or other whitespace, ASCII upper-cased, with kEndOfDocumentId *between* records
// (not after the last). Records without sequence lines add nothing. Lines before the first header
// count as a record.
std::vector<int32_t> tokenize_fasta(std::string_view text);

// True when the extension (any case) is .fa, .fasta or .fna.
bool has_fasta_extension(std::string_view path);

struct TokenizeSummary {
  std::string train_path;      // <output_dir>/train.bin
  std::string val_path;        // <output_dir>/val.bin (written even when it holds 0 tokens)
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  uint64_t documents = 0;      // non-empty text files + FASTA records with sequence
  int32_t vocab_size = 0;
};

// Tokenizes `input_paths` in order with the default ByteTokenizer into one token stream and writes its
// first part to <output_dir>/train.bin and its last floor(val_fraction · tokens) tokens to val.bin.
// An input is FASTA when has_fasta_extension() or its first byte is '>', else raw text (one document
// per file). Documents (text files, FASTA records) are separated by kEndOfDocumentId. Memory use is
// independent of input size (two streaming passes). Throws fpdt::Error for an unreadable or
// compressed input, an output directory that is missing or not writable, val_fraction outside
// [0, 1), or inputs without any token.
TokenizeSummary tokenize_files(const std::vector<std::string>& input_paths, const std::string& output_dir,
                               double val_fraction);

}  // namespace fpdt::train
