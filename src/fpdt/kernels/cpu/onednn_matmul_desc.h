// A matmul primitive descriptor in either oneDNN API, for the code that calls oneDNN directly
// (cpu/onednn_gemm.cpp, bench/*_onednn.cpp). oneDNN 2.x builds it from an operation descriptor
// (matmul::desc), which 3.0 removed for a constructor that takes the engine first: Debian 12's libdnnl-dev
// is 2.6; the oneDNN wheels on PyPI (onednn-cpu-gomp 2023.2: 3.2) and oneDNN's current releases are 3.x.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace fpdt::kernels::cpu::onednn {

// C = A · B with the attribute's post-ops and modes; a, b, c as in matmul's memory descriptors.
inline dnnl::matmul::primitive_desc matmul_primitive_desc(const dnnl::engine& engine, const dnnl::memory::desc& a,
                                                          const dnnl::memory::desc& b, const dnnl::memory::desc& c,
                                                          const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(engine, a, b, c, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine);
#endif
}

}  // namespace fpdt::kernels::cpu::onednn
