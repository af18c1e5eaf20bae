// GPT-2's byte-level alphabet, shared by the tokenizer (ByteLevel pre-tokenizer and decoder) and the
// GGUF tokenizer conversion (which spells vocabularies in it): printable Latin-1 bytes stand for
// themselves, the other 68 bytes for U+0100 onwards in byte order, so every byte is a visible character.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace fpdt::data::text {

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;            // byte → its character, UTF-8
  std::unordered_map<char32_t, uint8_t> char_to_byte;   // and back
};
const ByteAlphabet& byte_alphabet();

}  // namespace fpdt::data::text
