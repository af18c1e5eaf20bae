// The parameters and constants of the kernel ops, shared by the Backend interface (backend.h), every
// backend and the reference kernels (the spec). No code that computes on tensors: the model, the
// pipeline and a CUDA translation unit can all include it alone.
#pragma once

#include <cstdint>

namespace fpdt::kernels {

// The arithmetic of a run's GEMMs and attention (the run spec's precision word; DESIGN.md §4). fp32:
// everything fp32. bf16, the standard mixed-precision recipe: each product's inputs are rounded to
// bf16 (round_to_bf16, dtype.h) and accumulate in fp32 — linear's x, w and dout; attention's q, k, v,
// the probabilities P and dO, and dS in the backward — while biases, softmax statistics, LSE, Δ, norms,
// losses and every gradient accumulator stay fp32. The ops that take it state it in backend_ops.inc;
// every other op is fp32 in both. The pipeline rounds the activations it keeps (round_to_bf16 op).
enum class Precision : uint8_t { fp32, bf16 };

// A linear layer's weight matrix w (O, I) as the linear ops read it: its fp32 values and, in a bf16 run,
// the bf16 words of the run's working copy (pipeline/model_states.h: round_to_bf16 of the masters, made
// once after each update, and what ZeRO-3 gathers). A bf16 product reads the words where they are given
// — no conversion per call — and rounds the values otherwise; an fp32 product reads the values. Where
// the words are given the values may be absent or stale (ZeRO-3 gathers only the words of a matrix).
struct WeightMatrix {
  const float* values = nullptr;  // (O, I) fp32
  const uint16_t* bf16 = nullptr; // (O, I) bf16 words, or null
  WeightMatrix() = default;
  WeightMatrix(const float* values_) : values(values_) {}  // NOLINT(google-explicit-constructor): an fp32 matrix
  WeightMatrix(const float* values_, const uint16_t* bf16_) : values(values_), bf16(bf16_) {}
  // The rows from `first_row` on of a matrix of I columns (the k rows of a fused q | k | v matrix).
  WeightMatrix rows_from(int64_t first_row, int I) const {
    const int64_t offset = first_row * I;
    return WeightMatrix(values ? values + offset : nullptr, bf16 ? bf16 + offset : nullptr);
  }
  // Whether a product of `precision` reads the bf16 words.
  bool reads_bf16(Precision precision) const { return precision == Precision::bf16 && bf16 != nullptr; }
};

// The dimensions of a linear layer's products: x (N, I), w (O, I), out and dout (N, O).
struct LinearShape {
  int64_t N = 0;  // rows: tokens
  int I = 0;      // input features
  int O = 0;      // output features
};

// Target id of a position that adds nothing to the loss (PyTorch's ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;

// One AdamW step (reference/adamw.h): torch.optim.AdamW's hyper-parameters; step counts from 1.
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

// Rotary position embedding (reference/rope.h): pair i of a token at position p turns by the angle
// p · inv_freq[i], and both cos and sin are multiplied by attention_scaling. The table is a parameter,
// not a tensor: it lives in host memory on every backend. model/rope.h makes it from a config.
struct RopeParams {
  const double* inv_freq = nullptr;  // (rotary_dim / 2)
  double attention_scaling = 1.0;    // YaRN's mscale; 1 for every other RoPE type
  int rotary_dim = 0;                // leading dims of each head that rotate: even, ≤ D
};

// Full-sequence causal attention (reference/attention.h; the Backend's attention_forward and
// attention_backward): queries and keys both at positions 0..S−1 of each sequence, with one set of
// document ids. GQA: q head j reads kv head j / (H / Hkv). Key t is visible from query s iff
// position_visible(s, t, window) and, with document ids, doc_ids[b, s] == doc_ids[b, t]. T is float on
// every backend (AttentionParams); the float64 reference also takes double.
template <typename T>
struct BasicAttentionParams {
  const T* q = nullptr;              // (B, S, H, D)
  const T* k = nullptr;              // (B, S, Hkv, D)
  const T* v = nullptr;              // (B, S, Hkv, D)
  const int32_t* doc_ids = nullptr;  // (B, S) or null
  int B = 0;
  int64_t S = 0;       // tokens of each sequence
  int H = 0;           // q heads
  int Hkv = 0;         // kv heads, H % Hkv == 0
  int D = 0;           // head dim
  double scale = 0.0;  // softmax scale, usually 1/sqrt(D)
  int64_t window = 0;  // sliding window in tokens; 0: none
  Precision precision = Precision::fp32;  // the products' input rounding (Precision above)
};
using AttentionParams = BasicAttentionParams<float>;

// One (q block, kv block) pair of attention (reference/attention_chunk.h). GQA: q head j reads kv
// head j / (H / Hkv). Key j is visible from query i iff position_visible(q_begin + i, kv_begin + j,
// window) and, with document ids, q_doc_ids[b, i] == kv_doc_ids[b, j].
struct AttentionChunkParams {
  const float* q = nullptr;             // (B, Cq, H, D)
  const float* k = nullptr;             // (B, Ck, Hkv, D)
  const float* v = nullptr;             // (B, Ck, Hkv, D)
  const int32_t* q_doc_ids = nullptr;   // (B, Cq) or null (then kv_doc_ids is null too)
  const int32_t* kv_doc_ids = nullptr;  // (B, Ck) or null
  int B = 0;
  int64_t Cq = 0;        // q tokens in the block
  int64_t Ck = 0;        // kv tokens in the block
  int H = 0;             // q heads
  int Hkv = 0;           // kv heads, H % Hkv == 0
  int D = 0;             // head dim
  int64_t q_begin = 0;   // global position of q token 0
  int64_t kv_begin = 0;  // global position of kv token 0
  double scale = 0.0;    // softmax scale, usually 1/sqrt(D)
  int64_t window = 0;    // sliding window in tokens; 0: none
  Precision precision = Precision::fp32;  // the products' input rounding (Precision above)
  // K and V given as bf16 words instead of k and v (a bf16 KV cache's rows, read as they are stored: the
  // value of word w is the float with w in its upper half): both set, k and v null. Forward only
  // (attention_chunk_forward); every backend takes them, the same as their widened floats.
  const uint16_t* k_words = nullptr;  // (B, Ck, Hkv, D)
  const uint16_t* v_words = nullptr;  // (B, Ck, Hkv, D)
};

// The values of K (and of V) in a block: B·Ck·Hkv·D.
inline int64_t kv_values(const AttentionChunkParams& p) { return static_cast<int64_t>(p.B) * p.Ck * p.Hkv * p.D; }
// A block of K and V words as the same block over floats, once its caller has widened the words into
// `widened` (K, then V: 2·kv_values(p) floats) — for a kernel that reads floats only.
inline AttentionChunkParams with_widened_kv(const AttentionChunkParams& p, const float* widened) {
  AttentionChunkParams floats = p;
  floats.k = widened;
  floats.v = widened + kv_values(p);
  floats.k_words = floats.v_words = nullptr;
  return floats;
}

// The attention mask by position, one rule for every backend and op: the key at global position k is
// visible from the query at q iff k ≤ q and, with a window W > 0, q − k < W — a query sees itself
// and the W − 1 keys before it (Hugging Face's sliding_window for Mistral and Qwen2).
constexpr bool position_visible(int64_t q, int64_t k, int64_t window) {
  return k <= q && (window == 0 || q - k < window);
}

// Whether some key of positions [kv_begin, kv_begin + Ck) is visible by position from some query of
// [q_begin, q_begin + Cq). A block for which this is false computes nothing (and need not be fetched).
constexpr bool block_has_visible_pair(int64_t q_begin, int64_t Cq, int64_t kv_begin, int64_t Ck, int64_t window) {
  if (Cq <= 0 || Ck <= 0) return false;
  return kv_begin <= q_begin + Cq - 1 && (window == 0 || q_begin - (kv_begin + Ck - 1) < window);
}

// Full-sequence attention as one block: q block = kv block = the whole sequence (positions 0..S−1, the
// same document ids) — how the cpu and cuda backends run attention_forward / attention_backward.
inline AttentionChunkParams whole_sequence_block(const AttentionParams& whole) {
  AttentionChunkParams p;
  p.q = whole.q;
  p.k = whole.k;
  p.v = whole.v;
  p.q_doc_ids = whole.doc_ids;
  p.kv_doc_ids = whole.doc_ids;
  p.B = whole.B;
  p.Cq = p.Ck = whole.S;
  p.H = whole.H;
  p.Hkv = whole.Hkv;
  p.D = whole.D;
  p.scale = whole.scale;
  p.window = whole.window;
  p.precision = whole.precision;
  return p;
}

}  // namespace fpdt::kernels
