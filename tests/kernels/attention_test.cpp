// Reference attention: against a naive softmax(QKᵀ)V written out here (causal and with sliding
// windows), the one-visible-key case, and its backward against float64 central finite differences
// for GQA ratios 1, 2, 4, with and without document ids and windows, B = 2 — on the out loss alone,
// and with the LSE output in the loss too. The bf16 spec (attention_chunk.h): the recipe written out
// for one small case, and the full-sequence op = the chunk ops block by block merged by LSE, which
// holds only because P̃ is anchored at a power of two. (The float instantiation and every backend
// against the float64 reference: backend_ops_test.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/reference/attention.h"
#include "fpdt/kernels/reference/attention_chunk.h"
#include "fpdt/tensor/dtype.h"
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
  reference::attention_forward(out.data(), lse.data(),
                               {.q = q.data(), .k = k.data(), .v = v.data(), .B = 1, .S = S, .H = Hq, .Hkv = Hkv,
                                .D = D, .scale = scale, .window = window});
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
  reference::attention_forward(out.data(), lse.data(),
                               {.q = q.data(), .k = k.data(), .v = v.data(), .doc_ids = doc_ids.data(), .B = B,
                                .S = S, .H = Hq, .Hkv = Hkv, .D = D, .scale = scale});
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

// The bf16 recipe of attention_chunk.h written out for B = 1, one head, causal: every operand of a
// product rounded once (r), sums in float64, P̃ against the power-of-two max.
TEST(AttentionReferenceBf16, MatchesTheRecipeWrittenOut) {
  Rng rng(fresh_seed());
  const int S = 6, D = 5;
  const double scale = 0.45;
  const auto q = random_normal<float>(rng, S * D), k = random_normal<float>(rng, S * D);
  const auto v = random_normal<float>(rng, S * D), dout = random_normal<float>(rng, S * D);
  auto r = [](double x) { return static_cast<double>(round_to_bf16(static_cast<float>(x))); };
  std::vector<double> want_out(S * D), want_lse(S), want_dq(S * D, 0.0), want_dk(S * D, 0.0), want_dv(S * D, 0.0);
  for (int s = 0; s < S; ++s) {
    double score[S], max = -INFINITY;
    for (int t = 0; t <= s; ++t) {
      score[t] = 0.0;
      for (int d = 0; d < D; ++d) score[t] += r(q[s * D + d]) * r(k[t * D + d]);
      score[t] *= scale;
      max = std::max(max, score[t]);
    }
    const double anchor = std::log(2.0) * std::ceil(max / std::log(2.0));
    double l = 0.0;
    for (int t = 0; t <= s; ++t) l += std::exp(score[t] - anchor);
    want_lse[s] = anchor + std::log(l);
    for (int d = 0; d < D; ++d) {
      double acc = 0.0;
      for (int t = 0; t <= s; ++t) acc += r(std::exp(score[t] - anchor)) * r(v[t * D + d]);
      want_out[s * D + d] = acc / l;
    }
  }
  const BasicAttentionParams<float> params{.q = q.data(), .k = k.data(), .v = v.data(), .B = 1, .S = S, .H = 1,
                                           .Hkv = 1, .D = D, .scale = scale, .precision = Precision::bf16};
  std::vector<float> out(S * D), lse(S);
  reference::attention_forward(out.data(), lse.data(), params);
  // The same float64 sums in the same order, then stored as float: half an fp32 ulp, 2^-24 relative.
  EXPECT_LE(relative_error(out, want_out), 1e-7);
  EXPECT_LE(relative_error(lse, want_lse), 1e-7);

  for (int s = 0; s < S; ++s) {
    double delta = 0.0;  // unrounded dout and out
    for (int d = 0; d < D; ++d) delta += static_cast<double>(dout[s * D + d]) * out[s * D + d];
    for (int t = 0; t <= s; ++t) {
      double score = 0.0, dprob = 0.0;
      for (int d = 0; d < D; ++d) {
        score += r(q[s * D + d]) * r(k[t * D + d]);
        dprob += r(dout[s * D + d]) * r(v[t * D + d]);
      }
      const double prob = std::exp(scale * score - lse[s]);
      const double dscore = prob * (dprob - delta);
      for (int d = 0; d < D; ++d) {
        want_dv[t * D + d] += r(prob) * r(dout[s * D + d]);
        want_dq[s * D + d] += scale * r(dscore) * r(k[t * D + d]);
        want_dk[t * D + d] += scale * r(dscore) * r(q[s * D + d]);
      }
    }
  }
  std::vector<float> dq(S * D), dk(S * D), dv(S * D);
  reference::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), params);
  // As above: one rounding to float at the end (the same P and dS bits are rounded on both sides).
  EXPECT_LE(relative_error(dq, want_dq), 1e-7);
  EXPECT_LE(relative_error(dk, want_dk), 1e-7);
  EXPECT_LE(relative_error(dv, want_dv), 1e-7);
  // And bf16 is not fp32: the same op in fp32 differs by bf16 roundings (2^-9 relative each), far above.
  std::vector<float> out32(S * D), lse32(S);
  BasicAttentionParams<float> params32 = params;
  params32.precision = Precision::fp32;
  reference::attention_forward(out32.data(), lse32.data(), params32);
  EXPECT_GE(relative_error(out, out32), 1e-4);
}

// In bf16, the full-sequence reference = the chunk reference run block by block (q blocks × kv
// blocks, merged by LSE, with documents, a window and GQA), forward and backward. Each block anchors
// its P̃ at its own power of two, and r(2^k x) = 2^k r(x), so the blocks round the very bits the one
// pass does; the difference is the fp32 storage of out between merges and of the += gradients,
// a few 2^-24. (Anchoring at the row max itself would differ by a bf16 rounding of P̃, ~1e-3.)
TEST(AttentionReferenceBf16, BlocksMergedByLseEqualTheWholeSequence) {
  Rng rng(fresh_seed());
  const int B = 2, S = 40, Hq = 4, Hkv = 2, D = 8, block = 16;  // blocks of 16, 16, 8
  const int64_t window = 29;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const size_t q_size = static_cast<size_t>(B) * S * Hq * D, kv_size = static_cast<size_t>(B) * S * Hkv * D;
  // Scores of several units, so that P̃ spans many binades and the row maxima differ between blocks.
  const auto q = random_normal<float>(rng, q_size, 2.0), k = random_normal<float>(rng, kv_size, 2.0);
  const auto v = random_normal<float>(rng, kv_size), dout = random_normal<float>(rng, q_size);
  std::vector<int32_t> docs(static_cast<size_t>(B) * S);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s) docs[b * S + s] = b == 0 ? s / 23 : (s < 5 ? 0 : 1);

  std::vector<float> want_out(q_size), want_lse(static_cast<size_t>(B) * Hq * S);
  std::vector<float> want_dq(q_size), want_dk(kv_size), want_dv(kv_size);
  const BasicAttentionParams<float> full{.q = q.data(), .k = k.data(), .v = v.data(), .doc_ids = docs.data(),
                                         .B = B, .S = S, .H = Hq, .Hkv = Hkv, .D = D, .scale = scale,
                                         .window = window, .precision = Precision::bf16};
  reference::attention_forward(want_out.data(), want_lse.data(), full);
  reference::attention_backward(want_dq.data(), want_dk.data(), want_dv.data(), dout.data(), want_out.data(),
                                want_lse.data(), full);

  // Token ranges of the blocks, and a block's rows of a (B, S, heads, D) tensor or of (B, S) ids.
  const int blocks = (S + block - 1) / block;
  auto length = [&](int n) { return std::min(block, S - n * block); };
  auto slice = [&](const auto& whole, int n, int heads_d) {
    std::vector<std::decay_t<decltype(whole[0])>> part(static_cast<size_t>(B) * length(n) * heads_d);
    for (int b = 0; b < B; ++b)
      std::copy_n(whole.begin() + (static_cast<size_t>(b) * S + n * block) * heads_d,
                  static_cast<size_t>(length(n)) * heads_d, part.begin() + static_cast<size_t>(b) * length(n) * heads_d);
    return part;
  };
  std::vector<float> out(q_size), lse(want_lse.size()), dq(q_size), dk(kv_size), dv(kv_size);
  for (int qn = 0; qn < blocks; ++qn) {
    const auto q_part = slice(q, qn, Hq * D), dout_part = slice(dout, qn, Hq * D);
    const auto q_docs = slice(docs, qn, 1);
    const int64_t Cq = length(qn);
    std::vector<float> out_part(q_part.size()), lse_part(static_cast<size_t>(B) * Hq * Cq, -INFINITY);
    std::vector<float> dq_part(q_part.size(), 0.0f), delta(lse_part.size());
    for (int pass = 0; pass < 2; ++pass) {  // 0: forward over every kv block; 1: backward with the final lse
      if (pass == 1) reference::attention_chunk_delta(delta.data(), dout_part.data(), out_part.data(), B, Cq, Hq, D);
      for (int kn = 0; kn < blocks; ++kn) {
        const auto k_part = slice(k, kn, Hkv * D), v_part = slice(v, kn, Hkv * D);
        const auto kv_docs = slice(docs, kn, 1);
        AttentionChunkParams p;
        p.q = q_part.data();
        p.k = k_part.data();
        p.v = v_part.data();
        p.q_doc_ids = q_docs.data();
        p.kv_doc_ids = kv_docs.data();
        p.B = B;
        p.Cq = Cq;
        p.Ck = length(kn);
        p.H = Hq;
        p.Hkv = Hkv;
        p.D = D;
        p.q_begin = qn * block;
        p.kv_begin = kn * block;
        p.scale = scale;
        p.window = window;
        p.precision = Precision::bf16;
        if (pass == 0) {
          reference::attention_chunk_forward(out_part.data(), lse_part.data(), p, /*accumulate=*/kn > 0);
          continue;
        }
        std::vector<float> dk_part(k_part.size(), 0.0f), dv_part(v_part.size(), 0.0f);
        reference::attention_chunk_backward(dq_part.data(), dk_part.data(), dv_part.data(), dout_part.data(),
                                            lse_part.data(), delta.data(), p);
        for (int b = 0; b < B; ++b)
          for (size_t e = 0; e < static_cast<size_t>(p.Ck) * Hkv * D; ++e) {
            const size_t whole = (static_cast<size_t>(b) * S + kn * block) * Hkv * D + e;
            dk[whole] += dk_part[b * p.Ck * Hkv * D + e];
            dv[whole] += dv_part[b * p.Ck * Hkv * D + e];
          }
      }
    }
    for (int b = 0; b < B; ++b) {
      std::copy_n(out_part.begin() + static_cast<size_t>(b) * Cq * Hq * D, Cq * Hq * D,
                  out.begin() + (static_cast<size_t>(b) * S + qn * block) * Hq * D);
      std::copy_n(dq_part.begin() + static_cast<size_t>(b) * Cq * Hq * D, Cq * Hq * D,
                  dq.begin() + (static_cast<size_t>(b) * S + qn * block) * Hq * D);
      for (int h = 0; h < Hq; ++h)
        std::copy_n(lse_part.begin() + (static_cast<size_t>(b) * Hq + h) * Cq, Cq,
                    lse.begin() + (static_cast<size_t>(b) * Hq + h) * S + qn * block);
    }
  }
  // Forward: fp32 storage between the (at most 3) merges, a few 2^-24: 1e-6.
  EXPECT_LE(relative_error(out, want_out), 1e-6);
  EXPECT_LE(relative_error(lse, want_lse), 1e-6);
  // Backward: the blocks take the merged lse and an fp32 Δ, the whole pass its own lse and a float64
  // Δ, ~1e-7 apart; so now and then (~0.2 of the ~6400 (row, key) pairs per run) one r(P) or r(dS)
  // lands on the other side of a bf16 rounding boundary, a 2^-8 change of one term: ~5e-5 of the
  // norm of dq, dk or dv each. 3e-4 allows several such flips; a wrong mask or offset is O(1).
  EXPECT_LE(relative_error(dq, want_dq), 3e-4);
  EXPECT_LE(relative_error(dk, want_dk), 3e-4);
  EXPECT_LE(relative_error(dv, want_dv), 3e-4);
  std::printf("[ errors   ] bf16 reference, blocks vs whole: out %.3g dq %.3g dk %.3g dv %.3g\n",
              relative_error(out, want_out), relative_error(dq, want_dq), relative_error(dk, want_dk),
              relative_error(dv, want_dv));
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

  const BasicAttentionParams<double> params{.q = q.data(), .k = k.data(), .v = v.data(), .doc_ids = docs, .B = B,
                                            .S = S, .H = Hq, .Hkv = Hkv, .D = D, .scale = scale, .window = c.window};
  std::vector<double> out(q_size), lse(lse_size);
  auto loss = [&]() {
    reference::attention_forward(out.data(), lse.data(), params);
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
  reference::attention_backward(dq.data(), dk.data(), dv.data(), w_out.data(), out_arg.data(), lse.data(), params);

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
