// Reference AdamW step (the spec; see adamw.h): torch.optim.AdamW's update, one element at a time,
// computed in double whatever T is. param, m, v are updated in place; grad is read only.
#include "fpdt/kernels/reference/adamw.h"

#include <cmath>

#include "fpdt/kernels/reference/reference_backend.h"

namespace fpdt::kernels::reference {

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& params) {
  const double step = static_cast<double>(params.step);
  const double bias_correction1 = 1.0 - std::pow(params.beta1, step);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(params.beta2, step));
  const double step_size = params.lr / bias_correction1;
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    double p = static_cast<double>(param[i]) * (1.0 - params.lr * params.weight_decay);
    const double m_new = params.beta1 * m[i] + (1.0 - params.beta1) * g;
    const double v_new = params.beta2 * v[i] + (1.0 - params.beta2) * g * g;
    p -= step_size * m_new / (std::sqrt(v_new) / bias_correction2_sqrt + params.eps);
    param[i] = static_cast<T>(p);
    m[i] = static_cast<T>(m_new);
    v[i] = static_cast<T>(v_new);
  }
}

template void adamw_update<float>(float*, float*, float*, const float*, int64_t, const AdamWParams&);
template void adamw_update<double>(double*, double*, double*, const double*, int64_t, const AdamWParams&);

void ReferenceBackend::adamw_update(float* param, float* m, float* v, const float* grad, int64_t n,
                                    const AdamWParams& params) {
  reference::adamw_update(param, m, v, grad, n, params);
}

}  // namespace fpdt::kernels::reference
