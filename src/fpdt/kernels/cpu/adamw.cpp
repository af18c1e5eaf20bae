// Fast fp32 AdamW step (semantics: reference/adamw.h, torch.optim.AdamW). The scalars (bias
// corrections, step size) are computed once in double; each element is updated in float with AVX2
// and FMA, eight at a time, and the tail runs the very same float operations, so an element's result
// does not depend on where it sits in the array.
#include <cmath>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/simd.h"

namespace fpdt::kernels::cpu {

namespace {
constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
}  // namespace

void CpuBackend::adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                              const AdamWParams& params) {
  const double step = static_cast<double>(params.step);
  const float decay = static_cast<float>(1.0 - params.lr * params.weight_decay);
  const float beta1 = static_cast<float>(params.beta1);
  const float one_minus_beta1 = static_cast<float>(1.0 - params.beta1);
  const float beta2 = static_cast<float>(params.beta2);
  const float one_minus_beta2 = static_cast<float>(1.0 - params.beta2);
  const float step_size = static_cast<float>(params.lr / (1.0 - std::pow(params.beta1, step)));
  const float inv_bias_correction2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(params.beta2, step)));
  const float eps = static_cast<float>(params.eps);

  const int64_t blocks = n / 8;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i = b * 8;
    const __m256 g = _mm256_loadu_ps(grad + i);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), _mm256_set1_ps(decay));
    __m256 m_new = _mm256_fmadd_ps(_mm256_set1_ps(beta1), _mm256_loadu_ps(m + i),
                                   _mm256_mul_ps(_mm256_set1_ps(one_minus_beta1), g));
    __m256 v_new = _mm256_fmadd_ps(_mm256_set1_ps(beta2), _mm256_loadu_ps(v + i),
                                   _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(one_minus_beta2), g), g));
    const __m256 denom =
        _mm256_fmadd_ps(_mm256_sqrt_ps(v_new), _mm256_set1_ps(inv_bias_correction2_sqrt), _mm256_set1_ps(eps));
    p = _mm256_fnmadd_ps(_mm256_set1_ps(step_size), _mm256_div_ps(m_new, denom), p);
    _mm256_storeu_ps(param + i, p);
    _mm256_storeu_ps(m + i, m_new);
    _mm256_storeu_ps(v + i, v_new);
  }
  for (int64_t i = blocks * 8; i < n; ++i) {
    const float g = grad[i];
    const float p = param[i] * decay;
    const float m_new = std::fma(beta1, m[i], one_minus_beta1 * g);
    const float v_new = std::fma(beta2, v[i], (one_minus_beta2 * g) * g);
    const float denom = std::fma(std::sqrt(v_new), inv_bias_correction2_sqrt, eps);
    param[i] = std::fma(-step_size, m_new / denom, p);
    m[i] = m_new;
    v[i] = v_new;
  }
}

}  // namespace fpdt::kernels::cpu
