// Benchmark of the cpu flash attention (kernels/cpu/flash_attention.cpp): the cpu Backend's
// full-sequence causal forward and backward (optionally with a sliding window), against an OpenBLAS
// 4096³ sgemm run in the same process with the same threads. Counts only unmasked FLOPs: forward
// 4·pairs·D·H·B (QKᵀ and PV over the visible (query, key) pairs: S²/2 causal, about S·W with a
// window W), backward 2.5× that. Rounds of (sgemm, forward, backward) are interleaved and the best
// of each reported, so a busy neighbour on a shared machine skews the ratios less. The LAST line
// printed is one JSON object.
//   build/bench/bench_attention --seq 16384 --heads 8 --head-dim 64 --threads 2 [--window 4096]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/cpu_backend.h"

namespace {

struct Options {
  int64_t seq = 16384;
  int batch = 1;
  int heads = 8;
  int kv_heads = 0;  // 0: = heads
  int head_dim = 64;
  int threads = 2;
  int reps = 3;  // rounds of (sgemm, forward, backward); the best of each is reported
  bool docs = false;
  int64_t window = 0;  // sliding window in tokens; 0: none
};

void usage() {
  std::printf(
      "usage: bench_attention [--seq S] [--batch B] [--heads H] [--kv-heads Hkv] [--head-dim D] [--threads T]\n"
      "                       [--reps N] [--docs] [--window W]\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> long long {
      if (i + 1 >= argc) throw fpdt::Error("bench", "missing value after " + arg, "see --help");
      return std::atoll(argv[++i]);
    };
    if (arg == "--seq")
      o.seq = value();
    else if (arg == "--batch")
      o.batch = static_cast<int>(value());
    else if (arg == "--heads")
      o.heads = static_cast<int>(value());
    else if (arg == "--kv-heads")
      o.kv_heads = static_cast<int>(value());
    else if (arg == "--head-dim")
      o.head_dim = static_cast<int>(value());
    else if (arg == "--threads")
      o.threads = static_cast<int>(value());
    else if (arg == "--reps")
      o.reps = static_cast<int>(value());
    else if (arg == "--docs")
      o.docs = true;
    else if (arg == "--window")
      o.window = value();
    else if (arg == "--help" || arg == "-h") {
      usage();
      std::exit(0);
    } else {
      throw fpdt::Error("bench", "unknown argument " + arg, "see --help");
    }
  }
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.seq <= 0 || o.batch <= 0 || o.threads <= 0 || o.reps <= 0 || o.window < 0)
    throw fpdt::Error("bench", "--seq, --batch, --threads and --reps must be positive, --window not negative");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// OpenBLAS sgemm C = A·B with n = 4096: seconds of one call.
class Sgemm {
 public:
  Sgemm() : a_(static_cast<size_t>(kN) * kN), b_(a_.size()), c_(a_.size()) {
    fpdt::Rng rng(7);
    for (auto& x : a_) x = static_cast<float>(rng.uniform(-1, 1));
    for (auto& x : b_) x = static_cast<float>(rng.uniform(-1, 1));
  }
  double seconds() {
    const auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a_.data(), kN, b_.data(), kN, 0.0f,
                c_.data(), kN);
    return seconds_since(start);
  }
  static constexpr int kN = 4096;
  static double flops() { return 2.0 * kN * kN * static_cast<double>(kN); }

 private:
  std::vector<float> a_, b_, c_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    omp_set_num_threads(o.threads);
    openblas_set_num_threads(o.threads);
    const int64_t S = o.seq;
    const int B = o.batch, H = o.heads, Hkv = o.kv_heads, D = o.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const int64_t W = o.window;
    std::printf("bench_attention: B=%d S=%lld H=%d Hkv=%d D=%d threads=%d reps=%d docs=%d window=%lld causal\n", B,
                static_cast<long long>(S), H, Hkv, D, o.threads, o.reps, o.docs, static_cast<long long>(W));

    const size_t q_size = static_cast<size_t>(B) * S * H * D, kv_size = static_cast<size_t>(B) * S * Hkv * D;
    std::vector<float> q(q_size), k(kv_size), v(kv_size), dout(q_size), out(q_size), dq(q_size), dk(kv_size),
        dv(kv_size), lse(static_cast<size_t>(B) * H * S);
    std::vector<int32_t> docs;
    fpdt::Rng rng(1234);
    for (auto* x : {&q, &k, &v, &dout})
      for (auto& value : *x) value = static_cast<float>(rng.normal());
    if (o.docs) {  // four documents of equal length per sequence
      docs.resize(static_cast<size_t>(B) * S);
      for (size_t i = 0; i < docs.size(); ++i) docs[i] = static_cast<int32_t>((i % S) * 4 / S);
    }
    const int32_t* doc_ids = o.docs ? docs.data() : nullptr;

    // Rounds of sgemm, forward, backward, interleaved so that all three see the same background load
    // (the machine is shared); the best of each over the rounds is reported. One warm-up of each first.
    fpdt::kernels::cpu::CpuBackend backend;
    Sgemm sgemm;
    sgemm.seconds();
    backend.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc_ids, B, S, H, Hkv, D, scale, W);
    double sgemm_best = 1e30, fwd_best = 1e30, bwd_best = 1e30;
    for (int rep = 0; rep < o.reps; ++rep) {
      const double sgemm_s = std::min(sgemm.seconds(), sgemm.seconds());
      auto start = std::chrono::steady_clock::now();
      backend.attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), doc_ids, B, S, H, Hkv, D, scale,
                                W);
      const double fwd = seconds_since(start);
      start = std::chrono::steady_clock::now();
      backend.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                                 lse.data(), doc_ids, B, S, H, Hkv, D, scale, W);
      const double bwd = seconds_since(start);
      std::printf("round %d: sgemm %.1f GFLOP/s, forward %.3f s, backward %.3f s\n", rep,
                  Sgemm::flops() / sgemm_s / 1e9, fwd, bwd);
      sgemm_best = std::min(sgemm_best, sgemm_s);
      fwd_best = std::min(fwd_best, fwd);
      bwd_best = std::min(bwd_best, bwd);
    }
    // Unmasked work (documents not discounted): 4·D·H·B per visible (query, key) pair.
    const double s = static_cast<double>(S), w = static_cast<double>(W);
    const double pairs = W == 0 || W >= S ? s * s / 2 : (s - w) * w + w * w / 2;
    const double fwd_flops = 4.0 * pairs * D * H * B;
    const double bwd_flops = 2.5 * fwd_flops;
    const double fwd_gflops = fwd_flops / fwd_best / 1e9, bwd_gflops = bwd_flops / bwd_best / 1e9;
    const double sgemm_gflops = Sgemm::flops() / sgemm_best / 1e9;
    double checksum = 0.0;
    for (size_t i = 0; i < q_size; i += 997) checksum += out[i] + dq[i];
    std::printf("checksum %.6g\n", checksum);
    std::printf(
        "{\"bench\": \"attention\", \"batch\": %d, \"seq\": %lld, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
        "\"threads\": %d, \"docs\": %s, \"window\": %lld, \"fwd_s\": %.4f, \"bwd_s\": %.4f, \"fwd_gflops\": %.2f, "
        "\"bwd_gflops\": %.2f, \"sgemm_gflops\": %.2f, \"fwd_ratio\": %.3f, \"bwd_ratio\": %.3f}\n",
        B, static_cast<long long>(S), H, Hkv, D, o.threads, o.docs ? "true" : "false", static_cast<long long>(W),
        fwd_best, bwd_best, fwd_gflops, bwd_gflops, sgemm_gflops, fwd_gflops / sgemm_gflops, bwd_gflops / sgemm_gflops);
    return 0;
  } catch (const fpdt::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
