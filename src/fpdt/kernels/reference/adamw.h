// Reference AdamW update with PyTorch's semantics (torch.optim.AdamW, decoupled weight decay):
//   param *= 1 − lr·weight_decay
//   m = beta1·m + (1 − beta1)·grad;   v = beta2·v + (1 − beta2)·grad²
//   param −= (lr / (1 − beta1^step)) · m / (sqrt(v) / sqrt(1 − beta2^step) + eps)
// step counts from 1. param, m, v are updated in place; grad is read only. All arrays have n elements.
#pragma once

#include <cstdint>

#include "fpdt/kernels/ops.h"

namespace fpdt::kernels::reference {

template <typename T>
void adamw_update(T* param, T* m, T* v, const T* grad, int64_t n, const AdamWParams& params);

}  // namespace fpdt::kernels::reference
