// The kernel interface the model computes through. A Backend is one implementation of every op
// (fp32): `reference` runs the scalar spec kernels, `cpu` the fast ones, `cuda` GPU kernels on device
// pointers (built when nvcc is found; not yet driven by the model or pipeline).
// The model never names a kernel namespace, so a faster attention or a GPU backend drops in here.
// Semantics and shapes of each op are those of the reference headers (kernels/reference/*.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fpdt/kernels/device_memory.h"
#include "fpdt/kernels/reference/adamw.h"
#include "fpdt/kernels/reference/attention_chunk.h"

namespace fpdt::kernels {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The memory this backend computes in, and its copies between tiers (device_memory.h).
  virtual DeviceMemory& memory() = 0;

  virtual void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                 bool accumulate) = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) = 0;

  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                               double eps) = 0;
  virtual void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x,
                                const float* weight, const float* rstd, int64_t N, int h) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                 const float* bias, int64_t N, int h, double eps) = 0;
  virtual void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                                  const float* weight, const float* mean, const float* rstd, int64_t N,
                                  int h) = 0;

  virtual void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I,
                              int O, bool accumulate) = 0;
  virtual void linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                               const float* w, int64_t N, int I, int O, bool accumulate_dx) = 0;

  virtual void rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                            double theta) = 0;
  virtual void rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                             double theta) = 0;

  virtual void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                               int64_t n) = 0;
  virtual void gelu_forward(float* out, const float* x, int64_t n) = 0;
  virtual void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) = 0;

  // Full-sequence causal attention: q (B, S, Hq, D), k, v (B, S, Hkv, D) → out, lse (B, Hq, S).
  virtual void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D,
                                 double scale) = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                                  const float* k, const float* v, const float* out, const float* lse,
                                  const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D,
                                  double scale) = 0;

  // One (q chunk, kv chunk) block of attention, merged by LSE (semantics: reference/attention_chunk.h).
  virtual void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params,
                                       bool accumulate) = 0;
  virtual void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                     int D) = 0;
  virtual void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                        const float* delta, const AttentionChunkParams& params) = 0;

  virtual void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                     const float* mask, int64_t N, int V) = 0;
  virtual void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                      const int32_t* targets, const float* mask, double dloss_scale, int64_t N,
                                      int V) = 0;

  virtual void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                            const AdamWParams& params) = 0;

  // Σ x², accumulated in float64 (gradient norms); x *= alpha (gradient clipping).
  virtual double sum_squares(const float* x, int64_t n) = 0;
  virtual void scale_inplace(float* x, float alpha, int64_t n) = 0;
};

// "reference", "cpu" or "cuda" (device pointers; kernels/cuda, a clear error in builds without
// CUDA); throws fpdt::Error for any other name.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace fpdt::kernels
