// AdamW: the reference against a hand-written float64 recurrence of torch.optim.AdamW for one element
// (written the way torch's single-tensor implementation writes it), and the cpu kernel against the
// reference over several steps with weight decay (its drift; one step on every backend:
// backend_ops_test.cpp) and independent of an element's position.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/reference/adamw.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

using testing::to_double;
using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

double report(const char* what, double error) {
  std::printf("[ error    ] %s: %.3e\n", what, error);
  return error;
}

AdamWParams test_params(int64_t step) {
  AdamWParams params;
  params.lr = 1e-2;
  params.beta1 = 0.9;
  params.beta2 = 0.999;
  params.eps = 1e-8;
  params.weight_decay = 0.1;
  params.step = step;
  return params;
}

// torch/optim/adamw.py, _single_tensor_adamw, one element, in float64:
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.lerp_(grad, 1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   step_size = lr / (1 - beta1 ** step)
//   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2 ** step)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
struct TorchAdamW {
  double param, exp_avg = 0.0, exp_avg_sq = 0.0;
  void step(double grad, const AdamWParams& p) {
    param *= 1.0 - p.lr * p.weight_decay;
    exp_avg += (1.0 - p.beta1) * (grad - exp_avg);  // lerp
    exp_avg_sq = exp_avg_sq * p.beta2 + (1.0 - p.beta2) * grad * grad;
    const double step_size = p.lr / (1.0 - std::pow(p.beta1, static_cast<double>(p.step)));
    const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(p.beta2, static_cast<double>(p.step)));
    const double denom = std::sqrt(exp_avg_sq) / bias_correction2_sqrt + p.eps;
    param += -step_size * (exp_avg / denom);
  }
};

TEST(AdamW, ReferenceMatchesTorchRecurrence) {
  Rng rng(fresh_seed());
  const double start = rng.normal();
  TorchAdamW torch{start};
  double param = start, m = 0.0, v = 0.0;
  double max_grad = 0.0, worst = 0.0;
  for (int64_t step = 1; step <= 5; ++step) {
    const double grad = rng.normal();
    max_grad = std::max(max_grad, std::abs(grad));
    const AdamWParams params = test_params(step);
    torch.step(grad, params);
    reference::adamw_update(&param, &m, &v, &grad, 1, params);
    // The same maths in float64 with the operations in a slightly different order (lerp vs
    // β·m + (1−β)·g): a few ulps of the largest term in each quantity. m may cancel to near zero and
    // param may cross zero, so each error is measured against the size of its terms, not its value:
    // param against |param| + lr (decay and update), m against max |grad|, v against max grad².
    const double errors[] = {std::abs(param - torch.param) / (std::abs(torch.param) + params.lr),
                             std::abs(m - torch.exp_avg) / max_grad,
                             std::abs(v - torch.exp_avg_sq) / (max_grad * max_grad)};
    for (const double error : errors) {
      worst = std::max(worst, error);
      EXPECT_LE(error, 1e-14) << "step " << step;
    }
  }
  report("reference vs torch recurrence (5 steps)", worst);
  // The first step moves every parameter by about lr (m̂/√v̂ = ±1): a sanity check of the formula's scale.
  TorchAdamW first{0.0};
  first.step(0.3, test_params(1));
  EXPECT_NEAR(first.param, -1e-2, 1e-9);
}

class AdamWFast : public ::testing::TestWithParam<int64_t> {};

TEST_P(AdamWFast, MatchesReferenceOverSteps) {
  const int64_t n = GetParam();
  Rng rng(fresh_seed());
  auto param = random_normal<float>(rng, n);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  auto param_want = to_double(param);
  std::vector<double> m_want(n, 0.0), v_want(n, 0.0);
  double worst_param = 0.0, worst_m = 0.0, worst_v = 0.0;
  for (int64_t step = 1; step <= 5; ++step) {
    const auto grad = random_normal<float>(rng, n);
    const auto grad64 = to_double(grad);
    const AdamWParams params = test_params(step);
    cpu::CpuBackend().adamw_update(param.data(), m.data(), v.data(), grad.data(), n, params);
    reference::adamw_update(param_want.data(), m_want.data(), v_want.data(), grad64.data(), n, params);
    worst_param = std::max(worst_param, relative_error(param, param_want));
    worst_m = std::max(worst_m, relative_error(m, m_want));
    worst_v = std::max(worst_v, relative_error(v, v_want));
  }
  // fp32 state drifts from the float64 reference by a few roundings (6e-8) per step, and the update
  // is ~lr = 1e-2 of a parameter: after 5 steps every array is within ~1e-6; 5e-6 leaves margin.
  EXPECT_LE(report("fast param vs reference (5 steps)", worst_param), 5e-6);
  EXPECT_LE(report("fast m vs reference (5 steps)", worst_m), 5e-6);
  EXPECT_LE(report("fast v vs reference (5 steps)", worst_v), 5e-6);
}

// 37: one vector block plus a scalar tail; 100003: the parallel path plus a tail.
INSTANTIATE_TEST_SUITE_P(Sizes, AdamWFast, ::testing::Values(37, 100003),
                         [](const auto& info) { return std::string("n").append(std::to_string(info.param)); });

TEST(AdamW, FastResultDoesNotDependOnPosition) {
  // Elements 8..10 run in the scalar tail, 0..2 in the vector body: same inputs, bitwise same outputs.
  Rng rng(fresh_seed());
  const int64_t n = 11;
  auto param = random_normal<float>(rng, n);
  auto m = random_normal<float>(rng, n, 0.1);
  auto v = random_normal<float>(rng, n, 0.1);
  auto grad = random_normal<float>(rng, n);
  for (int i = 0; i < 3; ++i) {
    param[8 + i] = param[i];
    m[8 + i] = m[i];
    v[i] = v[8 + i] = std::abs(v[i]);
    grad[8 + i] = grad[i];
  }
  cpu::CpuBackend().adamw_update(param.data(), m.data(), v.data(), grad.data(), n, test_params(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(param[8 + i], param[i]);
    EXPECT_EQ(m[8 + i], m[i]);
    EXPECT_EQ(v[8 + i], v[i]);
  }
}

}  // namespace
}  // namespace fpdt::kernels
