// CUDA kernels of the pointwise and small-reduction ops: embedding gather / scatter-add, RoPE,
// SwiGLU, GELU, AdamW, Σx² and scaling. fp32 storage; math in fp32 except where the reference's
// float64 matters (RoPE angles, AdamW, Σx²). Outputs follow the reference (= or += as documented
// there). embedding_backward uses float atomics, so duplicate ids accumulate in an unspecified order
// (not bitwise reproducible; within fp32 rounding).
#include <algorithm>
#include <cmath>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/block_reduce.cuh"
#include "fpdt/kernels/cuda/cuda_backend_impl.h"
#include "fpdt/kernels/cuda/cuda_check.h"

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

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
  const int64_t total = N * h;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / h, j = i % h;
    atomicAdd(dtable + static_cast<int64_t>(ids[n]) * h + j, dout[i]);
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

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g * sigmoidf(g) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout, const float* gate,
                                       const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i], d = dout[i], u = up[i];  // read all before writing (outputs may alias inputs)
    const float sig = sigmoidf(g);
    const float silu = g * sig;
    dgate[i] = d * u * sig * (1.0f + g * (1.0f - sig));
    dup[i] = d * silu;
  }
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__global__ void gelu_forward_kernel(float* out, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + kGeluA * v * v * v)));
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

// *result += Σ x² over the whole array, grid-strided (the CUDA blocks' sums added atomically).
__global__ void sum_squares_kernel(double* result, const float* x, int64_t n) {
  const double sum = block_sum_of_squares(x, blockIdx.x * int64_t(blockDim.x) + threadIdx.x, n,
                                          int64_t(gridDim.x) * blockDim.x);
  if (threadIdx.x == 0) atomicAdd(result, sum);
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
  embedding_backward_kernel<<<blocks_for(N * h), kThreads, 0, stream_>>>(dtable, dout, ids, N, h);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(stream_, x, pos, N, H, D, rope, +1.0);
}

void CudaBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  rope_rotate(stream_, dx, pos, N, H, D, rope, -1.0);
}

void CudaBackend::swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(out, gate, up, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  int64_t n) {
  if (n == 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dgate, dup, dout, gate, up, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_forward(float* out, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(out, x, n);
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

// One block: the whole grid on it (atomic adds of the CUDA blocks' sums). Several: one CUDA block each,
// all copied back at once.
void CudaBackend::sum_squares(double* sums, const float* x, int64_t n, int64_t block) {
  const int64_t blocks = (n + block - 1) / block;
  if (blocks == 0) return;
  if (blocks == 1) {
    FPDT_CUDA_CHECK(cudaMemsetAsync(sum_device_, 0, sizeof(double), stream_));
    const unsigned grid = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
    sum_squares_kernel<<<grid, kThreads, 0, stream_>>>(sum_device_, x, n);
    FPDT_CUDA_CHECK_LAUNCH();
    FPDT_CUDA_CHECK(cudaMemcpyAsync(sum_host_, sum_device_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
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

}  // namespace fpdt::kernels::cuda
