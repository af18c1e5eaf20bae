// Shared helpers for the test suite: fresh random inputs (the seed is printed, and FPDT_TEST_SEED
// replays it), and the one error measure every comparison uses.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fpdt/base/random.h"

namespace fpdt::testing {

// A fresh seed per call unless FPDT_TEST_SEED is set; recorded in the test's output so a failure
// can be replayed with FPDT_TEST_SEED=<seed>.
inline uint64_t fresh_seed() {
  uint64_t seed;
  if (const char* fixed = std::getenv("FPDT_TEST_SEED")) {
    seed = std::strtoull(fixed, nullptr, 10);
  } else {
    std::random_device device;
    seed = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::printf("[ seed     ] FPDT_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

template <typename T>
std::vector<T> random_normal(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<T> values(n);
  for (auto& value : values) value = static_cast<T>(scale * rng.normal());
  return values;
}

template <typename T>
std::vector<T> random_uniform(Rng& rng, size_t n, double lo, double hi) {
  std::vector<T> values(n);
  for (auto& value : values) value = static_cast<T>(rng.uniform(lo, hi));
  return values;
}

// Norm-wise relative error ||got − want||₂ / ||want||₂ (accumulated in float64). This is the
// measure behind every "relative error ≤ tol" in the suite: it is insensitive to the scale of the
// values and is not blown up by individual entries that happen to be near zero.
template <typename A, typename B>
double relative_error(const A* got, const B* want, size_t n) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

template <typename A, typename B>
double relative_error(const std::vector<A>& got, const std::vector<B>& want) {
  EXPECT_EQ(got.size(), want.size());
  return relative_error(got.data(), want.data(), std::min(got.size(), want.size()));
}

}  // namespace fpdt::testing
