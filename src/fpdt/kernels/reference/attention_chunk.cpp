// Reference chunk-pair attention (see attention_chunk.h): one query row at a time, float64 inside;
// with Precision::bf16 the operands of each product are rounded to bf16 first, as the header says.
#include "fpdt/kernels/reference/attention_chunk.h"

#include <cmath>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/reference/reference_backend.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::reference {

namespace {

bool visible(const AttentionChunkParams& p, int b, int64_t i, int64_t j) {
  if (!position_visible(p.q_begin + i, p.kv_begin + j, p.window)) return false;
  return p.q_doc_ids == nullptr || p.q_doc_ids[b * p.Cq + i] == p.kv_doc_ids[b * p.Ck + j];
}

// The value a product reads: x itself in fp32, rounded to bf16 in bf16.
double operand(double x, bool bf16) { return bf16 ? fpdt::round_to_bf16(static_cast<float>(x)) : x; }

double dot(const float* a, const float* b, int D, bool bf16) {
  double sum = 0.0;
  for (int d = 0; d < D; ++d) sum += operand(a[d], bf16) * operand(b[d], bf16);
  return sum;
}

}  // namespace

double power_of_two_max(double m) {
  constexpr double kLn2 = 0.6931471805599453;
  return kLn2 * std::ceil(m / kLn2);
}

void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  if (p.k_words != nullptr) {  // K and V as bf16 words: their values, widened exactly
    const size_t n = static_cast<size_t>(kv_values(p));
    std::vector<float> widened(2 * n);
    for (size_t i = 0; i < n; ++i) {
      widened[i] = fpdt::bf16_to_float(p.k_words[i]);
      widened[n + i] = fpdt::bf16_to_float(p.v_words[i]);
    }
    attention_chunk_forward(out, lse, with_widened_kv(p, widened.data()), accumulate);
    return;
  }
  const int group = p.H / p.Hkv;
  const bool bf16 = p.precision == Precision::bf16;
  std::vector<double> scores(static_cast<size_t>(p.Ck));
  std::vector<double> acc(static_cast<size_t>(p.D));
  for (int b = 0; b < p.B; ++b)
    for (int head = 0; head < p.H; ++head)
      for (int64_t i = 0; i < p.Cq; ++i) {
        const float* q_row = p.q + ((b * p.Cq + i) * p.H + head) * p.D;
        float* out_row = out + ((b * p.Cq + i) * p.H + head) * p.D;
        float& row_lse = lse[(b * p.H + head) * p.Cq + i];
        double max = -INFINITY;
        for (int64_t j = 0; j < p.Ck; ++j) {
          if (!visible(p, b, i, j)) continue;
          scores[j] = p.scale * dot(q_row, p.k + ((b * p.Ck + j) * p.Hkv + head / group) * p.D, p.D, bf16);
          max = std::fmax(max, scores[j]);
        }
        if (max == -INFINITY) {  // no visible key: the empty softmax
          if (!accumulate) {
            for (int d = 0; d < p.D; ++d) out_row[d] = 0.0f;
            row_lse = -INFINITY;
          }
          continue;
        }
        const double anchor = bf16 ? power_of_two_max(max) : max;  // m*
        double sum = 0.0;  // l, from the unrounded P̃
        for (int d = 0; d < p.D; ++d) acc[d] = 0.0;
        for (int64_t j = 0; j < p.Ck; ++j) {
          if (!visible(p, b, i, j)) continue;
          const double weight = std::exp(scores[j] - anchor);  // P̃_j
          sum += weight;
          const double rounded_weight = operand(weight, bf16);
          const float* v_row = p.v + ((b * p.Ck + j) * p.Hkv + head / group) * p.D;
          for (int d = 0; d < p.D; ++d) acc[d] += rounded_weight * operand(v_row[d], bf16);
        }
        const double block_lse = anchor + std::log(sum);
        if (!accumulate || row_lse == -INFINITY) {
          for (int d = 0; d < p.D; ++d) out_row[d] = static_cast<float>(acc[d] / sum);
          row_lse = static_cast<float>(block_lse);
          continue;
        }
        const double old_lse = row_lse;
        const double new_lse = std::fmax(old_lse, block_lse) + std::log1p(std::exp(-std::fabs(old_lse - block_lse)));
        const double keep = std::exp(old_lse - new_lse), add = std::exp(block_lse - new_lse);
        for (int d = 0; d < p.D; ++d) out_row[d] = static_cast<float>(out_row[d] * keep + (acc[d] / sum) * add);
        row_lse = static_cast<float>(new_lse);
      }
}

void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H, int D) {
  for (int b = 0; b < B; ++b)
    for (int head = 0; head < H; ++head)
      for (int64_t i = 0; i < Cq; ++i) {
        const int64_t row = ((b * Cq + i) * H + head) * D;
        delta[(b * H + head) * Cq + i] = static_cast<float>(dot(dout + row, out + row, D, /*bf16=*/false));
      }
}

void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                              const float* delta, const AttentionChunkParams& p) {
  FPDT_CHECK(p.k_words == nullptr, "attention", "K and V as bf16 words are for the forward only", "");
  const int group = p.H / p.Hkv;
  const bool bf16 = p.precision == Precision::bf16;
  std::vector<double> dq_row(static_cast<size_t>(p.D));
  for (int b = 0; b < p.B; ++b)
    for (int head = 0; head < p.H; ++head)
      for (int64_t i = 0; i < p.Cq; ++i) {
        const int64_t row = ((b * p.Cq + i) * p.H + head) * p.D;
        const double row_lse = lse[(b * p.H + head) * p.Cq + i];
        const double row_delta = delta[(b * p.H + head) * p.Cq + i];
        if (row_lse == -INFINITY) continue;
        for (int d = 0; d < p.D; ++d) dq_row[d] = 0.0;
        for (int64_t j = 0; j < p.Ck; ++j) {
          if (!visible(p, b, i, j)) continue;
          const int64_t kv_row = ((b * p.Ck + j) * p.Hkv + head / group) * p.D;
          const double prob = std::exp(p.scale * dot(p.q + row, p.k + kv_row, p.D, bf16) - row_lse);  // P
          const double dprob = dot(dout + row, p.v + kv_row, p.D, bf16);                              // dP
          const double dscore = prob * (dprob - row_delta);                                            // dS
          const double prob_in = operand(prob, bf16), dscore_in = operand(dscore, bf16);
          for (int d = 0; d < p.D; ++d) {
            dv[kv_row + d] += static_cast<float>(prob_in * operand(dout[row + d], bf16));
            dk[kv_row + d] += static_cast<float>(p.scale * dscore_in * operand(p.q[row + d], bf16));
            dq_row[d] += p.scale * dscore_in * operand(p.k[kv_row + d], bf16);
          }
        }
        for (int d = 0; d < p.D; ++d) dq[row + d] += static_cast<float>(dq_row[d]);
      }
}

void ReferenceBackend::attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params,
                                               bool accumulate) {
  reference::attention_chunk_forward(out, lse, params, accumulate);
}

void ReferenceBackend::attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq,
                                             int H, int D) {
  reference::attention_chunk_delta(delta, dout, out, B, Cq, H, D);
}

void ReferenceBackend::attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                                const float* delta, const AttentionChunkParams& params) {
  reference::attention_chunk_backward(dq, dk, dv, dout, lse, delta, params);
}

}  // namespace fpdt::kernels::reference
