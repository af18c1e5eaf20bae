// The cpu-guarded backend's ops (see guarded_backend.h): every pointer operand through guarded_readable
// (host pointers and null pass unchanged), then the cpu op.
#include "fpdt/kernels/guarded/guarded_backend.h"

#include "fpdt/kernels/guarded/guarded_memory.h"

namespace fpdt::kernels {

namespace {

template <typename T>
T* readable(T* handle) {
  return guarded_readable(handle);
}

WeightMatrix readable(WeightMatrix w) { return WeightMatrix(readable(w.values), readable(w.bf16)); }

AttentionParams readable(AttentionParams params) {
  params.q = readable(params.q);
  params.k = readable(params.k);
  params.v = readable(params.v);
  params.doc_ids = readable(params.doc_ids);
  return params;
}

AttentionChunkParams readable(AttentionChunkParams params) {
  params.q = readable(params.q);
  params.k = readable(params.k);
  params.v = readable(params.v);
  params.k_words = readable(params.k_words);
  params.v_words = readable(params.v_words);
  params.q_doc_ids = readable(params.q_doc_ids);
  params.kv_doc_ids = readable(params.kv_doc_ids);
  return params;
}

}  // namespace

DeviceMemory& GuardedBackend::memory() { return guarded_memory(); }

void GuardedBackend::embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int h,
                                       bool accumulate) {
  cpu_.embedding_forward(readable(out), readable(ids), readable(table), N, h, accumulate);
}
void GuardedBackend::embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int h) {
  cpu_.embedding_backward(readable(dtable), readable(dout), readable(ids), N, h);
}

void GuardedBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int64_t N, int h,
                                     double eps) {
  cpu_.rmsnorm_forward(readable(out), readable(rstd), readable(x), readable(weight), N, h, eps);
}
void GuardedBackend::rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x,
                                      const float* weight, const float* rstd, int64_t N, int h) {
  cpu_.rmsnorm_backward(readable(dx), readable(dweight), readable(dout), readable(x), readable(weight),
                        readable(rstd), N, h);
}
void GuardedBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                                       const float* bias, int64_t N, int h, double eps) {
  cpu_.layernorm_forward(readable(out), readable(mean), readable(rstd), readable(x), readable(weight), readable(bias),
                         N, h, eps);
}
void GuardedBackend::layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                                        const float* weight, const float* mean, const float* rstd, int64_t N, int h) {
  cpu_.layernorm_backward(readable(dx), readable(dweight), readable(dbias), readable(dout), readable(x),
                          readable(weight), readable(mean), readable(rstd), N, h);
}

void GuardedBackend::linear_forward(float* out, const float* x, WeightMatrix w, const float* bias, int64_t N, int I,
                                    int O, bool accumulate, Precision precision) {
  cpu_.linear_forward(readable(out), readable(x), readable(w), readable(bias), N, I, O, accumulate, precision);
}
void GuardedBackend::linear_backward(float* dx, float* dw, float* dbias, const float* dout, const float* x,
                                     WeightMatrix w, LinearShape shape, bool accumulate_dx, Precision precision) {
  cpu_.linear_backward(readable(dx), readable(dw), readable(dbias), readable(dout), readable(x), readable(w), shape,
                       accumulate_dx, precision);
}

// The RoPE table is a host parameter (ops.h).
void GuardedBackend::rope_forward(float* x, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  cpu_.rope_forward(readable(x), readable(pos), N, H, D, rope);
}
void GuardedBackend::rope_backward(float* dx, const int64_t* pos, int64_t N, int H, int D, const RopeParams& rope) {
  cpu_.rope_backward(readable(dx), readable(pos), N, H, D, rope);
}

void GuardedBackend::swiglu_forward(float* out, float* gate, float* up, int64_t n, Precision precision) {
  cpu_.swiglu_forward(readable(out), readable(gate), readable(up), n, precision);
}
void GuardedBackend::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                     int64_t n, Precision precision) {
  cpu_.swiglu_backward(readable(dgate), readable(dup), readable(dout), readable(gate), readable(up), n, precision);
}
void GuardedBackend::gelu_forward(float* out, float* x, int64_t n, Precision precision) {
  cpu_.gelu_forward(readable(out), readable(x), n, precision);
}
void GuardedBackend::gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  cpu_.gelu_backward(readable(dx), readable(dout), readable(x), n);
}

void GuardedBackend::attention_forward(float* out, float* lse, const AttentionParams& params) {
  cpu_.attention_forward(readable(out), readable(lse), readable(params));
}
void GuardedBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                        const float* lse, const AttentionParams& params) {
  cpu_.attention_backward(readable(dq), readable(dk), readable(dv), readable(dout), readable(out), readable(lse),
                          readable(params));
}

void GuardedBackend::attention_chunk_forward(float* out, float* lse, const AttentionChunkParams& params,
                                             bool accumulate) {
  cpu_.attention_chunk_forward(readable(out), readable(lse), readable(params), accumulate);
}
void GuardedBackend::attention_chunk_delta(float* delta, const float* dout, const float* out, int B, int64_t Cq, int H,
                                           int D) {
  cpu_.attention_chunk_delta(readable(delta), readable(dout), readable(out), B, Cq, H, D);
}
void GuardedBackend::attention_chunk_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse,
                                              const float* delta, const AttentionChunkParams& params) {
  cpu_.attention_chunk_backward(readable(dq), readable(dk), readable(dv), readable(dout), readable(lse),
                                readable(delta), readable(params));
}

void GuardedBackend::cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                           const float* mask, int64_t N, int V) {
  cpu_.cross_entropy_forward(readable(losses), readable(lse), readable(logits), readable(targets), readable(mask), N,
                             V);
}
void GuardedBackend::cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                            const int32_t* targets, const float* mask, double dloss_scale, int64_t N,
                                            int V) {
  cpu_.cross_entropy_backward(readable(dlogits), readable(logits), readable(lse), readable(targets), readable(mask),
                              dloss_scale, N, V);
}
// sums and indices are host memory.
void GuardedBackend::cross_entropy_sums(double* sums, const float* losses, const int32_t* targets, const float* mask,
                                        int64_t N) {
  cpu_.cross_entropy_sums(readable(sums), readable(losses), readable(targets), readable(mask), N);
}
void GuardedBackend::argmax_rows(int32_t* indices, const float* x, int64_t N, int V) {
  cpu_.argmax_rows(indices, readable(x), N, V);
}

void GuardedBackend::adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                                  const AdamWParams& params) {
  cpu_.adamw_update(readable(param), readable(m), readable(v), readable(grad), n, params);
}

// sums and count are host memory.
void GuardedBackend::sum_squares(double* sums, const float* x, int64_t n, int64_t block) {
  cpu_.sum_squares(sums, readable(x), n, block);
}
void GuardedBackend::scale_inplace(float* x, float alpha, int64_t n) { cpu_.scale_inplace(readable(x), alpha, n); }
void GuardedBackend::round_to_bf16(float* x, int64_t n) { cpu_.round_to_bf16(readable(x), n); }
void GuardedBackend::pack_bf16(uint16_t* dst, const float* src, int64_t n) {
  cpu_.pack_bf16(readable(dst), readable(src), n);
}
void GuardedBackend::unpack_bf16(float* dst, const uint16_t* src, int64_t n) {
  cpu_.unpack_bf16(readable(dst), readable(src), n);
}
void GuardedBackend::add_inplace(float* y, const float* x, int64_t n) {
  cpu_.add_inplace(readable(y), readable(x), n);
}
void GuardedBackend::count_invalid(int64_t* count, const float* x, int64_t n, bool negative_invalid) {
  cpu_.count_invalid(count, readable(x), n, negative_invalid);
}

}  // namespace fpdt::kernels
