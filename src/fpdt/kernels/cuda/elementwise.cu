// CUDA kernels for the pointwise and small-reduction ops: embedding gather / scatter-add, RoPE,
// SwiGLU, GELU, AdamW, Σx², scaling, bias rows and bias-gradient column sums. fp32 storage; math
// in fp32 except where the reference's float64 matters (RoPE angles, AdamW, Σx²). Outputs follow
// the reference (= or += as documented there). embedding_backward uses float atomics, so duplicate
// ids accumulate in an unspecified order (not bitwise reproducible; within fp32 rounding).
#include <cmath>

#include "fpdt/kernels/cuda/cuda_check.h"
#include "fpdt/kernels/cuda/cuda_kernels.h"

namespace fpdt::kernels::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

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

// One thread per (token, head, rotary pair).
__global__ void rope_kernel(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta,
                            double sign) {
  const int half = rotary_dim / 2;
  const int64_t total = N * H * half;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(t % half);
    const int64_t row = t / half;  // n * H + head
    const int64_t n = row / H;
    const double inv_freq = pow(theta, -2.0 * i / rotary_dim);
    const double angle = static_cast<double>(pos[n]) * inv_freq;
    double s, c;
    sincos(angle, &s, &c);
    s *= sign;
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

__global__ void sum_squares_kernel(double* result, const float* x, int64_t n) {
  __shared__ double partial[kThreads / 32];
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double value = x[i];
    sum += value * value;
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_sum = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) block_sum += partial[w];
    atomicAdd(result, block_sum);
  }
}

__global__ void scale_kernel(float* x, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= alpha;
}

__global__ void add_bias_rows_kernel(float* out, const float* bias, int64_t N, int O) {
  const int64_t total = N * O;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % O];
}

// One thread per column: adjacent threads read adjacent columns of a row (coalesced); deterministic.
__global__ void column_sums_kernel(float* dbias, const float* dout, int64_t N, int O) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= O) return;
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) sum += dout[n * O + o];
  dbias[o] = static_cast<float>(dbias[o] + sum);
}

}  // namespace

void embedding_forward(cudaStream_t stream, float* out, const int32_t* ids, const float* table, int64_t N, int h,
                       bool accumulate) {
  if (N * h == 0) return;
  embedding_forward_kernel<<<blocks_for(N * h), kThreads, 0, stream>>>(out, ids, table, N, h, accumulate);
  FPDT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(cudaStream_t stream, float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
  if (N * h == 0) return;
  embedding_backward_kernel<<<blocks_for(N * h), kThreads, 0, stream>>>(dtable, dout, ids, N, h);
  FPDT_CUDA_CHECK_LAUNCH();
}

void rope_rotate(cudaStream_t stream, float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                 double theta, double sign) {
  const int64_t total = N * H * (rotary_dim / 2);
  if (total == 0) return;
  rope_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, pos, N, H, D, rotary_dim, theta, sign);
  FPDT_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(cudaStream_t stream, float* out, const float* gate, const float* up, int64_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, gate, up, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(cudaStream_t stream, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n) {
  if (n == 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void gelu_forward(cudaStream_t stream, float* out, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void gelu_backward(cudaStream_t stream, float* dx, const float* dout, const float* x, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dx, dout, x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void adamw_update(cudaStream_t stream, float* param, float* m, float* v, const float* grad, int64_t n,
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
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, m, v, grad, n, s);
  FPDT_CUDA_CHECK_LAUNCH();
}

void sum_squares(cudaStream_t stream, double* result, const float* x, int64_t n) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
  sum_squares_kernel<<<blocks, kThreads, 0, stream>>>(result, x, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void scale_inplace(cudaStream_t stream, float* x, float alpha, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, alpha, n);
  FPDT_CUDA_CHECK_LAUNCH();
}

void add_bias_rows(cudaStream_t stream, float* out, const float* bias, int64_t N, int O) {
  if (N * O == 0) return;
  add_bias_rows_kernel<<<blocks_for(N * O), kThreads, 0, stream>>>(out, bias, N, O);
  FPDT_CUDA_CHECK_LAUNCH();
}

void accumulate_column_sums(cudaStream_t stream, float* dbias, const float* dout, int64_t N, int O) {
  if (O == 0) return;
  column_sums_kernel<<<(O + kThreads - 1) / kThreads, kThreads, 0, stream>>>(dbias, dout, N, O);
  FPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace fpdt::kernels::cuda
