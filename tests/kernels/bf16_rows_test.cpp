// The bf16 rows the CPU attention's softmax hands its products (panel_gemm_bf16.h: round_row, and the
// pairings store_pairs_along and store_pair_row), and bf16_row, the packings' rounding of a row of any
// length, against dtype.h's float_to_bf16, bit for bit, on fresh
// random rows of every kind of float: normal values, exact ties, zeros, subnormals, infinities, quiet and
// signalling NaNs, and values that round up to infinity. A row without a subnormal takes AVX512-BF16's
// conversion where the build has it; a row with one, the lane-by-lane rounding: both are drawn.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/panel_gemm_bf16.h"
#include "testing.h"

namespace fpdt::kernels::cpu {
namespace {

using testing::fresh_seed;

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// A float of a random kind; subnormals only where allowed.
float random_float(Rng& rng, bool subnormals) {
  const uint32_t sign = static_cast<uint32_t>(rng.next_u64() & 1) << 31;
  const uint32_t mantissa = static_cast<uint32_t>(rng.next_u64()) & 0x007fffffu;
  switch (rng.next_u64() % (subnormals ? 8 : 7)) {
    case 0: return from_bits(sign | 0x00800000u * static_cast<uint32_t>(1 + rng.next_u64() % 254) | mantissa);
    case 1: return from_bits(sign | 0x3f800000u | (mantissa & 0x007f0000u) | 0x8000u);  // a tie: to even
    case 2: return from_bits(sign);                                                    // ±0
    case 3: return from_bits(sign | 0x7f800000u);                                      // ±inf
    case 4: return from_bits(sign | 0x7fc00000u | mantissa);                           // quiet NaN
    case 5: return from_bits(sign | 0x7f800000u | (mantissa & 0x003fffffu) | 1u);     // signalling NaN
    case 6: return from_bits(sign | 0x7f7f8000u | (mantissa & 0x7fffu));               // rounds to ±inf
    default: return from_bits(sign | (mantissa | 1u));                                 // subnormal
  }
}

struct Rows {
  alignas(64) float even[kPanel];
  alignas(64) float odd[kPanel];
};

Rows random_rows(Rng& rng, bool subnormals) {
  Rows rows;
  for (int c = 0; c < kPanel; ++c) {
    rows.even[c] = random_float(rng, subnormals);
    rows.odd[c] = random_float(rng, subnormals);
  }
  if (subnormals) rows.even[rng.next_u64() % kPanel] = from_bits(0x00000001u);  // at least one
  return rows;
}

Bf16Row round(const float* row) { return round_row(vload<Vec>(row), vload<Vec>(row + kLanes)); }

TEST(Bf16Rows, RoundedAndPairedAsFloatToBf16) {
  Rng rng(fresh_seed());
  for (int trial = 0; trial < 2000; ++trial) {
    const bool subnormals = trial % 2 == 1;
    const Rows rows = random_rows(rng, subnormals);
    const Bf16Row even = round(rows.even), odd = round(rows.odd);
    uint32_t along[kPanel / 2], paired[kPanel];
    store_pairs_along(along, even);
    store_pair_row(paired, even, odd);
    for (int c = 0; c < kPanel; ++c) {
      const uint16_t want_even = float_to_bf16(rows.even[c]), want_odd = float_to_bf16(rows.odd[c]);
      const uint16_t got_along = static_cast<uint16_t>(along[c / 2] >> (16 * (c % 2)));
      uint32_t input;
      std::memcpy(&input, &rows.even[c], 4);
      ASSERT_EQ(got_along, want_even) << "trial " << trial << " lane " << c << " input 0x" << std::hex << input;
      ASSERT_EQ(paired[c] & 0xffffu, want_even) << "trial " << trial << " lane " << c << " input 0x" << std::hex
                                                << input;
      ASSERT_EQ(paired[c] >> 16, want_odd) << "trial " << trial << " lane " << c;
    }
  }
}

// computed_under_ftz leaves the subnormal check out: rows of values a thread that flushes subnormal
// results computes (every kind of float but subnormals) round as float_to_bf16 all the same — and such a
// thread is what a CpuBackend makes of its team, so that the softmax takes this path in a run.
TEST(Bf16Rows, RowsComputedUnderFtzRoundedAsFloatToBf16) {
  Rng rng(fresh_seed());
  for (int trial = 0; trial < 2000; ++trial) {
    const Rows rows = random_rows(rng, /*subnormals=*/false);
    const Bf16Row row = round_row(vload<Vec>(rows.even), vload<Vec>(rows.even + kLanes), /*computed_under_ftz=*/true);
    uint16_t words[kPanel];
    store_words(words, row);
    for (int c = 0; c < kPanel; ++c)
      ASSERT_EQ(words[c], float_to_bf16(rows.even[c])) << "trial " << trial << " lane " << c;
  }
  const unsigned mxcsr = _mm_getcsr();  // the backend sets FTZ and DAZ: put back for the tests after this one
  const CpuBackend backend;
  EXPECT_TRUE(flushes_subnormal_results()) << "a CpuBackend's thread keeps subnormal results";
  _mm_setcsr(mxcsr);
}

TEST(Bf16Rows, ARowOfAnyLengthAsFloatToBf16) {
  Rng rng(fresh_seed());
  std::vector<float> row(3 * kPanel + 7);
  std::vector<uint16_t> words(row.size() + 1);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = static_cast<int>(rng.next_u64() % row.size());
    for (float& value : row) value = random_float(rng, trial % 2 == 1);
    const uint16_t sentinel = 0xbeef;
    std::fill(words.begin(), words.end(), sentinel);
    bf16_row(words.data(), row.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(words[i], float_to_bf16(row[i])) << "trial " << trial << " n " << n << " i " << i;
    ASSERT_EQ(words[n], sentinel) << "bf16_row wrote past n = " << n;
  }
}

}  // namespace
}  // namespace fpdt::kernels::cpu
