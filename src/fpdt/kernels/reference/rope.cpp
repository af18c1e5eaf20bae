// Reference rotary position embedding (the spec; see rope.h). Scalar and in float64 throughout:
// angle = pos · inv_freq[i] and its scaled cos/sin are taken in double, then the rotated pair is
// rounded to T. Forward rotates each pair (i, i + rotary_dim/2) by +angle, backward by −angle (the
// transpose).
#include "fpdt/kernels/reference/rope.h"

#include <cmath>

#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

namespace {

// x (N, H, D), rotated in place by sign · angle (sign = +1 forward, −1 backward).
template <typename T>
void rope_rotate(T* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope, double sign) {
  const int half = rope.rotary_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int head = 0; head < H; ++head) {
      T* row = x + (n * H + head) * D;
      for (int i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[n]) * rope.inv_freq[i];
        const double c = std::cos(angle) * rope.attention_scaling;
        const double s = sign * std::sin(angle) * rope.attention_scaling;
        const double a = row[i];
        const double b = row[i + half];
        row[i] = static_cast<T>(a * c - b * s);
        row[i + half] = static_cast<T>(b * c + a * s);
      }
      // Dims rotary_dim..D-1 are left as they are.
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(x, pos, N, H, D, rope, +1.0);
}

template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(dx, pos, N, H, D, rope, -1.0);
}

template void rope_forward<float>(float*, const int64_t*, int64_t, int, int, const RopeParams&);
template void rope_forward<double>(double*, const int64_t*, int64_t, int, int, const RopeParams&);
template void rope_backward<float>(float*, const int64_t*, int64_t, int, int, const RopeParams&);
template void rope_backward<double>(double*, const int64_t*, int64_t, int, int, const RopeParams&);

void ReferenceBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  reference::rope_forward(x, pos, N, H, D, rope);
}

void ReferenceBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  reference::rope_backward(dx, pos, N, H, D, rope);
}

}  // namespace fpdt::kernels::reference
