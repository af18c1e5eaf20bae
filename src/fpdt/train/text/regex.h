// A small backtracking regex engine with Oniguruma's semantics (leftmost match, alternatives tried in
// order, greedy quantifiers that give back), for the pre-tokenizer patterns of Hugging Face tokenizers
// (GPT-2, Llama 3, Qwen2 and their like) over valid UTF-8. It supports literals, '.', classes with
// ranges, \s \S \d \D \p{..} \P{..} (general categories), groups, (?i:..) on ASCII letters, |, ?, *, +,
// {m,n} (greedy or lazy) and lookahead (?=..) (?!..); anything else is refused when compiled.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fpdt::train::text {

class Regex {
 public:
  // Throws fpdt::Error naming the construct and its offset for a pattern the engine does not support;
  // `origin` (e.g. the file and field the pattern came from) starts the message.
  explicit Regex(std::string_view pattern, std::string_view origin = "");
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every match in order, as Oniguruma's find_iter: each search starts at the previous match's end,
  // and an empty match right at the previous match's end is skipped. [begin, end) byte offsets.
  // Throws fpdt::Error when a pathological pattern would backtrack without end or overflow the stack.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

  struct Node;

 private:
  std::string pattern_;
  std::unique_ptr<Node> root_;
};

}  // namespace fpdt::train::text
