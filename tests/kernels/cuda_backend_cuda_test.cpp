// The CUDA backend op by op against the reference backend (the spec) on fresh random inputs: copy
// to the device, run, copy back, compare with the norm-wise relative error of testing.h. Label
// `cuda`: run only on GPU machines (ctest -L cuda, scripts/gpu_check.sh); without a usable device
// every test FAILS with a message, it never skips. Tolerances (fp32 on both sides; the reference
// accumulates in float64): pointwise ops and norms 1e-5 (a few fp32 roundings per element, plus
// fp32 row sums over ≤ 1000 terms); GEMMs and attention 1e-4 (fp32 dot products over hundreds of
// terms, exp of scores up to ~10 in magnitude).
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/reference/cross_entropy.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;
using testing::random_uniform;
using testing::relative_error;

constexpr double kPointwiseTolerance = 1e-5;
constexpr double kGemmTolerance = 1e-4;
constexpr double kAttentionTolerance = 1e-4;

// An owning device copy of a host vector.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    ptr_ = static_cast<T*>(cuda_device_alloc(bytes() > 0 ? bytes() : 1));
    if (n_ > 0) cuda_copy_to_device(ptr_, host.data(), bytes());
  }
  ~DeviceArray() { cuda_device_free(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> host() const {
    std::vector<T> values(n_);
    if (n_ > 0) cuda_copy_to_host(values.data(), ptr_, bytes());
    return values;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  size_t n_;
  T* ptr_ = nullptr;
};

double check(const char* what, const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  const double error = relative_error(got, want);
  std::printf("[ error    ] %s: %.3e (tolerance %.0e)\n", what, error, tolerance);
  EXPECT_LE(error, tolerance) << what;
  return error;
}

// LSE rows may be −inf (no visible key): the same rows must be −inf on both sides, the rest close.
void check_lse(const char* what, const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  std::vector<float> got_finite, want_finite;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::isinf(got[i]), std::isinf(want[i])) << what << " row " << i;
    if (!std::isinf(want[i])) {
      got_finite.push_back(got[i]);
      want_finite.push_back(want[i]);
    }
  }
  check(what, got_finite, want_finite, tolerance);
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cuda_available())
        << "no usable CUDA device (or a build without CUDA): the `cuda` tests run only on GPU machines; "
           "build with -DFPDT_CUDA=ON and run `ctest -L cuda` where nvidia-smi shows a GPU";
    gpu_ = make_cuda_backend();
    ref_ = make_backend("reference");
  }
  std::unique_ptr<Backend> gpu_, ref_;
  Rng rng_{fresh_seed()};
};

TEST_F(CudaBackendTest, Name) { EXPECT_EQ(gpu_->name(), "cuda"); }

TEST_F(CudaBackendTest, Embedding) {
  const int64_t N = 37, V = 11;
  const int h = 70;
  std::vector<int32_t> ids(N);
  for (auto& id : ids) id = static_cast<int32_t>(rng_.below(V));  // duplicates: the backward accumulates
  const auto table = random_normal<float>(rng_, V * h);
  for (bool accumulate : {false, true}) {
    auto out = random_normal<float>(rng_, N * h);
    DeviceArray<float> d_out(out), d_table(table);
    DeviceArray<int32_t> d_ids(ids);
    gpu_->embedding_forward(d_out.get(), d_ids.get(), d_table.get(), N, h, accumulate);
    ref_->embedding_forward(out.data(), ids.data(), table.data(), N, h, accumulate);
    check(accumulate ? "embedding forward +=" : "embedding forward", d_out.host(), out, kPointwiseTolerance);
  }
  auto dtable = random_normal<float>(rng_, V * h);
  const auto dout = random_normal<float>(rng_, N * h);
  DeviceArray<float> d_dtable(dtable), d_dout(dout);
  DeviceArray<int32_t> d_ids(ids);
  gpu_->embedding_backward(d_dtable.get(), d_dout.get(), d_ids.get(), N, h);
  ref_->embedding_backward(dtable.data(), dout.data(), ids.data(), N, h);
  check("embedding backward", d_dtable.host(), dtable, kPointwiseTolerance);
}

TEST_F(CudaBackendTest, RmsNorm) {
  const int64_t N = 29;
  const int h = 1000;  // not a multiple of the block size
  const auto x = random_normal<float>(rng_, N * h);
  const auto weight = random_normal<float>(rng_, h);
  std::vector<float> out(N * h), rstd(N);
  DeviceArray<float> d_x(x), d_weight(weight), d_out(out), d_rstd(rstd);
  gpu_->rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_weight.get(), N, h, 1e-5);
  ref_->rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, h, 1e-5);
  check("rmsnorm out", d_out.host(), out, kPointwiseTolerance);
  check("rmsnorm rstd", d_rstd.host(), rstd, kPointwiseTolerance);

  const auto dout = random_normal<float>(rng_, N * h);
  auto dx = random_normal<float>(rng_, N * h);  // accumulates (+=)
  auto dweight = random_normal<float>(rng_, h);
  DeviceArray<float> d_dout(dout), d_dx(dx), d_dweight(dweight);
  gpu_->rmsnorm_backward(d_dx.get(), d_dweight.get(), d_dout.get(), d_x.get(), d_weight.get(), d_rstd.get(), N, h);
  ref_->rmsnorm_backward(dx.data(), dweight.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, h);
  check("rmsnorm dx", d_dx.host(), dx, kPointwiseTolerance);
  check("rmsnorm dweight", d_dweight.host(), dweight, kPointwiseTolerance);
}

TEST_F(CudaBackendTest, LayerNorm) {
  const int64_t N = 23;
  const int h = 333;
  for (bool with_bias : {true, false}) {
    auto x = random_normal<float>(rng_, N * h);
    for (auto& value : x) value += 3.0f;  // a mean far from zero
    const auto weight = random_normal<float>(rng_, h);
    const auto bias = random_normal<float>(rng_, h);
    std::vector<float> out(N * h), mean(N), rstd(N);
    DeviceArray<float> d_x(x), d_weight(weight), d_bias(bias), d_out(out), d_mean(mean), d_rstd(rstd);
    gpu_->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_weight.get(),
                            with_bias ? d_bias.get() : nullptr, N, h, 1e-5);
    ref_->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                            with_bias ? bias.data() : nullptr, N, h, 1e-5);
    check("layernorm out", d_out.host(), out, kPointwiseTolerance);
    check("layernorm mean", d_mean.host(), mean, kPointwiseTolerance);
    check("layernorm rstd", d_rstd.host(), rstd, kPointwiseTolerance);

    const auto dout = random_normal<float>(rng_, N * h);
    auto dx = random_normal<float>(rng_, N * h);
    auto dweight = random_normal<float>(rng_, h);
    auto dbias = random_normal<float>(rng_, h);
    DeviceArray<float> d_dout(dout), d_dx(dx), d_dweight(dweight), d_dbias(dbias);
    gpu_->layernorm_backward(d_dx.get(), d_dweight.get(), with_bias ? d_dbias.get() : nullptr, d_dout.get(),
                             d_x.get(), d_weight.get(), d_mean.get(), d_rstd.get(), N, h);
    ref_->layernorm_backward(dx.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(), x.data(),
                             weight.data(), mean.data(), rstd.data(), N, h);
    check("layernorm dx", d_dx.host(), dx, kPointwiseTolerance);
    check("layernorm dweight", d_dweight.host(), dweight, kPointwiseTolerance);
    check("layernorm dbias", d_dbias.host(), dbias, kPointwiseTolerance);
  }
}

TEST_F(CudaBackendTest, Linear) {
  const int64_t N = 45;
  const int I = 130, O = 77;
  const auto x = random_normal<float>(rng_, N * I);
  const auto w = random_normal<float>(rng_, static_cast<size_t>(O) * I, 0.1);
  const auto bias = random_normal<float>(rng_, O);
  for (bool accumulate : {false, true})
    for (bool with_bias : {false, true}) {
      auto out = random_normal<float>(rng_, N * O);
      DeviceArray<float> d_x(x), d_w(w), d_bias(bias), d_out(out);
      gpu_->linear_forward(d_out.get(), d_x.get(), d_w.get(), with_bias ? d_bias.get() : nullptr, N, I, O, accumulate);
      ref_->linear_forward(out.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, N, I, O, accumulate);
      check("linear forward", d_out.host(), out, kGemmTolerance);
    }
  const auto dout = random_normal<float>(rng_, N * O);
  for (int variant = 0; variant < 3; ++variant) {  // dx =, dx += (with dbias), no dx
    const bool accumulate_dx = variant == 1;
    const bool with_dx = variant != 2;
    auto dx = random_normal<float>(rng_, N * I);
    auto dw = random_normal<float>(rng_, static_cast<size_t>(O) * I);
    auto dbias = random_normal<float>(rng_, O);
    DeviceArray<float> d_x(x), d_w(w), d_dout(dout), d_dx(dx), d_dw(dw), d_dbias(dbias);
    gpu_->linear_backward(with_dx ? d_dx.get() : nullptr, d_dw.get(), variant == 1 ? d_dbias.get() : nullptr,
                          d_dout.get(), d_x.get(), d_w.get(), N, I, O, accumulate_dx);
    ref_->linear_backward(with_dx ? dx.data() : nullptr, dw.data(), variant == 1 ? dbias.data() : nullptr,
                          dout.data(), x.data(), w.data(), N, I, O, accumulate_dx);
    check("linear dx", d_dx.host(), dx, kGemmTolerance);
    check("linear dw", d_dw.host(), dw, kGemmTolerance);
    check("linear dbias", d_dbias.host(), dbias, kGemmTolerance);
  }
}

TEST_F(CudaBackendTest, Rope) {
  const int64_t N = 19;
  const int H = 3, D = 64;
  std::vector<int64_t> pos(N);
  for (auto& p : pos) p = static_cast<int64_t>(rng_.below(2'000'000));  // long-context positions
  for (int rotary_dim : {D, 32}) {  // full and partial rotary
    auto x = random_normal<float>(rng_, N * H * D);
    DeviceArray<float> d_x(x);
    DeviceArray<int64_t> d_pos(pos);
    gpu_->rope_forward(d_x.get(), d_pos.get(), N, H, D, rotary_dim, 500000.0);
    ref_->rope_forward(x.data(), pos.data(), N, H, D, rotary_dim, 500000.0);
    check("rope forward", d_x.host(), x, kPointwiseTolerance);
    gpu_->rope_backward(d_x.get(), d_pos.get(), N, H, D, rotary_dim, 500000.0);
    ref_->rope_backward(x.data(), pos.data(), N, H, D, rotary_dim, 500000.0);
    check("rope backward", d_x.host(), x, kPointwiseTolerance);
  }
}

TEST_F(CudaBackendTest, Activations) {
  const int64_t n = 10007;
  const auto gate = random_normal<float>(rng_, n, 3.0);
  const auto up = random_normal<float>(rng_, n);
  const auto dout = random_normal<float>(rng_, n);
  std::vector<float> out(n), dgate(n), dup(n), dx(n);
  DeviceArray<float> d_gate(gate), d_up(up), d_dout(dout), d_out(out), d_dgate(dgate), d_dup(dup), d_dx(dx);
  gpu_->swiglu_forward(d_out.get(), d_gate.get(), d_up.get(), n);
  ref_->swiglu_forward(out.data(), gate.data(), up.data(), n);
  check("swiglu forward", d_out.host(), out, kPointwiseTolerance);
  gpu_->swiglu_backward(d_dgate.get(), d_dup.get(), d_dout.get(), d_gate.get(), d_up.get(), n);
  ref_->swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  check("swiglu dgate", d_dgate.host(), dgate, kPointwiseTolerance);
  check("swiglu dup", d_dup.host(), dup, kPointwiseTolerance);
  gpu_->gelu_forward(d_out.get(), d_gate.get(), n);
  ref_->gelu_forward(out.data(), gate.data(), n);
  check("gelu forward", d_out.host(), out, kPointwiseTolerance);
  gpu_->gelu_backward(d_dx.get(), d_dout.get(), d_gate.get(), n);
  ref_->gelu_backward(dx.data(), dout.data(), gate.data(), n);
  check("gelu backward", d_dx.host(), dx, kPointwiseTolerance);
}

TEST_F(CudaBackendTest, CrossEntropy) {
  const int64_t N = 13;
  const int V = 5003;
  const auto logits = random_normal<float>(rng_, N * V, 4.0);
  std::vector<int32_t> targets(N);
  for (auto& t : targets) t = static_cast<int32_t>(rng_.below(V));
  targets[3] = reference::kIgnoreIndex;
  const auto mask = random_uniform<float>(rng_, N, 0.0, 1.0);
  for (bool with_mask : {false, true}) {
    std::vector<float> losses(N), lse(N);
    DeviceArray<float> d_logits(logits), d_mask(mask), d_losses(losses), d_lse(lse);
    DeviceArray<int32_t> d_targets(targets);
    const float* mask_dev = with_mask ? d_mask.get() : nullptr;
    const float* mask_host = with_mask ? mask.data() : nullptr;
    gpu_->cross_entropy_forward(d_losses.get(), d_lse.get(), d_logits.get(), d_targets.get(), mask_dev, N, V);
    ref_->cross_entropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), mask_host, N, V);
    check("cross-entropy losses", d_losses.host(), losses, kPointwiseTolerance);
    check("cross-entropy lse", d_lse.host(), lse, kPointwiseTolerance);
    // In place (dlogits aliases logits), as the model uses it.
    auto dlogits = logits;
    gpu_->cross_entropy_backward(d_logits.get(), d_logits.get(), d_lse.get(), d_targets.get(), mask_dev, 0.25, N, V);
    ref_->cross_entropy_backward(dlogits.data(), dlogits.data(), lse.data(), targets.data(), mask_host, 0.25, N, V);
    check("cross-entropy dlogits (in place)", d_logits.host(), dlogits, kPointwiseTolerance);
  }
}

TEST_F(CudaBackendTest, AdamWAndReductions) {
  const int64_t n = 100003;
  auto param = random_normal<float>(rng_, n);
  auto m = random_normal<float>(rng_, n, 0.1);
  auto v = random_uniform<float>(rng_, n, 0.0, 0.01);
  const auto grad = random_normal<float>(rng_, n);
  AdamWParams params;
  params.lr = 3e-3;
  params.weight_decay = 0.1;
  params.step = 7;
  DeviceArray<float> d_param(param), d_m(m), d_v(v), d_grad(grad);
  gpu_->adamw_update(d_param.get(), d_m.get(), d_v.get(), d_grad.get(), n, params);
  ref_->adamw_update(param.data(), m.data(), v.data(), grad.data(), n, params);
  check("adamw param", d_param.host(), param, kPointwiseTolerance);
  check("adamw m", d_m.host(), m, kPointwiseTolerance);
  check("adamw v", d_v.host(), v, kPointwiseTolerance);

  const double got = gpu_->sum_squares(d_grad.get(), n), want = ref_->sum_squares(grad.data(), n);
  std::printf("[ error    ] sum_squares: %.3e\n", std::fabs(got - want) / want);
  EXPECT_LE(std::fabs(got - want) / want, 1e-12);  // float64 accumulation on both sides, only the order differs
  auto x = grad;
  DeviceArray<float> d_x(x);
  gpu_->scale_inplace(d_x.get(), 0.37f, n);
  ref_->scale_inplace(x.data(), 0.37f, n);
  check("scale_inplace", d_x.host(), x, 0.0);  // one fp32 multiply: bitwise
}

// Host and device copies of one chunk pair's inputs.
struct ChunkCase {
  AttentionChunkParams host, device;
  std::vector<float> q, k, v;
  std::vector<int32_t> q_docs, kv_docs;
  std::unique_ptr<DeviceArray<float>> d_q, d_k, d_v;
  std::unique_ptr<DeviceArray<int32_t>> d_q_docs, d_kv_docs;

  ChunkCase(Rng& rng, int B, int64_t Cq, int64_t Ck, int H, int Hkv, int D, int64_t q_begin, int64_t kv_begin,
            bool documents) {
    q = random_normal<float>(rng, B * Cq * H * D);
    k = random_normal<float>(rng, B * Ck * Hkv * D);
    v = random_normal<float>(rng, B * Ck * Hkv * D);
    d_q = std::make_unique<DeviceArray<float>>(q);
    d_k = std::make_unique<DeviceArray<float>>(k);
    d_v = std::make_unique<DeviceArray<float>>(v);
    host.B = device.B = B;
    host.Cq = device.Cq = Cq;
    host.Ck = device.Ck = Ck;
    host.H = device.H = H;
    host.Hkv = device.Hkv = Hkv;
    host.D = device.D = D;
    host.q_begin = device.q_begin = q_begin;
    host.kv_begin = device.kv_begin = kv_begin;
    host.scale = device.scale = 1.0 / std::sqrt(static_cast<double>(D));
    host.q = q.data();
    host.k = k.data();
    host.v = v.data();
    device.q = d_q->get();
    device.k = d_k->get();
    device.v = d_v->get();
    if (documents) {  // document ids non-decreasing along global positions, a few documents
      auto doc_of = [](int b, int64_t position) { return static_cast<int32_t>((position * 7 + b * 3) / 97); };
      for (int b = 0; b < B; ++b) {
        for (int64_t i = 0; i < Cq; ++i) q_docs.push_back(doc_of(b, q_begin + i));
        for (int64_t j = 0; j < Ck; ++j) kv_docs.push_back(doc_of(b, kv_begin + j));
      }
      d_q_docs = std::make_unique<DeviceArray<int32_t>>(q_docs);
      d_kv_docs = std::make_unique<DeviceArray<int32_t>>(kv_docs);
      host.q_doc_ids = q_docs.data();
      host.kv_doc_ids = kv_docs.data();
      device.q_doc_ids = d_q_docs->get();
      device.kv_doc_ids = d_kv_docs->get();
    }
  }
};

// One q chunk attending two kv chunks merged by LSE (the earlier one, then the diagonal one), then
// delta and the backward of both blocks from the final out and lse — the FPDT pattern.
void run_chunk_pair(Backend& gpu, Backend& ref, Rng& rng, int B, int64_t C, int H, int Hkv, int D, bool documents) {
  std::printf("[ case     ] B=%d C=%lld H=%d Hkv=%d D=%d documents=%d\n", B, static_cast<long long>(C), H, Hkv, D,
              documents ? 1 : 0);
  ChunkCase early(rng, B, C, C, H, Hkv, D, /*q_begin=*/C, /*kv_begin=*/0, documents);
  ChunkCase diagonal(rng, B, C, C, H, Hkv, D, /*q_begin=*/C, /*kv_begin=*/C, documents);
  // The q rows are the same in both pairs: share them.
  diagonal.q = early.q;
  diagonal.host.q = diagonal.q.data();
  diagonal.device.q = early.device.q;

  const size_t out_size = static_cast<size_t>(B) * C * H * D, stat_size = static_cast<size_t>(B) * H * C;
  std::vector<float> out(out_size), lse(stat_size);
  DeviceArray<float> d_out(out), d_lse(lse);
  gpu.attention_chunk_forward(d_out.get(), d_lse.get(), early.device, false);
  ref.attention_chunk_forward(out.data(), lse.data(), early.host, false);
  check("chunk forward (first block) out", d_out.host(), out, kAttentionTolerance);
  check_lse("chunk forward (first block) lse", d_lse.host(), lse, kAttentionTolerance);
  gpu.attention_chunk_forward(d_out.get(), d_lse.get(), diagonal.device, true);
  ref.attention_chunk_forward(out.data(), lse.data(), diagonal.host, true);
  check("chunk forward (merged) out", d_out.host(), out, kAttentionTolerance);
  check_lse("chunk forward (merged) lse", d_lse.host(), lse, kAttentionTolerance);

  // Continue both sides from the reference's final out/lse so the backward is compared on equal inputs.
  const auto dout = random_normal<float>(rng, out_size);
  std::vector<float> delta(stat_size);
  DeviceArray<float> d_dout(dout), d_final_out(out), d_final_lse(lse), d_delta(delta);
  gpu.attention_chunk_delta(d_delta.get(), d_dout.get(), d_final_out.get(), B, C, H, D);
  ref.attention_chunk_delta(delta.data(), dout.data(), out.data(), B, C, H, D);
  check("chunk delta", d_delta.host(), delta, kPointwiseTolerance);
  DeviceArray<float> d_ref_delta(delta);

  auto dq = random_normal<float>(rng, out_size);  // all three accumulate (+=)
  DeviceArray<float> d_dq(dq);
  for (ChunkCase* pair : {&early, &diagonal}) {
    auto dk = random_normal<float>(rng, static_cast<size_t>(B) * C * Hkv * D);
    auto dv = random_normal<float>(rng, static_cast<size_t>(B) * C * Hkv * D);
    DeviceArray<float> d_dk(dk), d_dv(dv);
    gpu.attention_chunk_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_final_lse.get(),
                                 d_ref_delta.get(), pair->device);
    ref.attention_chunk_backward(dq.data(), dk.data(), dv.data(), dout.data(), lse.data(), delta.data(), pair->host);
    check("chunk backward dk", d_dk.host(), dk, kAttentionTolerance);
    check("chunk backward dv", d_dv.host(), dv, kAttentionTolerance);
  }
  check("chunk backward dq", d_dq.host(), dq, kAttentionTolerance);
}

TEST_F(CudaBackendTest, AttentionChunkPairs) {
  run_chunk_pair(*gpu_, *ref_, rng_, 2, 45, 4, 2, 64, false);   // GQA, C not a multiple of the tiles
  run_chunk_pair(*gpu_, *ref_, rng_, 1, 70, 4, 4, 128, true);   // documents (some rows see nothing)
  run_chunk_pair(*gpu_, *ref_, rng_, 1, 33, 6, 2, 80, false);   // D not a multiple of 32
  run_chunk_pair(*gpu_, *ref_, rng_, 1, 20, 2, 1, 256, false);  // the largest head dim
}

TEST_F(CudaBackendTest, AttentionChunkWithoutVisibleKeys) {
  // The kv block lies entirely after the q block: every row sees nothing; out = 0, lse = −inf, and
  // with accumulate the rows are left untouched.
  ChunkCase pair(rng_, 1, 16, 16, 2, 1, 32, /*q_begin=*/0, /*kv_begin=*/100, false);
  std::vector<float> out = random_normal<float>(rng_, 16 * 2 * 32), lse(2 * 16, 1.5f);
  DeviceArray<float> d_out(out), d_lse(lse);
  gpu_->attention_chunk_forward(d_out.get(), d_lse.get(), pair.device, true);
  check("untouched out", d_out.host(), out, 0.0);
  check("untouched lse", d_lse.host(), lse, 0.0);
  gpu_->attention_chunk_forward(d_out.get(), d_lse.get(), pair.device, false);
  for (float value : d_out.host()) EXPECT_EQ(value, 0.0f);
  for (float value : d_lse.host()) EXPECT_TRUE(std::isinf(value) && value < 0);
}

TEST_F(CudaBackendTest, FullAttention) {
  const int B = 2, Hq = 4, Hkv = 2, D = 64;
  const int64_t S = 77;
  for (bool documents : {false, true}) {
    const auto q = random_normal<float>(rng_, B * S * Hq * D);
    const auto k = random_normal<float>(rng_, B * S * Hkv * D);
    const auto v = random_normal<float>(rng_, B * S * Hkv * D);
    std::vector<int32_t> docs(B * S);
    for (int64_t i = 0; i < B * S; ++i) docs[i] = static_cast<int32_t>((i % S) / 30);
    const int32_t* docs_host = documents ? docs.data() : nullptr;
    DeviceArray<float> d_q(q), d_k(k), d_v(v);
    DeviceArray<int32_t> d_docs(docs);
    const int32_t* docs_dev = documents ? d_docs.get() : nullptr;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<float> out(q.size()), lse(static_cast<size_t>(B) * Hq * S);
    DeviceArray<float> d_out(out), d_lse(lse);
    gpu_->attention_forward(d_out.get(), d_lse.get(), d_q.get(), d_k.get(), d_v.get(), docs_dev, B, S, Hq, Hkv, D,
                            scale);
    ref_->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), docs_host, B, S, Hq, Hkv, D, scale);
    check("attention out", d_out.host(), out, kAttentionTolerance);
    check_lse("attention lse", d_lse.host(), lse, kAttentionTolerance);

    const auto dout = random_normal<float>(rng_, out.size());
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    DeviceArray<float> d_dout(dout), d_ref_out(out), d_ref_lse(lse), d_dq(dq), d_dk(dk), d_dv(dv);
    gpu_->attention_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_q.get(), d_k.get(), d_v.get(),
                             d_ref_out.get(), d_ref_lse.get(), docs_dev, B, S, Hq, Hkv, D, scale);
    ref_->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                             lse.data(), docs_host, B, S, Hq, Hkv, D, scale);
    check("attention dq", d_dq.host(), dq, kAttentionTolerance);
    check("attention dk", d_dk.host(), dk, kAttentionTolerance);
    check("attention dv", d_dv.host(), dv, kAttentionTolerance);
  }
}

TEST_F(CudaBackendTest, RejectsHeadDimAbove256) {
  AttentionChunkParams params;
  params.B = 1;
  params.Cq = params.Ck = 1;
  params.H = params.Hkv = 1;
  params.D = 512;
  float* none = nullptr;
  EXPECT_THROW(gpu_->attention_chunk_forward(none, none, params, false), Error);
}

}  // namespace
}  // namespace fpdt::kernels
