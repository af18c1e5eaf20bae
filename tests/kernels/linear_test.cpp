// Linear: the reference backward against float64 finite differences of the reference forward, and
// its switches (accumulate, null outputs skipped); the reference bf16 spec against its rule; the cpu
// backward at any team size, and its bf16 GEMMs on each arithmetic this CPU has (gemm.h's Bf16Gemm).
// (Every backend against the reference, for every switch and precision: backend_ops_test.cpp.)
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cpu/onednn_gemm.h"
#include "fpdt/kernels/reference/linear.h"
#include "fpdt/tensor/dtype.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

// got − initial, in float64: the increment an accumulating (+=) kernel added.
template <typename T>
std::vector<double> minus(const std::vector<T>& got, const std::vector<T>& initial) {
  std::vector<double> diff(got.size());
  for (size_t i = 0; i < got.size(); ++i) diff[i] = static_cast<double>(got[i]) - static_cast<double>(initial[i]);
  return diff;
}

double report(const std::string& what, double error) {
  std::printf("[ error    ] %s: %.3e\n", what.c_str(), error);
  return error;
}

// The arithmetics of the cpu backend's bf16 GEMMs this CPU has: the fp32 FMAs always, the bf16 units where
// oneDNN has kernels for them (whether or not the rule picks them here).
std::vector<cpu::Bf16Gemm> bf16_gemm_arithmetics() {
  std::vector<cpu::Bf16Gemm> arithmetics = {cpu::Bf16Gemm::fp32_fmas};
  if (cpu::bf16_gemm_units_exist()) arithmetics.push_back(cpu::Bf16Gemm::bf16_units);
  return arithmetics;
}
const char* bf16_gemm_name(cpu::Bf16Gemm arithmetic) {
  return arithmetic == cpu::Bf16Gemm::bf16_units ? "bf16 units" : "fp32 FMAs";
}

// gemm.h's bf16 arithmetic for the scope of a test.
class Bf16GemmScope {
 public:
  explicit Bf16GemmScope(cpu::Bf16Gemm arithmetic) : saved_(cpu::set_bf16_gemm_arithmetic(arithmetic)) {}
  ~Bf16GemmScope() { cpu::set_bf16_gemm_arithmetic(saved_); }
  Bf16GemmScope(const Bf16GemmScope&) = delete;
  Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;

 private:
  cpu::Bf16Gemm saved_;
};

TEST(Linear, ReferenceBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const int64_t N = 4;
  const int I = 5, O = 3;
  auto x = random_normal<double>(rng, N * I);
  auto w = random_normal<double>(rng, O * I);
  auto bias = random_normal<double>(rng, O);
  const auto projection = random_normal<double>(rng, N * O);  // loss = Σ projection ∘ out
  auto loss = [&] {
    std::vector<double> out(N * O);
    reference::linear_forward(out.data(), x.data(), w.data(), bias.data(), N, I, O, false);
    double total = 0.0;
    for (size_t i = 0; i < out.size(); ++i) total += projection[i] * out[i];
    return total;
  };
  const auto dx_numeric = finite_differences(x, loss);
  const auto dw_numeric = finite_differences(w, loss);
  const auto dbias_numeric = finite_differences(bias, loss);

  // The loss is linear in each input, so central differences are exact up to float64 rounding of the
  // loss (~1e-16 · |loss| / 1e-6 ~ 1e-10 relative); 1e-8 leaves a wide margin.
  constexpr double kTolerance = 1e-8;
  for (const bool accumulate_dx : {false, true}) {
    const auto dx_initial = random_normal<double>(rng, N * I);  // += outputs start from non-zero content
    const auto dw_initial = random_normal<double>(rng, O * I);
    const auto dbias_initial = random_normal<double>(rng, O);
    auto dx = dx_initial;
    auto dw = dw_initial;
    auto dbias = dbias_initial;
    reference::linear_backward(dx.data(), dw.data(), dbias.data(), projection.data(), x.data(), w.data(), N, I, O,
                               accumulate_dx);
    const std::string tag = accumulate_dx ? " (accumulate_dx)" : "";
    const auto dx_added = accumulate_dx ? minus(dx, dx_initial) : dx;
    EXPECT_LE(report("reference dx vs finite differences" + tag, relative_error(dx_added, dx_numeric)), kTolerance);
    EXPECT_LE(report("reference dw vs finite differences" + tag, relative_error(minus(dw, dw_initial), dw_numeric)),
              kTolerance);
    EXPECT_LE(report("reference dbias vs finite differences" + tag,
                     relative_error(minus(dbias, dbias_initial), dbias_numeric)),
              kTolerance);
  }
}

TEST(Linear, ReferenceForwardAccumulateAddsAndNullsSkip) {
  Rng rng(fresh_seed());
  const int64_t N = 4;
  const int I = 6, O = 5;
  const auto x = random_normal<double>(rng, N * I);
  const auto w = random_normal<double>(rng, O * I);
  const auto dout = random_normal<double>(rng, N * O);
  std::vector<double> fresh(N * O, 3.0);
  reference::linear_forward<double>(fresh.data(), x.data(), w.data(), nullptr, N, I, O, false);
  const auto initial = random_normal<double>(rng, N * O);
  auto accumulated = initial;
  reference::linear_forward<double>(accumulated.data(), x.data(), w.data(), nullptr, N, I, O, true);
  // (a + b) − a differs from b by float64 rounding only (a few 1e-16 for values of similar size).
  EXPECT_LE(report("reference linear accumulate − initial vs overwrite",
                   relative_error(minus(accumulated, initial), fresh)),
            1e-14);

  // dx and dbias null: dw still accumulates and nothing else is touched.
  std::vector<double> dw(O * I, 0.0), dw_with_all(O * I, 0.0), dx(N * I), dbias(O, 0.0);
  reference::linear_backward<double>(nullptr, dw.data(), nullptr, dout.data(), x.data(), w.data(), N, I, O, false);
  reference::linear_backward(dx.data(), dw_with_all.data(), dbias.data(), dout.data(), x.data(), w.data(), N, I, O,
                             false);
  EXPECT_EQ(dw, dw_with_all);  // the same loops in the same order: bitwise
}

// The bf16 spec, by its rule: on inputs already bf16 it is the fp32 reference, bitwise (the rounding is
// the only difference); on fresh fp32 inputs it is the float64 product of the rounded x, w and dout;
// dbias sums dout unrounded.
TEST(Linear, ReferenceBf16RoundsTheProductsInputsOnly) {
  Rng rng(fresh_seed());
  const int64_t N = 7;
  const int I = 9, O = 6;
  const auto x = random_normal<float>(rng, N * I);
  const auto w = random_normal<float>(rng, O * I);
  const auto bias = random_normal<float>(rng, O);
  const auto dout = random_normal<float>(rng, N * O);
  auto rounded = [](std::vector<float> v) {
    for (float& value : v) value = fpdt::round_to_bf16(value);
    return v;
  };
  const auto x16 = rounded(x), w16 = rounded(w), dout16 = rounded(dout);
  ASSERT_NE(x16, x) << "fresh normal floats are almost never bf16 values: the test would not see the rounding";

  // Forward: bf16 on x, w = fp32 on the rounded copies, bitwise; and ≠ fp32 on x, w themselves.
  std::vector<float> out16(N * O), out_rounded(N * O), out32(N * O);
  reference::linear_forward_bf16(out16.data(), x.data(), w.data(), bias.data(), N, I, O, false);
  reference::linear_forward<float>(out_rounded.data(), x16.data(), w16.data(), bias.data(), N, I, O, false);
  reference::linear_forward<float>(out32.data(), x.data(), w.data(), bias.data(), N, I, O, false);
  EXPECT_EQ(out16, out_rounded);
  EXPECT_NE(out16, out32);

  // Backward: dx and dw from rounded dout, x, w (bitwise as above); dbias from dout as it came.
  std::vector<float> dx16(N * I), dw16(O * I, 0.5f), dbias16(O, 0.25f);
  std::vector<float> dx_rounded(N * I), dw_rounded(O * I, 0.5f), dbias_rounded(O, 0.25f), dbias32(O, 0.25f);
  reference::linear_backward_bf16(dx16.data(), dw16.data(), dbias16.data(), dout.data(), x.data(), w.data(), N, I, O,
                                  false);
  reference::linear_backward<float>(dx_rounded.data(), dw_rounded.data(), dbias_rounded.data(), dout16.data(),
                                    x16.data(), w16.data(), N, I, O, false);
  std::vector<float> dw_unused(O * I, 0.0f);
  reference::linear_backward<float>(nullptr, dw_unused.data(), dbias32.data(), dout.data(), x.data(), w.data(), N, I,
                                    O, false);
  EXPECT_EQ(dx16, dx_rounded);
  EXPECT_EQ(dw16, dw_rounded);
  EXPECT_EQ(dbias16, dbias32) << "dbias must sum the unrounded dout";
  EXPECT_NE(dbias16, dbias_rounded) << "rounding dout would have changed dbias: the check above could not fail";
}

// The cpu backward cuts its GEMMs across the team (OpenBLAS: dx by rows, dw along the token sum with
// partial sums added in thread order; oneDNN: its own cuts, its primitives kept per team size): 1 to 5
// threads, uneven cuts included, against the float64 reference — in bf16 on the bf16-rounded inputs,
// which leaves the same fp32 sums to compare.
TEST(LinearCpu, BackwardMatchesTheReferenceAtEveryTeamSize) {
  Rng rng(fresh_seed());
  const int64_t N = 301;
  const int I = 70, O = 93;  // 2·N·I·O ≈ 3.9 MFLOP a product: above the team's threshold
  const auto x = random_normal<float>(rng, N * I);
  const auto w = random_normal<float>(rng, O * I);
  const auto dout = random_normal<float>(rng, N * O);
  const auto dx_initial = random_normal<float>(rng, N * I);
  const auto dw_initial = random_normal<float>(rng, O * I);
  cpu::CpuBackend cpu;
  const int threads = omp_get_max_threads();
  struct Way {
    Precision precision;
    cpu::Bf16Gemm arithmetic;  // of bf16
  };
  std::vector<Way> ways = {Way{Precision::fp32, cpu::bf16_gemm_rule()}};
  for (const cpu::Bf16Gemm arithmetic : bf16_gemm_arithmetics()) ways.push_back(Way{Precision::bf16, arithmetic});
  for (const auto [precision, arithmetic] : ways) {
    const Bf16GemmScope scope(arithmetic);
    const bool bf16 = precision == Precision::bf16;
    auto as_run = [&](const std::vector<float>& v) {  // the products' inputs as the precision has them, in float64
      std::vector<double> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = bf16 ? fpdt::round_to_bf16(v[i]) : v[i];
      return out;
    };
    const auto x64 = as_run(x), w64 = as_run(w), dout64 = as_run(dout);
    std::vector<double> dx_want(dx_initial.begin(), dx_initial.end()), dw_want(dw_initial.begin(), dw_initial.end());
    reference::linear_backward<double>(dx_want.data(), dw_want.data(), nullptr, dout64.data(), x64.data(),
                                       w64.data(), N, I, O, true);
    for (int team = 1; team <= 5; ++team) {
      omp_set_num_threads(team);
      auto dx = dx_initial;
      auto dw = dw_initial;
      cpu.linear_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), {N, I, O}, true, precision);
      // fp32 sums of ≤ 301 products: ~√K · 6e-8 ≈ 1e-6 norm-wise; 1e-5 leaves margin (backend_ops.h).
      const std::string what = (bf16 ? std::string("bf16 on the ") + bf16_gemm_name(arithmetic) : std::string("fp32")) +
                               ", " + std::to_string(team) + " threads";
      EXPECT_LE(report("cpu dx " + what, relative_error(dx, dx_want)), 1e-5);
      EXPECT_LE(report("cpu dw " + what, relative_error(dw, dw_want)), 1e-5);
    }
  }
  omp_set_num_threads(threads);
}

// Every library behind gemm.h on each of the linear layer's layouts (forward NT, dx NN, dw TN), with and
// without +=, on leading dimensions wider than the rows: OpenBLAS (team_sgemm), oneDNN f32 and bf16 where
// the build has it (gemm_f32's table sends only some shapes there, so each is called directly), and
// gemm_bf16 — against float64 on the values each reads (bf16: the rounded ones). fp32 sums of ≤ 300 terms
// against float64: fp32_bound ≈ 6e-6 at most (tolerances.h); 1e-5.
TEST(LinearCpu, EveryGemmLibraryMatchesTheReferenceOnEveryLayout) {
  Rng rng(fresh_seed());
  const int M = 67, N = 45, K = 300, pad = 3;  // above team_sgemm's threshold: cut across the team
  struct Layout {
    const char* name;
    bool trans_a, trans_b;
  };
  for (const Layout layout : {Layout{"NT", false, true}, Layout{"NN", false, false}, Layout{"TN", true, false}}) {
    const int lda = (layout.trans_a ? M : K) + pad, ldb = (layout.trans_b ? K : N) + pad, ldc = N + pad;
    const auto a = random_normal<float>(rng, static_cast<size_t>(layout.trans_a ? K : M) * lda);
    const auto b = random_normal<float>(rng, static_cast<size_t>(layout.trans_b ? N : K) * ldb);
    const auto c_initial = random_normal<float>(rng, static_cast<size_t>(M) * ldc);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    cpu::to_bf16(a16.data(), a.data(), static_cast<int64_t>(a.size()));
    cpu::to_bf16(b16.data(), b.data(), static_cast<int64_t>(b.size()));
    auto want = [&](bool bf16, bool accumulate) {  // (M, N), dense
      std::vector<double> c(static_cast<size_t>(M) * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
          double sum = accumulate ? c_initial[static_cast<size_t>(i) * ldc + j] : 0.0;
          for (int k = 0; k < K; ++k) {
            const float x = layout.trans_a ? a[static_cast<size_t>(k) * lda + i] : a[static_cast<size_t>(i) * lda + k];
            const float y = layout.trans_b ? b[static_cast<size_t>(j) * ldb + k] : b[static_cast<size_t>(k) * ldb + j];
            sum += bf16 ? double{fpdt::round_to_bf16(x)} * fpdt::round_to_bf16(y) : double{x} * y;
          }
          c[static_cast<size_t>(i) * N + j] = sum;
        }
      return c;
    };
    auto dense = [&](const std::vector<float>& c) {
      std::vector<float> out(static_cast<size_t>(M) * N);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) out[static_cast<size_t>(i) * N + j] = c[static_cast<size_t>(i) * ldc + j];
      return out;
    };
    for (const bool accumulate : {false, true}) {
      const auto want32 = want(false, accumulate), want16 = want(true, accumulate);
      auto check = [&](const std::string& library, bool bf16, const std::function<void(float*)>& gemm) {
        auto c = c_initial;
        gemm(c.data());
        const std::string what = library + " " + layout.name + (accumulate ? " +=" : "");
        EXPECT_LE(report(what, relative_error(dense(c), bf16 ? want16 : want32)), 1e-5) << what;
        for (int i = 0; i < M; ++i)  // the columns past N are not C's: untouched
          for (int j = N; j < ldc; ++j)
            ASSERT_EQ(c[static_cast<size_t>(i) * ldc + j], c_initial[static_cast<size_t>(i) * ldc + j]) << what;
      };
      check("OpenBLAS", false, [&](float* c) {
        cpu::team_sgemm(layout.trans_a, layout.trans_b, M, N, K, a.data(), lda, b.data(), ldb, accumulate, c, ldc);
      });
      for (const cpu::Bf16Gemm arithmetic : bf16_gemm_arithmetics()) {
        const Bf16GemmScope scope(arithmetic);
        // The operands as a bf16 run makes them: a from floats (rounded now), b from words (a working copy).
        const cpu::Bf16Operand a_operand = cpu::bf16_operand(0, a.data(), static_cast<int64_t>(a.size()));
        const cpu::Bf16Operand b_operand{b16.data(), nullptr};
        check(std::string("gemm_bf16 on the ") + bf16_gemm_name(arithmetic), true, [&](float* c) {
          cpu::gemm_bf16(layout.trans_a, layout.trans_b, M, N, K, a_operand, lda, b_operand, ldb, accumulate, c, ldc);
        });
        if (arithmetic != cpu::Bf16Gemm::fp32_fmas) continue;
        // The FMAs widen b's words by blocks of its rows: in blocks of 13 (NT, 45 rows of 300) or 91 (NN and
        // TN, 300 rows of 45) rows here, the last one shorter — C's columns, or K, in four parts.
        const int64_t saved = cpu::set_widen_block_bytes(int64_t{4096} * sizeof(float));
        check("gemm_bf16 on the fp32 FMAs, b widened in 4 blocks", true, [&](float* c) {
          cpu::gemm_bf16(layout.trans_a, layout.trans_b, M, N, K, a_operand, lda, b_operand, ldb, accumulate, c, ldc);
        });
        cpu::set_widen_block_bytes(saved);
      }
      if (!cpu::onednn::available()) continue;
      check("oneDNN f32", false, [&](float* c) {
        cpu::onednn::matmul(cpu::onednn::Input::f32, layout.trans_a, layout.trans_b, M, N, K, a.data(), lda, b.data(),
                            ldb, accumulate, c, ldc);
      });
      if (!cpu::bf16_gemm_units_exist()) continue;  // oneDNN has no bf16 matmul on this CPU (AVX2)
      check("oneDNN bf16", true, [&](float* c) {
        cpu::onednn::matmul(cpu::onednn::Input::bf16, layout.trans_a, layout.trans_b, M, N, K, a16.data(), lda,
                            b16.data(), ldb, accumulate, c, ldc);
      });
    }
  }
}

// to_bf16 and round_to_bf16_values (the bf16 operands the cpu GEMMs read, as words or as floats) give
// float_to_bf16's bits for every kind of float: ties both ways, subnormals (which AVX512-BF16's own
// conversion would flush), the largest values (rounding to inf), inf, NaNs of both signs, and fresh random
// ones — at lengths off the 16-lane vector, in a call long enough to be cut across the team, the floats also
// in place; and bf16_to_floats gives those words' values back, bit for bit.
TEST(LinearCpu, ToBf16GivesTheScalarRulesBits) {
  Rng rng(fresh_seed());
  const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u,
                              0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu, 0xff7f8000u,
                              0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu, 0x7f800001u, 0x7fff8000u};
  std::vector<float> values;
  for (const uint32_t bits : special) {
    float value;
    std::memcpy(&value, &bits, 4);
    values.push_back(value);
  }
  const auto random = random_normal<float>(rng, 100'003, 1e3);
  values.insert(values.end(), random.begin(), random.end());
  for (const size_t n : {size_t{1}, size_t{15}, size_t{17}, values.size()}) {
    std::vector<uint16_t> got(n);
    cpu::to_bf16(got.data(), values.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], fpdt::float_to_bf16(values[i])) << "value " << i << " of " << n << ": " << values[i];
    std::vector<float> rounded(n), in_place(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n)), back(n);
    cpu::round_to_bf16_values(rounded.data(), values.data(), static_cast<int64_t>(n));
    cpu::round_to_bf16_values(in_place.data(), in_place.data(), static_cast<int64_t>(n));
    cpu::bf16_to_floats(back.data(), got.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t want = static_cast<uint32_t>(fpdt::float_to_bf16(values[i])) << 16;
      for (const float* floats : {rounded.data(), in_place.data(), back.data()}) {
        uint32_t bits;
        std::memcpy(&bits, &floats[i], 4);
        ASSERT_EQ(bits, want) << "value " << i << " of " << n << ": " << values[i];
      }
    }
  }
}

// The rule of the bf16 GEMMs' arithmetic (gemm.h) on this CPU: the bf16 units only where oneDNN has kernels
// for them, never on Intel's AVX512-BF16 without AMX (half-rate dot products); the config table's words
// name the path; and a bf16 operand is made as the arithmetic in force reads it.
TEST(LinearCpu, Bf16GemmsRunOnTheFasterUnit) {
  const cpu::Bf16Gemm rule = cpu::bf16_gemm_rule();
  if (!cpu::bf16_gemm_units_exist()) {
    EXPECT_EQ(rule, cpu::Bf16Gemm::fp32_fmas);
  }
  __builtin_cpu_init();
  if (__builtin_cpu_is("intel") && !cpu::cpu_has_amx_bf16()) {
    EXPECT_EQ(rule, cpu::Bf16Gemm::fp32_fmas);
  }
  const std::string described = cpu::describe_bf16_gemms();
  EXPECT_EQ(described.rfind("fp32 FMAs", 0) == 0, rule == cpu::Bf16Gemm::fp32_fmas) << described;
  const float values[3] = {1.0f, 1.00390625f, -3.0e-3f};
  for (const cpu::Bf16Gemm arithmetic : bf16_gemm_arithmetics()) {
    const Bf16GemmScope scope(arithmetic);
    const cpu::Bf16Operand operand = cpu::bf16_operand(0, values, 3);
    EXPECT_EQ(operand.words != nullptr, arithmetic == cpu::Bf16Gemm::bf16_units) << bf16_gemm_name(arithmetic);
    EXPECT_EQ(operand.values != nullptr, arithmetic == cpu::Bf16Gemm::fp32_fmas) << bf16_gemm_name(arithmetic);
  }
  EXPECT_EQ(cpu::bf16_gemm_arithmetic(), rule);  // each scope restored it
}

// On the fp32 FMAs a bf16 operand whose floats are all bf16 values already (a model's kept activations) is
// read in place, and any other is rounded into scratch: one float off bf16 anywhere (past the first block,
// which the calling thread checks alone) and a signalling NaN (which rounding quiets) each make the copy,
// whose values are the rounded ones.
TEST(LinearCpu, Bf16OperandsAlreadyRoundedAreReadInPlace) {
  const Bf16GemmScope scope(cpu::Bf16Gemm::fp32_fmas);
  Rng rng(fresh_seed());
  auto values = random_normal<float>(rng, 100'003);
  for (float& value : values) value = fpdt::round_to_bf16(value);
  const int64_t n = static_cast<int64_t>(values.size());
  EXPECT_EQ(cpu::bf16_operand(0, values.data(), n).values, values.data());
  const uint32_t signalling_nan = 0x7f810000u;  // low half zero, quiet bit clear
  for (const size_t at : {size_t{5}, values.size() - 3}) {
    for (const bool nan : {false, true}) {
      auto changed = values;
      if (nan) {
        std::memcpy(&changed[at], &signalling_nan, 4);
      } else {
        changed[at] = std::nextafter(changed[at], 1e30f);
      }
      const cpu::Bf16Operand operand = cpu::bf16_operand(0, changed.data(), n);
      ASSERT_NE(operand.values, changed.data()) << "value " << at << (nan ? " (NaN)" : "");
      uint32_t got, want;
      std::memcpy(&got, &operand.values[at], 4);
      want = static_cast<uint32_t>(fpdt::float_to_bf16(changed[at])) << 16;
      EXPECT_EQ(got, want) << "value " << at << (nan ? " (NaN)" : "");
      EXPECT_EQ(operand.values[at ^ 1], changed[at ^ 1]);
    }
  }
}

}  // namespace
}  // namespace fpdt::kernels
