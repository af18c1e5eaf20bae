// The Backend conformance table (backend_ops.h) on the cuda backend: every op against the float64
// reference at several shapes, inputs copied to the device and results back — bf16 attention on cuDNN's
// fused attention where it takes a block, and the attention rows once more on the CUDA-core kernels alone
// (its fallback); then what is particular to the CUDA bf16 paths (operands rounded once, where the kernels
// read them), cuDNN's attention over the FPDT chunk schedule, and the copies' promises. Label `cuda`: run only
// on GPU machines (ctest -L cuda, scripts/gpu_check.sh); without a usable device every test FAILS
// with a message, it never skips.
#include <cstdlib>

#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/tensor/dtype.h"
#include "kernels/backend_ops.h"
#include "kernels/bf16_words.h"

namespace fpdt::kernels::conformance {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps,
                         ::testing::Combine(::testing::Values("cuda"), ::testing::Range<size_t>(0, rows().size())),
                         row_test_name);

// FPDT_CUDNN_ATTENTION for the life of a scope: "off" sends every attention block of the backends made in it
// to the CUDA-core kernels (kernels/cuda/cudnn_sdpa.h reads it on a backend's first such block).
class ScopedCudnnSwitch {
 public:
  explicit ScopedCudnnSwitch(const char* value) {
    const char* old = std::getenv(kName);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(kName, value, 1);
  }
  ~ScopedCudnnSwitch() {
    if (had_)
      setenv(kName, old_.c_str(), 1);
    else
      unsetenv(kName);
  }
  ScopedCudnnSwitch(const ScopedCudnnSwitch&) = delete;
  ScopedCudnnSwitch& operator=(const ScopedCudnnSwitch&) = delete;

 private:
  static constexpr const char* kName = "FPDT_CUDNN_ATTENTION";
  bool had_ = false;
  std::string old_;
};

size_t row_index(const std::string& name) {
  for (size_t i = 0; i < rows().size(); ++i)
    if (rows()[i].name == name) return i;
  ADD_FAILURE() << "no conformance row " << name;
  return 0;
}

// The attention rows on the CUDA-core kernels alone (cuDNN switched off): the fallback of every block cuDNN
// refuses, and fp32's path, held to the spec's own bounds in bf16 (the rows pick them: no block is cuDNN's).
class CudaCoreAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaCoreAttention, MatchesReference) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const ScopedCudnnSwitch off("off");
  const auto backend = make_backend(BackendKind::cuda);
  Rng rng(fresh_seed());
  OpCheck check{*backend, memory_of("cuda"), rng};
  rows()[row_index(GetParam())].check(check);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaCoreAttention, ::testing::Values("attention", "attention_chunk"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A bf16 run's attention runs on cuDNN's fused attention: on a GPU machine this fails unless the build has it
// and libcudnn loads (the sentence says why not: the run's table says the same), and cuDNN must take every
// block of the FPDT chunk schedule — the diagonal with its causal band, the blocks below it unmasked — in
// both directions, at the head dims and GQA ratios of the models fpdt trains.
TEST(CudnnAttention, TakesEveryBlockOfTheChunkSchedule) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const std::string kernels = cuda_attention_kernels(Precision::bf16);
  ASSERT_EQ(kernels.rfind("cuDNN", 0), 0u) << "bf16 attention runs on: " << kernels;
  const auto backend = make_backend(BackendKind::cuda);
  constexpr int64_t C = 512;
  for (const int D : {64, 128})
    for (const int Hkv : {8, 2})
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          AttentionChunkParams p;
          p.B = 1;
          p.Cq = p.Ck = C;
          p.H = 8;
          p.Hkv = Hkv;
          p.D = D;
          p.q_begin = i * C;
          p.kv_begin = j * C;
          p.scale = 1.0 / std::sqrt(static_cast<double>(D));
          p.precision = Precision::bf16;
          const std::string block = "D=" + std::to_string(D) + " Hkv=" + std::to_string(Hkv) + " q chunk " +
                                    std::to_string(i) + ", kv chunk " + std::to_string(j);
          EXPECT_TRUE(cuda_attention_on_cudnn(*backend, p, false)) << "forward of " << block << " (see the log)";
          EXPECT_TRUE(cuda_attention_on_cudnn(*backend, p, true)) << "backward of " << block << " (see the log)";
        }
}

// The FPDT pattern on cuDNN end to end: a sequence cut into chunks, q chunk i against kv chunks 0..i merged
// by LSE, Δ per q chunk, the backward of every block from the merged out and LSE, dq summed over kv chunks
// and dk, dv over q chunks — against full attention in float64 on the unrounded inputs (chunked = unchunked),
// within tolerances.h's cuDNN bounds (kAttentionBf16*Cudnn): the roundings behind an output do not grow with
// the blocks merged (each block's o and gradients are rounded once; merging by LSE is a convex combination,
// and the sums over blocks are fp32). The backward runs twice: cuDNN's deterministic algorithm, bit for bit.
TEST(CudnnAttention, ChunkScheduleMatchesFullAttention) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend(BackendKind::cuda);
  const Memory memory = memory_of("cuda");
  Rng rng(fresh_seed());
  const int B = 2, H = 8, Hkv = 2, D = 64, chunks = 4;
  const int64_t C = 96, S = C * chunks;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto q = random_normal<float>(rng, size_t{B} * S * H * D), k = random_normal<float>(rng, size_t{B} * S * Hkv * D),
             v = random_normal<float>(rng, size_t{B} * S * Hkv * D), dout = random_normal<float>(rng, size_t{B} * S * H * D);
  // Chunk c of a (B, S, heads, D) tensor as its own (B, C, heads, D) tensor, and back.
  auto chunk_of = [&](const std::vector<float>& full, int heads, int64_t c) {
    std::vector<float> part(size_t{B} * C * heads * D);
    const size_t row = static_cast<size_t>(heads) * D;
    for (int b = 0; b < B; ++b)
      std::copy_n(full.begin() + static_cast<std::ptrdiff_t>((b * S + c * C) * row), C * row,
                  part.begin() + static_cast<std::ptrdiff_t>(b * C * row));
    return part;
  };
  auto place_chunk = [&](std::vector<float>& full, const std::vector<float>& part, int heads, int64_t c) {
    const size_t row = static_cast<size_t>(heads) * D;
    for (int b = 0; b < B; ++b)
      std::copy_n(part.begin() + static_cast<std::ptrdiff_t>(b * C * row), C * row,
                  full.begin() + static_cast<std::ptrdiff_t>((b * S + c * C) * row));
  };
  std::vector<std::unique_ptr<Placed<float>>> q_c, k_c, v_c, dout_c, out_c, lse_c, delta_c;
  for (int64_t c = 0; c < chunks; ++c) {
    q_c.push_back(std::make_unique<Placed<float>>(memory, chunk_of(q, H, c)));
    k_c.push_back(std::make_unique<Placed<float>>(memory, chunk_of(k, Hkv, c)));
    v_c.push_back(std::make_unique<Placed<float>>(memory, chunk_of(v, Hkv, c)));
    dout_c.push_back(std::make_unique<Placed<float>>(memory, chunk_of(dout, H, c)));
    out_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * C * H * D, 7.0f)));
    lse_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * H * C, 7.0f)));
    delta_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * H * C, 7.0f)));
  }
  auto block = [&](int64_t i, int64_t j) {
    return AttentionChunkParams{.q = q_c[i]->get(), .k = k_c[j]->get(), .v = v_c[j]->get(), .B = B, .Cq = C,
                                .Ck = C, .H = H, .Hkv = Hkv, .D = D, .q_begin = i * C, .kv_begin = j * C,
                                .scale = scale, .precision = Precision::bf16};
  };
  for (int64_t i = 0; i < chunks; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      ASSERT_TRUE(cuda_attention_on_cudnn(*backend, block(i, j), false)) << "block " << i << ", " << j;
      ASSERT_TRUE(cuda_attention_on_cudnn(*backend, block(i, j), true)) << "block " << i << ", " << j;
      backend->attention_chunk_forward(out_c[i]->get(), lse_c[i]->get(), block(i, j), j > 0);
    }
  for (int64_t i = 0; i < chunks; ++i)
    backend->attention_chunk_delta(delta_c[i]->get(), dout_c[i]->get(), out_c[i]->get(), B, C, H, D);
  struct Gradients {
    std::vector<float> dq, dk, dv;
  };
  auto backward = [&] {
    std::vector<std::unique_ptr<Placed<float>>> dq_c, dk_c, dv_c;
    for (int64_t c = 0; c < chunks; ++c) {
      dq_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * C * H * D, 0.0f)));
      dk_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * C * Hkv * D, 0.0f)));
      dv_c.push_back(std::make_unique<Placed<float>>(memory, std::vector<float>(size_t{B} * C * Hkv * D, 0.0f)));
    }
    for (int64_t j = 0; j < chunks; ++j)  // the paper's order: outer kv chunk, inner q chunks from it on
      for (int64_t i = j; i < chunks; ++i)
        backend->attention_chunk_backward(dq_c[i]->get(), dk_c[j]->get(), dv_c[j]->get(), dout_c[i]->get(),
                                          lse_c[i]->get(), delta_c[i]->get(), block(i, j));
    Gradients g{std::vector<float>(q.size()), std::vector<float>(k.size()), std::vector<float>(v.size())};
    for (int64_t c = 0; c < chunks; ++c) {
      place_chunk(g.dq, dq_c[c]->host(), H, c);
      place_chunk(g.dk, dk_c[c]->host(), Hkv, c);
      place_chunk(g.dv, dv_c[c]->host(), Hkv, c);
    }
    return g;
  };
  const Gradients got = backward();
  const Gradients again = backward();
  EXPECT_EQ(got.dq, again.dq) << "cuDNN's backward is not deterministic (dq)";
  EXPECT_EQ(got.dk, again.dk) << "cuDNN's backward is not deterministic (dk)";
  EXPECT_EQ(got.dv, again.dv) << "cuDNN's backward is not deterministic (dv)";

  std::vector<float> out(q.size()), lse(size_t{B} * H * S);
  for (int64_t c = 0; c < chunks; ++c) {
    place_chunk(out, out_c[c]->host(), H, c);
    const auto part = lse_c[c]->host();  // (B, H, C) into (B, H, S)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        std::copy_n(part.begin() + static_cast<std::ptrdiff_t>((b * H + h) * C), C,
                    lse.begin() + static_cast<std::ptrdiff_t>((b * H + h) * S + c * C));
  }
  const std::vector<double> q64 = to_double(q), k64 = to_double(k), v64 = to_double(v);
  const BasicAttentionParams<double> whole{.q = q64.data(), .k = k64.data(), .v = v64.data(), .B = B, .S = S, .H = H,
                                           .Hkv = Hkv, .D = D, .scale = scale};
  std::vector<double> out_want(q.size()), lse_want(lse.size()), dq_want(q.size()), dk_want(k.size()),
      dv_want(v.size());
  reference::attention_forward(out_want.data(), lse_want.data(), whole);
  reference::attention_backward(dq_want.data(), dk_want.data(), dv_want.data(), to_double(dout).data(),
                                out_want.data(), lse_want.data(), whole);
  expect_close("cuDNN chunk schedule out", out, out_want, testing::kAttentionBf16ForwardCudnn);
  expect_close("cuDNN chunk schedule lse", lse, lse_want, testing::kAttentionBf16Lse);
  expect_close("cuDNN chunk schedule dq", got.dq, dq_want, testing::kAttentionBf16BackwardCudnn);
  expect_close("cuDNN chunk schedule dk", got.dk, dk_want, testing::kAttentionBf16BackwardCudnn);
  expect_close("cuDNN chunk schedule dv", got.dv, dv_want, testing::kAttentionBf16BackwardCudnn);
}

// K and V given as bf16 words (a bf16 KV cache, read as stored) are their values given as floats, bit for bit:
// on cuDNN, which takes the words as its operands (no copy; q is packed as always), and on the CUDA-core kernels
// (cuDNN off), which widen them first. A block below the diagonal, out and lse accumulated into (the merge
// reads them too).
TEST(CudnnAttention, KvAsBf16WordsAreTheirValues) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const Memory memory = memory_of("cuda");
  Rng rng(fresh_seed());
  const int B = 2, H = 8, Hkv = 2, D = 64;
  const int64_t Cq = 96, Ck = 128;
  const auto q = random_normal<float>(rng, size_t{B} * Cq * H * D);
  const testing::Bf16Values k = testing::random_bf16(rng, size_t{B} * Ck * Hkv * D);
  const testing::Bf16Values v = testing::random_bf16(rng, k.words.size());
  const Placed<float> q_placed(memory, q), k_placed(memory, k.values), v_placed(memory, v.values);
  const Placed<uint16_t> k_words_placed(memory, k.words), v_words_placed(memory, v.words);
  const AttentionChunkParams floats{.q = q_placed.get(), .k = k_placed.get(), .v = v_placed.get(), .B = B, .Cq = Cq,
                                    .Ck = Ck, .H = H, .Hkv = Hkv, .D = D, .q_begin = 2 * Ck, .kv_begin = 0,
                                    .scale = 1.0 / std::sqrt(static_cast<double>(D)), .precision = Precision::bf16};
  AttentionChunkParams words = floats;
  words.k = words.v = nullptr;
  words.k_words = k_words_placed.get();
  words.v_words = v_words_placed.get();
  const size_t rows = size_t{B} * Cq * H;
  for (const char* cudnn : {"on", "off"}) {
    const ScopedCudnnSwitch path(cudnn);
    const auto backend = make_backend(BackendKind::cuda);
    EXPECT_EQ(cuda_attention_on_cudnn(*backend, floats, false), std::string(cudnn) == "on") << "cuDNN " << cudnn;
    auto run = [&](const AttentionChunkParams& block) {
      const Placed<float> out(memory, std::vector<float>(rows * D, 3.0f));
      const Placed<float> lse(memory, std::vector<float>(rows, 0.5f));
      backend->attention_chunk_forward(out.get(), lse.get(), block, /*accumulate=*/true);
      return std::pair{out.host(), lse.host()};
    };
    EXPECT_EQ(run(words), run(floats)) << "cuDNN " << cudnn;
  }
}

// DeviceMemory::upload promises that the host bytes may be reused when it returns (device_memory.h), from
// pinned memory too — where a cudaMemcpyAsync returns at once and copies whenever the stream gets to it. The
// stream is kept busy first (device copies of 256 MiB, milliseconds of work), so a copy still queued when the
// host overwrites its source would read the new bytes.
TEST(CudaMemory, UploadFromPinnedMemoryMayReuseTheHostBytesAtOnce) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend(BackendKind::cuda);
  DeviceMemory& memory = backend->memory();
  constexpr size_t kBusyBytes = size_t(256) << 20, kBytes = size_t(8) << 20;
  const auto busy_a = memory.allocate(kBusyBytes, "busy work", ""), busy_b = memory.allocate(kBusyBytes, "busy work", "");
  const auto target = memory.allocate(kBytes, "upload target", "");
  auto* host = static_cast<uint8_t*>(cuda_pinned_alloc(kBytes));
  std::vector<uint8_t> got(kBytes);
  for (int round = 0; round < 3; ++round) {
    const auto first = static_cast<uint8_t>(0x11 * (round + 1));
    for (int copy = 0; copy < 8; ++copy) memory.copy(busy_b->data(), busy_a->data(), kBusyBytes);
    std::memset(host, first, kBytes);
    memory.upload(target->data(), host, kBytes);
    std::memset(host, 0xEE, kBytes);  // reused at once
    memory.download(got.data(), target->data(), kBytes);
    EXPECT_EQ(std::count(got.begin(), got.end(), first), static_cast<std::ptrdiff_t>(kBytes))
        << "round " << round << ": the upload read the host bytes after upload() returned";
  }
  cuda_pinned_free(host);
}

// cuda_copy_to_device (the tests' own uploads) is synchronous for every stream: a kernel on the backend's
// non-blocking stream launched right after it reads the new bytes, not the DMA still landing.
TEST(CudaMemory, CopyToDeviceHasLandedForTheBackendsStream) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend(BackendKind::cuda);
  constexpr int64_t n = int64_t{64} << 20;  // 256 MiB of floats: a DMA of many milliseconds
  void* device = cuda_device_alloc(static_cast<size_t>(n) * sizeof(float));
  std::vector<float> host(static_cast<size_t>(n), 0.0f);
  cuda_copy_to_device(device, host.data(), host.size() * sizeof(float));  // all zero first
  for (int round = 0; round < 3; ++round) {
    std::fill(host.begin(), host.end(), std::numeric_limits<float>::quiet_NaN());
    cuda_copy_to_device(device, host.data(), host.size() * sizeof(float));
    int64_t invalid = -1;
    backend->count_invalid(&invalid, static_cast<float*>(device), n, false);
    EXPECT_EQ(invalid, n) << "round " << round << ": the kernel read the device before the copy landed";
    std::fill(host.begin(), host.end(), 0.0f);
    cuda_copy_to_device(device, host.data(), host.size() * sizeof(float));
    backend->count_invalid(&invalid, static_cast<float*>(device), n, false);
    EXPECT_EQ(invalid, 0) << "round " << round << ": the kernel read the device before the copy landed";
  }
  cuda_device_free(device);
}

// The CUDA attention kernels have one instantiation per ⌈D/32⌉ up to 256: a larger head dim is one
// clear error, not a launch failure.
TEST(CudaBackendLimits, RejectsHeadDimAbove256) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend(BackendKind::cuda);
  AttentionChunkParams params;
  params.B = 1;
  params.Cq = params.Ck = 1;
  params.H = params.Hkv = 1;
  params.D = 512;
  float* none = nullptr;
  EXPECT_THROW(backend->attention_chunk_forward(none, none, params, false), Error);
}

std::vector<float> rounded_to_bf16(std::vector<float> values) {
  for (float& value : values) value = round_to_bf16(value);
  return values;
}

std::vector<double> magnitudes(const std::vector<float>& values) {
  std::vector<double> result(values.size());
  for (size_t i = 0; i < values.size(); ++i) result[i] = std::fabs(double{values[i]});
  return result;
}

// Two GEMMs over the same bf16-valued operands (their products exact in fp32), summed in any order with
// any rounding of the additions: the bf16 one on tensor cores, which truncate their sums (an addition errs
// by less than 2u there, u = 2^-24), the fp32 one on CUDA cores (at most u). Each output then differs by at
// most (2 + 1)·(K − 1)·u·Σ_k |a_k b_k| to first order (Higham, Accuracy and Stability of Numerical
// Algorithms, §3.1, for any summation tree); 4·K·u bounds it. `magnitude` is Σ_k |a_k b_k| per output.
void expect_within_sum_bound(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                             const std::vector<double>& magnitude, int64_t K) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_EQ(got.size(), magnitude.size()) << what;
  const double per_term = 4.0 * static_cast<double>(K) * testing::kFp32Rounding;
  double worst = 0.0;  // the largest |got − want| / (per_term · Σ|a b|)
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = per_term * magnitude[i], difference = std::fabs(double{got[i]} - want[i]);
    if (!(difference <= bound)) {
      ADD_FAILURE() << what << ": output " << i << " differs by " << difference << ", bound " << bound;
      return;
    }
    worst = std::max(worst, bound > 0 ? difference / bound : 0.0);
  }
  std::printf("[ error    ] %s: at most %.3f of the bound 4·K·u·Σ|a·b| (K = %lld)\n", what.c_str(), worst,
              static_cast<long long>(K));
}

// The CUDA bf16 paths round each product's input once, where the kernel reads it (linear: the copies
// cuBLASLt reads; attention: the tiles in shared memory). So (1) inputs that are already bf16 values
// give the same bits as the raw ones, (2) on bf16-valued inputs the bf16 GEMM is the fp32 one up to the
// order and rounding of its fp32 sums (expect_within_sum_bound), and (3) on raw inputs it is not the
// fp32 GEMM: the rounding took place. The backend_ops.h rows check both paths against the
// float64 reference; these pin where the CUDA kernels round.
TEST(CudaBf16, LinearRoundsXWAndDoutOnceAndAccumulatesInFp32) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend(BackendKind::cuda);
  const Memory memory = memory_of("cuda");
  Rng rng(fresh_seed());
  const int64_t N = 300;
  const int I = 136, O = 72;
  const auto x = random_normal<float>(rng, N * I), w = random_normal<float>(rng, int64_t{O} * I, 0.05);
  const auto dout = random_normal<float>(rng, N * O);
  const Placed<float> x_raw(memory, x), w_raw(memory, w), dout_raw(memory, dout);
  const Placed<float> x_bf16(memory, rounded_to_bf16(x)), w_bf16(memory, rounded_to_bf16(w)),
      dout_bf16(memory, rounded_to_bf16(dout));
  // Σ|a·b| of each output over the bf16-valued operands, by the reference GEMMs on magnitudes: forward
  // Σ_i |x||w| (K = I), dx Σ_o |dout||w| (K = O), dw Σ_n |dout||x| (K = N).
  const auto x_mag = magnitudes(rounded_to_bf16(x)), w_mag = magnitudes(rounded_to_bf16(w)),
             dout_mag = magnitudes(rounded_to_bf16(dout));
  std::vector<double> out_mag(N * O), dx_mag(N * I), dw_mag(int64_t{O} * I, 0.0);
  reference::linear_forward<double>(out_mag.data(), x_mag.data(), w_mag.data(), nullptr, N, I, O, false);
  reference::linear_backward<double>(dx_mag.data(), dw_mag.data(), nullptr, dout_mag.data(), x_mag.data(),
                                     w_mag.data(), N, I, O, false);
  // bf16 rounding moves each input by up to 2^-8 of itself; over random terms a product's relative error
  // is ~2^-8 and the norm-wise error of a sum of them ~1e-3. 1e-4 is far above fp32's reordering (~1e-6)
  // and far below that: an unrounded operand cannot pass.
  constexpr double kRoundingSeen = 1e-4;

  auto forward = [&](const Placed<float>& x_in, const Placed<float>& w_in, Precision precision) {
    const Placed<float> out(memory, std::vector<float>(N * O, 7.0f));
    backend->linear_forward(out.get(), x_in.get(), w_in.get(), nullptr, N, I, O, false, precision);
    return out.host();
  };
  const auto bf16_raw = forward(x_raw, w_raw, Precision::bf16);
  EXPECT_EQ(bf16_raw, forward(x_bf16, w_bf16, Precision::bf16)) << "linear_forward bf16: bf16-valued inputs differ";
  const auto fp32_on_bf16 = forward(x_bf16, w_bf16, Precision::fp32);
  expect_within_sum_bound("linear_forward bf16 vs fp32 on bf16-valued x, w", bf16_raw, fp32_on_bf16, out_mag, I);
  EXPECT_GT(relative_error(bf16_raw, forward(x_raw, w_raw, Precision::fp32)), kRoundingSeen)
      << "linear_forward bf16 on raw inputs equals fp32: nothing was rounded";

  struct Gradients {
    std::vector<float> dx, dw, dbias;
  };
  auto backward = [&](const Placed<float>& x_in, const Placed<float>& w_in, const Placed<float>& dout_in,
                      Precision precision) {
    const Placed<float> dx(memory, std::vector<float>(N * I, 7.0f));
    const Placed<float> dw(memory, std::vector<float>(int64_t{O} * I, 0.0f)), dbias(memory, std::vector<float>(O, 0.0f));
    backend->linear_backward(dx.get(), dw.get(), dbias.get(), dout_in.get(), x_in.get(), w_in.get(), {N, I, O}, false,
                             precision);
    return Gradients{dx.host(), dw.host(), dbias.host()};
  };
  const Gradients raw = backward(x_raw, w_raw, dout_raw, Precision::bf16);
  const Gradients pre = backward(x_bf16, w_bf16, dout_bf16, Precision::bf16);
  EXPECT_EQ(raw.dx, pre.dx) << "linear_backward bf16 dx: bf16-valued inputs differ";
  EXPECT_EQ(raw.dw, pre.dw) << "linear_backward bf16 dw: bf16-valued inputs differ";
  const Gradients fp32_on_bf16_grads = backward(x_bf16, w_bf16, dout_bf16, Precision::fp32);
  expect_within_sum_bound("linear_backward bf16 vs fp32 dx", raw.dx, fp32_on_bf16_grads.dx, dx_mag, O);
  expect_within_sum_bound("linear_backward bf16 vs fp32 dw", raw.dw, fp32_on_bf16_grads.dw, dw_mag, N);
  // dbias is fp32 in both precisions: the same column sums of the same (unrounded) dout, bit for bit.
  EXPECT_EQ(raw.dbias, backward(x_raw, w_raw, dout_raw, Precision::fp32).dbias) << "linear_backward bf16 dbias";
  const Gradients fp32_raw = backward(x_raw, w_raw, dout_raw, Precision::fp32);
  EXPECT_GT(relative_error(raw.dx, fp32_raw.dx), kRoundingSeen) << "linear_backward bf16 dx: nothing was rounded";
  EXPECT_GT(relative_error(raw.dw, fp32_raw.dw), kRoundingSeen) << "linear_backward bf16 dw: nothing was rounded";
}

// Attention in bf16: q, k, v, dO rounded as their tiles are loaded (so bf16-valued inputs give the same
// bits), the softmax statistics fp32 (so on bf16-valued inputs the LSE is the fp32 kernel's up to fp32
// rounding: the same scores, in log2 units against a power-of-two anchor), and P rounded before P·V: out
// moves from the fp32 kernel's by at most u_bf16 = 2^-8 of Σ_j p_j |v_jd| ≤ max_j |v_jd| (each p_j moves
// by at most 2^-8 of itself, the normaliser is unrounded), plus both sides' fp32 sums over the keys (a few
// 1e-6 of the same scale).
// These are the CUDA-core kernels' rounding points: cuDNN (which would take this block) is switched off.
TEST(CudaBf16, AttentionRoundsOperandsOnLoadAndKeepsTheSoftmaxFp32) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const ScopedCudnnSwitch off("off");
  const auto backend = make_backend(BackendKind::cuda);
  const Memory memory = memory_of("cuda");
  Rng rng(fresh_seed());
  const int B = 2, H = 4, Hkv = 2, D = 80;
  const int64_t Cq = 70, Ck = 90;
  const size_t q_size = size_t{B} * Cq * H * D, kv_size = size_t{B} * Ck * Hkv * D, stat_size = size_t{B} * H * Cq;
  const auto q = random_normal<float>(rng, q_size), k = random_normal<float>(rng, kv_size),
             v = random_normal<float>(rng, kv_size), dout = random_normal<float>(rng, q_size);
  const Placed<float> q_raw(memory, q), k_raw(memory, k), v_raw(memory, v), dout_raw(memory, dout);
  const Placed<float> q_bf16(memory, rounded_to_bf16(q)), k_bf16(memory, rounded_to_bf16(k)),
      v_bf16(memory, rounded_to_bf16(v)), dout_bf16(memory, rounded_to_bf16(dout));
  // q_begin 60, kv_begin 0: the diagonal crosses the block (masked and visible pairs; the last rows see every key).
  auto params = [&](const Placed<float>& q_in, const Placed<float>& k_in, const Placed<float>& v_in,
                    Precision precision) {
    return AttentionChunkParams{.q = q_in.get(), .k = k_in.get(), .v = v_in.get(), .B = B, .Cq = Cq, .Ck = Ck,
                                .H = H, .Hkv = Hkv, .D = D, .q_begin = 60, .kv_begin = 0,
                                .scale = 1.0 / std::sqrt(static_cast<double>(D)), .precision = precision};
  };
  struct Forward {
    std::vector<float> out, lse;
  };
  auto forward = [&](const AttentionChunkParams& p) {
    const Placed<float> out(memory, std::vector<float>(q_size, 7.0f)), lse(memory, std::vector<float>(stat_size, 7.0f));
    backend->attention_chunk_forward(out.get(), lse.get(), p, false);
    return Forward{out.host(), lse.host()};
  };
  const Forward raw = forward(params(q_raw, k_raw, v_raw, Precision::bf16));
  const Forward pre = forward(params(q_bf16, k_bf16, v_bf16, Precision::bf16));
  EXPECT_EQ(raw.out, pre.out) << "attention forward bf16: bf16-valued q, k, v differ";
  EXPECT_EQ(raw.lse, pre.lse) << "attention forward bf16 lse: bf16-valued q, k, v differ";
  const Forward fp32 = forward(params(q_bf16, k_bf16, v_bf16, Precision::fp32));
  // The LSE: the scores' sum over D, then the softmax's over the keys, exp and log — fp32 on both sides.
  expect_close("attention forward bf16 lse vs fp32 on bf16-valued inputs", raw.lse, to_double(fp32.lse),
               testing::fp32_bound({.summation = static_cast<double>(std::max<int64_t>(Ck, D)), .depth = 3}));
  float v_max = 0.0f;
  for (const float value : rounded_to_bf16(v)) v_max = std::max(v_max, std::fabs(value));
  const double per_element = (0x1p-8 + 1e-5) * v_max;
  double largest = 0.0;
  for (size_t i = 0; i < q_size; ++i) largest = std::max(largest, std::fabs(double{raw.out[i]} - fp32.out[i]));
  std::printf("[ error    ] attention forward bf16 vs fp32 on bf16-valued inputs: max %.3e (bound %.3e)\n", largest,
              per_element);
  EXPECT_LE(largest, per_element) << "P's rounding moved out further than 2^-8 of max |v|";
  EXPECT_GT(largest, 0.0) << "attention forward bf16: P was not rounded";

  // Backward from the same out, lse and Δ (fp32: the delta op takes no precision): bf16-valued q, k, v
  // and dO give the same bits; against fp32 the rounding of P and dS shows.
  const Placed<float> out(memory, raw.out), lse(memory, raw.lse), delta(memory, std::vector<float>(stat_size));
  backend->attention_chunk_delta(delta.get(), dout_raw.get(), out.get(), B, Cq, H, D);
  struct Backward {
    std::vector<float> dq, dk, dv;
  };
  auto backward = [&](const AttentionChunkParams& p, const Placed<float>& dout_in) {
    const Placed<float> dq(memory, std::vector<float>(q_size, 0.0f)), dk(memory, std::vector<float>(kv_size, 0.0f)),
        dv(memory, std::vector<float>(kv_size, 0.0f));
    backend->attention_chunk_backward(dq.get(), dk.get(), dv.get(), dout_in.get(), lse.get(), delta.get(), p);
    return Backward{dq.host(), dk.host(), dv.host()};
  };
  const Backward grads_raw = backward(params(q_raw, k_raw, v_raw, Precision::bf16), dout_raw);
  const Backward grads_pre = backward(params(q_bf16, k_bf16, v_bf16, Precision::bf16), dout_bf16);
  EXPECT_EQ(grads_raw.dq, grads_pre.dq) << "attention backward bf16 dq: bf16-valued inputs differ";
  EXPECT_EQ(grads_raw.dk, grads_pre.dk) << "attention backward bf16 dk: bf16-valued inputs differ";
  EXPECT_EQ(grads_raw.dv, grads_pre.dv) << "attention backward bf16 dv: bf16-valued inputs differ";
  const Backward grads_fp32 = backward(params(q_bf16, k_bf16, v_bf16, Precision::fp32), dout_bf16);
  EXPECT_NE(grads_raw.dv, grads_fp32.dv) << "attention backward bf16 dv: P was not rounded";
  EXPECT_NE(grads_raw.dq, grads_fp32.dq) << "attention backward bf16 dq: dS was not rounded";
  EXPECT_NE(grads_raw.dk, grads_fp32.dk) << "attention backward bf16 dk: dS was not rounded";
}

}  // namespace
}  // namespace fpdt::kernels::conformance
