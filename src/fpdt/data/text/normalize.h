// Unicode NFC as the `tokenizers` library's NFC normalizer computes it (its tables are Unicode 9.0:
// normalization_tables.inc, from tools/make_unicode_tables.py, which checks them against the library).
#pragma once

#include <string>
#include <string_view>

namespace fpdt::data::text {

// NFC of valid UTF-8: canonical decomposition (Hangul algorithmically), canonical ordering of combining
// marks, canonical composition.
std::string nfc(std::string_view text);

}  // namespace fpdt::data::text
