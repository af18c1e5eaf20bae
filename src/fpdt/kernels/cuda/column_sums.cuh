// Deterministic column sums over many rows, for the weight and bias gradients of the norms and the
// linear layer: outs[o][j] += Σ_n value(n, j)[o] over n < N, for j < cols. Pass 1: a grid of blocks over
// (32-column strips × kColumnTileRows-row tiles), each summing its tile in a fixed order into
// partial (outputs, tiles, cols); pass 2: one thread per column adds the tiles in tile order. The sums
// depend on N and cols only (not the GPU, the grid or timing): bitwise the same from run to run. With
// h = 2048 and N = 64K this is 64 × 256 blocks in pass 1, where one thread per column had 8 blocks for
// 132 SMs. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fpdt/base/cuda_check.h"

namespace fpdt::kernels::cuda {

constexpr int kColumnTileRows = 256;  // rows per tile of pass 1
constexpr int kColumnStrip = 32;      // columns per block of pass 1 (one per lane: coalesced rows)
constexpr int kColumnRowLanes = 8;    // row stripes per block of pass 1 (blockDim.y)

inline int64_t column_tiles(int64_t N) { return (N + kColumnTileRows - 1) / kColumnTileRows; }
// Scratch floats the sums of `outputs` gradients need.
inline size_t column_sums_scratch_floats(int outputs, int64_t N, int cols) {
  return static_cast<size_t>(outputs) * static_cast<size_t>(column_tiles(N)) * static_cast<size_t>(cols);
}

// Pass 1. Thread (x, y) of a block sums rows tile·R + y, + 8, + 16, … of column strip·32 + x; the eight
// stripes are then added in stripe order through shared memory.
template <int kOutputs, typename Value>
__global__ void __launch_bounds__(kColumnStrip * kColumnRowLanes)
    column_tile_sums_kernel(float* partial, Value value, int64_t N, int cols, int64_t tiles) {
  __shared__ float stripes[kOutputs][kColumnRowLanes][kColumnStrip];
  const int j = blockIdx.x * kColumnStrip + threadIdx.x;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    float sum[kOutputs] = {};
    const int64_t end = min(N, (tile + 1) * kColumnTileRows);
    if (j < cols)
      for (int64_t n = tile * kColumnTileRows + threadIdx.y; n < end; n += kColumnRowLanes) value(n, j, sum);
#pragma unroll
    for (int o = 0; o < kOutputs; ++o) stripes[o][threadIdx.y][threadIdx.x] = sum[o];
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
#pragma unroll
      for (int o = 0; o < kOutputs; ++o) {
        float total = stripes[o][0][threadIdx.x];
        for (int y = 1; y < kColumnRowLanes; ++y) total += stripes[o][y][threadIdx.x];
        partial[(o * tiles + tile) * cols + j] = total;
      }
    }
    __syncthreads();
  }
}

// Pass 2: out[j] += the tiles' sums of column j, in tile order (null outputs are skipped).
template <int kOutputs>
struct ColumnOutputs {
  float* out[kOutputs];
};

template <int kOutputs>
__global__ void column_tiles_add_kernel(ColumnOutputs<kOutputs> outs, const float* partial, int cols,
                                        int64_t tiles) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    if (outs.out[o] == nullptr) continue;
    float total = 0.0f;
    for (int64_t tile = 0; tile < tiles; ++tile) total += partial[(o * tiles + tile) * cols + j];
    outs.out[o][j] += total;
  }
}

// Both passes on `stream`; partial: column_sums_scratch_floats(kOutputs, N, cols) floats of device scratch.
template <int kOutputs, typename Value>
void add_column_sums(cudaStream_t stream, float* partial, ColumnOutputs<kOutputs> outs, Value value, int64_t N,
                     int cols) {
  if (N == 0 || cols == 0) return;
  const int64_t tiles = column_tiles(N);
  const dim3 grid(static_cast<unsigned>((cols + kColumnStrip - 1) / kColumnStrip),
                  static_cast<unsigned>(tiles < 65535 ? tiles : 65535));
  column_tile_sums_kernel<kOutputs><<<grid, dim3(kColumnStrip, kColumnRowLanes), 0, stream>>>(partial, value, N,
                                                                                               cols, tiles);
  FPDT_CUDA_CHECK_LAUNCH();
  constexpr int kThreadsPerBlock = 256;
  column_tiles_add_kernel<kOutputs><<<static_cast<unsigned>((cols + kThreadsPerBlock - 1) / kThreadsPerBlock),
                                      kThreadsPerBlock, 0, stream>>>(outs, partial, cols, tiles);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda
