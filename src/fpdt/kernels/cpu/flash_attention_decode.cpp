// The CPU flash attention's forward for a block of one query row (Cq = 1): decoding, where each new token
// reads the whole KV cache once. The tiled forward (flash_attention_forward.cpp) would pack every kv tile
// into its layouts and compute whole panels of 32 queries for the one it has — 31 of them padding — per
// token; here each kv row is read once, in place — floats, or a bf16 cache's words as they are stored
// (AttentionChunkParams::k_words), half the bytes and no widened copy. Task (b, kv head, 512 keys): the
// scores of the group's q heads, their softmax and P̃·V as one partial state (m, l, O) per q head; then per
// (b, q head) the partials are merged in key order (with the row's own state under accumulate), so the result does not
// depend on the threads. The numerics are the tiled forward's (flash_attention.h): log2 units, in bf16 the
// rounded operands, an integer running max, r(P̃) in the product and the unrounded P̃ in l. Vectors run
// along D; a dot product's 16 lane sums are reduced in one fixed order at either vector width.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/flash_attention_mask.h"
#include "fpdt/kernels/cpu/simd.h"
#include "fpdt/tensor/dtype.h"

namespace fpdt::kernels::cpu::flash {

namespace {

constexpr int64_t kDecodeKeys = 512;  // keys per task: its scores (group × 512 floats) stay in L1/L2
constexpr int kDotLanes = 16;         // a dot product's lane sums: d mod 16, at either vector width

// A K or V value as the products read it: a float rounded to bf16 when `round`, a bf16 word widened (exact).
inline float operand(const float* x, int64_t i, bool round) { return round ? round_to_bf16(x[i]) : x[i]; }
inline float operand(const uint16_t* x, int64_t i, bool) { return std::bit_cast<float>(uint32_t{x[i]} << 16); }

// The next 8 (V = __m256) or 16 (__m512) values of x as one vector, as operand() reads them.
template <class V>
V widen_words(const uint16_t* x);
template <>
inline __m256 widen_words<__m256>(const uint16_t* x) {
  const __m256i words = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
}
#if defined(__AVX512F__)
template <>
inline __m512 widen_words<__m512>(const uint16_t* x) {
  const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
}
#endif
template <class V>
inline V operand_vector(const float* x, bool round) {
  const V v = vload<V>(x);
  return round ? vround_bf16(v) : v;
}
template <class V>
inline V operand_vector(const uint16_t* x, bool) {
  return widen_words<V>(x);
}

// Σ_d a[d]·r(b[d]) over `D` values (a padded with zeros to a multiple of 16, b not): lane sums by d mod 16,
// then the 16 lanes reduced pairwise in one fixed order.
template <typename KV>
inline float dot16(const float* a, const KV* b, int D, bool round) {
  const int whole = D / kDotLanes * kDotLanes;
  alignas(64) float lanes[kDotLanes];
#if defined(__AVX512F__)
  __m512 sum = _mm512_setzero_ps();
  for (int d = 0; d < whole; d += kDotLanes)
    sum = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), operand_vector<__m512>(b + d, round), sum);
  _mm512_store_ps(lanes, sum);
#else
  __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
  for (int d = 0; d < whole; d += kDotLanes) {
    low = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), operand_vector<__m256>(b + d, round), low);
    high = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), operand_vector<__m256>(b + d + 8, round), high);
  }
  _mm256_store_ps(lanes, low);
  _mm256_store_ps(lanes + 8, high);
#endif
  for (int d = whole; d < D; ++d) lanes[d - whole] = std::fma(a[d], operand(b, d, round), lanes[d - whole]);
  for (int width = kDotLanes / 2; width > 0; width /= 2)
    for (int lane = 0; lane < width; ++lane) lanes[lane] += lanes[lane + width];
  return lanes[0];
}

// o[d] += w · r(v[d]), lane by lane.
template <typename KV>
inline void add_scaled(float* o, float w, const KV* v, int D, bool round) {
  int d = 0;
#if defined(__AVX512F__)
  const __m512 weight = _mm512_set1_ps(w);
  for (; d + 16 <= D; d += 16)
    _mm512_storeu_ps(o + d, _mm512_fmadd_ps(weight, operand_vector<__m512>(v + d, round), _mm512_loadu_ps(o + d)));
#endif
  const __m256 weight8 = _mm256_set1_ps(w);
  for (; d + 8 <= D; d += 8)
    _mm256_storeu_ps(o + d, _mm256_fmadd_ps(weight8, operand_vector<__m256>(v + d, round), _mm256_loadu_ps(o + d)));
  for (; d < D; ++d) o[d] = std::fma(w, operand(v, d, round), o[d]);
}

// One task's partial state per q head of its group: [m, l, O (D)], m in log2 units (−inf: it saw nothing).
inline size_t partial_floats(int D) { return 2 + static_cast<size_t>(D); }

// forward_single_query over K and V rows of floats or of bf16 words.
template <typename KV>
void single_query(float* out, float* lse, const AttentionChunkParams& p, bool accumulate, const KV* keys,
                  const KV* values) {
  const int D = p.D, group = p.H / p.Hkv;
  const bool bf16 = p.precision == Precision::bf16;
  const float qk_scale = static_cast<float>(p.scale) * kLog2e;
  const int64_t segments = ceil_div(p.Ck, kDecodeKeys);
  const int64_t tasks = static_cast<int64_t>(p.B) * p.Hkv * segments;
  const size_t padded_d = round_up16(static_cast<size_t>(D));
  // per thread: the group's q rows (padded with zeros to 16 values) and their scores over a task's keys
  const size_t per_thread = round_up16(group * (padded_d + kDecodeKeys));
  const int threads = omp_get_max_threads();
  const size_t partial = partial_floats(D);
  float* scratch = kernel_workspace().floats(per_thread * threads + static_cast<size_t>(tasks) * group * partial);
  float* partials = scratch + per_thread * threads;  // [task][q head of the group][m, l, O]
  // Keys the query sees by position: [first_key, end_key) of the block (causal, and the window's start).
  const int64_t query = p.q_begin;
  const int64_t end_key = std::min(p.Ck, query - p.kv_begin + 1);
  const int64_t first_key = p.window > 0 ? std::max<int64_t>(0, query - p.window + 1 - p.kv_begin) : 0;
  run_tasks(tasks, scratch, per_thread, [&](int64_t t, float* mine) {
    const int64_t segment = t % segments;
    const int kv_head = static_cast<int>(t / segments % p.Hkv), b = static_cast<int>(t / segments / p.Hkv);
    float* q_rows = mine;                         // [q head of the group][padded_d]
    float* scores = mine + group * padded_d;      // [q head of the group][kDecodeKeys]
    const int64_t lo = std::max(first_key, segment * kDecodeKeys);
    const int64_t hi = std::min(end_key, (segment + 1) * kDecodeKeys);
    const int64_t n = std::max<int64_t>(0, hi - lo);
    for (int g = 0; g < group; ++g) {
      const float* q = p.q + (static_cast<int64_t>(b) * p.H + kv_head * group + g) * D;
      float* row = q_rows + g * padded_d;
      for (int d = 0; d < D; ++d) row[d] = bf16 ? round_to_bf16(q[d]) : q[d] * qk_scale;
      std::fill(row + D, row + padded_d, 0.0f);
    }
    const int32_t query_doc = p.q_doc_ids != nullptr ? p.q_doc_ids[b] : 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = lo + j;
      const KV* k = keys + ((static_cast<int64_t>(b) * p.Ck + key) * p.Hkv + kv_head) * D;
      const bool visible = p.q_doc_ids == nullptr || p.kv_doc_ids[b * p.Ck + key] == query_doc;
      for (int g = 0; g < group; ++g)
        scores[g * kDecodeKeys + j] = visible ? dot16(q_rows + g * padded_d, k, D, bf16) : -kInf;
    }
    for (int g = 0; g < group; ++g) {
      float* state = partials + (static_cast<size_t>(t) * group + g) * partial;
      float* o = state + 2;
      std::fill(o, o + D, 0.0f);
      const float* s = scores + g * kDecodeKeys;
      float top = -kInf;
      for (int64_t j = 0; j < n; ++j) top = std::max(top, s[j]);
      state[0] = top == -kInf ? -kInf : bf16 ? std::ceil(top * qk_scale) : top;  // m
      state[1] = 0.0f;                                                          // l
      if (top == -kInf) continue;
      const float m = state[0];
      float* weights = scores + g * kDecodeKeys;  // P̃, over the scores
      int64_t j = 0;
      for (; j + kLanes <= n; j += kLanes) {
        const Vec x = vload<Vec>(s + j);
        vstore(weights + j, vexp2(bf16 ? vfma(x, vset<Vec>(qk_scale), vset<Vec>(-m)) : vsub(x, vset<Vec>(m))));
      }
      for (; j < n; ++j) weights[j] = std::exp2(bf16 ? std::fma(s[j], qk_scale, -m) : s[j] - m);
      for (j = 0; j < n; ++j) {
        if (weights[j] == 0.0f) continue;  // adds nothing: another document's key (2^−inf), or one far below m
        state[1] += weights[j];
        const KV* v = values + ((static_cast<int64_t>(b) * p.Ck + lo + j) * p.Hkv + kv_head) * D;
        add_scaled(o, bf16 ? round_to_bf16(weights[j]) : weights[j], v, D, bf16);
      }
    }
  });
  // Per (b, q head): the row's own state under accumulate (out = O / l, lse = (m + log2 l)·ln 2, m an
  // integer in bf16), then the partials in key order, each scaled by 2^(its m − the common max).
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h) {
      float* out_row = out + (static_cast<int64_t>(b) * p.H + h) * D;
      float& row_lse = lse[static_cast<int64_t>(b) * p.H + h];
      const int kv_head = h / group, g = h % group;
      auto state_of = [&](int64_t segment) {
        const int64_t t = (static_cast<int64_t>(b) * p.Hkv + kv_head) * segments + segment;
        return partials + (static_cast<size_t>(t) * group + g) * partial;
      };
      const bool resume = accumulate && row_lse > -kInf;
      const float lse2 = resume ? row_lse * kLog2e : -kInf;
      const float own_m = bf16 ? std::ceil(lse2) : lse2;
      float m = own_m;
      for (int64_t segment = 0; segment < segments; ++segment) m = std::max(m, state_of(segment)[0]);
      if (m == -kInf) {  // nothing visible, now or before
        if (!accumulate) {
          std::fill(out_row, out_row + D, 0.0f);
          row_lse = -kInf;
        }
        continue;
      }
      float l = 0.0f;
      float* o = scratch;  // (D) the merged O: the tasks' scratch is free now
      std::fill(o, o + D, 0.0f);
      if (resume) {  // O = out · l, at the common max
        l = (bf16 ? std::exp2(lse2 - own_m) : 1.0f) * std::exp2(own_m - m);
        for (int d = 0; d < D; ++d) o[d] = out_row[d] * l;
      }
      bool added = false;
      for (int64_t segment = 0; segment < segments; ++segment) {
        const float* state = state_of(segment);
        if (state[0] == -kInf) continue;
        const float alpha = std::exp2(state[0] - m);
        l = std::fma(state[1], alpha, l);
        for (int d = 0; d < D; ++d) o[d] = std::fma(state[2 + d], alpha, o[d]);
        added = true;
      }
      if (!added) continue;  // this block added nothing to the row (accumulate: it stays as it was)
      const float inverse = 1.0f / l;
      for (int d = 0; d < D; ++d) out_row[d] = o[d] * inverse;
      row_lse = static_cast<float>((static_cast<double>(m) + std::log2(static_cast<double>(l))) * kLn2);
    }
}

}  // namespace

void forward_single_query(float* out, float* lse, const AttentionChunkParams& p, bool accumulate) {
  if (p.k_words != nullptr)
    single_query(out, lse, p, accumulate, p.k_words, p.v_words);
  else
    single_query(out, lse, p, accumulate, p.k, p.v);
}

}  // namespace fpdt::kernels::cpu::flash
