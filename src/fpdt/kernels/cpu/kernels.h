// Fast CPU kernels (fp32, AVX2/FMA where it pays, OpenMP across rows, OpenBLAS for GEMMs).
// Each function has exactly the semantics of its namespace-`reference` twin (see the reference
// headers for the maths, shapes and which outputs are overwritten or accumulated); tests hold every
// one of them against the reference on fresh random inputs. Sources: one file per op family.
// Attention's fast path lives in its own files (flash attention).
#pragma once

#include <cstdint>

#include "fpdt/kernels/reference/adamw.h"

namespace fpdt::kernels::cpu {

// embedding.cpp
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h, bool accumulate);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h);

// norm.cpp
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h, double eps);
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int64_t N, int h);
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int64_t N, int h, double eps);
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int h);

// linear.cpp (cblas_sgemm)
void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                    bool accumulate);
void linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                     int64_t N, int I, int O, bool accumulate_dx);

// rope.cpp
void rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta);
void rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim, double theta);

// activation.cpp
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int64_t n);
void gelu_forward(float* out, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n);

// cross_entropy.cpp (tiled over the vocabulary; dlogits may alias logits)
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           const float* mask, int64_t N, int V);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            const float* mask, double dloss_scale, int64_t N, int V);

// adamw.cpp
void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n, const AdamWParams& params);

// elementwise.cpp: small helpers the model and trainer need.
// Sum of squares of x (n), accumulated in float64 (for gradient norms).
double sum_squares(const float* x, int64_t n);
// x (n) *= alpha
void scale_inplace(float* x, float alpha, int64_t n);

}  // namespace fpdt::kernels::cpu
