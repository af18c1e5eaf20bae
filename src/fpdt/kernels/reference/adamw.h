// Reference AdamW update with PyTorch's semantics (torch.optim.AdamW, decoupled weight decay):
//   param *= 1 − lr·weight_decay
//   m = beta1·m + (1 − beta1)·grad;   v = beta2·v + (1 − beta2)·grad²
//   param −= (lr / (1 − beta1^step)) · m / (sqrt(v) / sqrt(1 − beta2^step) + eps)
// step counts from 1. param, m, v are updated in place; grad is read only. All arrays have n elements.
#pragma once

#include <cstdint>

namespace fpdt::kernels {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

}  // namespace fpdt::kernels

namespace fpdt::kernels::reference {

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& params);

}  // namespace fpdt::kernels::reference
