// The bound for tensor-core sums (tests/tolerances.h truncating_sum_bound), checked on the CPU: terms summed in
// fp32 with every addition rounded toward zero — the worst order, one term at a time — at the shapes of the
// conformance table's linear row, against the float64 sum of the same terms, by the row's own measure
// (norm-wise, times its cancellation). Two kinds of terms: products of bf16 values (exact in fp32, as a
// tensor core forms them: 16 significant bits, so an addition only rounds where the partial sum is 2^8 times
// a term or changes binade — the truncation rarely bites), and full fp32 terms (every addition rounds: the
// bias at its largest). Both must stay inside the truncating bound, and the fp32 terms' longest sums must
// leave the round-to-nearest bound behind: the bias that model leaves out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/tensor/dtype.h"
#include "testing.h"
#include "tolerances.h"

namespace fpdt::testing {
namespace {

// a + b in fp32 rounded toward zero: the exact sum (a double holds the sum of two floats whose exponents
// are at most 29 apart exactly, and a far smaller addend changes nothing toward zero) cut to a float.
float add_truncating(float a, float b) {
  const double exact = double{a} + double{b};
  float sum = static_cast<float>(exact);  // to nearest
  if (std::fabs(double{sum}) > std::fabs(exact)) sum = std::nextafter(sum, 0.0f);
  return sum;
}

struct Shape {
  int64_t outputs;
  int64_t K;
};

enum class Terms { bf16_products, fp32 };

// One draw: `outputs` sums of K products x·w (x ~ N(0, 1), w ~ N(0, 0.05²), as the linear row draws them),
// both factors rounded to bf16 (bf16_products) or the product rounded to fp32 (fp32). Returns {the norm-wise
// error of the truncating sums, the row's cancellation}.
std::pair<double, double> draw(Rng& rng, const Shape& s, Terms terms) {
  std::vector<float> got(static_cast<size_t>(s.outputs));
  std::vector<double> want(static_cast<size_t>(s.outputs)), scale(static_cast<size_t>(s.outputs));
  for (int64_t o = 0; o < s.outputs; ++o) {
    float sum = 0.0f;
    double exact = 0.0, squares = 0.0;
    for (int64_t k = 0; k < s.K; ++k) {
      const double x = rng.normal(), w = 0.05 * rng.normal();
      const float product = terms == Terms::bf16_products
                                ? round_to_bf16(static_cast<float>(x)) * round_to_bf16(static_cast<float>(w))  // exact
                                : static_cast<float>(x * w);
      sum = add_truncating(sum, product);
      exact += double{product};
      squares += double{product} * product;
    }
    got[static_cast<size_t>(o)] = sum;
    want[static_cast<size_t>(o)] = exact;
    scale[static_cast<size_t>(o)] = std::sqrt(squares);
  }
  return {relative_error(got, want), cancellation(scale, want)};
}

TEST(TruncatingSums, StayInsideTheTruncatingBound) {
  Rng rng(fresh_seed());
  // The linear row's outputs and sums (forward over I, dx over O, dw over N) and longer sums.
  for (const Shape s : {Shape{3, 7}, Shape{21, 3}, Shape{2775, 100}, Shape{3700, 75}, Shape{1100 * 33, 40},
                        Shape{40 * 33, 1100}, Shape{256, 4096}}) {
    for (const Terms terms : {Terms::bf16_products, Terms::fp32}) {
      const char* kind = terms == Terms::fp32 ? "fp32 terms" : "bf16 products";
      double worst = 0.0;
      for (int trial = 0; trial < 5; ++trial) {
        const auto [error, kappa] = draw(rng, s, terms);
        const double bound = kappa * truncating_sum_bound(static_cast<double>(s.K));
        ASSERT_LE(error, bound) << s.outputs << " sums of " << s.K << " " << kind << ", trial " << trial;
        worst = std::max(worst, error / bound);
      }
      std::printf("[ error    ] %lld sums of %lld truncated %s: at most %.3f of the bound\n",
                  static_cast<long long>(s.outputs), static_cast<long long>(s.K), kind, worst);
    }
  }
}

TEST(TruncatingSums, LeaveTheRoundToNearestBoundBehind) {
  Rng rng(fresh_seed());
  for (const Shape s : {Shape{1320, 1100}, Shape{256, 4096}}) {
    const auto [error, kappa] = draw(rng, s, Terms::fp32);
    const double nearest = kappa * fp32_bound({.summation = static_cast<double>(s.K), .against = Against::float64});
    EXPECT_GT(error, nearest) << s.outputs << " sums of " << s.K
                              << " terms: truncation's bias did not show (the emulation rounds to nearest?)";
  }
}

}  // namespace
}  // namespace fpdt::testing
