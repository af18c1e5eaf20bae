// Tokenizers: a Hugging Face tokenizer.json with a BPE model (byte-level as in GPT-2, Llama 3, Qwen2),
// encoded and decoded here in C++ with the `tokenizers` library's exact ids and text; the byte
// tokenizer (ids 0..255 = bytes, 256 = "<|eod|>") is one such tokenizer.json, built in. FASTA is
// fasta.h's; `tokenize_files` (text/FASTA inputs → train.bin and val.bin shards) tokenize_files.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fpdt::data {

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

}  // namespace fpdt::data
