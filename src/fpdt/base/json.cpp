// Depth-limited JSON parsing and bounded excerpts (see json.h).
#include "fpdt/base/json.h"

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
        append(out, Json(excerpt_text(item.key(), limit)), limit, depth + 1);
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

std::string excerpt_text(std::string_view text, size_t max_chars) { return cut(text, max_chars); }

}  // namespace fpdt::json
