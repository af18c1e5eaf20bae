// Benchmark of the cpu flash attention (kernels/cpu/flash_attention.cpp): the cpu Backend's
// full-sequence causal forward and backward (optionally with a sliding window), against the machine's
// rates measured in the same process with the same threads (machine/rates.h: the OpenBLAS sgemm on
// the backend's GEMM path, and the FMA peak of the widest vectors; both per second of CPU time, which
// a busy neighbour does not lower, while the attention is timed by the wall). Counts only unmasked FLOPs:
// forward 4·pairs·D·H·B (QKᵀ and PV over the visible (query, key) pairs: S²/2 causal, about S·W with
// a window W), backward 2.5× that. Rounds of (sgemm, forward, backward) are interleaved and the best
// of each reported; on a shared machine the ratios fall with the share the attention gets (the load
// average is printed with them). With --bf16, each round also times the bf16 attention (the spec of
// reference/attention_chunk.h) each way the backend runs it — on AMX-BF16 tiles (the default where the
// CPU has them), on AVX512-BF16's dot products, on the fp32 products over the same rounded operands; a
// path the CPU lacks runs the next one — and the bf16 GEMM the model's linears run (cpu/gemm.h's gemm_bf16,
// oneDNN, at their 8192 × 1536 × 512 forward shape, bf16 operands) and the backend's bf16 linear_forward
// with its copies (machine/rates.h's measure_bf16_gemm_gflops): the bf16_* fields. The bf16 paths are
// timed by the wall and by the process's CPU time (*_cpu_gflops: flops per CPU second × threads, as the
// GEMM rates are); bf16_default_path: the path the backend takes by default on this CPU (AMX tiles where
// it has them, else the dot products where they are double-rate, else the fp32 products: flash_attention.h);
// bf16_fwd_ratio, bf16_bwd_ratio: that path's CPU rates over the bf16 GEMM's.
// The LAST line printed is one JSON object.
//   build/bench/bench_attention --seq 16384 --heads 8 --head-dim 64 --threads 2 [--window 4096] [--bf16]
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
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cpu/panel_gemm_amx.h"
#include "fpdt/kernels/cpu/panel_gemm_bf16.h"
#include "fpdt/machine/rates.h"

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
  bool bf16 = false;   // also time the bf16 attention, both ways
};

void usage() {
  std::printf(
      "usage: bench_attention [--seq S] [--batch B] [--heads H] [--kv-heads Hkv] [--head-dim D] [--threads T]\n"
      "                       [--reps N] [--docs] [--window W] [--bf16]\n");
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
    else if (arg == "--bf16")
      o.bf16 = true;
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

}  // namespace

int main(int argc, char** argv) {
  fpdt::kernels::cpu::restart_with_matching_blas_core(argv);  // the sgemm it compares against: blas_core.h
  try {
    const Options o = parse(argc, argv);
    omp_set_num_threads(o.threads);
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
    const fpdt::kernels::AttentionParams params{.q = q.data(), .k = k.data(), .v = v.data(), .doc_ids = doc_ids,
                                                .B = B, .S = S, .H = H, .Hkv = Hkv, .D = D, .scale = scale,
                                                .window = W};

    // Rounds of sgemm, forward, backward, interleaved; the best of each over the rounds is reported.
    // One warm-up of each first.
    fpdt::kernels::cpu::CpuBackend backend;
    const double load = fpdt::machine::load_average();
    int vector_bits = 0;
    const double fma_gflops = fpdt::machine::measure_fma_peak_gflops(o.threads, &vector_bits);
    backend.attention_forward(out.data(), lse.data(), params);
    using fpdt::kernels::Precision;
    using fpdt::kernels::cpu::CpuBackend;
    // One forward and backward in `precision`: (forward, backward) seconds by the wall, and of CPU time.
    struct PassTimes {
      double fwd = 1e30, bwd = 1e30, fwd_cpu = 1e30, bwd_cpu = 1e30;
      void keep_best(const PassTimes& t) {
        fwd = std::min(fwd, t.fwd);
        bwd = std::min(bwd, t.bwd);
        fwd_cpu = std::min(fwd_cpu, t.fwd_cpu);
        bwd_cpu = std::min(bwd_cpu, t.bwd_cpu);
      }
    };
    auto time_pass = [&](Precision precision) {
      PassTimes t;
      fpdt::kernels::AttentionParams in_precision = params;
      in_precision.precision = precision;
      auto start = std::chrono::steady_clock::now();
      double cpu_start = fpdt::machine::process_cpu_seconds();
      backend.attention_forward(out.data(), lse.data(), in_precision);
      t.fwd = seconds_since(start);
      t.fwd_cpu = fpdt::machine::process_cpu_seconds() - cpu_start;
      start = std::chrono::steady_clock::now();
      cpu_start = fpdt::machine::process_cpu_seconds();
      backend.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), in_precision);
      t.bwd = seconds_since(start);
      t.bwd_cpu = fpdt::machine::process_cpu_seconds() - cpu_start;
      return t;
    };
    // The bf16 GEMM of the model's linears at 8192 × 1536 × 512 (x · wᵀ, bf16 operands), flops per CPU second
    // × threads, the best of three calls (after one warm-up).
    constexpr int kGemmM = 8192, kGemmN = 1536, kGemmK = 512;
    std::vector<float> gemm_a, gemm_c;  // a (M, K) activations
    std::vector<uint16_t> gemm_b;       // b (N, K): a weight's bf16 working copy
    if (o.bf16) {
      gemm_a.resize(static_cast<size_t>(kGemmM) * kGemmK);
      for (float& value : gemm_a) value = static_cast<float>(rng.normal());
      gemm_b.resize(static_cast<size_t>(kGemmN) * kGemmK);
      fpdt::kernels::cpu::to_bf16(gemm_b.data(), gemm_a.data(), static_cast<int64_t>(gemm_b.size()));
      gemm_c.resize(static_cast<size_t>(kGemmM) * kGemmN);
    }
    // On the arithmetic gemm.h's rule picks here: a rounded beforehand, b the words a linear layer reads.
    auto bf16_gemm_rate = [&] {
      namespace cpu = fpdt::kernels::cpu;
      const cpu::Bf16Operand a = cpu::bf16_operand(0, gemm_a.data(), static_cast<int64_t>(gemm_a.size()));
      const cpu::Bf16Operand b{gemm_b.data(), nullptr};
      double best = 0.0;
      for (int call = 0; call < 4; ++call) {
        const double cpu_start = fpdt::machine::process_cpu_seconds();
        cpu::gemm_bf16(false, true, kGemmM, kGemmN, kGemmK, a, kGemmK, b, kGemmK, false, gemm_c.data(), kGemmN);
        const double rate =
            2.0 * kGemmM * kGemmN * kGemmK / (fpdt::machine::process_cpu_seconds() - cpu_start) * o.threads * 1e-9;
        if (call > 0) best = std::max(best, rate);
      }
      return best;
    };
    const bool amx = fpdt::kernels::cpu::amx_tiles_available();
    const bool dots = fpdt::kernels::cpu::bf16_dot_products_available();
    // The bf16 paths (AMX tiles, dot products, fp32 products): the best times of each, in the order of
    // CpuBackend::Bf16Attention, and which one the backend takes by default.
    static constexpr const char* kBf16PathNames[] = {"amx_tiles", "dot_products", "fp32_products"};
    const int default_path = static_cast<int>(CpuBackend::bf16_attention());
    constexpr int kBf16Paths = 3;
    PassTimes bf16_best[kBf16Paths];
    double bf16_gemm_gflops = 0.0, bf16_linear_gflops = 0.0, sgemm_gflops = 0.0, fwd_best = 1e30, bwd_best = 1e30;
    for (int rep = 0; rep < o.reps; ++rep) {
      if (o.bf16) {
        const bool saved_amx = CpuBackend::set_amx_tiles(false), saved_dots = CpuBackend::set_bf16_dot_products(false);
        PassTimes times[kBf16Paths];
        for (int path = 0; path < kBf16Paths; ++path) {
          CpuBackend::set_amx_tiles(path == 0);
          CpuBackend::set_bf16_dot_products(path == 1);
          times[path] = time_pass(Precision::bf16);
          bf16_best[path].keep_best(times[path]);
        }
        CpuBackend::set_amx_tiles(saved_amx);
        CpuBackend::set_bf16_dot_products(saved_dots);
        const double gemm_rate = bf16_gemm_rate(), linear_rate = fpdt::machine::measure_bf16_gemm_gflops(o.threads);
        bf16_gemm_gflops = std::max(bf16_gemm_gflops, gemm_rate);
        bf16_linear_gflops = std::max(bf16_linear_gflops, linear_rate);
        std::printf(
            "round %d: bf16 forward, backward %.3f s, %.3f s (%s; CPU %.3f s, %.3f s); %.3f s, %.3f s (%s); on fp32 "
            "products %.3f s, %.3f s; bf16 GEMM %.1f GFLOP/s, bf16 linear with copies %.1f (per CPU second)\n",
            rep, times[0].fwd, times[0].bwd, amx ? "AMX-BF16" : "no AMX: next path", times[0].fwd_cpu,
            times[0].bwd_cpu, times[1].fwd, times[1].bwd, dots ? "AVX512-BF16" : "no AVX512-BF16: fp32 products",
            times[2].fwd, times[2].bwd, gemm_rate, linear_rate);
      }
      const double sgemm_rate = fpdt::machine::measure_sgemm_gflops(o.threads);
      auto start = std::chrono::steady_clock::now();
      backend.attention_forward(out.data(), lse.data(), params);
      const double fwd = seconds_since(start);
      start = std::chrono::steady_clock::now();
      backend.attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), params);
      const double bwd = seconds_since(start);
      std::printf("round %d: sgemm %.1f GFLOP/s, forward %.3f s, backward %.3f s (load %.2f)\n", rep, sgemm_rate,
                  fwd, bwd, fpdt::machine::load_average());
      sgemm_gflops = std::max(sgemm_gflops, sgemm_rate);
      fwd_best = std::min(fwd_best, fwd);
      bwd_best = std::min(bwd_best, bwd);
    }
    // Unmasked work (documents not discounted): 4·D·H·B per visible (query, key) pair.
    const double s = static_cast<double>(S), w = static_cast<double>(W);
    const double pairs = W == 0 || W >= S ? s * s / 2 : (s - w) * w + w * w / 2;
    const double fwd_flops = 4.0 * pairs * D * H * B;
    const double bwd_flops = 2.5 * fwd_flops;
    const double fwd_gflops = fwd_flops / fwd_best / 1e9, bwd_gflops = bwd_flops / bwd_best / 1e9;
    double checksum = 0.0;
    for (size_t i = 0; i < q_size; i += 997) checksum += out[i] + dq[i];
    std::printf("checksum %.6g\n", checksum);
    std::string bf16_fields;
    if (o.bf16) {
      char text[1536];
      auto rate = [&](double flops, double seconds) { return flops / seconds / 1e9; };
      double fwd_cpu[kBf16Paths], bwd_cpu[kBf16Paths];
      for (int path = 0; path < kBf16Paths; ++path) {
        fwd_cpu[path] = rate(fwd_flops, bf16_best[path].fwd_cpu / o.threads);
        bwd_cpu[path] = rate(bwd_flops, bf16_best[path].bwd_cpu / o.threads);
      }
      std::snprintf(text, sizeof text,
                    ", \"amx_tiles\": %s, \"bf16_amx_fwd_gflops\": %.2f, \"bf16_amx_bwd_gflops\": %.2f, "
                    "\"bf16_amx_fwd_cpu_gflops\": %.2f, \"bf16_amx_bwd_cpu_gflops\": %.2f, "
                    "\"bf16_dot_products\": %s, \"bf16_dots_fwd_gflops\": %.2f, \"bf16_dots_bwd_gflops\": %.2f, "
                    "\"bf16_dots_fwd_cpu_gflops\": %.2f, \"bf16_dots_bwd_cpu_gflops\": %.2f, "
                    "\"bf16_fp32_products_fwd_gflops\": %.2f, \"bf16_fp32_products_bwd_gflops\": %.2f, "
                    "\"bf16_fp32_products_fwd_cpu_gflops\": %.2f, \"bf16_fp32_products_bwd_cpu_gflops\": %.2f, "
                    "\"bf16_gemm_gflops\": %.2f, \"bf16_gemm_shape\": \"%dx%dx%d\", \"bf16_linear_gflops\": %.2f, "
                    "\"bf16_default_path\": \"%s\", \"bf16_fwd_ratio\": %.3f, \"bf16_bwd_ratio\": %.3f",
                    amx ? "true" : "false", rate(fwd_flops, bf16_best[0].fwd), rate(bwd_flops, bf16_best[0].bwd),
                    fwd_cpu[0], bwd_cpu[0], dots ? "true" : "false", rate(fwd_flops, bf16_best[1].fwd),
                    rate(bwd_flops, bf16_best[1].bwd), fwd_cpu[1], bwd_cpu[1], rate(fwd_flops, bf16_best[2].fwd),
                    rate(bwd_flops, bf16_best[2].bwd), fwd_cpu[2], bwd_cpu[2], bf16_gemm_gflops, kGemmM, kGemmN,
                    kGemmK, bf16_linear_gflops, kBf16PathNames[default_path],
                    fwd_cpu[default_path] / bf16_gemm_gflops, bwd_cpu[default_path] / bf16_gemm_gflops);
      bf16_fields = text;
    }
    std::printf(
        "{\"bench\": \"attention\", \"batch\": %d, \"seq\": %lld, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
        "\"threads\": %d, \"docs\": %s, \"window\": %lld, \"fwd_s\": %.6f, \"bwd_s\": %.6f, \"fwd_gflops\": %.2f, "
        "\"bwd_gflops\": %.2f, \"sgemm_gflops\": %.2f, \"fwd_ratio\": %.3f, \"bwd_ratio\": %.3f, "
        "\"fma_peak_gflops\": %.2f, \"vector_bits\": %d, \"fwd_mfu\": %.3f, \"bwd_mfu\": %.3f, \"load_average\": %.2f%s}\n",
        B, static_cast<long long>(S), H, Hkv, D, o.threads, o.docs ? "true" : "false", static_cast<long long>(W),
        fwd_best, bwd_best, fwd_gflops, bwd_gflops, sgemm_gflops, fwd_gflops / sgemm_gflops, bwd_gflops / sgemm_gflops,
        fma_gflops, vector_bits, fwd_gflops / fma_gflops, bwd_gflops / fma_gflops, load, bf16_fields.c_str());
    return 0;
  } catch (const fpdt::Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
