// A type an option spells (an enum of a run's options) as one table of (spelling, value) rows: the
// spelling of a value, the accepted spellings, and a spelling read back — so they are written once.
// ("Word" elsewhere in fpdt is a bf16 value's 16 bits.)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fpdt/base/error.h"

namespace fpdt {

template <class E>
struct Spelling {
  const char* text;
  E value;
};

template <class E, size_t N>
std::string spelling_of(const Spelling<E> (&spellings)[N], E value) {
  for (const Spelling<E>& row : spellings)
    if (row.value == value) return row.text;
  FPDT_ASSERT(false && "a value without a spelling");
  return "";
}

template <class E, size_t N>
std::vector<std::string> spellings_of(const Spelling<E> (&spellings)[N]) {
  std::vector<std::string> texts;
  for (const Spelling<E>& row : spellings) texts.push_back(row.text);
  return texts;
}

// "a, b or c"
inline std::string listed(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text.append(i == 0 ? "" : i + 1 == items.size() ? " or " : ", ").append(items[i]);
  return text;
}

// The value spelled `text`; throws fpdt::Error of `module` ("unknown <what> '<text>'") listing the spellings.
template <class E, size_t N>
E parse_spelling(const Spelling<E> (&spellings)[N], const std::string& text, const std::string& module, const std::string& what) {
  for (const Spelling<E>& row : spellings)
    if (text == row.text) return row.value;
  std::string message = "unknown ";
  message.append(what).append(" '").append(text).append("'");
  throw Error(module, message, "use " + listed(spellings_of(spellings)));
}

}  // namespace fpdt
