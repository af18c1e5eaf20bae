// A stable 64-bit hash of bytes (FNV-1a): the same on every machine and run, for fingerprints that are
// saved (a tokenizer's) or compared between processes (the ranks' options). Not for adversarial input.
#pragma once

#include <cstdint>
#include <string_view>

namespace fpdt {

inline uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace fpdt
