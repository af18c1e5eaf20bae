// Reference rotary position embedding (the spec; see rope.h). Scalar and in float64 throughout:
// angle = pos · theta^(−2i / rotary_dim) and its cos/sin are taken in double, then rounded to T.
// Forward rotates each pair (i, i + rotary_dim/2) by +angle, backward by −angle (the transpose).
#include "fpdt/kernels/reference/rope.h"

#include <cmath>

namespace fpdt::kernels::reference {

namespace {

// x (N, H, D), rotated in place by sign · angle (sign = +1 forward, −1 backward).
template <typename T>
void rope_rotate(T* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta, double sign) {
  const int half = rotary_dim / 2;
  for (int64_t n = 0; n < N; ++n) {
    for (int head = 0; head < H; ++head) {
      T* row = x + (n * H + head) * D;
      for (int i = 0; i < half; ++i) {
        const double inv_freq = std::pow(theta, -2.0 * i / rotary_dim);
        const double angle = static_cast<double>(pos[n]) * inv_freq;
        const double c = std::cos(angle);
        const double s = sign * std::sin(angle);
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
void rope_forward(T* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta) {
  rope_rotate(x, pos, N, H, D, rotary_dim, theta, +1.0);
}

template <typename T>
void rope_backward(T* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta) {
  rope_rotate(dx, pos, N, H, D, rotary_dim, theta, -1.0);
}

template void rope_forward<float>(float*, const int64_t*, int64_t, int, int, int, double);
template void rope_forward<double>(double*, const int64_t*, int64_t, int, int, int, double);
template void rope_backward<float>(float*, const int64_t*, int64_t, int, int, int, double);
template void rope_backward<double>(double*, const int64_t*, int64_t, int, int, int, double);

}  // namespace fpdt::kernels::reference
