// Reference dense causal attention with GQA, optional document ids and sliding window (the spec; see
// attention.h). One query row at a time: scaled scores over the visible keys (t <= s, within the
// window, same document), softmax by
// max / exp / sum, then out and lse. All arithmetic in float64; slow on purpose (it is the oracle).
// bf16 rounds each product's operands first (attention_chunk.h states which).
#include "fpdt/kernels/reference/attention.h"

#include <cmath>
#include <vector>

#include "fpdt/kernels/reference/attention_chunk.h"
#include "fpdt/kernels/reference/reference_backend.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::reference {

namespace {

// Token t is visible from query token s of batch b.
bool visible(const int32_t* doc_ids, int64_t S, int64_t window, int b, int64_t s, int64_t t) {
  if (!position_visible(s, t, window)) return false;
  return doc_ids == nullptr || doc_ids[b * S + t] == doc_ids[b * S + s];
}

// The value a product reads: x itself in fp32, x rounded to bf16 (through float) in bf16.
template <typename T>
double operand(T x, bool bf16) {
  return bf16 ? fpdt::round_to_bf16(static_cast<float>(x)) : static_cast<double>(x);
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const BasicAttentionParams<T>& params) {
  const T *q = params.q, *k = params.k, *v = params.v;
  const int32_t* doc_ids = params.doc_ids;
  const int B = params.B, H = params.H, Hkv = params.Hkv, D = params.D;
  const int64_t S = params.S, window = params.window;
  const double scale = params.scale;
  const int group = H / Hkv;  // q heads per kv head
  const bool bf16 = params.precision == Precision::bf16;
  std::vector<double> scores(S);  // (S) scaled scores of one query row; only t <= s is used
  std::vector<double> acc(D);
  for (int b = 0; b < B; ++b) {
    for (int head = 0; head < H; ++head) {
      const int kv_head = head / group;
      for (int64_t s = 0; s < S; ++s) {
        const T* q_row = q + ((b * S + s) * H + head) * D;
        double max = -INFINITY;
        for (int64_t t = 0; t <= s; ++t) {
          if (!visible(doc_ids, S, window, b, s, t)) continue;
          const T* k_row = k + ((b * S + t) * Hkv + kv_head) * D;
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += operand(q_row[d], bf16) * operand(k_row[d], bf16);
          scores[t] = scale * dot;
          max = std::fmax(max, scores[t]);
        }
        const double anchor = bf16 ? power_of_two_max(max) : max;  // m* (attention_chunk.h)
        double sum = 0.0;
        for (int d = 0; d < D; ++d) acc[d] = 0.0;
        for (int64_t t = 0; t <= s; ++t) {
          if (!visible(doc_ids, S, window, b, s, t)) continue;
          const double p = std::exp(scores[t] - anchor);  // unnormalised probability P̃
          sum += p;
          const double p_in = operand(p, bf16);
          const T* v_row = v + ((b * S + t) * Hkv + kv_head) * D;
          for (int d = 0; d < D; ++d) acc[d] += p_in * operand(v_row[d], bf16);
        }
        T* out_row = out + ((b * S + s) * H + head) * D;
        for (int d = 0; d < D; ++d) out_row[d] = static_cast<T>(acc[d] / sum);
        lse[(static_cast<int64_t>(b) * H + head) * S + s] = static_cast<T>(anchor + std::log(sum));
      }
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse,
                        const BasicAttentionParams<T>& params) {
  const T *q = params.q, *k = params.k, *v = params.v;
  const int32_t* doc_ids = params.doc_ids;
  const int B = params.B, H = params.H, Hkv = params.Hkv, D = params.D;
  const int64_t S = params.S, window = params.window;
  const double scale = params.scale;
  const int group = H / Hkv;
  const bool bf16 = params.precision == Precision::bf16;
  // Accumulate in float64, round to T at the end. dk and dv sum over the q heads of a group.
  std::vector<double> dq_acc(static_cast<size_t>(B) * S * H * D, 0.0);     // (B, S, H, D)
  std::vector<double> dk_acc(static_cast<size_t>(B) * S * Hkv * D, 0.0);  // (B, S, Hkv, D)
  std::vector<double> dv_acc(static_cast<size_t>(B) * S * Hkv * D, 0.0);  // (B, S, Hkv, D)
  for (int b = 0; b < B; ++b) {
    for (int head = 0; head < H; ++head) {
      const int kv_head = head / group;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t q_index = ((b * S + s) * H + head) * D;
        const T* q_row = q + q_index;
        const T* dout_row = dout + q_index;
        const T* out_row = out + q_index;
        const double row_lse = lse[(static_cast<int64_t>(b) * H + head) * S + s];
        double delta = 0.0;  // Δ = rowsum(dout ∘ out)
        for (int d = 0; d < D; ++d) delta += static_cast<double>(dout_row[d]) * static_cast<double>(out_row[d]);
        for (int64_t t = 0; t <= s; ++t) {
          if (!visible(doc_ids, S, window, b, s, t)) continue;
          const int64_t kv_index = ((b * S + t) * Hkv + kv_head) * D;
          const T* k_row = k + kv_index;
          const T* v_row = v + kv_index;
          double dot = 0.0;
          double dp = 0.0;  // dP = dout · v
          for (int d = 0; d < D; ++d) {
            dot += operand(q_row[d], bf16) * operand(k_row[d], bf16);
            dp += operand(dout_row[d], bf16) * operand(v_row[d], bf16);
          }
          const double p = std::exp(scale * dot - row_lse);  // P = exp(score − lse)
          const double ds = p * (dp - delta);                // dS = P (dP − Δ)
          const double p_in = operand(p, bf16), ds_in = operand(ds, bf16);
          for (int d = 0; d < D; ++d) {
            dv_acc[kv_index + d] += p_in * operand(dout_row[d], bf16);         // dV += Pᵀ dO
            dq_acc[q_index + d] += scale * ds_in * operand(k_row[d], bf16);    // dQ = scale dS K
            dk_acc[kv_index + d] += scale * ds_in * operand(q_row[d], bf16);   // dK = scale dSᵀ Q
          }
        }
      }
    }
  }
  for (size_t i = 0; i < dq_acc.size(); ++i) dq[i] = static_cast<T>(dq_acc[i]);
  for (size_t i = 0; i < dk_acc.size(); ++i) {
    dk[i] = static_cast<T>(dk_acc[i]);
    dv[i] = static_cast<T>(dv_acc[i]);
  }
}

template void attention_forward<float>(float*, float*, const BasicAttentionParams<float>&);
template void attention_forward<double>(double*, double*, const BasicAttentionParams<double>&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                        const BasicAttentionParams<float>&);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const BasicAttentionParams<double>&);

void ReferenceBackend::attention_forward(float* out, float* lse, const AttentionParams& params) {
  reference::attention_forward(out, lse, params);
}

void ReferenceBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                          const float* lse, const AttentionParams& params) {
  reference::attention_backward(dq, dk, dv, dout, out, lse, params);
}

}  // namespace fpdt::kernels::reference
