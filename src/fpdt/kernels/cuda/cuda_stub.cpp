// The CUDA backend in a build without CUDA (CMake picks this file when FPDT_CUDA is off): the same
// functions as cuda/*.cu, each throwing one clear fpdt::Error; cuda_available() says false.
#include "fpdt/base/error.h"
#include "fpdt/kernels/cuda/cuda_backend.h"

namespace fpdt::kernels {

namespace {

[[noreturn]] void no_cuda() {
  throw Error("kernels", "built without CUDA",
              "install the CUDA toolkit and reconfigure with -DFPDT_CUDA=ON");
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { no_cuda(); }
void* cuda_stream(Backend&) { no_cuda(); }
bool cuda_available() { return false; }
bool cuda_built() { return false; }
std::string cuda_attention_kernels(Precision) { return "built without CUDA"; }
bool cuda_attention_on_cudnn(Backend&, const AttentionChunkParams&, bool) { return false; }
std::string cuda_check_attention_graphs(const AttentionChunkParams&, int) { return "built without CUDA"; }
std::string cuda_device_name() { no_cuda(); }
void load_cuda_libraries() { no_cuda(); }
void* cuda_device_alloc(size_t) { no_cuda(); }
void cuda_device_free(void*) noexcept {}
void cuda_copy_to_device(void*, const void*, size_t) { no_cuda(); }
void cuda_copy_to_host(void*, const void*, size_t) { no_cuda(); }
void cuda_synchronize() { no_cuda(); }
void* cuda_pinned_alloc(size_t) { no_cuda(); }
void cuda_pinned_free(void*) noexcept {}

}  // namespace fpdt::kernels
