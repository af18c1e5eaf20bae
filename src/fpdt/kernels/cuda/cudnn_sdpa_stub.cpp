// CudnnSdpa (cudnn_sdpa.h) in a CUDA build without cuDNN's headers (CMake picks this file when it finds no
// cudnn.h or cudnn_frontend.h, or FPDT_CUDNN=OFF): every block is refused with one sentence that says how
// to get the fused path, so the CUDA-core kernel (attention.cu) runs attention. Nothing here is called to
// execute: forward and backward follow only a successful prepare.
#include "fpdt/kernels/cuda/cudnn_sdpa.h"

#include "fpdt/base/error.h"

namespace fpdt::kernels::cuda {

namespace {

const char* const kNotBuilt =
    "not built: CMake found no cudnn.h or cudnn_frontend.h (pip's nvidia-cudnn-cu13 and nvidia-cudnn-frontend have "
    "them; pass -DFPDT_CUDNN_INCLUDE_DIR and -DFPDT_CUDNN_FRONTEND_INCLUDE_DIR)";

}  // namespace

struct CudnnSdpa::Impl {};

CudnnSdpa::CudnnSdpa(cudaStream_t) {}
CudnnSdpa::~CudnnSdpa() = default;

std::string CudnnSdpa::describe(bool) { return "CUDA-core kernels (built without cuDNN)"; }

std::string CudnnSdpa::prepare_forward(const SdpaKey&, size_t* workspace_bytes) {
  *workspace_bytes = 0;
  return kNotBuilt;
}

std::string CudnnSdpa::prepare_backward(const SdpaKey&, size_t* workspace_bytes) {
  *workspace_bytes = 0;
  return kNotBuilt;
}

std::string CudnnSdpa::check_without_device(const SdpaKey&, int) { return kNotBuilt; }

void CudnnSdpa::forward(const SdpaKey&, const SdpaForwardArgs&, void*) {
  throw Error("cuda", "cuDNN attention called in a build without it", "");
}

void CudnnSdpa::backward(const SdpaKey&, const SdpaBackwardArgs&, void*) {
  throw Error("cuda", "cuDNN attention called in a build without it", "");
}

}  // namespace fpdt::kernels::cuda
