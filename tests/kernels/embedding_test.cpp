// Embedding kernels: the reference backward against float64 finite differences of the reference
// forward, and the fast CPU kernels against the reference on fresh random inputs (ids with repeats,
// sizes that are not multiples of the vector width, one size large enough to use several threads).
#include <cstdio>
#include <functional>
#include <ostream>
#include <vector>

#include "fpdt/kernels/cpu/kernels.h"
#include "fpdt/kernels/reference/embedding.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
using testing::to_double;
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

struct Size {
  int64_t N;
  int h, V;
};
void PrintTo(const Size& s, std::ostream* os) { *os << "N" << s.N << "_h" << s.h << "_V" << s.V; }

class EmbeddingFast : public ::testing::TestWithParam<Size> {};

TEST_P(EmbeddingFast, ForwardMatchesReference) {
  const auto [N, h, V] = GetParam();
  Rng rng(fresh_seed());
  const auto ids = random_ids(rng, N, V);
  const auto table = random_normal<float>(rng, V * h);
  const auto table64 = to_double(table);

  std::vector<float> out(N * h, 7.0f);
  cpu::embedding_forward(out.data(), ids.data(), table.data(), N, h, false);
  std::vector<double> want(N * h);
  reference::embedding_forward(want.data(), ids.data(), table64.data(), N, h, false);
  // A gather copies values: the result is exact.
  EXPECT_EQ(relative_error(out, want), 0.0);

  const auto initial = random_normal<float>(rng, N * h);
  out = initial;
  cpu::embedding_forward(out.data(), ids.data(), table.data(), N, h, true);
  want = to_double(initial);
  reference::embedding_forward(want.data(), ids.data(), table64.data(), N, h, true);
  // One fp32 addition per element: at most half an ulp (6e-8) relative.
  EXPECT_LE(report("fast forward accumulate vs reference", relative_error(out, want)), 1e-7);
}

TEST_P(EmbeddingFast, BackwardMatchesReference) {
  const auto [N, h, V] = GetParam();
  Rng rng(fresh_seed());
  const auto ids = random_ids(rng, N, V);
  const auto dout = random_normal<float>(rng, N * h);
  const auto initial = random_normal<float>(rng, V * h);  // dtable accumulates: start from non-zero content

  auto dtable = initial;
  cpu::embedding_backward(dtable.data(), dout.data(), ids.data(), N, h);
  auto want = to_double(initial);
  reference::embedding_backward(want.data(), to_double(dout).data(), ids.data(), N, h);
  // Each entry sums ~N/V fp32 values in fp32: a few ulps relative to the sum's magnitude.
  EXPECT_LE(report("fast dtable vs reference (float64)", relative_error(dtable, want)), 1e-6);

  // The fast kernel adds every row in input order, like the reference run in float: bitwise equal.
  auto want32 = initial;
  reference::embedding_backward(want32.data(), dout.data(), ids.data(), N, h);
  EXPECT_EQ(dtable, want32);
}

// 37×100 runs on one thread; 300×512 is past the parallel threshold. Few ids, so rows repeat.
INSTANTIATE_TEST_SUITE_P(Sizes, EmbeddingFast, ::testing::Values(Size{37, 100, 17}, Size{300, 512, 64}),
                         [](const auto& info) {
                           return std::string("N")
                               .append(std::to_string(info.param.N))
                               .append("_h")
                               .append(std::to_string(info.param.h));
                         });

}  // namespace
}  // namespace fpdt::kernels
