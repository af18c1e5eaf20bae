// The NCCL backend of a build without it (CMake compiles this file instead of nccl_communicator.cpp
// and nccl_sum.cu when the CUDA backend is off or NCCL is not found): the same entry points, a clear error.
#include "fpdt/base/error.h"
#include "fpdt/comm/communicator.h"

namespace fpdt::comm {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl(Communicator& bootstrap, void* cuda_stream) {
  throw Error("comm", "collectives over GPU memory need NCCL, but fpdt was built without it",
              "install NCCL (libnccl-dev, or the CUDA toolkit's) and reconfigure with -DFPDT_CUDA=ON");
}

}  // namespace fpdt::comm
