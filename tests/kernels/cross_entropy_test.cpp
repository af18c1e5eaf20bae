// Cross-entropy: the reference against a naive log-sum-exp and float64 finite differences (with
// ignored rows and a mask), and in place. (Every backend against the reference, on random and
// large-magnitude logits, in place too: backend_ops_test.cpp.)
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/reference/cross_entropy.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

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
