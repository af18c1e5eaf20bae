// The `reference` Backend: every op runs the scalar spec kernel in fp32. Slow; used by tests to
// prove the model's wiring independently of the fast kernels.
#include <memory>

#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/reference/activation.h"
#include "fpdt/kernels/reference/attention.h"
#include "fpdt/kernels/reference/attention_chunk.h"
#include "fpdt/kernels/reference/cross_entropy.h"
#include "fpdt/kernels/reference/elementwise.h"
#include "fpdt/kernels/reference/embedding.h"
#include "fpdt/kernels/reference/linear.h"
#include "fpdt/kernels/reference/norm.h"
#include "fpdt/kernels/reference/rope.h"

namespace fpdt::kernels {

namespace ref = reference;

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  DeviceMemory& memory() override { return host_memory(); }

  void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                         bool accumulate) override {
    ref::embedding_forward(out, ids, table, N, h, accumulate);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) override {
    ref::embedding_backward(dtable, dout, ids, N, h);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                       double eps) override {
    ref::rmsnorm_forward(out, rstd, x, weight, N, h, eps);
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int64_t N, int h) override {
    ref::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, h);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                         const float* bias, int64_t N, int h, double eps) override {
    ref::layernorm_forward(out, mean, rstd, x, weight, bias, N, h, eps);
  }
  void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int h) override {
    ref::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, h);
  }
  void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                      bool accumulate) override {
    ref::linear_forward(out, x, w, bias, N, I, O, accumulate);
  }
  void linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                       int64_t N, int I, int O, bool accumulate_dx) override {
    ref::linear_backward(dx, dw, dbias, dout, x, w, N, I, O, accumulate_dx);
  }
  void rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                    double theta) override {
    ref::rope_forward(x, pos, N, H, D, rotary_dim, theta);
  }
  void rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                     double theta) override {
    ref::rope_backward(dx, pos, N, H, D, rotary_dim, theta);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
    ref::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       int64_t n) override {
    ref::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void gelu_forward(float* out, const float* x, int64_t n) override { ref::gelu_forward(out, x, n); }
  void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) override {
    ref::gelu_backward(dx, dout, x, n);
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D, double scale) override {
    ref::attention_forward(out, lse, q, k, v, doc_ids, B, S, Hq, Hkv, D, scale);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const int32_t* doc_ids, int B,
                          int64_t S, int Hq, int Hkv, int D, double scale) override {
    ref::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_ids, B, S, Hq, Hkv, D, scale);
  }
  void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate) override {
    ref::attention_chunk_forward(out, lse, params, accumulate);
  }
  void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                             int D) override {
    ref::attention_chunk_delta(delta, dout, out, B, Cq, H, D);
  }
  void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                const float* delta, const AttentionChunkParams& params) override {
    ref::attention_chunk_backward(dq, dk, dv, dout, lse, delta, params);
  }
  void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                             const float* mask, int64_t N, int V) override {
    ref::cross_entropy_forward(losses, lse, logits, targets, mask, N, V);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                              const float* mask, double dloss_scale, int64_t N, int V) override {
    ref::cross_entropy_backward(dlogits, logits, lse, targets, mask, dloss_scale, N, V);
  }
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                    const AdamWParams& params) override {
    ref::adamw_update(param, m, v, grad, n, params);
  }
  double sum_squares(const float* x, int64_t n) override { return ref::sum_squares(x, n); }
  void scale_inplace(float* x, float alpha, int64_t n) override { ref::scale_inplace(x, alpha, n); }
};

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace fpdt::kernels
