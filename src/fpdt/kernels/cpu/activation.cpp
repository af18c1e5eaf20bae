// Fast SwiGLU and GELU (tanh form), forward and backward (semantics: reference/activation.h), in fp32
// arithmetic on simd.h's widest vector (16 floats on AVX-512, 8 on AVX2), OpenMP over blocks; the last
// partial block runs through padded copies so every element sees the same arithmetic. All outputs are
// overwritten (=). In bf16 the roundings a bf16 run makes around the activation (backend_ops.inc) ride
// in the same pass instead of passes of their own over the (n) arrays.
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
inline Vec vsigmoid(Vec x, Vec* one_minus) {
  const Vec one = vset<Vec>(1.0f);
  const Vec e = vexp(vsub(vset<Vec>(0.0f), x));
  const Vec sig = vdiv(one, vadd(one, e));
  if (one_minus) *one_minus = vmin(vmul(e, sig), one);
  return sig;
}

// u = sqrt(2/pi)(x + 0.044715 x³), du = u'(x), and sigmoid(2u) (with 1 − sigmoid(2u)) for GELU.
inline Vec gelu_sigmoid(Vec x, Vec* du, Vec* one_minus) {
  const Vec x2 = vmul(x, x);
  const Vec c = vset<Vec>(kGeluC);
  const Vec u = vmul(vmul(c, x), vfma(vset<Vec>(kGeluA), x2, vset<Vec>(1.0f)));
  if (du) *du = vmul(c, vfma(vset<Vec>(3.0f * kGeluA), x2, vset<Vec>(1.0f)));
  return vsigmoid(vadd(u, u), one_minus);
}

// silu(gate) · up and gelu(x): the forwards' values, in both precisions.
inline Vec swiglu(Vec gate, Vec up) { return vmul(vmul(gate, vsigmoid(gate, nullptr)), up); }
inline Vec gelu(Vec x) { return vmul(x, gelu_sigmoid(x, nullptr, nullptr)); }

// x, or x rounded to bf16 (its value, in the fp32 lane) where `bf16`.
inline Vec rounded_if(bool bf16, Vec x) { return bf16 ? vround_bf16(x) : x; }

// Runs op(out, in) on n elements, kLanes at a time: kOut output arrays, kIn input arrays. Every input
// is loaded before any output is stored, so an output may alias an input of the same block.
template <size_t kOut, size_t kIn, typename Op>
void map_lanes(const std::array<float*, kOut>& outs, const std::array<const float*, kIn>& ins, int64_t n, Op op) {
  const int64_t blocks = (n + kLanes - 1) / kLanes;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kLanes;
    Vec x[kIn];
    Vec y[kOut];
    if (begin + kLanes <= n) {
      for (size_t j = 0; j < kIn; ++j) x[j] = vload<Vec>(ins[j] + begin);
      op(y, x);
      for (size_t j = 0; j < kOut; ++j) vstore(outs[j] + begin, y[j]);
    } else {
      const size_t rest = static_cast<size_t>(n - begin);
      float padded[kLanes];
      for (size_t j = 0; j < kIn; ++j) {
        std::memset(padded, 0, sizeof(padded));
        std::memcpy(padded, ins[j] + begin, rest * sizeof(float));
        x[j] = vload<Vec>(padded);
      }
      op(y, x);
      for (size_t j = 0; j < kOut; ++j) {
        vstore(padded, y[j]);
        std::memcpy(outs[j] + begin, padded, rest * sizeof(float));
      }
    }
  }
}

}  // namespace

void CpuBackend::swiglu_forward(float* out, float* gate, float* up, int64_t n, Precision precision) {
  if (precision == Precision::bf16) {  // gate, up rounded in place (kept), then silu(gate) · up rounded
    map_lanes<3, 2>({out, gate, up}, {gate, up}, n, [](Vec* y, const Vec* x) {
      const Vec g = vround_bf16(x[0]), u = vround_bf16(x[1]);
      y[0] = vround_bf16(swiglu(g, u));
      y[1] = g;
      y[2] = u;
    });
    return;
  }
  map_lanes<1, 2>({out}, {gate, up}, n, [](Vec* y, const Vec* x) { y[0] = swiglu(x[0], x[1]); });
}

void CpuBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                 int64_t n, Precision precision) {
  const bool bf16 = precision == Precision::bf16;  // dgate, dup rounded: the up projection's products read them
  map_lanes<2, 3>({dgate, dup}, {dout, gate, up}, n, [bf16](Vec* y, const Vec* x) {
    const Vec one = vset<Vec>(1.0f);
    const Vec g = x[1];
    Vec one_minus;
    const Vec sig = vsigmoid(g, &one_minus);
    const Vec silu = vmul(g, sig);
    // silu'(g) = sig (1 + g (1 − sig))
    const Vec dsilu = vmul(sig, vfma(g, one_minus, one));
    y[0] = rounded_if(bf16, vmul(vmul(x[0], x[2]), dsilu));
    y[1] = rounded_if(bf16, vmul(x[0], silu));
  });
}

void CpuBackend::gelu_forward(float* out, float* x, int64_t n, Precision precision) {
  if (precision == Precision::bf16) {  // x rounded in place (kept), then gelu(x) rounded
    map_lanes<2, 1>({out, x}, {x}, n, [](Vec* y, const Vec* in) {
      const Vec v = vround_bf16(in[0]);
      y[0] = vround_bf16(gelu(v));
      y[1] = v;
    });
    return;
  }
  map_lanes<1, 1>({out}, {x}, n, [](Vec* y, const Vec* in) { y[0] = gelu(in[0]); });
}

void CpuBackend::gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  map_lanes<1, 2>({dx}, {dout, x}, n, [](Vec* y, const Vec* in) {
    const Vec v = in[1];
    Vec du, one_minus;
    const Vec sig = gelu_sigmoid(v, &du, &one_minus);
    // gelu'(x) = sig + 2 x sig (1 − sig) u'(x), sig = sigmoid(2u)
    const Vec two_x_du = vmul(vadd(v, v), du);
    const Vec spread = vmul(sig, one_minus);
    y[0] = vmul(in[0], vfma(two_x_du, spread, sig));
  });
}

}  // namespace fpdt::kernels::cpu
