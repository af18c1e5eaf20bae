// oneDNN's matmul behind cpu/onednn_gemm.h. A product's primitive (with its memory descriptors, the
// sum post-op for +=, and a user scratchpad) is made the first time its shape, layout and team size
// are seen on a thread and kept in that thread's table: each call only points the kept memory objects
// at the caller's buffers and executes.
#include "fpdt/kernels/cpu/onednn_gemm.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/kernels/cpu/onednn_matmul_desc.h"

namespace fpdt::kernels::cpu::onednn {

namespace {

using dnnl::memory;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct Shape {
  Input input;
  bool trans_a, trans_b, accumulate;
  int M, N, K, lda, ldb, ldc, team;
  bool operator==(const Shape& o) const {
    return std::tie(input, trans_a, trans_b, accumulate, M, N, K, lda, ldb, ldc, team) ==
           std::tie(o.input, o.trans_a, o.trans_b, o.accumulate, o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.team);
  }
};

struct ShapeHash {
  size_t operator()(const Shape& s) const {
    size_t h = static_cast<size_t>(s.input) | size_t{s.trans_a} << 1 | size_t{s.trans_b} << 2 | size_t{s.accumulate} << 3;
    for (const int v : {s.M, s.N, s.K, s.lda, s.ldb, s.ldc, s.team}) h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

// One shape's primitive and the memory objects its calls re-point (args holds the same objects).
struct Product {
  dnnl::matmul primitive;
  memory a, b, c, scratchpad;
  std::vector<uint8_t> scratchpad_bytes;
  std::unordered_map<int, memory> args;
  std::string implementation;
};

dnnl::matmul::primitive_desc describe(const Shape& s) {
  const memory::data_type in = s.input == Input::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  // Strides of op(A) (M, K) and op(B) (K, N) in elements: a transposed operand walks its rows by 1.
  const memory::desc a({s.M, s.K}, in, s.trans_a ? memory::dims{1, s.lda} : memory::dims{s.lda, 1});
  const memory::desc b({s.K, s.N}, in, s.trans_b ? memory::dims{1, s.ldb} : memory::dims{s.ldb, 1});
  const memory::desc c({s.M, s.N}, memory::data_type::f32, memory::dims{s.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  return matmul_primitive_desc(cpu_engine(), a, b, c, attr);
}

Shape shape_of(Input input, bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb, bool accumulate,
               int ldc) {
  const int team = omp_in_parallel() ? 1 : omp_get_max_threads();
  return Shape{input, trans_a, trans_b, accumulate, M, N, K, lda, ldb, ldc, team};
}

Product& product_for(const Shape& shape) {
  thread_local std::unordered_map<Shape, Product, ShapeHash> products;
  const auto found = products.find(shape);
  if (found != products.end()) return found->second;
  try {
    const dnnl::matmul::primitive_desc pd = describe(shape);
    Product p;
    p.primitive = dnnl::matmul(pd);
    p.a = memory(pd.src_desc(), cpu_engine(), nullptr);
    p.b = memory(pd.weights_desc(), cpu_engine(), nullptr);
    p.c = memory(pd.dst_desc(), cpu_engine(), nullptr);
    p.scratchpad_bytes.resize(pd.scratchpad_desc().get_size());
    p.scratchpad = memory(pd.scratchpad_desc(), cpu_engine(), p.scratchpad_bytes.data());
    p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}, {DNNL_ARG_SCRATCHPAD, p.scratchpad}};
    p.implementation = pd.impl_info_str();
    return products.emplace(shape, std::move(p)).first->second;
  } catch (const dnnl::error& e) {
    throw Error("kernels",
                "oneDNN has no matmul for " + std::to_string(shape.M) + " x " + std::to_string(shape.N) + " x " +
                    std::to_string(shape.K) + (shape.input == Input::bf16 ? " bf16" : " f32") + ": " + e.what(),
                "run with ONEDNN_VERBOSE=1 to see what it tried");
  }
}

}  // namespace

bool available() { return true; }

std::string version() {
  const dnnl_version_t* v = dnnl::version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

void matmul(Input input, bool trans_a, bool trans_b, int M, int N, int K, const void* a, int lda, const void* b,
            int ldb, bool accumulate, float* c, int ldc) {
  Product& p = product_for(shape_of(input, trans_a, trans_b, M, N, K, lda, ldb, accumulate, ldc));
  p.a.set_data_handle(const_cast<void*>(a));  // oneDNN reads sources through non-const handles
  p.b.set_data_handle(const_cast<void*>(b));
  p.c.set_data_handle(c);
  thread_local dnnl::stream stream(cpu_engine());
  p.primitive.execute(stream, p.args);
  stream.wait();
}

std::string implementation(Input input, bool trans_a, bool trans_b, int M, int N, int K) {
  const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
  return product_for(shape_of(input, trans_a, trans_b, M, N, K, lda, ldb, false, N)).implementation;
}

}  // namespace fpdt::kernels::cpu::onednn
