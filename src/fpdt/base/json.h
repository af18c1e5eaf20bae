// JSON read from files (safetensors headers, config.json, trainer state): parsing with a nesting
// limit, so no input can make a later dump, comparison or destructor recurse off the stack, and
// bounded excerpts of values for error messages, so no message repeats a huge input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "fpdt/base/error.h"

namespace fpdt::json {

// Deepest nesting accepted: the files we read nest at most 4 levels (a Hugging Face config's
// rope_scaling, a trainer state's settings); 64 leaves room and keeps recursion over a value tiny.
inline constexpr int kMaxDepth = 64;
// Longest excerpt of an input in a message, in characters (before the "..." that marks a cut).
inline constexpr size_t kExcerptChars = 120;

// Parses `text` as one JSON value (Json: nlohmann::json, or nlohmann::ordered_json to keep the
// order of keys). Malformed JSON or nesting deeper than kMaxDepth throws
// fpdt::Error(module, "<where> is not valid JSON: <reason>", hint), the reason cut to a bounded length.
template <class Json = nlohmann::json>
Json parse(std::string_view text, const std::string& where, const std::string& module, const std::string& hint = "");

// `value` as compact JSON, at most about kExcerptChars characters ("..." marks a cut). Works on any
// value (its recursion stops at the excerpt's length and at kMaxDepth levels).
std::string excerpt(const nlohmann::json& value, size_t max_chars = kExcerptChars);
std::string excerpt(const nlohmann::ordered_json& value, size_t max_chars = kExcerptChars);

// `text` for a message quoting raw input: whatever would not show as itself — a control character, DEL, a
// byte that is not part of well-formed UTF-8 — written as an escape (\n, \t, \r, \xNN; a NUL no longer ends
// the message), and a backslash doubled (\\), so that an escape is never text that looked like one; cut to
// at most max_chars characters, never inside an escape or a UTF-8 sequence ("..." marks a cut).
std::string excerpt_text(std::string_view text, size_t max_chars = kExcerptChars);

// `value` as an integer of type T: a JSON integer (not a float, string or bool — nlohmann's get<T>()
// would convert those, a float beyond T's range with undefined behaviour) within T's range. Else
// fpdt::Error(module, "<what> is <excerpt>, not a whole number in [min, max]").
template <typename T, class Json>
T integer(const Json& value, const std::string& what, const std::string& module) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (value.is_number_unsigned()) {
    const uint64_t number = value.template get<uint64_t>();
    if (std::in_range<T>(number)) return static_cast<T>(number);
  } else if (value.is_number_integer()) {
    const int64_t number = value.template get<int64_t>();
    if (std::in_range<T>(number)) return static_cast<T>(number);
  }
  throw Error(module, what + " is " + excerpt(value) + ", not a whole number in [" +
                          std::to_string(std::numeric_limits<T>::min()) + ", " +
                          std::to_string(std::numeric_limits<T>::max()) + "]");
}

}  // namespace fpdt::json
