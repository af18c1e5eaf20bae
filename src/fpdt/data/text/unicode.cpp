// General categories from the generated range table (a direct table for the BMP, built once, and a
// binary search above it), and UTF-8 helpers with Rust's rules for invalid input.
#include "fpdt/data/text/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace fpdt::data::text {

namespace {

struct CategoryRange {
  char32_t first;
  char32_t last;
  GeneralCategory category;
};

using enum GeneralCategory;
constexpr CategoryRange kCategoryRanges[] = {
#include "fpdt/data/text/unicode_tables.inc"
};

GeneralCategory search_category(char32_t code_point) {
  const auto* end = std::end(kCategoryRanges);
  const auto* range = std::upper_bound(std::begin(kCategoryRanges), end, code_point,
                                       [](char32_t cp, const CategoryRange& r) { return cp < r.first; });
  if (range == std::begin(kCategoryRanges)) return Cn;
  --range;
  return code_point <= range->last ? range->category : Cn;
}

const std::vector<GeneralCategory>& bmp_categories() {
  static const std::vector<GeneralCategory> table = [] {
    std::vector<GeneralCategory> categories(0x10000, Cn);
    for (const CategoryRange& range : kCategoryRanges)
      for (char32_t cp = range.first; cp <= range.last && cp < 0x10000; ++cp) categories[cp] = range.category;
    return categories;
  }();
  return table;
}

// Length of the maximal prefix of an invalid sequence at text[0..available) that Rust replaces by one
// U+FFFD: a bad lead byte alone, or a lead byte with the continuation bytes valid so far.
size_t invalid_subpart_bytes(const unsigned char* text, size_t available) {
  const unsigned char lead = text[0];
  size_t length = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead == 0xE0) length = 3, second_min = 0xA0;
  else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) length = 3;
  else if (lead == 0xED) length = 3, second_max = 0x9F;
  else if (lead == 0xF0) length = 4, second_min = 0x90;
  else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
  else if (lead == 0xF4) length = 4, second_max = 0x8F;
  else return 1;
  if (available < 2 || text[1] < second_min || text[1] > second_max) return 1;
  size_t i = 2;
  while (i < length && i < available && text[i] >= 0x80 && text[i] <= 0xBF) ++i;
  return i;
}

}  // namespace

GeneralCategory general_category(char32_t code_point) {
  if (code_point < 0x10000) return bmp_categories()[code_point];
  return search_category(code_point);
}

bool is_white_space(char32_t code_point) {
  if (code_point < 0x80) return (code_point >= 0x09 && code_point <= 0x0D) || code_point == 0x20;
  const GeneralCategory category = general_category(code_point);
  return code_point == 0x85 || category == Zs || category == Zl || category == Zp;
}

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const unsigned char lead = bytes[0];
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    pos += 2;
    return (char32_t{lead & 0x1Fu} << 6) | (bytes[1] & 0x3Fu);
  }
  if (lead < 0xF0) {
    pos += 3;
    return (char32_t{lead & 0x0Fu} << 12) | (char32_t{bytes[1] & 0x3Fu} << 6) | (bytes[2] & 0x3Fu);
  }
  pos += 4;
  return (char32_t{lead & 0x07u} << 18) | (char32_t{bytes[1] & 0x3Fu} << 12) | (char32_t{bytes[2] & 0x3Fu} << 6) |
         (bytes[3] & 0x3Fu);
}

size_t previous_boundary(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  return pos;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_sequence_bytes(const unsigned char* text, size_t available) {
  if (text[0] < 0x80) return 1;
  const size_t prefix = invalid_subpart_bytes(text, available);
  // A complete sequence is one whose valid prefix reaches its full length.
  const unsigned char lead = text[0];
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  return prefix == length ? length : 0;
}

size_t first_invalid_utf8(std::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (data[pos] < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = utf8_sequence_bytes(data + pos, bytes.size() - pos);
    if (length == 0) return pos;
    pos += length;
  }
  return bytes.size();
}

std::string utf8_lossy(std::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t length = utf8_sequence_bytes(data + pos, bytes.size() - pos);
    if (length > 0) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      out += "\xEF\xBF\xBD";
      pos += invalid_subpart_bytes(data + pos, bytes.size() - pos);
    }
  }
  return out;
}

}  // namespace fpdt::data::text
