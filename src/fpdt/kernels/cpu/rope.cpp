// Fast fp32 rotary position embedding, in place (semantics: reference/rope.h). The angles pos · inv_freq[i]
// and their scaled cos/sin are taken in float64 and rounded to float into a table of the call's tokens,
// which the calling thread keeps: q and k of every layer, forward and backward, rotate at the same
// positions, so one table serves them all (rebuilding it per call — 2·N·rotary_dim/2 sin/cos — had cost
// as much as the rotation). OpenMP over tokens; per token one contiguous loop per head the compiler
// vectorises. The backward negates the sine (exactly), so every call gives the bits of the reference.
#include <cmath>
#include <cstring>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int64_t kParallelMinElements = 16384;  // below this a thread team costs more than it saves

// The cos/sin of the last positions and RoPE settings one thread rotated by, grown (never shrunk) to the
// largest call: N · rotary_dim floats.
class AngleTable {
 public:
  // cos (N, half) and sin (N, half) at positions pos (N), built unless they are the table's already.
  void prepare(const int64_t* pos, int64_t N, const RopeParams& rope) {
    const int half = rope.rotary_dim / 2;
    const bool same = static_cast<size_t>(N) == positions_.size() && static_cast<size_t>(half) == inv_freq_.size() &&
                      rope.attention_scaling == scaling_ &&
                      std::memcmp(pos, positions_.data(), sizeof(int64_t) * static_cast<size_t>(N)) == 0 &&
                      std::memcmp(rope.inv_freq, inv_freq_.data(), sizeof(double) * static_cast<size_t>(half)) == 0;
    if (same) return;
    positions_.assign(pos, pos + N);
    inv_freq_.assign(rope.inv_freq, rope.inv_freq + half);
    scaling_ = rope.attention_scaling;
    if (cos_.size() < static_cast<size_t>(N * half)) {
      cos_.resize(static_cast<size_t>(N * half));
      sin_.resize(static_cast<size_t>(N * half));
    }
#pragma omp parallel for schedule(static) if (N * half > kParallelMinElements)
    for (int64_t n = 0; n < N; ++n) {
      const double position = static_cast<double>(pos[n]);
      for (int i = 0; i < half; ++i) {
        const double angle = position * rope.inv_freq[i];
        cos_[n * half + i] = static_cast<float>(std::cos(angle) * rope.attention_scaling);
        sin_[n * half + i] = static_cast<float>(std::sin(angle) * rope.attention_scaling);
      }
    }
  }
  const float* cos_row(int64_t n) const { return cos_.data() + n * static_cast<int64_t>(inv_freq_.size()); }
  const float* sin_row(int64_t n) const { return sin_.data() + n * static_cast<int64_t>(inv_freq_.size()); }

 private:
  std::vector<int64_t> positions_;  // (N) the table's positions
  std::vector<double> inv_freq_;    // (half) its frequencies
  double scaling_ = 0.0;
  std::vector<float> cos_, sin_;  // (N, half) each, grown to the largest N · half
};

// x (N, H, D), rotated in place by sign · angle (sign = +1 forward, −1 backward).
void rope_rotate(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope, float sign) {
  const int half = rope.rotary_dim / 2;
  if (half == 0 || N == 0) return;
  // The team reads the caller's table: a thread_local named inside the parallel region is each thread's own.
  thread_local AngleTable calling_thread_table;
  AngleTable& table = calling_thread_table;
  table.prepare(pos, N, rope);
#pragma omp parallel for schedule(static) if (N * H * rope.rotary_dim > kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict cos_row = table.cos_row(n);
    const float* __restrict sin_row = table.sin_row(n);
    for (int head = 0; head < H; ++head) {
      float* __restrict lo = x + (n * H + head) * D;  // dims [0, half)
      float* __restrict hi = lo + half;                // dims [half, rotary_dim)
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float a = lo[i];
        const float b = hi[i];
        const float s = sign * sin_row[i];
        lo[i] = a * cos_row[i] - b * s;
        hi[i] = b * cos_row[i] + a * s;
      }
    }
  }
}

}  // namespace

void CpuBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(x, pos, N, H, D, rope, +1.0f);
}

void CpuBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(dx, pos, N, H, D, rope, -1.0f);
}

}  // namespace fpdt::kernels::cpu
