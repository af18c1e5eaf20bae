// Tokenizer: a Hugging Face tokenizer.json (BPE), read into tables by tokenizer_json.cpp, run here as the
// `tokenizers` library runs it: added tokens split out (leftmost-longest), pre-tokenizers (Split by
// regex, ByteLevel) cut the rest into words, and each word is merged by BPE rank (lowest rank first,
// leftmost among equals). Decoding maps byte-level characters back to bytes and converts them as Rust's
// from_utf8_lossy.
#include "fpdt/data/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <unordered_map>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/data/text/byte_level.h"
#include "fpdt/data/text/normalize.h"
#include "fpdt/data/text/oniguruma.h"
#include "fpdt/data/text/unicode.h"
#include "fpdt/data/tokenizer_impl.h"

namespace fpdt::data {

namespace {

using tokenizer_detail::kModule;
using tokenizer_detail::PreTokenizerStep;

constexpr size_t kWordCacheLimit = 1 << 16;

using text::ByteAlphabet;
using text::byte_alphabet;

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

}  // namespace

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

std::string fingerprint_string(uint64_t fingerprint) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(fingerprint));
  return text;
}

}  // namespace fpdt::data
