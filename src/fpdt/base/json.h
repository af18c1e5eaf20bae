// JSON read from files (safetensors headers, config.json, trainer state): parsing with a nesting
// limit, so no input can make a later dump, comparison or destructor recurse off the stack, and
// bounded excerpts of values for error messages, so no message repeats a huge input.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace fpdt::json {

// Deepest nesting accepted: the files we read nest at most 4 levels (a Hugging Face config's
// rope_scaling, a trainer state's settings); 64 leaves room and keeps recursion over a value tiny.
inline constexpr int kMaxDepth = 64;
// Longest excerpt of an input in a message, in characters (before the "..." that marks a cut).
inline constexpr size_t kExcerptChars = 120;

// Parses `text` as one JSON value. Malformed JSON or nesting deeper than kMaxDepth throws
// fpdt::Error(module, "<where> is not valid JSON: <reason>", hint), the reason cut to a bounded length.
nlohmann::json parse(std::string_view text, const std::string& where, const std::string& module,
                     const std::string& hint = "");

// `value` as compact JSON, at most about kExcerptChars characters ("..." marks a cut). Works on any
// value (its recursion stops at the excerpt's length and at kMaxDepth levels).
std::string excerpt(const nlohmann::json& value, size_t max_chars = kExcerptChars);

// `text` cut to max_chars characters ("..." marks a cut), for messages quoting raw input.
std::string excerpt_text(std::string_view text, size_t max_chars = kExcerptChars);

}  // namespace fpdt::json
