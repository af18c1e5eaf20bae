// Cross-entropy: the reference against a naive log-sum-exp and float64 finite differences (with
// ignored rows and a mask); the fast CPU kernel against the reference (in double) on random and
// large-magnitude logits, including in place (dlogits aliasing logits).
#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/kernels.h"
#include "fpdt/kernels/reference/cross_entropy.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using reference::kIgnoreIndex;
using testing::fresh_seed;
using testing::random_normal;
using testing::random_uniform;
using testing::relative_error;

// Targets in [0, V), with rows listed in `ignored` set to the ignore index.
std::vector<int32_t> random_targets(Rng& rng, int64_t N, int V, const std::vector<int64_t>& ignored) {
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(V));
  for (int64_t row : ignored) targets[row] = kIgnoreIndex;
  return targets;
}

TEST(CrossEntropyReference, ForwardMatchesNaive) {
  Rng rng(fresh_seed());
  const int64_t N = 4;
  const int V = 9;
  const auto logits = random_normal<double>(rng, N * V, 3.0);
  const auto targets = random_targets(rng, N, V, {2});
  const std::vector<double> mask = {1.0, 0.5, 1.0, 0.0};
  std::vector<double> losses(N, 7.0), lse(N);
  reference::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask.data(), N, V);
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v]);  // |logits| ≲ 15: no overflow
    // Same quantity without the max shift; a few double roundings of O(10) values.
    EXPECT_NEAR(lse[n], std::log(sum), 1e-13);
  }
  EXPECT_NEAR(losses[0], lse[0] - logits[0 * V + targets[0]], 1e-13);          // as above
  EXPECT_NEAR(losses[1], 0.5 * (lse[1] - logits[1 * V + targets[1]]), 1e-13);  // as above
  EXPECT_EQ(losses[2], 0.0);  // ignored row: exactly 0
  EXPECT_EQ(losses[3], 0.0);  // mask 0: exactly 0
}

// loss = Σ_n w[n] · losses[n]. The backward scales every row by one dloss_scale, so per-row weights
// are applied by running it row by row (rows are independent) with dloss_scale = w[n]; and the
// whole-batch call with a single scale is checked against the same finite differences.
TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 7;
  const int V = 11;
  auto logits = random_normal<double>(rng, N * V, 2.0);
  const auto targets = random_targets(rng, N, V, {1, 4});
  auto mask = random_uniform<double>(rng, N, 0.2, 1.5);
  mask[5] = 0.0;  // a masked-out row
  const auto w = random_normal<double>(rng, N);

  for (bool per_row_weights : {true, false}) {
    const double uniform_scale = 0.37;
    auto weight = [&](int64_t n) { return per_row_weights ? w[n] : uniform_scale; };
    std::vector<double> losses(N), lse(N);
    auto loss = [&]() {
      reference::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask.data(), N, V);
      double sum = 0.0;
      for (int64_t n = 0; n < N; ++n) sum += weight(n) * losses[n];
      return sum;
    };
    loss();
    std::vector<double> dlogits(N * V, 7.0);  // junk: the output is overwritten
    if (per_row_weights) {
      for (int64_t n = 0; n < N; ++n) {
        reference::cross_entropy_backward(dlogits.data() + n * V, logits.data() + n * V, lse.data() + n,
                                          targets.data() + n, mask.data() + n, w[n], 1, V);
      }
    } else {
      reference::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), mask.data(),
                                        uniform_scale, N, V);
    }

    const double h = 1e-5;
    std::vector<double> numeric(N * V);
    for (int64_t i = 0; i < N * V; ++i) {
      const double saved = logits[i];
      logits[i] = saved + h;
      const double plus = loss();
      logits[i] = saved - h;
      const double minus = loss();
      logits[i] = saved;
      numeric[i] = (plus - minus) / (2 * h);
    }
    // Truncation h² · O(1) ≈ 1e-10 plus cancellation 1e-16 · |loss| / h ≈ 1e-10: 1e-8 is ample.
    const double error = relative_error(dlogits, numeric);
    EXPECT_LE(error, 1e-8) << "per_row_weights=" << per_row_weights;
    std::printf("[ errors   ] cross-entropy reference vs finite differences (per-row weights %d): %.3g\n",
                per_row_weights, error);
    for (int64_t n : {1, 4, 5}) {  // ignored and masked rows: exactly zero gradient
      for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[n * V + v], 0.0);
    }
  }
}

struct CpuCase {
  int64_t N;
  int V;
  double logit_scale;  // normal(0, scale), or uniform(−scale, scale) when `uniform`
  bool uniform;
  bool with_mask;
};

void PrintTo(const CpuCase& c, std::ostream* os) {
  *os << "N=" << c.N << " V=" << c.V << " scale=" << c.logit_scale << (c.uniform ? " uniform" : " normal")
      << " mask=" << c.with_mask;
}

class CrossEntropyCpu : public ::testing::TestWithParam<CpuCase> {};

TEST_P(CrossEntropyCpu, MatchesReference) {
  const CpuCase c = GetParam();
  Rng rng(fresh_seed());
  const int64_t N = c.N;
  const int V = c.V;
  const auto logits = c.uniform ? random_uniform<float>(rng, N * V, -c.logit_scale, c.logit_scale)
                                : random_normal<float>(rng, N * V, c.logit_scale);
  const auto targets = random_targets(rng, N, V, {0, N / 2});
  auto mask = random_uniform<float>(rng, N, 0.0, 1.0);
  mask[1] = 0.0f;
  const float* mask_ptr = c.with_mask ? mask.data() : nullptr;
  const double dloss_scale = 1.0 / static_cast<double>(N);

  const std::vector<double> logits_d(logits.begin(), logits.end());
  const std::vector<double> mask_d(mask.begin(), mask.end());
  const double* mask_d_ptr = c.with_mask ? mask_d.data() : nullptr;

  std::vector<double> want_losses(N), want_lse(N);
  reference::cross_entropy_forward(want_losses.data(), want_lse.data(), logits_d.data(), targets.data(), mask_d_ptr,
                                   N, V);
  std::vector<float> losses(N), lse(N);
  cpu::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask_ptr, N, V);
  // lse: the sum of exps is accumulated in float per tile (relative error ~ √(tile) · 6e-8) and in
  // double across tiles, then rounded to float once: ≲ 1e-7. Losses are formed in double from
  // (max − logit) + log Σ, so they carry the same ~1e-7. 1e-6 leaves margin, far below any bug.
  const double lse_error = relative_error(lse, want_lse);
  const double loss_error = relative_error(losses, want_losses);
  EXPECT_LE(lse_error, 1e-6);
  EXPECT_LE(loss_error, 1e-6);
  EXPECT_EQ(losses[0], 0.0f);      // ignored row: exactly 0
  EXPECT_EQ(losses[N / 2], 0.0f);  // ignored row: exactly 0
  for (int64_t n = 0; n < N; ++n) ASSERT_TRUE(std::isfinite(losses[n]) && std::isfinite(lse[n])) << n;

  // Backward on the same inputs: both sides get the fast kernel's float lse, so the gap is only the
  // fast kernel's own arithmetic — the vector exp (≈ 2 ulp) of x − lse, whose float subtraction
  // adds |x − lse| · 6e-8 (≲ 1e-6 for the entries that matter at |logits| ≈ 80), and one product.
  const std::vector<double> lse_as_double(lse.begin(), lse.end());
  std::vector<double> want_dlogits(N * V);
  reference::cross_entropy_backward(want_dlogits.data(), logits_d.data(), lse_as_double.data(), targets.data(),
                                    mask_d_ptr, dloss_scale, N, V);
  std::vector<float> dlogits(N * V, 7.0f);
  cpu::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), mask_ptr, dloss_scale, N,
                              V);
  const double dlogits_error = relative_error(dlogits, want_dlogits);
  EXPECT_LE(dlogits_error, 1e-5);
  for (int64_t i = 0; i < N * V; ++i) ASSERT_TRUE(std::isfinite(dlogits[i])) << i;

  // End to end (each side its own lse): adds the float rounding of lse, up to 2^-18 ≈ 4e-6 relative
  // on every probability at |lse| ≈ 90; 1e-5 covers it.
  reference::cross_entropy_backward(want_dlogits.data(), logits_d.data(), want_lse.data(), targets.data(),
                                    mask_d_ptr, dloss_scale, N, V);
  const double end_to_end_error = relative_error(dlogits, want_dlogits);
  EXPECT_LE(end_to_end_error, 1e-5);

  // In place: dlogits aliasing logits. Each element is read before it is written, with the same
  // arithmetic as above, so the result is bitwise the same.
  auto in_place = logits;
  cpu::cross_entropy_backward(in_place.data(), in_place.data(), lse.data(), targets.data(), mask_ptr, dloss_scale, N,
                              V);
  EXPECT_EQ(in_place, dlogits);
  std::printf("[ errors   ] cross-entropy cpu N=%lld V=%d scale=%g: lse %.3g loss %.3g dlogits %.3g (end to end %.3g)\n",
              static_cast<long long>(N), V, c.logit_scale, lse_error, loss_error, dlogits_error, end_to_end_error);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyCpu,
                         ::testing::Values(CpuCase{37, 1000, 2.0, false, true},    // V below one tile
                                           CpuCase{9, 4099, 2.0, false, false},    // 4 tiles and a tail of 3
                                           CpuCase{37, 1000, 80.0, true, true},    // logits in ±80
                                           CpuCase{5, 3001, 80.0, true, true}),    // ±80 across tiles
                         [](const ::testing::TestParamInfo<CpuCase>& info) {
                           const CpuCase& c = info.param;
                           std::ostringstream name;  // (not std::string operator+: GCC 12 -Wrestrict false positive)
                           name << "N" << c.N << "_V" << c.V << (c.uniform ? "_uniform" : "_normal")
                                << static_cast<int>(c.logit_scale) << (c.with_mask ? "_mask" : "_nomask");
                           return name.str();
                         });

// Reference in place as well: aliasing gives the same as separate buffers, bit for bit.
TEST(CrossEntropyReference, InPlaceMatchesSeparateBuffers) {
  Rng rng(fresh_seed());
  const int64_t N = 6;
  const int V = 13;
  const auto logits = random_normal<double>(rng, N * V, 2.0);
  const auto targets = random_targets(rng, N, V, {3});
  const double* no_mask = nullptr;
  std::vector<double> losses(N), lse(N), dlogits(N * V);
  reference::cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), no_mask, N, V);
  reference::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), no_mask, 0.5, N, V);
  auto in_place = logits;
  reference::cross_entropy_backward(in_place.data(), in_place.data(), lse.data(), targets.data(), no_mask, 0.5, N, V);
  EXPECT_EQ(in_place, dlogits);  // same arithmetic per element: bitwise
}

}  // namespace
}  // namespace fpdt::kernels
