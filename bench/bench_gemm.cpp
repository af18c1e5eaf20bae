// Benchmark of the cpu backend's GEMM libraries (kernels/cpu/gemm.h) on the linear layer's three products
// — forward x · wᵀ (NT), dx = dout · w (NN), dw = doutᵀ · x (TN, the sum over tokens) — at the shapes the
// models train with (tokens × out × in: 8192 × {512, 1536} × {512, 1536}, and 2048 × 2752 × 512, the MLP's
// up projection at 2K): OpenBLAS sgemm on the team (team_sgemm), oneDNN's f32 matmul, oneDNN's bf16 matmul
// on bf16 operands (the bf16 units' kernels, where oneDNN has any), the same with its bf16 copies made (to_bf16
// of both operands, as linear.cpp did before the weights' working copy), and as a bf16 run on those units runs
// it: the weight read from its working copy's words, only the tokens' operands (x, dout) copied per call —
// one copy for forward and dx, both for dw, whose operands are both the tokens'.
// Beside them, in the same process and threads, the measured peaks (machine/rates.h): fp32 FMA, AVX512-BF16
// dot products, AMX-BF16 tiles. Then the cpu backend's bf16 linear ops themselves, forward + backward per
// shape, w from its working copy's words, on each arithmetic of gemm.h's bf16 GEMMs (the bf16 units, the
// fp32 FMAs over the operands' values) and which one its rule picks here, beside the three products'
// no-copy rate on the bf16 units (their flops over the sum of their best times).
// Rates are flops per second of the process's CPU time (threads × wall on
// an idle machine; a busy neighbour does not lower them, though the team's spin-waits count), the best over
// --reps interleaved rounds; the wall-clock best is printed beside. The LAST line printed is one JSON object.
//   build/bench/bench_gemm --threads 2 --reps 3
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cpu/onednn_gemm.h"
#include "fpdt/tensor/dtype.h"
#include "fpdt/machine/rates.h"

namespace {

namespace cpu = fpdt::kernels::cpu;

struct Options {
  int threads = 2;
  int reps = 3;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) throw fpdt::Error("bench", "missing value after " + arg, "see --help");
      return std::atoi(argv[++i]);
    };
    if (arg == "--threads") {
      o.threads = value();
    } else if (arg == "--reps") {
      o.reps = value();
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: bench_gemm [--threads T] [--reps N]\n");
      std::exit(0);
    } else {
      throw fpdt::Error("bench", "unknown argument " + arg, "see --help");
    }
  }
  if (o.threads <= 0 || o.reps <= 0) throw fpdt::Error("bench", "--threads and --reps must be positive");
  return o;
}

// One GEMM of the table: C (M, N) = op(A) · op(B), dense operands.
struct Product {
  std::string name;  // "8192x1536x512 forward"
  bool trans_a, trans_b;
  int M, N, K;
  bool b_is_weight;  // forward, dx: B is w (a bf16 run reads its working copy); dw: B is x
};

enum Library { kOpenBlas, kOnednnF32, kOnednnBf16, kBf16WithCopies, kBf16WorkingCopy, kLibraries };
const char* const kLibraryNames[kLibraries] = {"OpenBLAS", "oneDNN f32", "oneDNN bf16", "bf16 + copies",
                                               "bf16 + x/dout copies"};

struct Best {
  double cpu_gflops = 0.0, wall_gflops = 0.0;
};

}  // namespace

int main(int argc, char** argv) {
  cpu::restart_with_matching_blas_core(argv);  // the OpenBLAS kernels fpdt runs: blas_core.h
  try {
    const Options o = parse(argc, argv);
    omp_set_num_threads(o.threads);
    std::printf("bench_gemm: threads=%d reps=%d; %s; load %.2f\n", o.threads, o.reps,
                cpu::describe_gemm_libraries().c_str(), fpdt::machine::load_average());

    std::vector<Product> products;
    struct Linear {
      int tokens, out, in;
    };
    const std::vector<Linear> linears = {Linear{8192, 512, 512}, Linear{8192, 1536, 512}, Linear{8192, 512, 1536},
                                         Linear{8192, 1536, 1536}, Linear{2048, 2752, 512}, Linear{8192, 1376, 512},
                                         Linear{8192, 512, 1376}};
    for (const Linear l : linears) {
      const std::string shape = std::to_string(l.tokens) + "x" + std::to_string(l.out) + "x" + std::to_string(l.in);
      products.push_back({shape + " forward", false, true, l.tokens, l.out, l.in, true});  // x (T, in) · wᵀ
      products.push_back({shape + " dx", false, false, l.tokens, l.in, l.out, true});      // dout (T, out) · w (out, in)
      products.push_back({shape + " dw", true, false, l.out, l.in, l.tokens, false});      // doutᵀ · x (T, in)
    }
    size_t largest = 0;
    for (const Product& p : products)
      largest = std::max({largest, size_t(p.M) * p.K, size_t(p.K) * p.N, size_t(p.M) * p.N});
    std::vector<float> a(largest), b(largest), c(largest);
    fpdt::Rng rng(1234);
    for (auto* x : {&a, &b})
      for (float& v : *x) v = static_cast<float>(rng.normal());
    std::vector<uint16_t> a16(largest), b16(largest);
    cpu::to_bf16(a16.data(), a.data(), static_cast<int64_t>(largest));
    cpu::to_bf16(b16.data(), b.data(), static_cast<int64_t>(largest));

    auto run = [&](const Product& p, int library) {
      const int lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
      switch (library) {
        case kOpenBlas:
          cpu::team_sgemm(p.trans_a, p.trans_b, p.M, p.N, p.K, a.data(), lda, b.data(), ldb, false, c.data(), p.N);
          break;
        case kOnednnF32:
          cpu::onednn::matmul(cpu::onednn::Input::f32, p.trans_a, p.trans_b, p.M, p.N, p.K, a.data(), lda, b.data(),
                              ldb, false, c.data(), p.N);
          break;
        case kBf16WithCopies:
        case kBf16WorkingCopy:
          cpu::to_bf16(a16.data(), a.data(), int64_t{p.M} * p.K);
          if (library == kBf16WithCopies || !p.b_is_weight) cpu::to_bf16(b16.data(), b.data(), int64_t{p.K} * p.N);
          [[fallthrough]];
        case kOnednnBf16:
          cpu::onednn::matmul(cpu::onednn::Input::bf16, p.trans_a, p.trans_b, p.M, p.N, p.K, a16.data(), lda,
                              b16.data(), ldb, false, c.data(), p.N);
          break;
      }
    };
    const bool onednn = cpu::onednn::available(), onednn_bf16 = cpu::bf16_gemm_units_exist();
    auto skipped = [&](int library) { return library == kOnednnF32 ? !onednn : library != kOpenBlas && !onednn_bf16; };
    for (const Product& p : products)  // warm-up: pages, buffers, oneDNN's primitives
      for (int library = 0; library < kLibraries; ++library)
        if (!skipped(library)) run(p, library);

    std::vector<std::vector<Best>> best(products.size(), std::vector<Best>(kLibraries));
    fpdt::machine::Bf16Rates bf16;
    double fma_peak = 0.0;
    for (int rep = 0; rep < o.reps; ++rep) {
      fma_peak = std::max(fma_peak, fpdt::machine::measure_fma_peak_gflops(o.threads));
      bf16.dot_peak_gflops = std::max(bf16.dot_peak_gflops, fpdt::machine::measure_bf16_dot_peak_gflops(o.threads));
      bf16.amx_peak_gflops = std::max(bf16.amx_peak_gflops, fpdt::machine::measure_amx_bf16_peak_gflops(o.threads));
      bf16.gemm_gflops = std::max(bf16.gemm_gflops, fpdt::machine::measure_bf16_gemm_gflops(o.threads));
      for (size_t i = 0; i < products.size(); ++i)
        for (int library = 0; library < kLibraries; ++library) {
          if (skipped(library)) continue;
          const double flops = 2.0 * products[i].M * products[i].N * static_cast<double>(products[i].K);
          const double cpu_start = fpdt::machine::process_cpu_seconds();
          const auto wall_start = std::chrono::steady_clock::now();
          run(products[i], library);
          const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
          const double cpu_seconds = fpdt::machine::process_cpu_seconds() - cpu_start;
          Best& b = best[i][library];
          b.cpu_gflops = std::max(b.cpu_gflops, flops / cpu_seconds * o.threads * 1e-9);
          b.wall_gflops = std::max(b.wall_gflops, flops / wall * 1e-9);
        }
      std::printf("round %d done (load %.2f)\n", rep, fpdt::machine::load_average());
    }

    std::printf("peaks (GFLOP/s of CPU time, %d threads): fp32 FMA %.0f, AVX512-BF16 %.0f, AMX-BF16 %.0f; "
                "bf16 linear 1024^3 %.0f\n",
                o.threads, fma_peak, bf16.dot_peak_gflops, bf16.amx_peak_gflops, bf16.gemm_gflops);
    std::printf("%-24s", "GFLOP/s cpu (wall)");
    for (const char* name : kLibraryNames) std::printf(" %20s", name);
    std::printf("   fp32 table   bf16/peak   bf16/no-copies  (bf16: the x/dout-copies column)\n");
    std::string json = "{\"bench\":\"gemm\",\"threads\":" + std::to_string(o.threads) +
                       ",\"fma_peak\":" + std::to_string(fma_peak) +
                       ",\"bf16_dot_peak\":" + std::to_string(bf16.dot_peak_gflops) +
                       ",\"amx_bf16_peak\":" + std::to_string(bf16.amx_peak_gflops) +
                       ",\"bf16_linear_1024\":" + std::to_string(bf16.gemm_gflops) + ",\"products\":[";
    for (size_t i = 0; i < products.size(); ++i) {
      const Product& p = products[i];
      std::printf("%-24s", p.name.c_str());
      json += std::string(i ? "," : "") + "{\"product\":\"" + p.name + "\"";
      for (int library = 0; library < kLibraries; ++library) {
        std::printf(" %11.0f (%6.0f)", best[i][library].cpu_gflops, best[i][library].wall_gflops);
        json += ",\"" + std::string(kLibraryNames[library]) + "\":" + std::to_string(best[i][library].cpu_gflops);
      }
      const bool table_onednn = cpu::fp32_gemm_library(p.trans_a, p.trans_b, p.M, p.N, p.K) == cpu::GemmLibrary::onednn;
      const double peak = bf16.peak_gflops();
      const double no_copies = best[i][kOnednnBf16].cpu_gflops;
      std::printf("   %-10s   %9.2f   %14.2f\n", table_onednn ? "oneDNN" : "OpenBLAS",
                  peak > 0 ? best[i][kBf16WorkingCopy].cpu_gflops / peak : 0.0,
                  no_copies > 0 ? best[i][kBf16WorkingCopy].cpu_gflops / no_copies : 0.0);
      json += "}";
    }
    json += "]";

    // The backend's bf16 linear ops, forward + backward (6·T·in·out flops): 3·reps rounds after a warm-up,
    // the two ways alternating which goes first (the first after a shape change pays its cache misses).
    fpdt::kernels::cpu::CpuBackend backend;
    // Both arithmetics of gemm.h's bf16 GEMMs, w from its working copy's words as a bf16 run reads it.
    enum LinearWay { kBf16Units, kFp32Fmas, kLinearWays };
    const char* const kWayNames[kLinearWays] = {"on the bf16 units", "on the fp32 FMAs"};
    const cpu::Bf16Gemm rule = cpu::bf16_gemm_rule();
    std::printf("%-24s %22s %22s %14s %14s   (the rule here: %s)\n", "bf16 linear fwd+bwd", kWayNames[0], kWayNames[1],
                "no-copy rate", "units/no-copy", rule == cpu::Bf16Gemm::bf16_units ? kWayNames[0] : kWayNames[1]);
    json += ",\"linear_ops\":[";
    for (size_t i = 0; i < linears.size(); ++i) {
      const Linear l = linears[i];
      const int64_t T = l.tokens;
      std::vector<float> x(size_t(T) * l.in), w(size_t(l.out) * l.in), dout(size_t(T) * l.out), out(dout.size()),
          dx(x.size()), dw(w.size());
      for (auto* v : {&x, &w, &dout})
        for (float& value : *v) value = fpdt::round_to_bf16(static_cast<float>(rng.normal()));
      std::vector<uint16_t> words(w.size());
      backend.pack_bf16(words.data(), w.data(), static_cast<int64_t>(w.size()));
      const fpdt::kernels::Precision bf16p = fpdt::kernels::Precision::bf16;
      double best_cpu[kLinearWays] = {0.0, 0.0}, best_wall[kLinearWays] = {0.0, 0.0};
      const double flops = 6.0 * T * l.in * static_cast<double>(l.out);
      const fpdt::kernels::WeightMatrix weight(w.data(), words.data());
      for (int rep = 0; rep <= 3 * o.reps; ++rep)  // rep 0 warms up
        for (int turn = 0; turn < kLinearWays; ++turn) {
          const int way = (turn + rep) % kLinearWays;
          if (way == kBf16Units && !onednn_bf16) continue;
          cpu::set_bf16_gemm_arithmetic(way == kBf16Units ? cpu::Bf16Gemm::bf16_units : cpu::Bf16Gemm::fp32_fmas);
          const double cpu_start = fpdt::machine::process_cpu_seconds();
          const auto wall_start = std::chrono::steady_clock::now();
          backend.linear_forward(out.data(), x.data(), weight, nullptr, T, l.in, l.out, false, bf16p);
          backend.linear_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), weight, {T, l.in, l.out}, false,
                                  bf16p);
          const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
          const double cpu_seconds = fpdt::machine::process_cpu_seconds() - cpu_start;
          if (rep == 0) continue;
          best_cpu[way] = std::max(best_cpu[way], flops / cpu_seconds * o.threads * 1e-9);
          best_wall[way] = std::max(best_wall[way], flops / wall * 1e-9);
        }
      double no_copy_seconds = 0.0;  // the three products' best CPU seconds, on bf16 operands
      for (size_t k = 0; k < 3; ++k) {
        const Product& p = products[3 * i + k];
        no_copy_seconds += 2.0 * p.M * p.N * static_cast<double>(p.K) / (best[3 * i + k][kOnednnBf16].cpu_gflops * 1e9);
      }
      const double no_copy = onednn_bf16 ? flops / no_copy_seconds * 1e-9 : 0.0;
      const std::string shape = std::to_string(l.tokens) + "x" + std::to_string(l.out) + "x" + std::to_string(l.in);
      std::printf("%-24s %13.0f (%6.0f) %13.0f (%6.0f) %14.0f %14.2f\n", shape.c_str(), best_cpu[kBf16Units],
                  best_wall[kBf16Units], best_cpu[kFp32Fmas], best_wall[kFp32Fmas], no_copy,
                  no_copy > 0 ? best_cpu[kBf16Units] / no_copy : 0.0);
      json += std::string(i ? "," : "") + "{\"shape\":\"" + shape + "\",\"bf16_units\":" +
              std::to_string(best_cpu[kBf16Units]) + ",\"fp32_fmas\":" + std::to_string(best_cpu[kFp32Fmas]) +
              ",\"no_copy\":" + std::to_string(no_copy) + "}";
    }
    cpu::set_bf16_gemm_arithmetic(rule);
    json += "]}";
    std::printf("%s\n", json.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
