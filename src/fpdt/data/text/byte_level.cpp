// GPT-2's byte-level alphabet (see byte_level.h).
#include "fpdt/data/text/byte_level.h"

#include "fpdt/data/text/unicode.h"

namespace fpdt::data::text {

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet = [] {
    ByteAlphabet table;
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(table.byte_to_utf8[b], cp);
      table.char_to_byte[cp] = static_cast<uint8_t>(b);
    }
    return table;
  }();
  return alphabet;
}

}  // namespace fpdt::data::text
