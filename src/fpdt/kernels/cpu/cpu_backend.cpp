// The `cpu` Backend: the fast fp32 kernels (OpenBLAS GEMMs, AVX2, OpenMP). Attention runs the
// flash kernel (cpu/flash_attention.h): the full sequence as one causal block.
#include <memory>

#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/kernels.h"

namespace fpdt::kernels {

namespace fast = cpu;

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  DeviceMemory& memory() override { return host_memory(); }

  void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                         bool accumulate) override {
    fast::embedding_forward(out, ids, table, N, h, accumulate);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) override {
    fast::embedding_backward(dtable, dout, ids, N, h);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                       double eps) override {
    fast::rmsnorm_forward(out, rstd, x, weight, N, h, eps);
  }
  void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                        const float* rstd, int64_t N, int h) override {
    fast::rmsnorm_backward(dx, dweight, dout, x, weight, rstd, N, h);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                         const float* bias, int64_t N, int h, double eps) override {
    fast::layernorm_forward(out, mean, rstd, x, weight, bias, N, h, eps);
  }
  void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                          const float* weight, const float* mean, const float* rstd, int64_t N, int h) override {
    fast::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, h);
  }
  void linear_forward(float* out, const float* x, const float* w, const float* bias, int64_t N, int I, int O,
                      bool accumulate) override {
    fast::linear_forward(out, x, w, bias, N, I, O, accumulate);
  }
  void linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x, const float* w,
                       int64_t N, int I, int O, bool accumulate_dx) override {
    fast::linear_backward(dx, dw, dbias, dout, x, w, N, I, O, accumulate_dx);
  }
  void rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                    double theta) override {
    fast::rope_forward(x, pos, N, H, D, rotary_dim, theta);
  }
  void rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, int rotary_dim,
                     double theta) override {
    fast::rope_backward(dx, pos, N, H, D, rotary_dim, theta);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
    fast::swiglu_forward(out, gate, up, n);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                       int64_t n) override {
    fast::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  void gelu_forward(float* out, const float* x, int64_t n) override { fast::gelu_forward(out, x, n); }
  void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) override {
    fast::gelu_backward(dx, dout, x, n);
  }
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_ids, int B, int64_t S, int Hq, int Hkv, int D, double scale) override {
    fast::attention_forward(out, lse, q, k, v, doc_ids, B, S, Hq, Hkv, D, scale);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                          const float* v, const float* out, const float* lse, const int32_t* doc_ids, int B,
                          int64_t S, int Hq, int Hkv, int D, double scale) override {
    fast::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, doc_ids, B, S, Hq, Hkv, D, scale);
  }
  void attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params, bool accumulate) override {
    fast::attention_chunk_forward(out, lse, params, accumulate);
  }
  void attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                             int D) override {
    fast::attention_chunk_delta(delta, dout, out, B, Cq, H, D);
  }
  void attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                const float* delta, const AttentionChunkParams& params) override {
    fast::attention_chunk_backward(dq, dk, dv, dout, lse, delta, params);
  }
  void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                             const float* mask, int64_t N, int V) override {
    fast::cross_entropy_forward(losses, lse, logits, targets, mask, N, V);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                              const float* mask, double dloss_scale, int64_t N, int V) override {
    fast::cross_entropy_backward(dlogits, logits, lse, targets, mask, dloss_scale, N, V);
  }
  void adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                    const AdamWParams& params) override {
    fast::adamw_update(param, m, v, grad, n, params);
  }
  double sum_squares(const float* x, int64_t n) override { return fast::sum_squares(x, n); }
  void scale_inplace(float* x, float alpha, int64_t n) override { fast::scale_inplace(x, alpha, n); }
};

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace fpdt::kernels
