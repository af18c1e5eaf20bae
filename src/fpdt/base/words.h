// A type spelled by words (an enum of a run's options) as one table of (word, value) rows: the word of a
// value, the accepted words, and a word read back — so a type's spellings are written once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fpdt/base/error.h"

namespace fpdt {

template <class E>
struct Word {
  const char* text;
  E value;
};

template <class E, size_t N>
std::string word_of(const Word<E> (&words)[N], E value) {
  for (const Word<E>& word : words)
    if (word.value == value) return word.text;
  FPDT_ASSERT(false && "a value without a word");
  return "";
}

template <class E, size_t N>
std::vector<std::string> words_of(const Word<E> (&words)[N]) {
  std::vector<std::string> texts;
  for (const Word<E>& word : words) texts.push_back(word.text);
  return texts;
}

// "a, b or c"
inline std::string listed(const std::vector<std::string>& words) {
  std::string text;
  for (size_t i = 0; i < words.size(); ++i) text.append(i == 0 ? "" : i + 1 == words.size() ? " or " : ", ").append(words[i]);
  return text;
}

// The value spelled `text`; throws fpdt::Error of `module` ("unknown <what> '<text>'") listing the words.
template <class E, size_t N>
E parse_word(const Word<E> (&words)[N], const std::string& text, const std::string& module, const std::string& what) {
  for (const Word<E>& word : words)
    if (text == word.text) return word.value;
  std::string message = "unknown ";
  message.append(what).append(" '").append(text).append("'");
  throw Error(module, message, "use " + listed(words_of(words)));
}

}  // namespace fpdt
