// The hint a failed CUDA call carries (base/cuda_hints.h), checked without a GPU: out of device memory is
// answered with what shrinks the device's share (not with "check that a GPU is visible", which sent a user
// looking for a missing device on a GPU that was merely full), and the other common failures each with theirs.
#include <gtest/gtest.h>

#include <string>

#include "fpdt/base/cuda_hints.h"

namespace fpdt {
namespace {

bool says(const std::string& hint, const std::string& words) { return hint.find(words) != std::string::npos; }

TEST(CudaHints, OutOfMemoryAsksForLessDeviceMemory) {
  const std::string hint = cuda_error_hint("cudaErrorMemoryAllocation");
  EXPECT_TRUE(says(hint, "out of memory")) << hint;
  EXPECT_TRUE(says(hint, "--chunk")) << hint;
  EXPECT_TRUE(says(hint, "--offload")) << hint;
  EXPECT_FALSE(says(hint, "visible")) << hint;
}

TEST(CudaHints, EachCommonFailureHasItsOwn) {
  EXPECT_TRUE(says(cuda_error_hint("cudaErrorNoDevice"), "CUDA_VISIBLE_DEVICES"));
  EXPECT_TRUE(says(cuda_error_hint("cudaErrorInsufficientDriver"), "driver"));
  EXPECT_TRUE(says(cuda_error_hint("cudaErrorNoKernelImageForDevice"), "CMAKE_CUDA_ARCHITECTURES"));
  EXPECT_TRUE(says(cuda_error_hint("cudaErrorIllegalAddress"), "CUDA_LAUNCH_BLOCKING=1"));
  EXPECT_TRUE(says(cuda_error_hint("cudaErrorSomethingNew"), "nvidia-smi"));  // the general one
}

}  // namespace
}  // namespace fpdt
