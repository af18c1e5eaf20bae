// Linear kernels: the reference backward against float64 finite differences of the reference
// forward, and the fast CPU kernels (OpenBLAS) against the reference run in float64 on the same
// inputs, for every switch: bias or none, accumulate or overwrite, dx accumulated, overwritten or
// skipped.
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "fpdt/kernels/cpu/kernels.h"
#include "fpdt/kernels/reference/linear.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::finite_differences;
using testing::to_double;
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

struct Case {
  int64_t N;
  int I, O;
  bool bias, accumulate, accumulate_dx, dx;
};

std::string case_name(const Case& c) {
  char name[96];
  std::snprintf(name, sizeof(name), "N%lld_I%d_O%d_%s_%s_%s", static_cast<long long>(c.N), c.I, c.O,
                c.bias ? "bias" : "nobias", c.accumulate ? "acc" : "set",
                !c.dx ? "nodx" : c.accumulate_dx ? "accdx" : "setdx");
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class LinearFast : public ::testing::TestWithParam<Case> {};

TEST_P(LinearFast, MatchesReference) {
  const Case c = GetParam();
  const int64_t N = c.N;
  const int I = c.I, O = c.O;
  Rng rng(fresh_seed());
  const auto x = random_normal<float>(rng, N * I);
  const auto w = random_normal<float>(rng, O * I, 0.05);
  const auto bias = random_normal<float>(rng, O);
  const auto dout = random_normal<float>(rng, N * O);
  const auto x64 = to_double(x), w64 = to_double(w), bias64 = to_double(bias), dout64 = to_double(dout);
  // fp32 GEMMs accumulate over K ≤ 512 terms (I, O or N): typical error ~√K · 6e-8 ≈ 1.4e-6 norm-wise
  // (the linear worst case K · 6e-8 is never approached on random data); 1e-5 leaves margin.
  constexpr double kTolerance = 1e-5;
  const std::string tag = " [" + case_name(c) + "]";

  const auto out_initial = random_normal<float>(rng, N * O);
  auto out = out_initial;
  cpu::linear_forward(out.data(), x.data(), w.data(), c.bias ? bias.data() : nullptr, N, I, O, c.accumulate);
  auto out_want = to_double(out_initial);
  reference::linear_forward(out_want.data(), x64.data(), w64.data(), c.bias ? bias64.data() : nullptr, N, I, O,
                            c.accumulate);
  if (c.accumulate) {
    EXPECT_LE(report("fast out vs reference" + tag,
                     relative_error(minus(out, out_initial), minus(out_want, to_double(out_initial)))),
              kTolerance);
  } else {
    EXPECT_LE(report("fast out vs reference" + tag, relative_error(out, out_want)), kTolerance);
  }

  const auto dx_initial = random_normal<float>(rng, N * I);  // += outputs start from non-zero content
  const auto dw_initial = random_normal<float>(rng, O * I);
  const auto dbias_initial = random_normal<float>(rng, O);
  auto dx = dx_initial;
  auto dw = dw_initial;
  auto dbias = dbias_initial;
  cpu::linear_backward(c.dx ? dx.data() : nullptr, dw.data(), c.bias ? dbias.data() : nullptr, dout.data(),
                       x.data(), w.data(), N, I, O, c.accumulate_dx);
  auto dx_want = to_double(dx_initial);
  auto dw_want = to_double(dw_initial);
  auto dbias_want = to_double(dbias_initial);
  reference::linear_backward(c.dx ? dx_want.data() : nullptr, dw_want.data(), c.bias ? dbias_want.data() : nullptr,
                             dout64.data(), x64.data(), w64.data(), N, I, O, c.accumulate_dx);
  if (!c.dx) {
    EXPECT_EQ(dx, dx_initial);
  } else if (c.accumulate_dx) {
    EXPECT_LE(report("fast dx vs reference" + tag,
                     relative_error(minus(dx, dx_initial), minus(dx_want, to_double(dx_initial)))),
              kTolerance);
  } else {
    EXPECT_LE(report("fast dx vs reference" + tag, relative_error(dx, dx_want)), kTolerance);
  }
  EXPECT_LE(report("fast dw vs reference" + tag,
                   relative_error(minus(dw, dw_initial), minus(dw_want, to_double(dw_initial)))),
            kTolerance);
  if (c.bias) {
    EXPECT_LE(report("fast dbias vs reference" + tag,
                     relative_error(minus(dbias, dbias_initial), minus(dbias_want, to_double(dbias_initial)))),
              kTolerance);
  }
}

// Small sizes (not multiples of 8 or 16) cover every switch; one larger size runs the parallel paths.
INSTANTIATE_TEST_SUITE_P(Switches, LinearFast,
                         ::testing::Values(Case{37, 100, 75, true, false, false, true},
                                           Case{37, 100, 75, true, true, true, true},
                                           Case{37, 100, 75, false, false, true, true},
                                           Case{37, 100, 75, false, true, false, false},
                                           Case{37, 100, 75, true, false, false, false},
                                           Case{300, 512, 257, true, true, true, true},
                                           Case{300, 512, 257, false, false, false, true}),
                         [](const auto& info) { return case_name(info.param); });

}  // namespace
}  // namespace fpdt::kernels
