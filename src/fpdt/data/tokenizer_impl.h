// What the two rooms of the tokenizer share, not part of its interface (tokenizer.h is): the tables a
// tokenizer.json is read into (Tokenizer::Impl: the BPE model, the added tokens, the pre-tokenizer
// steps), filled by tokenizer_json.cpp and run by tokenizer.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/data/text/oniguruma.h"
#include "fpdt/data/tokenizer.h"

namespace fpdt::data {

namespace tokenizer_detail {

inline constexpr const char* kModule = "tokenizer";
inline constexpr const char* kSupportedHint =
    "fpdt reads BPE tokenizer.json files as GPT-2, Llama 3 and Qwen2 write them (byte-level)";

struct AddedToken {
  std::string content;
  std::string match_text;  // what is matched: content, or its normal form for a normalized token
  int32_t id = 0;
  bool normalized = false;
  bool special = false;
  bool lstrip = false;  // the match takes the white space before it
  bool rstrip = false;  // ... and after it
};

struct PreTokenizerStep {
  enum Kind : uint8_t { split, byte_level } kind = split;
  enum Behavior : uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous } behavior = isolated;
  std::unique_ptr<text::Regex> regex;  // split by regex, or byte_level with use_regex
  std::string literal;                 // split by a literal string
  bool invert = false;
  bool add_prefix_space = false;
};

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  using json = nlohmann::json;
  using AddedToken = tokenizer_detail::AddedToken;
  using PreTokenizerStep = tokenizer_detail::PreTokenizerStep;

  std::string json_text, config_text, origin;
  // The BPE model.
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left id, right id) → (rank, new id)
  bool ignore_merges = false, fuse_unk = false, byte_fallback = false;
  int32_t unk_id = -1;
  std::string continuing_subword_prefix, end_of_word_suffix;
  // Added tokens, matched on the raw text (normalized = false) or, in a second pass as the library
  // does, on the normalized text (true).
  std::vector<AddedToken> added;
  bool nfc = false;  // the normalizer: NFC or none
  std::array<bool, 256> added_first_byte{};  // bytes that start some added token
  std::vector<PreTokenizerStep> pre_tokenizers;
  bool byte_level_decoder = false;
  bool needs_utf8 = false;
  bool byte_tokenizer = false;
  std::vector<std::string> id_to_token;  // (V) "" where no token has the id
  int32_t eos_id = -1;
  std::string eos_token;
  int32_t bos_id = -1, pad_id = -1;  // tokenizer_config.json's bos_token and pad_token; -1: none
  uint64_t fingerprint = 0;

  [[noreturn]] void fail(const std::string& what, const std::string& hint = tokenizer_detail::kSupportedHint) const {
    throw Error(tokenizer_detail::kModule, origin + ": " + what, hint);
  }

  // Id of an added token or a token of the vocabulary, or -1.
  int32_t id_of(std::string_view token) const {
    for (const AddedToken& added_token : added)
      if (added_token.content == token) return added_token.id;
    const auto it = vocab.find(std::string(token));
    return it == vocab.end() ? -1 : it->second;
  }

  void parse(const json& root);
  void parse_model(const json& model);
  void parse_pre_tokenizer(const json& node, const std::string& where);
  void finish(const std::string& end_of_document);

  void split_added(std::string_view text, bool normalized, std::vector<std::pair<std::string_view, int32_t>>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out,
                    std::unordered_map<std::string, std::vector<int32_t>>& cache, const TokenSink& sink) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
};

}  // namespace fpdt::data
