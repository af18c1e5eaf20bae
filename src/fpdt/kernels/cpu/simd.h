// The CPU backend's one SIMD layer: a small vocabulary of vector operations over the AVX2 vector of 8
// floats (__m256) and, where the build targets AVX-512, the one of 16 (__m512), with the vector exp and
// exp2 written once over it. `Vec` is the widest vector (the attention kernels and the activations run
// on it); the other elementwise kernels (cross-entropy, norms, AdamW) stay on __m256. Every operation is
// exact IEEE arithmetic lane by lane, so a kernel gives the same results at either width.
#pragma once

#include <immintrin.h>

#include <cstdint>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "fpdt's CPU kernels need AVX2 and FMA: build with -mavx2 -mfma (FPDT_NATIVE=OFF) or on an AVX2 machine"
#endif

// GCC 12's AVX-512 intrinsics initialise their "undefined" pass-through operands from themselves, which
// its own -Wmaybe-uninitialized then reports at every inlined use (GCC bug 105593, fixed in GCC 13).
// (Applies to every file that includes this header.)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace fpdt::kernels::cpu {

// The widest vector the build targets, its int32 vector and its lane mask (from comparisons).
#if defined(__AVX512F__)
using Vec = __m512;
using VecI = __m512i;
using Mask = __mmask16;
constexpr int kLanes = 16;
#else
using Vec = __m256;
using VecI = __m256i;
using Mask = __m256i;  // all ones / all zeros per lane
constexpr int kLanes = 8;
#endif

// Operations that make a vector from memory or a scalar name its type: vset<Vec>(0.0f).
template <class V>
V vload(const float* p);
template <class V>
V vset(float x);
template <class V>
V vbroadcast(const float* p);  // vset(*p), straight from memory
template <class V>
auto iload(const int32_t* p);  // the int32 vector of V's width
template <class V>
auto iset(int32_t x);
template <class V>
auto ilanes(int32_t first);  // first, first + 1, …

// The operations whose intrinsics differ only by their prefix (_mm256_ or _mm512_), stamped out for
// each width: V the float vector, VI its int32 vector, P the prefix, BITS its width in bits.
#define FPDT_SIMD_OPERATIONS(V, VI, P, BITS)                                                                        \
  template <> inline V vload<V>(const float* p) { return P##_loadu_ps(p); }                                         \
  template <> inline V vset<V>(float x) { return P##_set1_ps(x); }                                                  \
  template <> inline auto iload<V>(const int32_t* p) { return P##_loadu_si##BITS(reinterpret_cast<const VI*>(p)); } \
  template <> inline auto iset<V>(int32_t x) { return P##_set1_epi32(x); }                                          \
  template <> inline auto ilanes<V>(int32_t first) {                                                                \
    alignas(64) static constexpr int32_t kIota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};        \
    return P##_add_epi32(iload<V>(kIota), P##_set1_epi32(first));                                                   \
  }                                                                                                                 \
  inline void vstore(float* p, V v) { P##_storeu_ps(p, v); }                                                        \
  inline V vfma(V a, V b, V c) { return P##_fmadd_ps(a, b, c); }   /* a·b + c */                                    \
  inline V vfnma(V a, V b, V c) { return P##_fnmadd_ps(a, b, c); } /* c − a·b */                                    \
  inline V vmul(V a, V b) { return P##_mul_ps(a, b); }                                                              \
  inline V vdiv(V a, V b) { return P##_div_ps(a, b); }                                                              \
  inline V vadd(V a, V b) { return P##_add_ps(a, b); }                                                              \
  inline V vsub(V a, V b) { return P##_sub_ps(a, b); }                                                              \
  inline V vmax(V a, V b) { return P##_max_ps(a, b); } /* b where either is NaN */                                  \
  inline V vmin(V a, V b) { return P##_min_ps(a, b); } /* b where either is NaN */                                  \
  inline VI imul(VI a, VI b) { return P##_mullo_epi32(a, b); }                                                      \
  inline VI imin(VI a, VI b) { return P##_min_epi32(a, b); }

FPDT_SIMD_OPERATIONS(__m256, __m256i, _mm256, 256)
#if defined(__AVX512F__)
FPDT_SIMD_OPERATIONS(__m512, __m512i, _mm512, 512)
#endif
#undef FPDT_SIMD_OPERATIONS

// The operations named differently at the two widths; AVX2's masks are vectors, AVX-512's bits.
constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
constexpr int kRoundUp = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
template <>
inline __m256 vbroadcast<__m256>(const float* p) {
  return _mm256_broadcast_ss(p);
}
inline __m256 vround(__m256 x) { return _mm256_round_ps(x, kRoundNearest); }
inline __m256 vceil(__m256 x) { return _mm256_round_ps(x, kRoundUp); }
// p · 2^n for integral n in [−127, 127]: through the exponent bits of 2^n (n = −127: 0)...
inline __m256 vtimes_pow2(__m256 p, __m256 n) {
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
inline __m256 vgather(const float* base, __m256i index) { return _mm256_i32gather_ps(base, index, 4); }  // base[index]
inline __m256i greater(__m256i a, __m256i b) { return _mm256_cmpgt_epi32(a, b); }
inline __m256i equal(__m256i a, __m256i b) { return _mm256_cmpeq_epi32(a, b); }
inline __m256i greater(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
inline __m256i equal(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
inline __m256i both(__m256i a, __m256i b) { return _mm256_and_si256(a, b); }
inline __m256 select(__m256i m, __m256 yes, __m256 no) { return _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(m)); }
inline __m256 zero_unless(__m256i m, __m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }
inline __m256 zero_where(__m256i m, __m256 v) { return _mm256_andnot_ps(_mm256_castsi256_ps(m), v); }
#if defined(__AVX512F__)
template <>
inline __m512 vbroadcast<__m512>(const float* p) {
  return _mm512_set1_ps(*p);
}
inline __m512 vround(__m512 x) { return _mm512_roundscale_ps(x, kRoundNearest); }
inline __m512 vceil(__m512 x) { return _mm512_roundscale_ps(x, kRoundUp); }
// ...or in one vscalefps, zeroed where n = −127: the same bits (one rounding of the exact p · 2^n).
inline __m512 vtimes_pow2(__m512 p, __m512 n) {
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(n, _mm512_set1_ps(-127.0f), _CMP_GT_OQ), p, n);
}
inline __m512 vgather(const float* base, __m512i index) { return _mm512_i32gather_ps(index, base, 4); }  // base[index]
inline __mmask16 greater(__m512i a, __m512i b) { return _mm512_cmpgt_epi32_mask(a, b); }
inline __mmask16 equal(__m512i a, __m512i b) { return _mm512_cmpeq_epi32_mask(a, b); }
inline __mmask16 greater(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline __mmask16 equal(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline __mmask16 both(__mmask16 a, __mmask16 b) { return a & b; }
inline __m512 select(__mmask16 m, __m512 yes, __m512 no) { return _mm512_mask_blend_ps(m, no, yes); }
inline __m512 zero_unless(__mmask16 m, __m512 v) { return _mm512_maskz_mov_ps(m, v); }
inline __m512 zero_where(__mmask16 m, __m512 v) { return _mm512_maskz_mov_ps(static_cast<__mmask16>(~m), v); }
#endif

// x rounded to the nearest bf16 value, ties to even, kept in the fp32 lane: dtype.h's round_to_bf16
// lane by lane (add 0x7fff plus the kept part's lowest bit, drop the low 16 bits; a NaN stays a quiet
// NaN). The rounded-operand products of the bf16 attention (flash_attention.h) read these.
#define FPDT_SIMD_ROUND_BF16(V, P, BITS)                                                                    \
  inline V vround_bf16(V x) {                                                                               \
    const auto bits = P##_castps_si##BITS(x);                                                               \
    const auto lowest_kept = P##_and_si##BITS(P##_srli_epi32(bits, 16), P##_set1_epi32(1));                 \
    const auto sum = P##_add_epi32(bits, P##_add_epi32(lowest_kept, P##_set1_epi32(0x7fff)));               \
    const V rounded = P##_castsi##BITS##_ps(P##_and_si##BITS(sum, P##_set1_epi32(~0xffff)));                \
    const V quiet_nan = P##_castsi##BITS##_ps(                                                              \
        P##_or_si##BITS(P##_and_si##BITS(bits, P##_set1_epi32(~0xffff)), P##_set1_epi32(0x00400000)));      \
    return select(equal(x, x), rounded, quiet_nan); /* x == x: not NaN */                                   \
  }
FPDT_SIMD_ROUND_BF16(__m256, _mm256, 256)
#if defined(__AVX512F__)
FPDT_SIMD_ROUND_BF16(__m512, _mm512, 512)
#endif
#undef FPDT_SIMD_ROUND_BF16

// c[0]·x^(N−1) + c[1]·x^(N−2) + … + c[N−1] by Horner's rule, one FMA a coefficient.
template <class V, int N>
inline V polynomial(V x, const float (&c)[N]) {
  V p = vset<V>(c[0]);
#pragma GCC unroll 8
  for (int i = 1; i < N; ++i) p = vfma(p, x, vset<V>(c[i]));
  return p;
}

// exp2(x): 2^x = 2^n · 2^f, n = round(x), f ∈ [−½, ½], 2^f by the Cephes exp2f polynomial (relative
// error ≤ 2e-7). x ≤ −127 (including −inf) gives exactly 0; for inputs up to ~0 (the attention's
// scores minus a running max or the final lse), where no overflow can happen. NaN gives 0.
// AVX2's 2^n by exponent bits needs n ≥ −127, so x is clamped there first; AVX-512's vscalefps is
// masked to 0 wherever n ≤ −127 or is NaN (−inf and NaN make f NaN too, masked with them), which gives
// the clamp's bits without it: one operation of ~10 less in the attention's every score.
template <class V>
inline V vexp2(V x) {
  static constexpr float kExp2[] = {1.535336188319500e-4f, 1.339887440266574e-3f, 9.618437357674640e-3f,
                                    5.550332471162809e-2f, 2.402264791363012e-1f, 6.931472028550421e-1f, 1.0f};
  if constexpr (sizeof(V) == sizeof(__m256)) x = vmax(x, vset<V>(-127.0f));  // AVX2
  const V n = vround(x);
  return vtimes_pow2(polynomial(vsub(x, n), kExp2), n);
}

// exp(x): x = n ln2 + r, |r| ≤ ln2 / 2 (ln2 split in two for an exact r), e^r by the Cephes expf
// polynomial (≈ 2 ulp), 2^n through the exponent bits. Returns +inf above 88 and 0 below −87 (true
// values > 1.6e38 and < 1.7e−38); NaN propagates.
template <class V>
inline V vexp(V x) {
  static constexpr float kExpRemainder[] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
  const V hi = vset<V>(88.0f), lo = vset<V>(-87.0f);
  const auto overflow = greater(x, hi);
  const auto underflow = greater(lo, x);
  const V clamped = vmin(hi, vmax(lo, x));  // operand order keeps NaN
  const V n = vround(vmul(clamped, vset<V>(1.44269504088896341f)));
  V r = vfnma(n, vset<V>(0.693359375f), clamped);
  r = vfnma(n, vset<V>(-2.12194440e-4f), r);
  const V p = vadd(vfma(polynomial(r, kExpRemainder), vmul(r, r), r), vset<V>(1.0f));  // e^r = 1 + r + r²·P(r)
  return zero_where(underflow, select(overflow, vset<V>(__builtin_inff()), vtimes_pow2(p, n)));
}

}  // namespace fpdt::kernels::cpu
