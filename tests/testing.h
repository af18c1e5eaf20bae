// Shared helpers for the test suite: fresh random inputs (the seed is printed, and FPDT_TEST_SEED
// replays it), the one error measure every comparison uses, and (tolerances.h) the fp32 bounds on it.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "tolerances.h"

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

// Central differences of loss() with respect to every entry of values (perturbed in place and
// restored), step 1e-6: for float64 kernels the truncation error is O(1e-12) and the rounding error
// O(1e-10) relative, well inside the 1e-6…1e-8 tolerances the backward checks use.
inline std::vector<double> finite_differences(std::vector<double>& values, const std::function<double()>& loss) {
  constexpr double kStep = 1e-6;
  std::vector<double> grad(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    values[i] = saved + kStep;
    const double up = loss();
    values[i] = saved - kStep;
    const double down = loss();
    values[i] = saved;
    grad[i] = (up - down) / (2 * kStep);
  }
  return grad;
}

inline std::vector<double> to_double(const std::vector<float>& values) { return {values.begin(), values.end()}; }

// A fresh directory under /tmp, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/fpdt_test_XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Number of entries in the directory (e.g. to see that no temp file was left behind).
  size_t entries() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path_), {}));
  }

 private:
  std::string path_;
};

// The whole file as bytes ("" when it cannot be read).
inline std::string file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

inline void write_text_file(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary);
  file << bytes;
  if (!file) throw std::runtime_error("cannot write " + path);
}

// The message of the fpdt::Error that `action` throws; a test failure when it throws none.
template <typename Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an fpdt::Error";
  return "";
}

// Compares `text` with the golden file at `file_path`; FPDT_UPDATE_GOLDEN=1 rewrites the file (and fails,
// so an update is never mistaken for a pass: read the diff, then run again).
inline void expect_golden(const std::string& file_path, const std::string& text) {
  if (std::getenv("FPDT_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(file_path) << text;
    FAIL() << "rewrote " << file_path;
  }
  std::ifstream file(file_path);
  ASSERT_TRUE(file.good()) << "no golden file " << file_path << " (FPDT_UPDATE_GOLDEN=1 writes it)";
  const std::string want((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, want) << file_path;
}

inline void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

}  // namespace fpdt::testing
