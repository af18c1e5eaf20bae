// NFC from the generated tables: decompose each code point fully, sort each run of non-starters by
// combining class (stable), then compose each mark with the last starter unless a mark of the same or a
// higher class stands between them. Hangul syllables decompose and compose arithmetically.
#include "fpdt/data/text/normalize.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "fpdt/data/text/unicode.h"

namespace fpdt::data::text {

namespace {

struct CombiningClassRange {
  char32_t first, last;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t code_point, first, second;  // second = 0: a singleton
  bool composes;                       // a primary composite: (first, second) composes back to it
};
#include "fpdt/data/text/normalization_tables.inc"

// Hangul syllables: S = 0xAC00 + (L·21 + V)·28 + T.
constexpr char32_t kS = 0xAC00, kL = 0x1100, kV = 0x1161, kT = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = 11172;

uint8_t combining_class(char32_t cp) {
  const auto* end = std::end(kCombiningClasses);
  const auto* range = std::upper_bound(std::begin(kCombiningClasses), end, cp,
                                       [](char32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (range == std::begin(kCombiningClasses)) return 0;
  --range;
  return cp <= range->last ? range->combining_class : 0;
}

const Decomposition* find_decomposition(char32_t cp) {
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, char32_t c) { return d.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

const std::unordered_map<uint64_t, char32_t>& compositions() {
  static const std::unordered_map<uint64_t, char32_t> table = [] {
    std::unordered_map<uint64_t, char32_t> pairs;
    for (const Decomposition& d : kDecompositions)
      if (d.composes) pairs[(uint64_t{d.first} << 32) | d.second] = d.code_point;
    return pairs;
  }();
  return table;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kS && cp < kS + kSCount) {
    const char32_t index = cp - kS;
    out.push_back(kL + index / (kVCount * kTCount));
    out.push_back(kV + index % (kVCount * kTCount) / kTCount);
    if (index % kTCount != 0) out.push_back(kT + index % kTCount);
    return;
  }
  if (const Decomposition* d = find_decomposition(cp)) {
    decompose(d->first, out);
    if (d->second != 0) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// The composite of (starter, mark), or 0.
char32_t compose(char32_t starter, char32_t mark) {
  if (starter >= kL && starter < kL + kLCount && mark >= kV && mark < kV + kVCount)
    return kS + ((starter - kL) * kVCount + (mark - kV)) * kTCount;
  if (starter >= kS && starter < kS + kSCount && (starter - kS) % kTCount == 0 && mark > kT && mark < kT + kTCount)
    return starter + (mark - kT);
  const auto& table = compositions();
  const auto it = table.find((uint64_t{starter} << 32) | mark);
  return it == table.end() ? 0 : it->second;
}

}  // namespace

std::string nfc(std::string_view text) {
  std::vector<char32_t> decomposed;
  decomposed.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) decompose(next_code_point(text, pos), decomposed);
  // Canonical ordering.
  for (size_t i = 0; i < decomposed.size();) {
    size_t j = i;
    while (j < decomposed.size() && combining_class(decomposed[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(decomposed.begin() + static_cast<std::ptrdiff_t>(i), decomposed.begin() + static_cast<std::ptrdiff_t>(j),
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j + 1;
  }
  // Canonical composition.
  std::vector<char32_t> composed;
  composed.reserve(decomposed.size());
  size_t starter = SIZE_MAX;
  int last_class = -1;
  for (const char32_t cp : decomposed) {
    const int cls = combining_class(cp);
    const bool adjacent = starter != SIZE_MAX && composed.size() - 1 == starter;
    if (starter != SIZE_MAX && (last_class < cls || (last_class == 0 && adjacent))) {
      if (const char32_t merged = compose(composed[starter], cp)) {
        composed[starter] = merged;
        continue;
      }
    }
    if (cls == 0) {
      starter = composed.size();
      last_class = 0;
    } else {
      last_class = cls;
    }
    composed.push_back(cp);
  }
  std::string out;
  out.reserve(text.size());
  for (const char32_t cp : composed) append_utf8(out, cp);
  return out;
}

}  // namespace fpdt::data::text
