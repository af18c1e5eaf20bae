// Reference attention: against a naive softmax(QKᵀ)V written out here (causal and with sliding
// windows), the one-visible-key case, and its backward against float64 central finite differences
// for GQA ratios 1, 2, 4, with and without document ids and windows, B = 2 — on the out loss alone,
// and with the LSE output in the loss too. (The float instantiation and every backend against the
// float64 reference: backend_ops_test.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/reference/attention.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

// Naive attention for B = 1, no documents, every matrix written out: scores (Hq, S, S); causal, and
// with sliding windows of 1 (each query sees itself only), 2 and 4 tokens (Mistral's rule: a query
// sees itself and the window − 1 keys before it).
TEST(AttentionReference, MatchesNaiveSoftmax) {
  Rng rng(fresh_seed());
  const int S = 5, Hq = 2, Hkv = 1, D = 4;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q = random_normal<double>(rng, S * Hq * D);
  const auto k = random_normal<double>(rng, S * Hkv * D);
  const auto v = random_normal<double>(rng, S * Hkv * D);

  for (const int window : {0, 1, 2, 4}) {
  std::vector<double> want_out(S * Hq * D), want_lse(Hq * S);
  for (int head = 0; head < Hq; ++head) {
    for (int s = 0; s < S; ++s) {
      double scores[S];
      double max = -INFINITY;
      for (int t = 0; t < S; ++t) {
        double dot = 0.0;
        for (int d = 0; d < D; ++d) dot += q[(s * Hq + head) * D + d] * k[t * D + d];  // Hkv = 1
        const bool visible = t <= s && (window == 0 || s - t < window);                   // causal, window
        scores[t] = visible ? scale * dot : -INFINITY;
        max = std::max(max, scores[t]);
      }
      double sum = 0.0;
      for (int t = 0; t < S; ++t) sum += std::exp(scores[t] - max);
      want_lse[head * S + s] = max + std::log(sum);
      for (int d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int t = 0; t < S; ++t) acc += std::exp(scores[t] - max) / sum * v[t * D + d];
        want_out[(s * Hq + head) * D + d] = acc;
      }
    }
  }

  std::vector<double> out(S * Hq * D), lse(Hq * S);
  reference::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), nullptr, 1, S, Hq, Hkv, D,
                               scale, window);
  // Same maths in a different order, all in double: a few roundings of O(1) values.
  const double out_error = relative_error(out, want_out), lse_error = relative_error(lse, want_lse);
  EXPECT_LE(out_error, 1e-14) << "window " << window;
  EXPECT_LE(lse_error, 1e-14) << "window " << window;
  std::printf("[ errors   ] attention reference vs naive (window %d): out %.3g, lse %.3g\n", window, out_error,
              lse_error);
  }
}

// A query whose only visible key is itself (first token, or first token of a document) returns
// that token's v, and its lse is its own scaled score.
TEST(AttentionReference, SingleVisibleKeyReturnsItsValue) {
  Rng rng(fresh_seed());
  const int B = 2, S = 6, Hq = 4, Hkv = 2, D = 3;
  const double scale = 0.7;
  const auto q = random_normal<double>(rng, B * S * Hq * D);
  const auto k = random_normal<double>(rng, B * S * Hkv * D);
  const auto v = random_normal<double>(rng, B * S * Hkv * D);
  const std::vector<int32_t> doc_ids = {0, 0, 1, 1, 1, 2,   // batch 0: documents start at 0, 2, 5
                                        7, 8, 8, 8, 9, 9};  // batch 1: documents start at 0, 1, 4
  std::vector<double> out(B * S * Hq * D), lse(B * Hq * S);
  reference::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc_ids.data(), B, S, Hq,
                               Hkv, D, scale, /*window=*/0);
  const int starts[2][3] = {{0, 2, 5}, {0, 1, 4}};
  for (int b = 0; b < B; ++b) {
    for (int s : starts[b]) {
      for (int head = 0; head < Hq; ++head) {
        const int kv_head = head / (Hq / Hkv);
        double dot = 0.0;
        for (int d = 0; d < D; ++d) {
          // p = exp(0) / 1 = 1 exactly, so out is v itself, bit for bit.
          EXPECT_EQ(out[((b * S + s) * Hq + head) * D + d], v[((b * S + s) * Hkv + kv_head) * D + d]);
          dot += q[((b * S + s) * Hq + head) * D + d] * k[((b * S + s) * Hkv + kv_head) * D + d];
        }
        // lse = score + log(1); the dot product may be summed in a different order: 1e-14.
        EXPECT_NEAR(lse[(b * Hq + head) * S + s], scale * dot, 1e-14);
      }
    }
  }
}

struct GradCase {
  int Hq;
  int Hkv;
  bool documents;
  bool with_lse;   // also put the lse output in the loss
  int64_t window;  // 0: none
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << "Hq=" << c.Hq << " Hkv=" << c.Hkv << " documents=" << c.documents << " with_lse=" << c.with_lse
      << " window=" << c.window;
}

class AttentionGradient : public ::testing::TestWithParam<GradCase> {};

// loss = Σ w_out ∘ out (+ Σ w_lse ∘ lse). The backward takes only dout; a gradient flowing into lse
// enters dS = P (dP − Δ) exactly as −dlse enters Δ (d lse / d score = P), and Δ = rowsum(dout ∘ out)
// is the only use of `out`. So the lse term is fed by passing out' = out − w_lse · dout / |dout|²,
// which makes rowsum(dout ∘ out') = Δ − w_lse: this checks the backward's lse path (P from lse, the
// Δ term) against finite differences too.
TEST_P(AttentionGradient, BackwardMatchesFiniteDifferences) {
  const GradCase c = GetParam();
  Rng rng(fresh_seed());
  const int B = 2, S = 6, D = 4;
  const int Hq = c.Hq, Hkv = c.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const size_t q_size = static_cast<size_t>(B) * S * Hq * D, kv_size = static_cast<size_t>(B) * S * Hkv * D;
  const size_t lse_size = static_cast<size_t>(B) * Hq * S;
  auto q = random_normal<double>(rng, q_size);
  auto k = random_normal<double>(rng, kv_size);
  auto v = random_normal<double>(rng, kv_size);
  const auto w_out = random_normal<double>(rng, q_size);
  const auto w_lse = random_normal<double>(rng, lse_size);
  const std::vector<int32_t> doc_ids = {3, 3, 3, 4, 4, 4,   // batch 0: two documents of 3
                                        0, 1, 1, 1, 1, 2};  // batch 1: lengths 1, 4, 1
  const int32_t* docs = c.documents ? doc_ids.data() : nullptr;

  std::vector<double> out(q_size), lse(lse_size);
  auto loss = [&]() {
    reference::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), docs, B, S, Hq, Hkv, D,
                                 scale, c.window);
    double sum = 0.0;
    for (size_t i = 0; i < q_size; ++i) sum += w_out[i] * out[i];
    if (c.with_lse) {
      for (size_t i = 0; i < lse_size; ++i) sum += w_lse[i] * lse[i];
    }
    return sum;
  };

  loss();  // out and lse at the unperturbed point
  std::vector<double> out_arg = out;
  if (c.with_lse) {
    for (int b = 0; b < B; ++b) {
      for (int s = 0; s < S; ++s) {
        for (int head = 0; head < Hq; ++head) {
          const size_t row = ((static_cast<size_t>(b) * S + s) * Hq + head) * D;
          double norm2 = 0.0;
          for (int d = 0; d < D; ++d) norm2 += w_out[row + d] * w_out[row + d];
          const double shift = w_lse[(static_cast<size_t>(b) * Hq + head) * S + s] / norm2;
          for (int d = 0; d < D; ++d) out_arg[row + d] -= shift * w_out[row + d];
        }
      }
    }
  }
  std::vector<double> dq(q_size, 7.0), dk(kv_size, 7.0), dv(kv_size, 7.0);  // junk: outputs are overwritten
  reference::attention_backward(dq.data(), dk.data(), dv.data(), w_out.data(), q.data(), k.data(), v.data(),
                                out_arg.data(), lse.data(), docs, B, S, Hq, Hkv, D, scale, c.window);

  const double h = 1e-5;
  auto numeric_gradient = [&](std::vector<double>& x) {
    std::vector<double> grad(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + h;
      const double plus = loss();
      x[i] = saved - h;
      const double minus = loss();
      x[i] = saved;
      grad[i] = (plus - minus) / (2 * h);
    }
    return grad;
  };
  const auto numeric_dq = numeric_gradient(q);
  const auto numeric_dk = numeric_gradient(k);
  const auto numeric_dv = numeric_gradient(v);
  // Central differences: truncation h² · (third derivative, O(1) for unit-normal inputs) ≈ 1e-10,
  // cancellation 1e-16 · |loss| / h ≈ 1e-10; 1e-7 leaves a wide margin and still catches any wrong
  // term (those show up at 1e-2 or worse).
  const double dq_error = relative_error(dq, numeric_dq);
  const double dk_error = relative_error(dk, numeric_dk);
  const double dv_error = relative_error(dv, numeric_dv);
  EXPECT_LE(dq_error, 1e-7);
  EXPECT_LE(dk_error, 1e-7);
  EXPECT_LE(dv_error, 1e-7);
  std::printf(
      "[ errors   ] attention Hq=%d Hkv=%d docs=%d lse=%d window=%lld vs finite differences: dq %.3g dk %.3g dv %.3g\n",
      Hq, Hkv, c.documents, c.with_lse, static_cast<long long>(c.window), dq_error, dk_error, dv_error);
}

INSTANTIATE_TEST_SUITE_P(Reference, AttentionGradient,
                         // Windows of 1 (only the query itself: P = 1, no gradient to k), 2 and 4 < S = 6.
                         ::testing::Values(GradCase{2, 2, false, false, 0}, GradCase{4, 2, false, false, 0},
                                           GradCase{8, 2, false, false, 0}, GradCase{2, 2, true, false, 0},
                                           GradCase{4, 2, true, true, 0}, GradCase{8, 2, true, true, 0},
                                           GradCase{4, 1, false, true, 0}, GradCase{4, 2, false, true, 2},
                                           GradCase{4, 2, true, true, 4}, GradCase{2, 1, false, false, 1}),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           const GradCase& c = info.param;
                           std::ostringstream name;  // (not std::string operator+: GCC 12 -Wrestrict false positive)
                           name << "Hq" << c.Hq << "_Hkv" << c.Hkv << (c.documents ? "_docs" : "_nodocs")
                                << (c.with_lse ? "_outlse" : "_out") << (c.window ? "_window" : "")
                                << (c.window ? std::to_string(c.window) : "");
                           return name.str();
                         });

}  // namespace
}  // namespace fpdt::kernels
