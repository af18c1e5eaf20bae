// Fast fp32 SwiGLU and GELU (tanh form), forward and backward (semantics: reference/activation.h).
// AVX2/FMA, 8 floats at a time, OpenMP over blocks; the last partial block runs through padded
// copies so every element sees the same arithmetic. All outputs are overwritten (=).
//   sigmoid(x) = 1 / (1 + exp(−x)) with simd.h's vector exp (≈ 2 ulp), 1 − sigmoid without cancellation;
//   gelu(x) = 0.5 x (1 + tanh(u)) = x · sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x³), which avoids
//   the cancellation of 1 + tanh(u) for negative x.
#include <array>
#include <cmath>
#include <cstring>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/simd.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this one thread is faster

// sigmoid(x) = 1 / (1 + e), e = exp(−x), and 1 − sigmoid(x) = e · sigmoid(x), both to a few ulp:
// forming 1 − sigmoid(x) by subtraction would lose everything below 6e−8 for x ≳ 16, where
// silu' and gelu' still differ from 1 by ~1e−6. When e overflows to +inf, e · 0 is NaN and the
// min with 1 (which returns its second operand for NaN) gives the right 1 − sigmoid = 1.
inline __m256 sigmoid8(__m256 x, __m256* one_minus) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = vexp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e));
  if (one_minus) *one_minus = _mm256_min_ps(_mm256_mul_ps(e, sig), one);
  return sig;
}

// u = sqrt(2/pi)(x + 0.044715 x³), du = u'(x), and sigmoid(2u) (with 1 − sigmoid(2u)) for GELU.
inline __m256 gelu_sigmoid8(__m256 x, __m256* du, __m256* one_minus) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 c = _mm256_set1_ps(kGeluC);
  const __m256 u = _mm256_mul_ps(_mm256_mul_ps(c, x), _mm256_fmadd_ps(_mm256_set1_ps(kGeluA), x2, _mm256_set1_ps(1.0f)));
  if (du) *du = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluA), x2, _mm256_set1_ps(1.0f)));
  return sigmoid8(_mm256_add_ps(u, u), one_minus);
}

// Runs op(out, in) on n elements, 8 at a time: kOut output arrays, kIn input arrays. Every input
// is loaded before any output is stored, so an output may alias an input of the same block.
template <size_t kOut, size_t kIn, typename Op>
void map8(const std::array<float*, kOut>& outs, const std::array<const float*, kIn>& ins, int64_t n, Op op) {
  const int64_t blocks = (n + 7) / 8;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * 8;
    __m256 x[kIn];
    __m256 y[kOut];
    if (begin + 8 <= n) {
      for (size_t j = 0; j < kIn; ++j) x[j] = _mm256_loadu_ps(ins[j] + begin);
      op(y, x);
      for (size_t j = 0; j < kOut; ++j) _mm256_storeu_ps(outs[j] + begin, y[j]);
    } else {
      const size_t rest = static_cast<size_t>(n - begin);
      alignas(32) float padded[8];
      for (size_t j = 0; j < kIn; ++j) {
        std::memset(padded, 0, sizeof(padded));
        std::memcpy(padded, ins[j] + begin, rest * sizeof(float));
        x[j] = _mm256_load_ps(padded);
      }
      op(y, x);
      for (size_t j = 0; j < kOut; ++j) {
        _mm256_store_ps(padded, y[j]);
        std::memcpy(outs[j] + begin, padded, rest * sizeof(float));
      }
    }
  }
}

}  // namespace

void CpuBackend::swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  map8<1, 2>({out}, {gate, up}, n, [](__m256* y, const __m256* x) {
    y[0] = _mm256_mul_ps(_mm256_mul_ps(x[0], sigmoid8(x[0], nullptr)), x[1]);  // silu(gate) · up
  });
}

void CpuBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                 int64_t n) {
  map8<2, 3>({dgate, dup}, {dout, gate, up}, n, [](__m256* y, const __m256* x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 g = x[1];
    __m256 one_minus;
    const __m256 sig = sigmoid8(g, &one_minus);
    const __m256 silu = _mm256_mul_ps(g, sig);
    // silu'(g) = sig (1 + g (1 − sig))
    const __m256 dsilu = _mm256_mul_ps(sig, _mm256_fmadd_ps(g, one_minus, one));
    y[0] = _mm256_mul_ps(_mm256_mul_ps(x[0], x[2]), dsilu);
    y[1] = _mm256_mul_ps(x[0], silu);
  });
}

void CpuBackend::gelu_forward(float* out, const float* x, int64_t n) {
  map8<1, 1>({out}, {x}, n,
             [](__m256* y, const __m256* in) { y[0] = _mm256_mul_ps(in[0], gelu_sigmoid8(in[0], nullptr, nullptr)); });
}

void CpuBackend::gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  map8<1, 2>({dx}, {dout, x}, n, [](__m256* y, const __m256* in) {
    const __m256 v = in[1];
    __m256 du, one_minus;
    const __m256 sig = gelu_sigmoid8(v, &du, &one_minus);
    // gelu'(x) = sig + 2 x sig (1 − sig) u'(x), sig = sigmoid(2u)
    const __m256 two_x_du = _mm256_mul_ps(_mm256_add_ps(v, v), du);
    const __m256 spread = _mm256_mul_ps(sig, one_minus);
    y[0] = _mm256_mul_ps(in[0], _mm256_fmadd_ps(two_x_du, spread, sig));
  });
}

}  // namespace fpdt::kernels::cpu
