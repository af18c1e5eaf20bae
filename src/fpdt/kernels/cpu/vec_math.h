// Vectorised maths shared by the AVX2 kernels (activations, cross-entropy). Header-only, inline.
#pragma once

#include <immintrin.h>

#include <cmath>

namespace fpdt::kernels::cpu {

// exp(x) for 8 floats: x = n ln2 + r, |r| <= ln2 / 2, e^r by the Cephes degree-6 polynomial, 2^n
// through the exponent bits. Returns +inf above 88 and 0 below −87 (true values > 1.6e38 and
// < 1.7e−38); NaN propagates.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  __m256 clamped = _mm256_min_ps(hi, _mm256_max_ps(lo, x));  // operand order keeps NaN
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), clamped);  // ln2 split hi + lo
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
  result = _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), overflow);
  return _mm256_andnot_ps(underflow, result);
}

}  // namespace fpdt::kernels::cpu
