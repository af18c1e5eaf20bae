// Embedding: the reference backward against float64 finite differences of the reference forward, its
// accumulate switch, and the cpu backward's order of addition (bitwise the reference's in float).
// (Every backend against the reference: backend_ops_test.cpp.)
#include <cstdio>
#include <functional>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/reference/embedding.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

std::vector<int32_t> random_ids(Rng& rng, int64_t N, int V) {
  std::vector<int32_t> ids(N);
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(V));
  return ids;
}

double report(const char* what, double error) {
  std::printf("[ error    ] %s: %.3e\n", what, error);
  return error;
}

TEST(Embedding, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 11;
  const int h = 6, V = 5;  // N > V: ids repeat, so the scatter-add must sum
  const auto ids = random_ids(rng, N, V);
  auto table = random_normal<double>(rng, V * h);
  const auto projection = random_normal<double>(rng, N * h);  // loss = Σ projection ∘ out
  auto loss = [&] {
    std::vector<double> out(N * h);
    reference::embedding_forward(out.data(), ids.data(), table.data(), N, h, false);
    double total = 0.0;
    for (size_t i = 0; i < out.size(); ++i) total += projection[i] * out[i];
    return total;
  };
  const auto numeric = finite_differences(table, loss);

  const auto initial = random_normal<double>(rng, V * h);  // dtable accumulates: start from non-zero content
  auto dtable = initial;
  reference::embedding_backward(dtable.data(), projection.data(), ids.data(), N, h);
  for (size_t i = 0; i < dtable.size(); ++i) dtable[i] -= initial[i];
  // The loss is linear in the table, so central differences are exact up to float64 rounding of the
  // loss (~1e-16 · |loss| / 1e-6); 1e-8 leaves a wide margin.
  EXPECT_LE(report("reference dtable vs finite differences", relative_error(dtable, numeric)), 1e-8);
}

TEST(Embedding, ReferenceForwardAccumulateAdds) {
  Rng rng(fresh_seed());
  const int64_t N = 9;
  const int h = 5, V = 4;
  const auto ids = random_ids(rng, N, V);
  const auto table = random_normal<double>(rng, V * h);
  std::vector<double> fresh(N * h);
  reference::embedding_forward(fresh.data(), ids.data(), table.data(), N, h, false);
  for (int64_t n = 0; n < N; ++n) {
    for (int j = 0; j < h; ++j) EXPECT_EQ(fresh[n * h + j], table[ids[n] * h + j]);  // a gather is exact
  }
  const auto initial = random_normal<double>(rng, N * h);
  auto accumulated = initial;
  reference::embedding_forward(accumulated.data(), ids.data(), table.data(), N, h, true);
  for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] -= initial[i];
  // (a + b) − a differs from b by float64 rounding only (a few 1e-16 for values of similar size).
  EXPECT_LE(report("reference embedding accumulate − initial vs overwrite", relative_error(accumulated, fresh)),
            1e-14);
}

// The cpu kernel adds the rows of repeated ids in input order, as the reference run in float does:
// bitwise equal, whatever the thread count (300 × 512 is past the parallel threshold; 64 ids repeat).
TEST(EmbeddingCpu, BackwardAddsInInputOrder) {
  Rng rng(fresh_seed());
  const int64_t N = 300;
  const int h = 512, V = 64;
  const auto ids = random_ids(rng, N, V);
  const auto dout = random_normal<float>(rng, N * h);
  const auto initial = random_normal<float>(rng, V * h);  // dtable accumulates: start from non-zero content
  auto dtable = initial;
  cpu::CpuBackend().embedding_backward(dtable.data(), dout.data(), ids.data(), N, h);
  auto want = initial;
  reference::embedding_backward(want.data(), dout.data(), ids.data(), N, h);
  EXPECT_EQ(dtable, want);
}

}  // namespace
}  // namespace fpdt::kernels
