// Fast fp32 embedding (semantics: reference/embedding.h). Forward copies (or adds) table rows, one
// OpenMP thread per block of rows. Backward is a scatter-add where rows may share an id, so threads
// split the columns instead: no atomics, and each element sums its rows in input order, exactly as
// the reference does in float.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "fpdt/kernels/cpu/cpu_backend.h"

namespace fpdt::kernels::cpu {

namespace {
constexpr int64_t kParallelMinElements = int64_t{1} << 15;  // below this a thread team costs more than it saves
constexpr int kCacheLineFloats = 16;                         // column slices start on 64-byte boundaries
}  // namespace

void CpuBackend::embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                   bool accumulate) {
#pragma omp parallel for schedule(static) if (N * h >= kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = table + static_cast<int64_t>(ids[n]) * h;   // (h)
    float* out_row = out + n * h;                                  // (h)
    if (accumulate) {
      for (int j = 0; j < h; ++j) out_row[j] += row[j];
    } else {
      std::memcpy(out_row, row, sizeof(float) * static_cast<size_t>(h));
    }
  }
}

void CpuBackend::embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
#pragma omp parallel if (N * h >= kParallelMinElements)
  {
    const int threads = omp_get_num_threads();
    const int thread = omp_get_thread_num();
    // This thread's columns [j_begin, j_end), a multiple of a cache line wide so that no two threads
    // write the same line of a dtable row.
    const int slice = (h + threads - 1) / threads;
    const int slice_width = (slice + kCacheLineFloats - 1) / kCacheLineFloats * kCacheLineFloats;
    const int j_begin = std::min(h, thread * slice_width);
    const int j_end = std::min(h, j_begin + slice_width);
    for (int64_t n = 0; n < N; ++n) {
      float* drow = dtable + static_cast<int64_t>(ids[n]) * h;  // (h)
      const float* dout_row = dout + n * h;                      // (h)
      for (int j = j_begin; j < j_end; ++j) drow[j] += dout_row[j];
    }
  }
}

}  // namespace fpdt::kernels::cpu
