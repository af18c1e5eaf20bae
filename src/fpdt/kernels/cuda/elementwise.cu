// CUDA kernels of the pointwise and small-reduction ops: embedding gather / scatter-add, RoPE,
// SwiGLU, GELU, AdamW, Σx² and scaling. fp32 storage; math in fp32 except where the reference's
// float64 matters (RoPE angles, AdamW, Σx²). Outputs follow the reference (= or += as documented
// there). No float atomics, so every result is bitwise reproducible: embedding_backward sorts the
// tokens by id (a stable radix sort) and adds each row's tokens in token order, the reference's order,
// so it is bitwise the reference's float sum; Σx² adds fixed partial sums in a fixed order.
#include <algorithm>
#include <cmath>
#include <string>

#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>

#include "fpdt/base/cuda_check.h"
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/bf16.cuh"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"

namespace fpdt::kernels::cuda {

namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                         bool accumulate) {
  const int64_t total = N * h;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / h, j = i % h;
    const float value = table[static_cast<int64_t>(ids[n]) * h + j];
    out[i] = accumulate ? out[i] + value : value;
  }
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    values[i] = static_cast<int32_t>(i);
}

// ids_sorted (N): the ids in ascending order; tokens_sorted (N): their token indices, ascending within
// an id (the sort is stable). Position p starting a run of id r (ids_sorted[p − 1] ≠ r) adds, for its
// block's columns, the dout rows of the run in token order: dtable[r, j] += dout[n₀, j], += dout[n₁, j], …
// — each addition rounded as the reference's.
__global__ void embedding_backward_runs_kernel(float* dtable, const float* dout, const int32_t* ids_sorted,
                                               const int32_t* tokens_sorted, int64_t N, int h) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  for (int64_t p = blockIdx.y; p < N; p += gridDim.y) {
    const int32_t id = ids_sorted[p];
    if ((p > 0 && ids_sorted[p - 1] == id) || j >= h) continue;
    float* drow = dtable + static_cast<int64_t>(id) * h;  // (h)
    float sum = drow[j];
    for (int64_t q = p; q < N && ids_sorted[q] == id; ++q)
      sum += dout[static_cast<int64_t>(tokens_sorted[q]) * h + j];
    drow[j] = sum;
  }
}

// RoPE's parameters by value (the table is host memory; a launch copies its arguments).
struct RopeArgs {
  double inv_freq[kMaxRotaryDim / 2];  // (rotary_dim / 2)
  double attention_scaling;
  int rotary_dim;
};

// One thread per (token, head, rotary pair).
__global__ void rope_kernel(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeArgs rope,
                            double sign) {
  const int half = rope.rotary_dim / 2;
  const int64_t total = N * H * half;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(t % half);
    const int64_t row = t / half;  // n * H + head
    const int64_t n = row / H;
    const double angle = static_cast<double>(pos[n]) * rope.inv_freq[i];
    double s, c;
    sincos(angle, &s, &c);
    c *= rope.attention_scaling;
    s *= sign * rope.attention_scaling;
    float* r = x + row * D;
    const double a = r[i], b = r[i + half];
    r[i] = static_cast<float>(a * c - b * s);
    r[i + half] = static_cast<float>(b * c + a * s);
  }
}

__device__ float sigmoidf(float g) { return 1.0f / (1.0f + expf(-g)); }

// bf16 (backend_ops.inc): the inputs rounded in place first, the result rounded.
__global__ void swiglu_forward_kernel(float* out, float* gate, float* up, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float g = gate[i], u = up[i];
    if (bf16) {
      g = nearest_bf16(g);
      u = nearest_bf16(u);
      gate[i] = g;
      up[i] = u;
    }
    const float value = g * sigmoidf(g) * u;
    out[i] = bf16 ? nearest_bf16(value) : value;
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate,
                                       const float* up, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i], d = dout[i], u = up[i];  // read all before writing (outputs may alias inputs)
    const float sig = sigmoidf(g);
    const float silu = g * sig;
    const float dg = d * u * sig * (1.0f + g * (1.0f - sig)), du = d * silu;
    dgate[i] = bf16 ? nearest_bf16(dg) : dg;
    dup[i] = bf16 ? nearest_bf16(du) : du;
  }
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__global__ void gelu_forward_kernel(float* out, float* x, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float v = x[i];
    if (bf16) {
      v = nearest_bf16(v);
      x[i] = v;
    }
    const float value = 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v)));
    out[i] = bf16 ? nearest_bf16(value) : value;
  }
}

__global__ void gelu_backward_kernel(float* dx, const float* dout, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

struct AdamWScalars {
  double decay;  // 1 − lr·weight_decay
  double beta1, beta2, eps;
  double step_size;              // lr / (1 − beta1^step)
  double bias_correction2_sqrt;  // sqrt(1 − beta2^step)
};

__global__ void adamw_kernel(float* param, float* m, float* v, const float* grad, int64_t n, AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double g = grad[i];
    double p = static_cast<double>(param[i]) * s.decay;
    const double m_new = s.beta1 * m[i] + (1.0 - s.beta1) * g;
    const double v_new = s.beta2 * v[i] + (1.0 - s.beta2) * g * g;
    p -= s.step_size * m_new / (sqrt(v_new) / s.bias_correction2_sqrt + s.eps);
    param[i] = static_cast<float>(p);
    m[i] = static_cast<float>(m_new);
    v[i] = static_cast<float>(v_new);
  }
}

// Σ x[i]² over i = first, first + step, … < end on each thread, summed over the CUDA block (every thread
// gets the total).
__device__ double block_sum_of_squares(const float* x, int64_t first, int64_t end, int64_t step) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t i = first; i < end; i += step) {
    const double value = x[i];
    sum += value * value;
  }
  return block_sum(sum, scratch);
}

// partial[b] = the Σ x² of CUDA block b over its grid-strided elements (the grid depends on n only).
__global__ void grid_sum_squares_kernel(double* partial, const float* x, int64_t n) {
  const double sum = block_sum_of_squares(x, blockIdx.x * int64_t(blockDim.x) + threadIdx.x, n,
                                          int64_t(gridDim.x) * blockDim.x);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// *result = partial[0] + partial[1] + … in order (one thread: at most 1024 terms).
__global__ void sum_in_order_kernel(double* result, const double* partial, int count) {
  double total = 0.0;
  for (int b = 0; b < count; ++b) total += partial[b];
  *result = total;
}

// sums[b] = Σ x² over block b of `block` floats: one CUDA block per sum, a fixed reduction tree.
__global__ void block_sum_squares_kernel(double* sums, const float* x, int64_t n, int64_t block) {
  const int64_t begin = blockIdx.x * block;
  const double sum = block_sum_of_squares(x, begin + threadIdx.x, min(n, begin + block), blockDim.x);
  if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= alpha;
}

__global__ void round_to_bf16_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = nearest_bf16(x[i]);
}

__global__ void pack_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = bf16_word(src[i]);
}

__global__ void unpack_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = widen_bf16(src[i]);  // the word as the upper half: exact for every word, NaNs included
}

// x (N, H, D) rotated in place by sign · angle (sign = +1 forward, −1 backward).
void rope_rotate(cudaStream_t stream, float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope,
                 double sign) {
  const int64_t total = N * H * (rope.rotary_dim / 2);
  if (total == 0) return;
  FPDT_CHECK(rope.rotary_dim <= kMaxRotaryDim, "kernels",
             "CUDA RoPE supports rotary dims up to " + std::to_string(kMaxRotaryDim) + ", got " +
                 std::to_string(rope.rotary_dim),
             "use --backend cpu for this model");
  RopeArgs args{};
  std::copy(rope.inv_freq, rope.inv_freq + rope.rotary_dim / 2, args.inv_freq);
  args.attention_scaling = rope.attention_scaling;
  args.rotary_dim = rope.rotary_dim;
  rope_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, pos, N, H, D, args, sign);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                    bool accumulate) {
  if (N * h == 0) return;
  embedding_forward_kernel<<<blocks_for(N * h), kThreads, 0, stream_>>>(out, ids, table, N, h, accumulate);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
  if (N * h == 0) return;
  FPDT_CHECK(N <= INT32_MAX, "kernels", "CUDA embedding_backward over more than 2^31 tokens in one call",
             "pass fewer tokens per call");
  const int items = static_cast<int>(N);
  size_t sort_bytes = 0;
  FPDT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ids, static_cast<int32_t*>(nullptr),
                                                  static_cast<const int32_t*>(nullptr),
                                                  static_cast<int32_t*>(nullptr), items, 0, 32, stream_));
  // Scratch: ids_sorted, tokens, tokens_sorted (N int32 each), then the sort's own bytes at a 256-byte boundary.
  const size_t ints = 3 * static_cast<size_t>(N);
  const size_t sort_offset_floats = (ints + 63) / 64 * 64;
  float* base = scratch(sort_offset_floats + (sort_bytes + sizeof(float) - 1) / sizeof(float));
  int32_t* ids_sorted = reinterpret_cast<int32_t*>(base);
  int32_t* tokens = ids_sorted + N;
  int32_t* tokens_sorted = tokens + N;
  void* sort_scratch = base + sort_offset_floats;
  iota_kernel<<<blocks_for(N), kThreads, 0, stream_>>>(tokens, N);
  FPDT_CUDA_CHECK_LAUNCH();
  FPDT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, ids, ids_sorted, tokens, tokens_sorted,
                                                  items, 0, 32, stream_));
  const dim3 grid(static_cast<unsigned>((h + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(N, 65535)));
  embedding_backward_runs_kernel<<<grid, kThreads, 0, stream_>>>(dtable, dout, ids_sorted, tokens_sorted, N, h);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(stream_, x, pos, N, H, D, rope, +1.0);
}

void CudaBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(stream_, dx, pos, N, H, D, rope, -1.0);
}

void CudaBackend::swiglu_forward(float* out, float* gate, float* up, int64_t n, Precision precision) {
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(out, gate, up, n, precision == Precision::bf16);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  int64_t n, Precision precision) {
  if (n == 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dgate, dup, dout, gate, up, n,
                                                                  precision == Precision::bf16);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_forward(float* out, float* x, int64_t n, Precision precision) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(out, x, n, precision == Precision::bf16);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dx, dout, x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                               const AdamWParams& params) {
  if (n == 0) return;
  const double step = static_cast<double>(params.step);
  AdamWScalars s;
  s.decay = 1.0 - params.lr * params.weight_decay;
  s.beta1 = params.beta1;
  s.beta2 = params.beta2;
  s.eps = params.eps;
  s.step_size = params.lr / (1.0 - std::pow(params.beta1, step));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(params.beta2, step));
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(param, m, v, grad, n, s);
  FPDT_CUDA_CHECK_LAUNCH();
}

// One block: the grid's partial sums, then their sum in order. Several: one CUDA block each. Either
// way the sums come back in one copy.
void CudaBackend::sum_squares(double* sums, const float* x, int64_t n, int64_t block) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks == 0) return;
  if (blocks == 1) {
    const unsigned grid = std::min(blocks_for(n), 1024u);
    double* partial = reinterpret_cast<double*>(scratch(2 * (static_cast<size_t>(grid) + 1)));  // (grid + 1)
    grid_sum_squares_kernel<<<grid, kThreads, 0, stream_>>>(partial, x, n);
    FPDT_CUDA_CHECK_LAUNCH();
    sum_in_order_kernel<<<1, 1, 0, stream_>>>(partial + grid, partial, static_cast<int>(grid));
    FPDT_CUDA_CHECK_LAUNCH();
    FPDT_CUDA_CHECK(cudaMemcpyAsync(sum_host_, partial + grid, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    sums[0] = *sum_host_;
    return;
  }
  double* device_sums = reinterpret_cast<double*>(scratch(2 * static_cast<size_t>(blocks)));  // (blocks)
  block_sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(device_sums, x, n, block);
  FPDT_CUDA_CHECK_LAUNCH();
  FPDT_CUDA_CHECK(cudaMemcpyAsync(sums, device_sums, sizeof(double) * blocks, cudaMemcpyDeviceToHost, stream_));
  FPDT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::scale_inplace(float* x, float alpha, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, alpha, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::round_to_bf16(float* x, int64_t n) {
  if (n == 0) return;
  round_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::pack_bf16(uint16_t* dst, const float* src, int64_t n) {
  if (n == 0) return;
  pack_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dst, src, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::unpack_bf16(float* dst, const uint16_t* src, int64_t n) {
  if (n == 0) return;
  unpack_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dst, src, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda
