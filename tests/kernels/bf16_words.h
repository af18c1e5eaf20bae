// Random bf16 data for the tests that hand a kernel bf16 words (a bf16 KV cache's K or V as it is stored):
// fresh normals rounded to the nearest bf16, as the words and as the floats those words are.
#pragma once

#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/tensor/dtype.h"
#include "testing.h"

namespace fpdt::testing {

struct Bf16Values {
  std::vector<uint16_t> words;  // (n) bf16 words
  std::vector<float> values;    // (n) the words widened: each exactly a bf16 value
};

inline Bf16Values random_bf16(Rng& rng, size_t n) {
  Bf16Values x{std::vector<uint16_t>(n), std::vector<float>(n)};
  const std::vector<float> normals = random_normal<float>(rng, n);
  for (size_t i = 0; i < n; ++i) {
    x.words[i] = float_to_bf16(normals[i]);
    x.values[i] = bf16_to_float(x.words[i]);
  }
  return x;
}

}  // namespace fpdt::testing
