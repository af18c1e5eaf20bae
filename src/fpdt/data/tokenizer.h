// Tokenizers: a Hugging Face tokenizer.json with a BPE model (byte-level as in GPT-2, Llama 3, Qwen2),
// encoded and decoded here in C++ with the `tokenizers` library's exact ids and text; the byte
// tokenizer (ids 0..255 = bytes, 256 = "<|eod|>") is one such tokenizer.json, built in. Also FASTA
// parsing and `tokenize_files`, which turns text/FASTA inputs into train.bin and val.bin shards with
// the tokenizer's end-of-document token between documents.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fpdt::train {

inline constexpr int32_t kByteVocabSize = 256;
inline constexpr int32_t kEndOfDocumentId = 256;  // of the byte tokenizer
inline constexpr std::string_view kEndOfDocumentName = "<|eod|>";
inline constexpr const char* kTokenizerFile = "tokenizer.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";

// Receives a tokenizer's output a piece at a time.
using TokenSink = std::function<void(std::span<const int32_t>)>;

class Tokenizer {
 public:
  // The byte tokenizer: one id per byte (any bytes, UTF-8 or not), and "<|eod|>" = 256, the document
  // separator. Its tokenizer.json (a BPE without merges over the byte-level alphabet) gives the same
  // ids in the `tokenizers` library for any UTF-8 text.
  static Tokenizer bytes();
  // Reads `path`: a tokenizer.json, or a folder holding one. The end-of-document token is
  // `end_of_document` when given, else tokenizer_config.json's eos_token (beside tokenizer.json), else
  // the only special token, else one of <|endoftext|>, <|end_of_text|>, </s>, <eos>. Throws fpdt::Error
  // for a missing or malformed file and for what fpdt does not implement (model types other than BPE,
  // normalizers other than NFC, pre-tokenizers other than ByteLevel/Split/Sequence, decoders other than
  // ByteLevel, BPE dropout, added tokens with single_word), naming the file and the field.
  static Tokenizer load(const std::string& path, const std::string& end_of_document = "");
  // The same from the texts of tokenizer.json and tokenizer_config.json ("" when there is none);
  // `origin` names them in errors.
  static Tokenizer from_json(const std::string& tokenizer_json, const std::string& config_json,
                             const std::string& end_of_document, const std::string& origin);

  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // 1 + the largest id of the model's vocabulary and the added tokens.
  int32_t vocab_size() const;
  int32_t end_of_document_id() const;
  const std::string& end_of_document_token() const;
  // Ids of tokenizer_config.json's bos_token and pad_token; -1 when it names none, or a token the
  // tokenizer lacks.
  int32_t begin_of_text_id() const;
  int32_t padding_id() const;
  // Id of a token of the vocabulary or an added token, or -1.
  int32_t token_id(std::string_view token) const;
  bool is_byte_tokenizer() const;
  // False when encode needs valid UTF-8 (it normalizes, or a pre-tokenizer splits by regex).
  bool accepts_any_bytes() const;

  // The library's `Tokenizer.encode(text, add_special_tokens=False).ids`: added tokens in the text
  // (special ones included) are matched first, as the library does; no post-processor tokens (BOS)
  // are added. Text must be valid UTF-8 unless the tokenizer neither normalizes nor splits by regex
  // (the byte tokenizer takes any bytes); else fpdt::Error with the byte offset.
  std::vector<int32_t> encode(std::string_view text) const;
  // The same, handed to `sink` a piece at a time (memory independent of the text's length).
  void encode(std::string_view text, const TokenSink& sink) const;
  // The library's `decode(ids, skip_special_tokens=False)`: ids outside the vocabulary are dropped,
  // and bytes that are not valid UTF-8 become U+FFFD as Rust's from_utf8_lossy does.
  std::string decode(std::span<const int32_t> ids) const;
  // decode for printing: also terminal control characters other than '\n' and '\t' become U+FFFD.
  std::string render(std::span<const int32_t> ids) const;

  // Identity: FNV-1a (64 bits) of the tokenizer.json text; shards and checkpoints record it.
  uint64_t fingerprint() const;
  const std::string& tokenizer_json() const;
  // tokenizer_config.json as found beside tokenizer.json, else a minimal one that transformers'
  // AutoTokenizer loads (PreTrainedTokenizerFast with the end-of-document token as eos_token).
  const std::string& config_json() const;
  // Writes tokenizer.json and tokenizer_config.json into `directory` (atomically, each).
  void save(const std::string& directory) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "0x" + 16 hex digits, as fingerprints are printed in messages.
std::string fingerprint_string(uint64_t fingerprint);

// Texts of the records of a FASTA file: sequence lines only ('>' headers, ';' comments and blank lines
// skipped), without newlines or other whitespace, ASCII upper-cased. Records without sequence lines
// add nothing. Lines before the first header count as a record.
std::vector<std::string> fasta_records(std::string_view text);
// The byte tokenizer's tokens of a FASTA text: its records with kEndOfDocumentId *between* them.
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

// Tokenizes `input_paths` in order with `tokenizer` into one token stream and writes its first part to
// <output_dir>/train.bin and its last floor(val_fraction · tokens) tokens to val.bin; the shards record
// the tokenizer's fingerprint, and its tokenizer.json and tokenizer_config.json are written beside
// them. An input is FASTA when has_fasta_extension() or its first byte is '>' (each record a
// document), else text (one document per file); it may be a pipe, read once. Documents are separated
// by the tokenizer's end-of-document token. Memory: the largest document plus a few MiB. Throws
// fpdt::Error for an unreadable, compressed or non-file input (a device), text that the tokenizer
// cannot take (not UTF-8), an output directory that is missing or not writable, or that already holds
// shards or other tokenizer files (unless `overwrite`), val_fraction outside [0, 1), or inputs without
// any token; nothing in output_dir changes then.
TokenizeSummary tokenize_files(const std::vector<std::string>& input_paths, const std::string& output_dir,
                               double val_fraction, const Tokenizer& tokenizer, bool overwrite = false);

}  // namespace fpdt::train
