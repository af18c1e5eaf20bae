// Host-side launchers of the CUDA kernels (one .cu per op family), called by CudaBackend. Every
// launcher takes the backend's stream and enqueues on it only; none allocates or synchronises.
// Pointers are device pointers; shapes and semantics are those of kernels/reference/*.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fpdt/kernels/reference/adamw.h"
#include "fpdt/kernels/reference/attention_chunk.h"

namespace fpdt::kernels::cuda {

// elementwise.cu
void embedding_forward(cudaStream_t stream, float* out, const int32_t* ids, const float* table, int64_t N, int h,
                       bool accumulate);
void embedding_backward(cudaStream_t stream, float* dtable, const float* dout, const int32_t* ids, int64_t N, int h);
void rope_rotate(cudaStream_t stream, float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                 double theta, double sign);
void swiglu_forward(cudaStream_t stream, float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(cudaStream_t stream, float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n);
void gelu_forward(cudaStream_t stream, float* out, const float* x, int64_t n);
void gelu_backward(cudaStream_t stream, float* dx, const float* dout, const float* x, int64_t n);
void adamw_update(cudaStream_t stream, float* param, float* m, float* v, const float* grad, int64_t n,
                  const AdamWParams& params);
// *result (device, one double) += Σ x²; the caller zeroes it first.
void sum_squares(cudaStream_t stream, double* result, const float* x, int64_t n);
void scale_inplace(cudaStream_t stream, float* x, float alpha, int64_t n);
// out (N, O) += bias (O) on every row.
void add_bias_rows(cudaStream_t stream, float* out, const float* bias, int64_t N, int O);
// dbias (O) += Σ_n dout[n, :].
void accumulate_column_sums(cudaStream_t stream, float* dbias, const float* dout, int64_t N, int O);

// norm.cu
void rmsnorm_forward(cudaStream_t stream, float* out, float* rstd, const float* x, const float* weight, int64_t N,
                     int h, double eps);
void rmsnorm_backward(cudaStream_t stream, float* dx, float* dweight, const float* dout, const float* x,
                      const float* weight, const float* rstd, int64_t N, int h);
void layernorm_forward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* x,
                       const float* weight, const float* bias, int64_t N, int h, double eps);
void layernorm_backward(cudaStream_t stream, float* dx, float* dweight, float* dbias, const float* dout,
                        const float* x, const float* weight, const float* mean, const float* rstd, int64_t N, int h);

// cross_entropy.cu
void cross_entropy_forward(cudaStream_t stream, float* losses, float* lse, const float* logits,
                           const int32_t* targets, const float* mask, int64_t N, int V);
void cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, const float* mask, double dloss_scale, int64_t N, int V);

// attention.cu (fp32 FlashAttention-2-style chunk kernels; D ≤ kMaxHeadDim)
constexpr int kMaxHeadDim = 256;
// Raises the dynamic shared-memory limit of every attention kernel instantiation (once, at backend creation).
void attention_configure();
void attention_chunk_forward(cudaStream_t stream, float* out, float* lse, const AttentionChunkParams& params,
                             bool accumulate);
void attention_chunk_delta(cudaStream_t stream, float* delta, const float* dout, const float* out, int B,
                           int64_t Cq, int H, int D);
void attention_chunk_backward(cudaStream_t stream, float* dq, float* dk, float* dv, const float* dout,
                              const float* lse, const float* delta, const AttentionChunkParams& params);

}  // namespace fpdt::kernels::cuda
