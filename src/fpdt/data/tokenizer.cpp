// Tokenizer: a Hugging Face tokenizer.json (BPE) read into tables and run as the `tokenizers` library
// runs it: added tokens split out (leftmost-longest), pre-tokenizers (Split by regex, ByteLevel) cut
// the rest into words, and each word is merged by BPE rank (lowest rank first, leftmost among equals).
// Decoding maps byte-level characters back to bytes and converts them as Rust's from_utf8_lossy.
#include "fpdt/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/data/text/byte_level.h"
#include "fpdt/data/text/normalize.h"
#include "fpdt/data/text/oniguruma.h"
#include "fpdt/data/text/unicode.h"

namespace fpdt::train {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kModule = "tokenizer";
constexpr const char* kSupportedHint =
    "fpdt reads BPE tokenizer.json files as GPT-2, Llama 3 and Qwen2 write them (byte-level)";
// The pattern the ByteLevel pre-tokenizer splits with when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Largest vocabulary (1 + the largest id) accepted: real ones are ≤ 256K; this bounds the id table.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
constexpr size_t kWordCacheLimit = 1 << 16;

using text::ByteAlphabet;
using text::byte_alphabet;

bool first_invalid_utf8_in(std::string_view text) { return text::first_invalid_utf8(text) != text.size(); }

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

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

// The library's split of `piece` by its matches: (range, is_match) covering the piece in order.
std::vector<std::pair<std::pair<size_t, size_t>, bool>> split_ranges(const PreTokenizerStep& step,
                                                                     std::string_view piece) {
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.regex) {
    matches = step.regex->find_all(piece);
  } else if (!step.literal.empty()) {
    for (size_t at = piece.find(step.literal); at != std::string_view::npos; at = piece.find(step.literal, at + step.literal.size()))
      matches.emplace_back(at, at + step.literal.size());
  }
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> ranges;
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) ranges.push_back({{previous, begin}, step.invert});
    ranges.push_back({{begin, end}, !step.invert});
    previous = end;
  }
  if (previous != piece.size()) ranges.push_back({{previous, piece.size()}, step.invert});
  return ranges;
}

// Applies the split behaviour (tokenizers' SplitDelimiterBehavior) to the ranges; returns the pieces.
std::vector<std::pair<size_t, size_t>> apply_behavior(PreTokenizerStep::Behavior behavior,
                                                      const std::vector<std::pair<std::pair<size_t, size_t>, bool>>& ranges) {
  std::vector<std::pair<size_t, size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case PreTokenizerStep::removed:
      for (const auto& [range, is_match] : ranges)
        if (!is_match) pieces.push_back(range);
      break;
    case PreTokenizerStep::isolated:
      for (const auto& [range, is_match] : ranges) pieces.push_back(range);
      break;
    case PreTokenizerStep::merged_with_previous:
      for (const auto& [range, is_match] : ranges) {
        if (is_match && !previous_match && !pieces.empty()) pieces.back().second = range.second;
        else pieces.push_back(range);
        previous_match = is_match;
      }
      break;
    case PreTokenizerStep::merged_with_next:
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->second && !previous_match && !pieces.empty()) pieces.back().first = it->first.first;
        else pieces.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case PreTokenizerStep::contiguous:
      for (const auto& [range, is_match] : ranges) {
        if (is_match == previous_match && !pieces.empty()) pieces.back().second = range.second;
        else pieces.push_back(range);
        previous_match = is_match;
      }
      break;
  }
  return pieces;
}

// The byte tokenizer's tokenizer.json: ids 0..255 for the bytes (through the byte-level alphabet, no
// merges), and <|eod|> = 256, special.
const std::string& byte_tokenizer_json() {
  static const std::string text = [] {
    const ByteAlphabet& alphabet = byte_alphabet();
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (int b = 0; b < 256; ++b) vocab[alphabet.byte_to_utf8[b]] = b;
    const nlohmann::ordered_json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    const nlohmann::ordered_json root = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {{{"id", kEndOfDocumentId}, {"content", kEndOfDocumentName}, {"single_word", false}, {"lstrip", false},
           {"rstrip", false}, {"normalized", false}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", byte_level},
        {"post_processor", nullptr},
        {"decoder", byte_level},
        {"model",
         {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
          {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}}}};
    return root.dump(2) + "\n";
  }();
  return text;
}

}  // namespace

struct Tokenizer::Impl {
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

  [[noreturn]] void fail(const std::string& what, const std::string& hint = kSupportedHint) const {
    throw Error(kModule, origin + ": " + what, hint);
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

namespace {

bool flag(const json& node, const char* key, bool fallback = false) {
  const auto it = node.find(key);
  return it == node.end() || it->is_null() ? fallback : it->get<bool>();
}

std::string optional_string(const json& node, const char* key) {
  const auto it = node.find(key);
  return it == node.end() || it->is_null() ? std::string() : it->get<std::string>();
}

// A token of tokenizer_config.json: a string or {"content": "..."}; "" when absent or neither.
std::string config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return it->at("content").get<std::string>();
  return "";
}

}  // namespace

void Tokenizer::Impl::parse_pre_tokenizer(const json& node, const std::string& where) {
  if (node.is_null()) return;
  const std::string type = node.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : node.at("pretokenizers")) parse_pre_tokenizer(step, where + ".pretokenizers[]");
    return;
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::byte_level;
    step.add_prefix_space = flag(node, "add_prefix_space");
    if (flag(node, "use_regex", true)) step.regex = std::make_unique<text::Regex>(kGpt2Pattern);
  } else if (type == "Split") {
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex"))
      step.regex = std::make_unique<text::Regex>(pattern.at("Regex").get<std::string>(), origin + " " + where + ".pattern");
    else step.literal = pattern.at("String").get<std::string>();
    const std::string behavior = node.at("behavior").get<std::string>();
    if (behavior == "Removed") step.behavior = PreTokenizerStep::removed;
    else if (behavior == "Isolated") step.behavior = PreTokenizerStep::isolated;
    else if (behavior == "MergedWithPrevious") step.behavior = PreTokenizerStep::merged_with_previous;
    else if (behavior == "MergedWithNext") step.behavior = PreTokenizerStep::merged_with_next;
    else if (behavior == "Contiguous") step.behavior = PreTokenizerStep::contiguous;
    else fail(where + ".behavior '" + fpdt::json::excerpt_text(behavior) + "' is not a split behaviour");
    step.invert = flag(node, "invert");
  } else {
    fail(where + " of type '" + fpdt::json::excerpt_text(type) + "' is not supported (ByteLevel, Split and Sequence are)");
  }
  if (step.regex) needs_utf8 = true;
  pre_tokenizers.push_back(std::move(step));
}

void Tokenizer::Impl::parse_model(const json& model) {
  const std::string type = model.contains("type") ? model.at("type").get<std::string>() : (model.contains("merges") ? "BPE" : "?");
  if (type != "BPE")
    fail("model type '" + fpdt::json::excerpt_text(type) + "' is not supported (only BPE is)",
         "fpdt reads byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2); WordPiece, Unigram and WordLevel "
         "tokenizers are not implemented — use the byte tokenizer or a BPE tokenizer.json");
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0.0)
    fail("model.dropout is set: BPE dropout is random, so the ids would not be reproducible",
         "use a tokenizer.json with \"dropout\": null");
  ignore_merges = flag(model, "ignore_merges");
  fuse_unk = flag(model, "fuse_unk");
  byte_fallback = flag(model, "byte_fallback");
  continuing_subword_prefix = optional_string(model, "continuing_subword_prefix");
  end_of_word_suffix = optional_string(model, "end_of_word_suffix");
  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t value = fpdt::json::integer<int64_t>(
        id, origin + " is not a valid tokenizer.json: model.vocab['" + fpdt::json::excerpt_text(token) + "']", kModule);
    if (value < 0 || value > INT32_MAX - 1) fail("model.vocab['" + fpdt::json::excerpt_text(token) + "'] = " + std::to_string(value) + " is not a valid id");
    vocab[token] = static_cast<int32_t>(value);
  }
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    const auto it = vocab.find(unk);
    if (it == vocab.end()) fail("model.unk_token '" + fpdt::json::excerpt_text(unk) + "' is not in the vocabulary", "fix the tokenizer.json");
    unk_id = it->second;
  }
  const json& merge_list = model.at("merges");
  int32_t rank = 0;
  const size_t prefix = continuing_subword_prefix.size();
  for (const json& merge : merge_list) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail("model.merges[" + std::to_string(rank) + "] '" + fpdt::json::excerpt_text(line) + "' is not two tokens separated by one space",
             "fix the tokenizer.json");
      left = line.substr(0, space), right = line.substr(space + 1);
    } else {
      if (!merge.is_array() || merge.size() != 2) fail("model.merges[" + std::to_string(rank) + "] is not a pair", "fix the tokenizer.json");
      left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
    }
    const std::string merged = left + (right.size() >= prefix ? right.substr(prefix) : right);
    const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(merged);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end())
      fail("model.merges[" + std::to_string(rank) + "] ('" + fpdt::json::excerpt_text(left) + "', '" + fpdt::json::excerpt_text(right) + "') uses a token that is not in the vocabulary",
           "fix the tokenizer.json");
    merges[(uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second)] = {rank, m->second};  // a later duplicate wins, as in the library
    ++rank;
  }
}

void Tokenizer::Impl::parse(const json& root) {
  if (!root.is_object()) fail("is not a JSON object", "pass a Hugging Face tokenizer.json");
  if (!root.contains("model")) fail("has no \"model\"", "pass a Hugging Face tokenizer.json");
  parse_model(root.at("model"));
  const auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    // NFC alone, or a Sequence of nothing but NFC (as Qwen2 writes it).
    std::vector<json> steps{*normalizer};
    if (normalizer->at("type").get<std::string>() == "Sequence") steps = normalizer->at("normalizers").get<std::vector<json>>();
    for (const json& step : steps) {
      const std::string type = step.at("type").get<std::string>();
      if (type != "NFC")
        fail("normalizer '" + fpdt::json::excerpt_text(type) + "' is not supported (none and NFC are)", "GPT-2 and Llama 3 have none, Qwen2 has NFC");
      nfc = true;
    }
    needs_utf8 = needs_utf8 || nfc;
  }
  if (root.contains("pre_tokenizer")) parse_pre_tokenizer(root.at("pre_tokenizer"), "pre_tokenizer");
  const auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null()) {
    const std::string type = decoder->at("type").get<std::string>();
    if (type != "ByteLevel") fail("decoder '" + fpdt::json::excerpt_text(type) + "' is not supported (ByteLevel is)");
    byte_level_decoder = true;
  }
  if (root.contains("added_tokens")) {
    for (const json& token : root.at("added_tokens")) {
      AddedToken added_token;
      added_token.content = token.at("content").get<std::string>();
      const int64_t id = fpdt::json::integer<int64_t>(token.at("id"), origin + " is not a valid tokenizer.json: added_tokens[].id",
                                                         kModule);
      if (id < 0 || id > INT32_MAX - 1) fail("added token '" + fpdt::json::excerpt_text(added_token.content) + "' has a bad id " + std::to_string(id), "fix the tokenizer.json");
      added_token.id = static_cast<int32_t>(id);
      added_token.special = flag(token, "special");
      added_token.normalized = flag(token, "normalized", !added_token.special);
      if (flag(token, "single_word"))
        fail("added token '" + fpdt::json::excerpt_text(added_token.content) + "' sets single_word, which fpdt does not implement",
             "GPT-2, Llama 3 and Qwen2 tokenizers leave it false");
      added_token.lstrip = flag(token, "lstrip");
      added_token.rstrip = flag(token, "rstrip");
      if (added_token.lstrip || added_token.rstrip) needs_utf8 = true;  // white space is found by code point
      if (added_token.content.empty()) continue;
      if (first_invalid_utf8_in(added_token.content))
        fail("added token " + std::to_string(id) + " is not valid UTF-8", "fix the tokenizer.json");
      added.push_back(std::move(added_token));
    }
  }
}

void Tokenizer::Impl::finish(const std::string& end_of_document) {
  int64_t size = 0;
  for (const auto& [token, id] : vocab) size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& token : added) size = std::max<int64_t>(size, token.id + 1);
  if (size > kMaxVocabSize)
    fail("has an id of " + std::to_string(size - 1) + ", more than fpdt's limit of " + std::to_string(kMaxVocabSize - 1),
         "ids must be dense from 0; fix the tokenizer.json");
  id_to_token.assign(static_cast<size_t>(size), std::string());
  for (const auto& [token, id] : vocab) id_to_token[static_cast<size_t>(id)] = token;
  for (AddedToken& token : added) {
    id_to_token[static_cast<size_t>(token.id)] = token.content;
    token.match_text = token.normalized && nfc ? text::nfc(token.content) : token.content;
    if (!token.match_text.empty()) added_first_byte[static_cast<unsigned char>(token.match_text[0])] = true;
  }
  if (size == 0) fail("has an empty vocabulary", "pass a trained tokenizer.json");

  // Parsed by base/json.h, whose nesting limit keeps a hostile file from recursing off the stack.
  const json config = config_text.empty() ? json::object()
                                          : fpdt::json::parse(config_text, origin + ": its " + kTokenizerConfigFile, kModule,
                                                              "fix or remove tokenizer_config.json");
  const std::string bos = config_token(config, "bos_token"), pad = config_token(config, "pad_token");
  bos_id = bos.empty() ? -1 : id_of(bos);
  pad_id = pad.empty() ? -1 : id_of(pad);

  // The end-of-document token.
  std::string eos = end_of_document.empty() ? config_token(config, "eos_token") : end_of_document;
  if (eos.empty()) {
    std::vector<std::string> specials;
    for (const AddedToken& token : added)
      if (token.special) specials.push_back(token.content);
    if (specials.size() == 1) eos = specials[0];
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
      if (eos.empty() && std::find(specials.begin(), specials.end(), name) != specials.end()) eos = name;
  }
  if (eos.empty())
    fail("does not say which token ends a document (no eos_token in tokenizer_config.json, no special token)",
         "name it: fpdt tokenize --eos-token '<|endoftext|>'");
  eos_id = id_of(eos);
  if (eos_id < 0) fail("has no token '" + fpdt::json::excerpt_text(eos) + "' to end documents with", "name a token of the tokenizer with --eos-token");
  eos_token = eos;
  fingerprint = fnv1a(json_text);
  if (config_text.empty())
    config_text = nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"eos_token", eos_token}}.dump(2) + "\n";
}

// Leftmost-longest matching of the added tokens with this `normalized` flag; appends (text, id) pieces
// with id −1 for text between matches.
void Tokenizer::Impl::split_added(std::string_view text, bool normalized,
                                  std::vector<std::pair<std::string_view, int32_t>>& out) const {
  size_t start = 0, pos = 0;  // start: where the text not yet handed out begins; pos: where matching goes on
  while (pos < text.size()) {
    if (!added_first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* best = nullptr;
    for (const AddedToken& token : added)
      if (token.normalized == normalized && !token.match_text.empty() && token.match_text[0] == text[pos] &&
          (best == nullptr || token.match_text.size() > best->match_text.size()) &&
          text.compare(pos, token.match_text.size(), token.match_text) == 0)
        best = &token;
    if (best == nullptr) {
      ++pos;
      continue;
    }
    // lstrip/rstrip widen the piece over the white space around the match (not over an earlier piece);
    // matching goes on after the match itself, as the library's Aho-Corasick iteration does.
    size_t piece_begin = pos, piece_end = pos + best->match_text.size();
    if (best->lstrip) {
      while (piece_begin > 0) {
        const size_t previous = text::previous_boundary(text, piece_begin);
        size_t at = previous;
        if (!text::is_white_space(text::next_code_point(text, at))) break;
        piece_begin = previous;
      }
      piece_begin = std::max(piece_begin, start);
    }
    if (best->rstrip) {
      while (piece_end < text.size()) {
        size_t after = piece_end;
        if (!text::is_white_space(text::next_code_point(text, after))) break;
        piece_end = after;
      }
    }
    if (start < piece_begin) out.emplace_back(text.substr(start, piece_begin - start), -1);
    out.emplace_back(text.substr(piece_begin, piece_end - piece_begin), best->id);
    pos += best->match_text.size();
    start = piece_end;
  }
  if (start < text.size()) out.emplace_back(text.substr(start), -1);
}

// BPE of one word, as the library's BPE::merge_word and Word::merge_all.
void Tokenizer::Impl::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const auto it = vocab.find(word);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false});
  };
  int32_t pending_unk = -1;  // fuse_unk: consecutive unknowns become one unk
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    text::next_code_point(word, pos);
    std::string piece = word.substr(begin, pos - begin);
    if (begin > 0) piece = continuing_subword_prefix + piece;
    if (pos == word.size()) piece += end_of_word_suffix;
    const auto it = vocab.find(piece);
    if (it != vocab.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback) {
      std::vector<int32_t> byte_ids;
      for (size_t i = begin; i < pos; ++i) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(word[i]));
        const auto byte_it = vocab.find(name);
        if (byte_it == vocab.end()) break;
        byte_ids.push_back(byte_it->second);
      }
      if (byte_ids.size() == pos - begin) {
        if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
        for (const int32_t id : byte_ids) add(id);
        continue;
      }
    }
    if (unk_id >= 0) {
      if (pending_unk >= 0 && !fuse_unk) add(pending_unk);
      pending_unk = unk_id;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Merge {
    int32_t pos, rank, new_id;
  };
  const auto later = [](const Merge& a, const Merge& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::priority_queue<Merge, std::vector<Merge>, decltype(later)> queue(later);
  auto find_merge = [&](int32_t left, int32_t right) -> const std::pair<int32_t, int32_t>* {
    const auto it = merges.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
    return it == merges.end() ? nullptr : &it->second;
  };
  if (!merges.empty()) {
    for (size_t i = 0; i + 1 < symbols.size(); ++i)
      if (const auto* merge = find_merge(symbols[i].id, symbols[i + 1].id))
        queue.push({static_cast<int32_t>(i), merge->first, merge->second});
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& current = symbols[static_cast<size_t>(top.pos)];
    if (current.removed || current.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(current.next)];
    const auto* still = find_merge(current.id, right.id);
    if (still == nullptr || still->second != top.new_id) continue;  // an expired entry
    current.id = top.new_id;
    right.removed = true;
    current.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (current.prev >= 0)
      if (const auto* merge = find_merge(symbols[static_cast<size_t>(current.prev)].id, current.id))
        queue.push({current.prev, merge->first, merge->second});
    if (current.next >= 0)
      if (const auto* merge = find_merge(current.id, symbols[static_cast<size_t>(current.next)].id))
        queue.push({top.pos, merge->first, merge->second});
  }
  for (const Symbol& symbol : symbols)
    if (!symbol.removed) out.push_back(symbol.id);
}

namespace {
// Hands `ids` to `sink` once it holds a million (bounded memory for long documents).
void flush_if_full(std::vector<int32_t>& ids, const TokenSink& sink) {
  if (ids.size() < (size_t{1} << 20)) return;
  sink(ids);
  ids.clear();
}
}  // namespace

// Pre-tokenizes a piece of text without added tokens and appends the BPE ids of its words.
void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out,
                                   std::unordered_map<std::string, std::vector<int32_t>>& cache,
                                   const TokenSink& sink) const {
  if (byte_tokenizer) {  // the general path gives the same: one word, one id per byte (tested)
    for (const char c : piece) {
      out.push_back(static_cast<unsigned char>(c));
      flush_if_full(out, sink);
    }
    return;
  }
  std::vector<std::string> words{std::string(piece)};
  for (const PreTokenizerStep& step : pre_tokenizers) {
    std::vector<std::string> next;
    for (std::string& word : words) {
      if (step.kind == PreTokenizerStep::byte_level && step.add_prefix_space && !word.starts_with(' ')) word.insert(0, " ");
      if (step.regex || !step.literal.empty()) {
        const PreTokenizerStep::Behavior behavior =
            step.kind == PreTokenizerStep::byte_level ? PreTokenizerStep::isolated : step.behavior;
        for (const auto& [begin, end] : apply_behavior(behavior, split_ranges(step, word)))
          if (end > begin) next.push_back(word.substr(begin, end - begin));
      } else if (!word.empty()) {
        next.push_back(std::move(word));
      }
    }
    if (step.kind == PreTokenizerStep::byte_level) {
      const ByteAlphabet& alphabet = byte_alphabet();
      for (std::string& word : next) {
        std::string mapped;
        mapped.reserve(word.size() * 2);
        for (const char c : word) mapped += alphabet.byte_to_utf8[static_cast<unsigned char>(c)];
        word = std::move(mapped);
      }
    }
    words = std::move(next);
  }
  for (const std::string& word : words) {
    if (word.empty()) continue;
    if (word.size() <= 64) {
      const auto hit = cache.find(word);
      if (hit != cache.end()) {
        out.insert(out.end(), hit->second.begin(), hit->second.end());
        continue;
      }
    }
    const size_t first = out.size();
    encode_word(word, out);
    if (word.size() <= 64) {
      if (cache.size() >= kWordCacheLimit) cache.clear();
      cache.emplace(word, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
    flush_if_full(out, sink);
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& config_json,
                               const std::string& end_of_document, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->json_text = tokenizer_json;
  impl->config_text = config_json;
  impl->origin = origin;
  // Malformed or nested past base/json.h's limit: "<origin>: not a valid tokenizer.json, it is not valid
  // JSON: ..." (or "... it nests JSON deeper than 64 levels").
  const json root = fpdt::json::parse(tokenizer_json, origin + ": not a valid tokenizer.json, it", kModule,
                                      "pass a Hugging Face tokenizer.json");
  try {
    impl->parse(root);
  } catch (const json::exception& error) {
    impl->fail("is not a valid tokenizer.json: " + fpdt::json::excerpt_text(error.what(), 240), "pass a Hugging Face tokenizer.json");
  }
  impl->finish(end_of_document);
  impl->byte_tokenizer = tokenizer_json == byte_tokenizer_json();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path, const std::string& end_of_document) {
  const fs::path given(path);
  const fs::path file = fs::is_directory(given) ? given / kTokenizerFile : given;
  if (fs::is_directory(given) && !fs::exists(file))
    throw Error(kModule, "folder " + path + " holds no " + kTokenizerFile,
                "pass a tokenizer.json or a folder with one (a Hugging Face model folder)");
  const fs::path config = file.parent_path() / kTokenizerConfigFile;
  const std::string hint = "check the path; a tokenizer folder holds tokenizer.json";
  return from_json(read_text_file(file.string(), kModule, hint),
                   fs::exists(config) ? read_text_file(config.string(), kModule, hint) : "",
                   end_of_document, file.string());
}

Tokenizer Tokenizer::bytes() {
  return from_json(byte_tokenizer_json(), "", std::string(kEndOfDocumentName), "the byte tokenizer");
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
int32_t Tokenizer::end_of_document_id() const { return impl_->eos_id; }
int32_t Tokenizer::begin_of_text_id() const { return impl_->bos_id; }
int32_t Tokenizer::padding_id() const { return impl_->pad_id; }
const std::string& Tokenizer::end_of_document_token() const { return impl_->eos_token; }
bool Tokenizer::is_byte_tokenizer() const { return impl_->byte_tokenizer; }
bool Tokenizer::accepts_any_bytes() const { return !impl_->needs_utf8; }
uint64_t Tokenizer::fingerprint() const { return impl_->fingerprint; }
const std::string& Tokenizer::tokenizer_json() const { return impl_->json_text; }
const std::string& Tokenizer::config_json() const { return impl_->config_text; }

int32_t Tokenizer::token_id(std::string_view token) const { return impl_->id_of(token); }

void Tokenizer::encode(std::string_view text, const TokenSink& sink) const {
  if (impl_->needs_utf8) {
    const size_t bad = text::first_invalid_utf8(text);
    if (bad != text.size())
      throw Error(kModule, "text is not valid UTF-8 at byte " + std::to_string(bad) + " (" + impl_->origin + " normalizes or splits it by regex)",
                  "convert the input to UTF-8 (iconv), or use the byte tokenizer for binary data");
  }
  // As the library: added tokens split out of the raw text, then each piece between them normalized,
  // normalized added tokens split out of it, and what is left pre-tokenized and merged.
  std::vector<std::pair<std::string_view, int32_t>> raw_pieces, pieces;
  impl_->split_added(text, /*normalized=*/false, raw_pieces);
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<int32_t> ids;
  std::string normal_form;
  for (const auto& [raw_piece, raw_id] : raw_pieces) {
    pieces.clear();
    if (raw_id >= 0) {
      pieces.emplace_back(raw_piece, raw_id);
    } else if (impl_->nfc) {
      normal_form = text::nfc(raw_piece);
      impl_->split_added(normal_form, /*normalized=*/true, pieces);
    } else {
      impl_->split_added(raw_piece, /*normalized=*/true, pieces);
    }
    for (const auto& [piece, id] : pieces) {
      if (id >= 0) ids.push_back(id);
      else impl_->encode_piece(piece, ids, cache, sink);
      flush_if_full(ids, sink);
    }
  }
  if (!ids.empty()) sink(ids);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, [&](std::span<const int32_t> piece) { ids.insert(ids.end(), piece.begin(), piece.end()); });
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || impl_->id_to_token[static_cast<size_t>(id)].empty()) continue;
    const std::string& token = impl_->id_to_token[static_cast<size_t>(id)];
    if (!impl_->byte_level_decoder) {  // no decoder: the library joins the tokens with spaces
      if (!first) bytes += ' ';
      bytes += token;
      first = false;
      continue;
    }
    // Every character back to its byte; a token with a character outside the alphabet stays as it is.
    const auto& char_to_byte = byte_alphabet().char_to_byte;
    std::string token_bytes;
    bool all_mapped = true;
    for (size_t pos = 0; pos < token.size() && all_mapped;) {
      const auto it = char_to_byte.find(text::next_code_point(token, pos));
      if (it == char_to_byte.end()) all_mapped = false;
      else token_bytes.push_back(static_cast<char>(it->second));
    }
    bytes += all_mapped ? token_bytes : token;
  }
  return text::utf8_lossy(bytes);
}

std::string Tokenizer::render(std::span<const int32_t> ids) const {
  const std::string decoded = decode(ids);
  std::string out;
  out.reserve(decoded.size());
  for (size_t pos = 0; pos < decoded.size();) {
    const size_t begin = pos;
    const char32_t cp = text::next_code_point(decoded, pos);
    const bool control = (cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp < 0xA0);
    if (control) out += "\xEF\xBF\xBD";
    else out.append(decoded, begin, pos - begin);
  }
  return out;
}

void Tokenizer::save(const std::string& directory) const {
  for (const auto& [name, text] : {std::pair{kTokenizerFile, &impl_->json_text}, std::pair{kTokenizerConfigFile, &impl_->config_text}}) {
    const std::string path = (fs::path(directory) / name).string();
    const std::string* contents = text;  // clang 14 cannot capture a structured binding
    write_file_atomic(path, [&](int fd) { write_fully(fd, contents->data(), contents->size(), path, kModule); },
                      kModule);
  }
}

std::string fingerprint_string(uint64_t fingerprint) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(fingerprint));
  return text;
}

}  // namespace fpdt::train
