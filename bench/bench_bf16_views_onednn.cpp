// Issue 28's ways to feed oneDNN's bf16 matmul from the compute tier's fp32 lanes (which hold bf16 values,
// so their bf16 words are the upper halves) without a per-call copy, measured beside the copy fpdt makes:
//   copy + bf16     to_bf16 of A into a reused buffer, then the bf16 matmul (what cpu/linear.cpp does)
//   bf16 dense      the bf16 matmul on words made beforehand (the ceiling: no copy at all)
//   f32 fpmath bf16 an f32 matmul with the fpmath_mode::bf16 attribute (oneDNN may compute in bf16)
//   bf16 view       a bf16 memory descriptor over the fp32 lanes: strides doubled, data at word 1
// For each: the implementation oneDNN picked (its impl_info_str, as ONEDNN_VERBOSE=1 prints it), the best
// wall-clock rate of --reps (the view: one trial, at the first shape only — oneDNN 2.6.3 runs it on its
// reference kernel, ~10^4 times slower), and the largest difference from the dense product.
//   build/bench/bench_bf16_views_onednn --threads 2 --reps 5
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cpu/onednn_matmul_desc.h"
#include "fpdt/tensor/dtype.h"
#include "fpdt/machine/rates.h"

namespace {

using dnnl::memory;

struct Shape {
  int M, N, K;  // C (M, N) = A (M, K) · Bᵀ, B (N, K): the linear forward, tokens × out × in
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--threads") threads = std::atoi(argv[i + 1]);
    else if (arg == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_bf16_views_onednn [--threads T] [--reps N]\n");
      return 1;
    }
  }
  omp_set_num_threads(threads);
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::printf("bench_bf16_views_onednn: threads=%d reps=%d load %.2f\n", threads, reps, fpdt::machine::load_average());
  for (const Shape s : {Shape{8192, 512, 512}, Shape{8192, 1536, 512}}) {  // the view at the first only
    fpdt::Rng rng(7);
    std::vector<float> a(size_t(s.M) * s.K), b(size_t(s.N) * s.K), c(size_t(s.M) * s.N), dense(c.size());
    for (float& v : a) v = fpdt::round_to_bf16(static_cast<float>(rng.normal()));  // bf16 values in fp32 lanes
    for (float& v : b) v = fpdt::round_to_bf16(static_cast<float>(rng.normal()));
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    fpdt::kernels::cpu::to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
    fpdt::kernels::cpu::to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
    const memory::desc c_desc({s.M, s.N}, memory::data_type::f32, memory::dims{s.N, 1});
    // One way: A's and B's descriptors and handles, an attribute, and work before the product (the copy).
    auto measure = [&](const char* name, const memory::desc& a_desc, const memory::desc& b_desc, void* a_handle,
                       void* b_handle, const dnnl::primitive_attr& attr, const std::function<void()>& before,
                       bool is_dense, int trials) {
      const dnnl::matmul::primitive_desc pd =
          fpdt::kernels::cpu::onednn::matmul_primitive_desc(engine, a_desc, b_desc, c_desc, attr);
      const dnnl::matmul product(pd);
      memory a_mem(a_desc, engine, a_handle), b_mem(b_desc, engine, b_handle), c_mem(c_desc, engine, c.data());
      double best = 1e30;
      for (int rep = trials > 1 ? 0 : 1; rep <= trials; ++rep) {  // rep 0 warms up
        const auto start = std::chrono::steady_clock::now();
        before();
        product.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
        stream.wait();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (rep > 0) best = std::min(best, seconds);
      }
      if (is_dense) dense = c;
      double diff = 0.0;
      for (size_t i = 0; i < c.size(); ++i) diff = std::max(diff, std::fabs(double(c[i]) - dense[i]));
      std::printf("  %dx%dx%d %-16s %-28s %9.2f GFLOP/s wall   max |C - dense| %.2e\n", s.M, s.N, s.K, name,
                  pd.impl_info_str(), 2.0 * s.M * s.N * s.K / best * 1e-9, diff);
    };
    const auto bf16 = memory::data_type::bf16, f32 = memory::data_type::f32;
    const dnnl::primitive_attr plain;
    dnnl::primitive_attr fpmath;
    fpmath.set_fpmath_mode(dnnl::fpmath_mode::bf16);
    const memory::desc a_words({s.M, s.K}, bf16, memory::dims{s.K, 1}), b_words({s.K, s.N}, bf16, memory::dims{1, s.K});
    measure("bf16 dense", a_words, b_words, a16.data(), b16.data(), plain, [] {}, true, reps);
    measure("copy + bf16", a_words, b_words, a16.data(), b16.data(), plain,
            [&] { fpdt::kernels::cpu::to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size())); }, false, reps);
    measure("f32 fpmath bf16", memory::desc({s.M, s.K}, f32, memory::dims{s.K, 1}),
            memory::desc({s.K, s.N}, f32, memory::dims{1, s.K}), a.data(), b.data(), fpmath, [] {}, false, reps);
    // Little endian: a float's bf16 word is its second uint16.
    if (s.N == 512)
      measure("bf16 view", memory::desc({s.M, s.K}, bf16, memory::dims{2 * s.K, 2}), b_words,
              reinterpret_cast<uint16_t*>(a.data()) + 1, b16.data(), plain, [] {}, false, 1);
  }
  return 0;
}
