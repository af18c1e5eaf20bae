// The pre-tokenizer's regular expressions, compiled and matched by Oniguruma — the library Hugging Face
// `tokenizers` matches them with (both 6.9.8; Oniguruma syntax, UTF-8, no options) — so a pattern the
// library accepts is accepted here and splits a text at the same places. Matching is bounded (the
// retry and stack limits below): a pathological pattern gives an error on the text that exposes it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct re_pattern_buffer;  // Oniguruma's compiled pattern (OnigRegexType)

namespace fpdt::data::text {

class Regex {
 public:
  // Throws fpdt::Error with Oniguruma's reason for a pattern it refuses; `origin` (e.g. the file and
  // field the pattern came from) starts the message.
  explicit Regex(std::string_view pattern, std::string_view origin = "");
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every match in order, as the library's find_iter: each search starts at the previous match's
  // end, and an empty match right at the previous match's end is skipped. [begin, end) byte offsets;
  // text must be valid UTF-8. Throws fpdt::Error when the pattern backtracks past the limits.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Free {
    void operator()(re_pattern_buffer* compiled) const;
  };
  std::string pattern_;
  std::unique_ptr<re_pattern_buffer, Free> compiled_;
};

}  // namespace fpdt::data::text
