// The Backend conformance table (backend_ops.h) on the cuda backend: every op against the float64
// reference at several shapes, inputs copied to the device and results back. Label `cuda`: run only
// on GPU machines (ctest -L cuda, scripts/gpu_check.sh); without a usable device every test FAILS
// with a message, it never skips.
#include "kernels/backend_ops.h"

namespace fpdt::kernels::conformance {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, BackendOps,
                         ::testing::Combine(::testing::Values("cuda"), ::testing::Range<size_t>(0, rows().size())),
                         row_test_name);

// The CUDA attention kernels have one instantiation per ⌈D/32⌉ up to 256: a larger head dim is one
// clear error, not a launch failure.
TEST(CudaBackendLimits, RejectsHeadDimAbove256) {
  ASSERT_TRUE(cuda_available()) << "no usable CUDA device (or a build without CUDA): run on a GPU machine";
  const auto backend = make_backend("cuda");
  AttentionChunkParams params;
  params.B = 1;
  params.Cq = params.Ck = 1;
  params.H = params.Hkv = 1;
  params.D = 512;
  float* none = nullptr;
  EXPECT_THROW(backend->attention_chunk_forward(none, none, params, false), Error);
}

}  // namespace
}  // namespace fpdt::kernels::conformance
