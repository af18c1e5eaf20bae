// simd.h's exp2, the attention's exponential: within its stated 2e-7 of std::exp2 where the result is a
// normal float, exactly 0 at and below −127 (−inf included) and for NaN, and — as simd.h promises of every
// operation — the same bits at both vector widths where the build has AVX-512 (AVX2 clamps x and builds
// 2^n from exponent bits; AVX-512 masks vscalefps instead), on fresh random inputs and the edges between
// the two ways of reaching 0.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fpdt/kernels/cpu/simd.h"
#include "testing.h"

namespace fpdt::kernels::cpu {
namespace {

using testing::fresh_seed;

// Inputs: uniform over the attention's range (scores minus a max: ≤ 0) and past −127, and the edges.
std::vector<float> exp2_inputs(Rng& rng) {
  std::vector<float> x = {0.0f,       -0.5f,      -1.0f,      -126.0f,   -126.2f,     -126.5f, -126.7f,
                          -127.0f,    -127.3f,    -127.5f,    -128.0f,   -150.0f,     -1e30f,  0.25f,
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 4096; ++i) x.push_back(static_cast<float>(-140.0 * rng.uniform()));
  for (int i = 0; i < 1024; ++i) x.push_back(static_cast<float>(-2.0 * rng.uniform()));
  while (x.size() % 16 != 0) x.push_back(-3.0f);
  return x;
}

template <class V>
std::vector<float> exp2_at_width(const std::vector<float>& x) {
  constexpr size_t kWidth = sizeof(V) / sizeof(float);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); i += kWidth) vstore(y.data() + i, vexp2(vload<V>(x.data() + i)));
  return y;
}

TEST(Simd, Exp2WithinItsBoundAndZeroBelowMinus127) {
  Rng rng(fresh_seed());
  const std::vector<float> x = exp2_inputs(rng);
  const std::vector<float> y = exp2_at_width<Vec>(x);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || x[i] < -126.5f) {  // n = round(x) ≤ −127 (−126.5 rounds to even, −126): 0
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), 0u) << "exp2(" << x[i] << ") = " << y[i];
      continue;
    }
    const double want = std::exp2(static_cast<double>(x[i]));
    if (want < std::numeric_limits<float>::min()) continue;  // a subnormal result: 0 under FTZ, else rounded
    // 2e-7: the Cephes polynomial's relative error (simd.h), its fp32 evaluation and the final rounding
    ASSERT_LE(std::abs(y[i] - want), 2e-7 * want) << "exp2(" << x[i] << ")";
  }
}

// The premise of round_row's computed_under_ftz (panel_gemm_bf16.h): on a thread that flushes subnormal
// results — every thread of a CpuBackend's team — exp2 gives 0 or a normal float, never a subnormal,
// where the results would be subnormal (2^x for x in [−127, −126)) as well as elsewhere.
TEST(Simd, Exp2GivesNoSubnormalOnAThreadThatFlushesThem) {
  const unsigned mxcsr = _mm_getcsr();
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  Rng rng(fresh_seed());
  std::vector<float> x = exp2_inputs(rng);
  for (int i = 0; i < 1024; ++i) x.push_back(static_cast<float>(-127.0 + rng.uniform()));
  while (x.size() % 16 != 0) x.push_back(-126.9f);
  const std::vector<float> y = exp2_at_width<Vec>(x);
  _mm_setcsr(mxcsr);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NE(std::fpclassify(y[i]), FP_SUBNORMAL) << "exp2(" << x[i] << ") = " << y[i] << " under FTZ";
}

#if defined(__AVX512F__)
TEST(Simd, Exp2TheSameBitsAtBothWidths) {
  Rng rng(fresh_seed());
  const std::vector<float> x = exp2_inputs(rng);
  const std::vector<float> narrow = exp2_at_width<__m256>(x), wide = exp2_at_width<__m512>(x);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(narrow[i]), std::bit_cast<uint32_t>(wide[i]))
        << "exp2(" << x[i] << "): AVX2 " << narrow[i] << ", AVX-512 " << wide[i];
}
#endif

}  // namespace
}  // namespace fpdt::kernels::cpu
