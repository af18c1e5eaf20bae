// Fast fp32 rotary position embedding, in place (semantics: reference/rope.h). OpenMP over tokens;
// per token the angles pos · inv_freq[i] and their scaled cos/sin are taken once in float64, rounded
// to float, and reused across all H heads in a contiguous loop the compiler vectorises.
#include <cmath>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels::cpu {

namespace {

// x (N, H, D), rotated in place by sign · angle (sign = +1 forward, −1 backward).
void rope_rotate(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope, double sign) {
  const int half = rope.rotary_dim / 2;
  if (half == 0 || N == 0) return;
  const double* inv_freq = rope.inv_freq;  // (rotary_dim / 2)

#pragma omp parallel if (N * H * rope.rotary_dim > 16384)
  {
    std::vector<float> cos_table(half);  // (rotary_dim / 2) of the current token
    std::vector<float> sin_table(half);
    float* __restrict cos_row = cos_table.data();
    float* __restrict sin_row = sin_table.data();
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const double position = static_cast<double>(pos[n]);
      for (int i = 0; i < half; ++i) {
        const double angle = position * inv_freq[i];
        cos_row[i] = static_cast<float>(std::cos(angle) * rope.attention_scaling);
        sin_row[i] = static_cast<float>(sign * std::sin(angle) * rope.attention_scaling);
      }
      for (int head = 0; head < H; ++head) {
        float* __restrict lo = x + (n * H + head) * D;  // dims [0, half)
        float* __restrict hi = lo + half;                // dims [half, rotary_dim)
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const float a = lo[i];
          const float b = hi[i];
          lo[i] = a * cos_row[i] - b * sin_row[i];
          hi[i] = b * cos_row[i] + a * sin_row[i];
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(x, pos, N, H, D, rope, +1.0);
}

void CpuBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(dx, pos, N, H, D, rope, -1.0);
}

}  // namespace fpdt::kernels::cpu
