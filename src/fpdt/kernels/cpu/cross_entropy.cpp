// Fast fp32 softmax cross-entropy (semantics: reference/cross_entropy.h). OpenMP over rows; each
// row is read once in tiles of kTileFloats (L1-resident): tile max, rescale the running sum if the
// max grew, add the tile's exp sum (an online softmax over the vocabulary). No (N, V) buffer exists;
// the backward writes dlogits element by element after reading that element, so it may alias logits.
// The host's sums (O(N)) are the reference's loop; the argmax runs the reference per row on the team.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/simd.h"
#include "fpdt/kernels/reference/cross_entropy.h"

namespace fpdt::kernels::cpu {

namespace {

constexpr int kTileFloats = 1024;                     // 4 KiB of a row, stays in L1 for the second read
constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below N·V of this one thread is faster

// The last `count` (< 8) floats of a row, padded with `fill`.
inline __m256 load_partial(const float* x, int count, float fill) {
  alignas(32) float padded[8];
  std::fill(padded, padded + 8, fill);
  std::memcpy(padded, x, static_cast<size_t>(count) * sizeof(float));
  return _mm256_load_ps(padded);
}

inline float horizontal_max(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline double horizontal_sum(__m256 x) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, x);
  double sum = 0.0;
  for (float lane : lanes) sum += lane;
  return sum;
}

float tile_max(const float* x, int count) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int i = 0;
  for (; i + 8 <= count; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  if (i < count) m = _mm256_max_ps(m, load_partial(x + i, count - i, -INFINITY));
  return horizontal_max(m);
}

// Σ exp(x − shift) over one tile (two accumulators to hide the FMA latency).
double tile_exp_sum(const float* x, int count, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= count; i += 16) {
    acc0 = _mm256_add_ps(acc0, vexp(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    acc1 = _mm256_add_ps(acc1, vexp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s)));
  }
  for (; i + 8 <= count; i += 8) acc0 = _mm256_add_ps(acc0, vexp(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  if (i < count) acc1 = _mm256_add_ps(acc1, vexp(_mm256_sub_ps(load_partial(x + i, count - i, -INFINITY), s)));
  return horizontal_sum(_mm256_add_ps(acc0, acc1));
}

// drow (V) = weight · exp(row − lse); drow may alias row.
void softmax_row_scaled(float* drow, const float* row, int V, float lse, float weight) {
  const __m256 l = _mm256_set1_ps(lse);
  const __m256 w = _mm256_set1_ps(weight);
  int i = 0;
  for (; i + 8 <= V; i += 8) _mm256_storeu_ps(drow + i, _mm256_mul_ps(w, vexp(_mm256_sub_ps(_mm256_loadu_ps(row + i), l))));
  if (i < V) {
    alignas(32) float padded[8];
    _mm256_store_ps(padded, _mm256_mul_ps(w, vexp(_mm256_sub_ps(load_partial(row + i, V - i, -INFINITY), l))));
    std::memcpy(drow + i, padded, static_cast<size_t>(V - i) * sizeof(float));
  }
}

}  // namespace

void CpuBackend::cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                       const float* mask, int64_t N, int V) {
#pragma omp parallel for schedule(static) if (N * V >= kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    // Online softmax over tiles: running_sum = Σ exp(x − running_max) over the tiles seen so far.
    float running_max = -INFINITY;
    double running_sum = 0.0;
    for (int begin = 0; begin < V; begin += kTileFloats) {
      const int count = std::min(kTileFloats, V - begin);
      const float max = tile_max(row + begin, count);
      if (max > running_max) {
        running_sum *= std::exp(static_cast<double>(running_max) - static_cast<double>(max));
        running_max = max;
      }
      running_sum += tile_exp_sum(row + begin, count, running_max);
    }
    const double log_sum = std::log(running_sum);
    lse[n] = static_cast<float>(running_max + log_sum);

    const int32_t target = targets[n];
    if (target == kIgnoreIndex) {
      losses[n] = 0.0f;
      continue;
    }
    const double weight = mask ? mask[n] : 1.0;
    // lse − logit[target] as (max − logit[target]) + log Σ, in float64: no cancellation at large |logits|.
    const double loss = (static_cast<double>(running_max) - static_cast<double>(row[target])) + log_sum;
    losses[n] = static_cast<float>(weight * loss);
  }
}

void CpuBackend::cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                        const float* mask, double dloss_scale, int64_t N, int V) {
#pragma omp parallel for schedule(static) if (N * V >= kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * V;
    float* drow = dlogits + n * V;
    const int32_t target = targets[n];
    if (target == kIgnoreIndex) {
      std::fill(drow, drow + V, 0.0f);
      continue;
    }
    const float weight = static_cast<float>(dloss_scale * (mask ? mask[n] : 1.0));
    softmax_row_scaled(drow, row, V, lse[n], weight);
    drow[target] -= weight;  // − weight · onehot(target)
  }
}

void CpuBackend::cross_entropy_sums(double* sums, const float* losses, const int32_t* targets, const float* mask,
                                    int64_t N) {
  reference::cross_entropy_sums(sums, losses, targets, mask, N);
}

void CpuBackend::argmax_rows(int32_t* indices, const float* x, int64_t N, int V) {
#pragma omp parallel for schedule(static) if (N * V >= (int64_t{1} << 16))
  for (int64_t n = 0; n < N; ++n) reference::argmax_rows(indices + n, x + n * V, 1, V);
}

}  // namespace fpdt::kernels::cpu
