// CudnnSdpa (cudnn_sdpa.h) over the cuDNN frontend's graph API, the frontend in its dynamic-loading mode
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, set by CMake): every cuDNN call goes through the handle opened
// here, so nothing links libcudnn and a machine without it runs the CUDA-core kernel. Host code only (built
// by the C++ compiler, not nvcc). Graph per SdpaKey and direction: io bf16, intermediates and compute
// fp32, statistics fp32 (the LSE, natural log), the band of sdpa_plan.h; built by the heuristics' first
// plan that cuDNN supports, kept for the life of the backend.
#include "fpdt/kernels/cuda/cudnn_sdpa.h"

#include <dlfcn.h>

#include <cudnn_frontend.h>

#include <cstdlib>
#include <exception>
#include <memory>
#include <unordered_map>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"

namespace cudnn_frontend {
// The frontend's dynamic-loading mode resolves every cuDNN symbol in this handle (cudnn_frontend_shim.h).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace fpdt::kernels::cuda {

namespace fe = cudnn_frontend;

namespace {

#ifndef FPDT_CUDNN_LIBRARY_HINT
#define FPDT_CUDNN_LIBRARY_HINT ""
#endif

// cuDNN 9 is the first with the SDPA backward this path uses through the graph API; the frontend checks
// finer version limits of each feature itself, as refusals.
constexpr size_t kMinCudnnVersion = 90000;

// The graphs' tensor ids (uids): one set for both directions.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// Opens libcudnn once per process; "" or why not. The handle is process-wide (the frontend's is a global).
std::string open_library() {
  static const std::string status = [] {
    std::string tried;
    auto attempt = [&](const std::string& name) {
      if (name.empty() || fe::cudnn_dlhandle != nullptr) return;
      fe::cudnn_dlhandle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (fe::cudnn_dlhandle == nullptr) {
        const char* error = dlerror();
        tried += (tried.empty() ? "" : "; ") + name + " (" + (error ? error : "not found") + ")";
      }
    };
    const char* given = std::getenv("FPDT_CUDNN_LIBRARY");
    attempt(given ? given : "");
    attempt("libcudnn.so.9");
    attempt(FPDT_CUDNN_LIBRARY_HINT);
    if (fe::cudnn_dlhandle == nullptr) return "libcudnn not loaded, tried " + tried;
    try {
      const size_t version = fe::detail::get_backend_version();
      if (version < kMinCudnnVersion) return "cuDNN " + std::to_string(version) + " is older than 9.0";
    } catch (const std::exception& error) {
      return std::string("libcudnn has no cudnnGetVersion: ") + error.what();
    }
    return std::string();
  }();
  return status;
}

// FPDT_CUDNN_ATTENTION=off: every block to the CUDA-core kernels (to compare the two paths, or to rule
// cuDNN out); read on a backend's first block that may go to cuDNN.
bool switched_off() {
  const char* value = std::getenv("FPDT_CUDNN_ATTENTION");
  return value != nullptr && std::string(value) == "off";
}

std::string version_text(size_t version) {  // 92600 → 9.26.0
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

// (B, C, heads, D) in memory as cuDNN's (B, heads, C, D).
std::vector<int64_t> bshd_dims(int B, int64_t C, int heads, int D) { return {B, heads, C, D}; }
std::vector<int64_t> bshd_strides(int64_t C, int heads, int D) {
  return {C * heads * D, D, int64_t{heads} * D, 1};
}

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& graph, const char* name, Uid uid, int B,
                                                     int64_t C, int heads, int D) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(bshd_dims(B, C, heads, D))
                          .set_stride(bshd_strides(C, heads, D)));
}

std::shared_ptr<fe::graph::Graph> new_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

template <typename Attributes>
void set_band(Attributes& attributes, const SdpaKey& key) {
  attributes.set_attn_scale(key.scale());
  if (key.right_bound != kNoBound || key.left_bound != kNoBound)
    attributes.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
  if (key.right_bound != kNoBound) attributes.set_diagonal_band_right_bound(static_cast<int>(key.right_bound));
  if (key.left_bound != kNoBound) attributes.set_diagonal_band_left_bound(static_cast<int>(key.left_bound));
}

// The graph's checks and plan, in the frontend's order; "" or the first refusal.
std::string build(fe::graph::Graph& graph, cudnnHandle_t handle) {
  auto step = [](fe::error_t status, const char* what) {
    return status.is_good() ? std::string() : std::string(what) + ": " + status.get_message();
  };
  std::string refusal = step(graph.validate(), "validate");
  if (refusal.empty()) refusal = step(graph.build_operation_graph(handle), "build_operation_graph");
  if (refusal.empty()) refusal = step(graph.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  if (refusal.empty()) refusal = step(graph.check_support(), "check_support");
  if (refusal.empty()) refusal = step(graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans");
  return refusal;
}

// The forward graph of `key`: o (bf16) and its LSE (fp32 statistics) from q, k, v under the key's band.
void add_forward(fe::graph::Graph& graph, const SdpaKey& key) {
  auto q = tensor(graph, "q", kQ, key.B, key.Cq, key.H, key.D);
  auto k = tensor(graph, "k", kK, key.B, key.Ck, key.Hkv, key.D);
  auto v = tensor(graph, "v", kV, key.B, key.Ck, key.Hkv, key.D);
  auto attributes = fe::graph::SDPA_attributes().set_name("fpdt_block_forward").set_generate_stats(true);
  set_band(attributes, key);
  auto [o, stats] = graph.sdpa(q, k, v, attributes);
  o->set_output(true).set_uid(kO).set_dim(bshd_dims(key.B, key.Cq, key.H, key.D)).set_stride(
      bshd_strides(key.Cq, key.H, key.D));
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({key.B, key.H, key.Cq, 1})
      .set_stride({int64_t{key.H} * key.Cq, key.Cq, 1, 1});
}

// The backward graph of `key`: dq, dk, dv (bf16) from q, k, v, o, dO and the LSE, deterministic (the same
// gradients bit for bit on every run: resume and rerun checks compare bits).
void add_backward(fe::graph::Graph& graph, const SdpaKey& key) {
  auto q = tensor(graph, "q", kQ, key.B, key.Cq, key.H, key.D);
  auto k = tensor(graph, "k", kK, key.B, key.Ck, key.Hkv, key.D);
  auto v = tensor(graph, "v", kV, key.B, key.Ck, key.Hkv, key.D);
  auto o = tensor(graph, "o", kO, key.B, key.Cq, key.H, key.D);
  auto dO = tensor(graph, "dO", kDO, key.B, key.Cq, key.H, key.D);
  auto stats = graph.tensor(fe::graph::Tensor_attributes()
                                .set_name("lse")
                                .set_uid(kStats)
                                .set_data_type(fe::DataType_t::FLOAT)
                                .set_dim({key.B, key.H, key.Cq, 1})
                                .set_stride({int64_t{key.H} * key.Cq, key.Cq, 1, 1}));
  auto attributes =
      fe::graph::SDPA_backward_attributes().set_name("fpdt_block_backward").set_deterministic_algorithm(true);
  set_band(attributes, key);
  auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, dO, stats, attributes);
  dq->set_output(true).set_uid(kDQ).set_dim(bshd_dims(key.B, key.Cq, key.H, key.D)).set_stride(
      bshd_strides(key.Cq, key.H, key.D));
  dk->set_output(true).set_uid(kDK).set_dim(bshd_dims(key.B, key.Ck, key.Hkv, key.D)).set_stride(
      bshd_strides(key.Ck, key.Hkv, key.D));
  dv->set_output(true).set_uid(kDV).set_dim(bshd_dims(key.B, key.Ck, key.Hkv, key.D)).set_stride(
      bshd_strides(key.Ck, key.Hkv, key.D));
}

std::string describe_key(const SdpaKey& key) {
  return "B=" + std::to_string(key.B) + " Cq=" + std::to_string(key.Cq) + " Ck=" + std::to_string(key.Ck) +
         " H=" + std::to_string(key.H) + " Hkv=" + std::to_string(key.Hkv) + " D=" + std::to_string(key.D) +
         (key.right_bound != kNoBound ? " right=" + std::to_string(key.right_bound) : "") +
         (key.left_bound != kNoBound ? " left=" + std::to_string(key.left_bound) : "");
}

}  // namespace

struct CudnnSdpa::Impl {
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;  // null when refused
    std::string refusal;
    size_t workspace_bytes = 0;
  };
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  bool started = false;
  std::string unavailable;  // why no block runs on cuDNN ("" when it can), once started
  std::unordered_map<SdpaKey, Entry, SdpaKeyHash> forward, backward;

  // Opens libcudnn and makes the handle on the first block that may go to cuDNN, not when the backend is made:
  // an fp32 run never loads cuDNN's libraries (hundreds of MB once a handle exists).
  void start() {
    if (started) return;
    started = true;
    if (switched_off()) {
      unavailable = "switched off by FPDT_CUDNN_ATTENTION=off";
      return;
    }
    unavailable = open_library();
    if (unavailable.empty()) {
      try {
        if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
          unavailable = "cudnnCreate failed";
          handle = nullptr;
        } else if (fe::detail::set_stream(handle, stream) != CUDNN_STATUS_SUCCESS) {
          unavailable = "cudnnSetStream failed";
        }
      } catch (const std::exception& error) {
        unavailable = std::string("cuDNN could not start: ") + error.what();
      }
    }
    if (!unavailable.empty())
      log::info("attention: the CUDA-core kernels (cuDNN's fused attention is unavailable: " + unavailable +
                "; FPDT_CUDNN_LIBRARY names libcudnn.so.9)");
  }

  // The entry of `key` in `cache`, made by `make` (which adds the graph's tensors) on first use.
  template <typename Make>
  Entry& entry(std::unordered_map<SdpaKey, Entry, SdpaKeyHash>& cache, const SdpaKey& key, const char* direction,
               Make&& make) {
    auto found = cache.find(key);
    if (found != cache.end()) return found->second;
    start();
    Entry made;
    if (!unavailable.empty()) {
      made.refusal = unavailable;
    } else {
      try {
        auto graph = new_graph();
        make(*graph);
        made.refusal = build(*graph, handle);
        if (made.refusal.empty()) {
          int64_t bytes = 0;
          const fe::error_t status = graph->get_workspace_size(bytes);
          if (status.is_good()) {
            made.graph = std::move(graph);
            made.workspace_bytes = static_cast<size_t>(bytes);
          } else {
            made.refusal = "get_workspace_size: " + fe::error_t(status).get_message();
          }
        }
      } catch (const std::exception& error) {  // the frontend throws where a symbol or the driver is missing
        made.refusal = std::string("the cuDNN frontend threw: ") + error.what();
      }
      if (!made.refusal.empty())
        log::info("cuDNN refused the attention " + std::string(direction) + " of [" + describe_key(key) +
                  "]: " + made.refusal + "; the CUDA-core kernel runs it");
    }
    return cache.emplace(key, std::move(made)).first->second;
  }

  void execute(const Entry& made, std::unordered_map<int64_t, void*>& pack, void* workspace, const SdpaKey& key,
               const char* direction) {
    FPDT_CHECK(made.graph != nullptr, "cuda", "cuDNN attention run for a shape it refused", "");
    const fe::error_t status = made.graph->execute(handle, pack, workspace);
    if (status.is_bad())
      throw Error("cuda",
                  "cuDNN's attention " + std::string(direction) + " failed on [" + describe_key(key) +
                      "]: " + fe::error_t(status).get_message(),
                  "rerun with CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr for cuDNN's log");
  }
};

CudnnSdpa::CudnnSdpa(cudaStream_t stream) : impl_(std::make_unique<Impl>()) { impl_->stream = stream; }

CudnnSdpa::~CudnnSdpa() {
  impl_->forward.clear();
  impl_->backward.clear();
  if (impl_->handle != nullptr) {
    try {
      fe::detail::destroy_handle(impl_->handle);
    } catch (...) {  // a destructor never throws; the process is ending the library anyway
    }
  }
}

std::string CudnnSdpa::describe(bool bf16) {
  // At most 48 characters: the width of the run table's values.
  if (switched_off()) return "CUDA-core kernels (FPDT_CUDNN_ATTENTION=off)";
  const std::string status = open_library();
  if (!status.empty()) return "CUDA-core kernels (libcudnn not loaded: log)";
  if (!bf16) return "CUDA-core kernels (fp32; cuDNN's is bf16)";
  return "cuDNN " + version_text(fe::detail::get_backend_version()) + " SDPA; CUDA-core where it refuses";
}

std::string CudnnSdpa::prepare_forward(const SdpaKey& key, size_t* workspace_bytes) {
  const Impl::Entry& made =
      impl_->entry(impl_->forward, key, "forward", [&](fe::graph::Graph& graph) { add_forward(graph, key); });
  *workspace_bytes = made.workspace_bytes;
  return made.refusal;
}

std::string CudnnSdpa::prepare_backward(const SdpaKey& key, size_t* workspace_bytes) {
  const Impl::Entry& made =
      impl_->entry(impl_->backward, key, "backward", [&](fe::graph::Graph& graph) { add_backward(graph, key); });
  *workspace_bytes = made.workspace_bytes;
  return made.refusal;
}

std::string CudnnSdpa::check_without_device(const SdpaKey& key, int sm_version) {
  const std::string status = open_library();
  if (!status.empty()) return status;
  for (const bool backward : {false, true}) {
    try {
      auto graph = new_graph();
      graph->set_sm_version(sm_version);
      backward ? add_backward(*graph, key) : add_forward(*graph, key);
      fe::error_t checked = graph->validate();
      if (checked.is_good()) checked = graph->build_operation_graph(nullptr);
      if (checked.is_bad()) return std::string(backward ? "backward: " : "forward: ") + checked.get_message();
    } catch (const std::exception& error) {
      return std::string("the cuDNN frontend threw: ") + error.what();
    }
  }
  return "";
}

void CudnnSdpa::forward(const SdpaKey& key, const SdpaForwardArgs& args, void* workspace) {
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<uint16_t*>(args.q)},
                                          {kK, const_cast<uint16_t*>(args.k)},
                                          {kV, const_cast<uint16_t*>(args.v)},
                                          {kO, args.o},
                                          {kStats, args.stats}};
  impl_->execute(impl_->forward.at(key), pack, workspace, key, "forward");
}

void CudnnSdpa::backward(const SdpaKey& key, const SdpaBackwardArgs& args, void* workspace) {
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<uint16_t*>(args.q)},
                                          {kK, const_cast<uint16_t*>(args.k)},
                                          {kV, const_cast<uint16_t*>(args.v)},
                                          {kO, const_cast<uint16_t*>(args.o)},
                                          {kDO, const_cast<uint16_t*>(args.dO)},
                                          {kStats, const_cast<float*>(args.lse)},
                                          {kDQ, args.dq},
                                          {kDK, args.dk},
                                          {kDV, args.dv}};
  impl_->execute(impl_->backward.at(key), pack, workspace, key, "backward");
}

}  // namespace fpdt::kernels::cuda
