// The NCCL communicator's one piece of arithmetic, in CUDA (nccl_sum.cu): the rank-order sum of the
// blocks a reduction received, Communicator::sum_blocks's contract on device memory. Internal to comm/nccl.
#pragma once

#include <cstddef>

namespace fpdt::comm::nccl {

// dst (n) = ((b_0 + b_1) + …) + b_{ranks−1}, b_j = blocks + j·n, (+= with add), queued on `stream`
// (a cudaStream_t). The same fp32/fp64 additions in the same order as the host's loop: bitwise its sums.
void sum_blocks_on_stream(float* dst, const float* blocks, size_t ranks, size_t n, bool add, void* stream);
void sum_blocks_on_stream(double* dst, const double* blocks, size_t ranks, size_t n, bool add, void* stream);

}  // namespace fpdt::comm::nccl
