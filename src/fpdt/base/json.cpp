// Depth-limited JSON parsing and bounded excerpts (see json.h).
#include "fpdt/base/json.h"

#include <cstdio>

#include "fpdt/base/error.h"

namespace fpdt::json {

namespace {

// Cuts `text` to at most max_chars bytes, not inside a UTF-8 sequence, and marks the cut.
std::string cut(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  size_t keep = max_chars;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;  // continuation byte
  std::string out(text.substr(0, keep));
  return out + "...";
}

// Appends `value` to `out` until out holds more than `limit` characters; depth counts the levels
// above `value`, and deeper levels are written as "..." (a value from parse() never gets there).
template <class Json>
void append(std::string& out, const Json& value, size_t limit, int depth) {
  if (out.size() > limit) return;
  if (depth >= kMaxDepth && value.is_structured()) {
    out += "...";
    return;
  }
  switch (value.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto item = value.begin(); item != value.end() && out.size() <= limit; ++item) {
        if (!first) out += ',';
        first = false;
        append(out, Json(cut(item.key(), limit)), limit, depth + 1);  // dump() escapes it
        out += ':';
        append(out, item.value(), limit, depth + 1);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < value.size() && out.size() <= limit; ++i) {
        if (i) out += ',';
        append(out, value[i], limit, depth + 1);
      }
      out += ']';
      return;
    }
    case Json::value_t::string: {
      const std::string& text = value.template get_ref<const std::string&>();
      // Only the part that can show is escaped (+1 so a cut is still seen as one).
      const size_t keep = std::min(text.size(), limit - out.size() + 1);
      out += Json(text.substr(0, keep)).dump(-1, ' ', false, Json::error_handler_t::replace);
      return;
    }
    default:
      out += value.dump();
  }
}

}  // namespace

template <class Json>
Json parse(std::string_view text, const std::string& where, const std::string& module, const std::string& hint) {
  // The callback sees each value's depth as it opens; throwing there stops the parse before any
  // deeper value exists.
  const typename Json::parser_callback_t limit_depth = [&](int depth, typename Json::parse_event_t event, Json&) {
    if (depth >= kMaxDepth &&
        (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start))
      throw Error(module, where + " nests JSON deeper than " + std::to_string(kMaxDepth) + " levels", hint);
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit_depth);
  } catch (const typename Json::exception& error) {
    // nlohmann's message quotes the last token read, which can be the whole (huge) input.
    throw Error(module, where + " is not valid JSON: " + excerpt_text(error.what(), 2 * kExcerptChars), hint);
  }
}

template nlohmann::json parse<nlohmann::json>(std::string_view, const std::string&, const std::string&,
                                              const std::string&);
template nlohmann::ordered_json parse<nlohmann::ordered_json>(std::string_view, const std::string&,
                                                              const std::string&, const std::string&);

std::string excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  append(out, value, max_chars, 0);
  return cut(out, max_chars);
}

std::string excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  std::string out;
  append(out, value, max_chars, 0);
  return cut(out, max_chars);
}

namespace {

// The length of the well-formed UTF-8 sequence at text[at] (1 for ASCII), 0 when the bytes there are not one.
size_t utf8_sequence_bytes(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  size_t length = 0;
  if (lead < 0x80) length = 1;
  else if (lead >= 0xC2 && lead <= 0xDF) length = 2;  // 0xC0 and 0xC1 only start overlong forms
  else if (lead >= 0xE0 && lead <= 0xEF) length = 3;
  else if (lead >= 0xF0 && lead <= 0xF4) length = 4;  // past 0xF4: beyond U+10FFFF
  if (length == 0 || at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i)
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  // Overlong three- and four-byte forms, UTF-16 surrogates and code points past U+10FFFF.
  if ((lead == 0xE0 && byte(at + 1) < 0xA0) || (lead == 0xED && byte(at + 1) >= 0xA0) ||
      (lead == 0xF0 && byte(at + 1) < 0x90) || (lead == 0xF4 && byte(at + 1) >= 0x90))
    return 0;
  return length;
}

}  // namespace

std::string excerpt_text(std::string_view text, size_t max_chars) {
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const unsigned char byte = static_cast<unsigned char>(text[at]);
    const size_t length = utf8_sequence_bytes(text, at);
    std::string unit;
    if (byte == '\\') unit = "\\\\";
    else if (byte == '\n') unit = "\\n";
    else if (byte == '\t') unit = "\\t";
    else if (byte == '\r') unit = "\\r";
    else if (length == 0 || byte < 0x20 || byte == 0x7F) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
      unit = escaped;
    } else {
      unit = std::string(text.substr(at, length));
    }
    if (out.size() + unit.size() > max_chars) return out + "...";
    out += unit;
    at += length == 0 ? 1 : length;
  }
  return out;
}

}  // namespace fpdt::json
