// Unicode for the tokenizer: the General_Category of a code point (Unicode 16.0, the version of the
// `tokenizers` library's regex engine; tables from tools/make_unicode_tables.py), Oniguruma's white
// space, and UTF-8: decoding, encoding, validation and Rust's lossy conversion (from_utf8_lossy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fpdt::data::text {

enum class GeneralCategory : uint8_t {
  Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi,
  Pf, Po, Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co, Cn,
};
inline constexpr int kGeneralCategoryCount = 30;

GeneralCategory general_category(char32_t code_point);
// Oniguruma's \s: Zs, Zl, Zp and U+0009..U+000D, U+0085 (= the White_Space property).
bool is_white_space(char32_t code_point);

// The code point at text[pos] of valid UTF-8; `pos` moves past it.
char32_t next_code_point(std::string_view text, size_t& pos);
// Start of the code point that ends at `pos` (> 0) in valid UTF-8.
size_t previous_boundary(std::string_view text, size_t pos);
void append_utf8(std::string& out, char32_t code_point);

// Length of the valid UTF-8 sequence at text[0..available), or 0 when it is not valid there.
size_t utf8_sequence_bytes(const unsigned char* text, size_t available);
// Byte offset of the first byte that is not part of valid UTF-8, or text.size() when all is valid.
size_t first_invalid_utf8(std::string_view bytes);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace fpdt::data::text
