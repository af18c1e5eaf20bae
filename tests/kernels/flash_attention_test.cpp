// Chunked attention as FPDT runs it, against the dense reference run in float64, on fresh random
// inputs: a sequence cut into (q chunk, kv chunk) blocks fed in shuffled order (diagonal,
// off-diagonal and fully masked blocks, Cq ≠ Ck, GQA, document ids, sliding windows) through the
// chunk kernels of the reference and cpu backends. Then the cpu flash kernels (cpu/cpu_backend.h):
// merging 1/2/4/8 kv blocks equals one block, with and without a window; masked blocks leave their
// outputs untouched; the backward against float64 finite differences; diagonal blocks at offsets off
// every tile against the reference chunk kernels; determinism across thread counts and pack budgets;
// and the errors at the edge. Each of these in fp32 and in bf16 (against the bf16 reference, both of
// the cpu backend's bf16 paths). (Each op against the reference at many shapes: backend_ops_test.cpp.)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/panel_gemm_amx.h"
#include "fpdt/kernels/cpu/panel_gemm_bf16.h"
#include "fpdt/kernels/reference/attention.h"
#include "fpdt/kernels/reference/attention_chunk.h"
#include "fpdt/tensor/dtype.h"
#include "kernels/bf16_words.h"
#include "testing.h"
#include "tolerances.h"

namespace fpdt::kernels {
namespace {

using testing::fresh_seed;
using testing::random_normal;
using testing::relative_error;

// fp32 flash vs the float64 reference on the same (fp32-representable) inputs. The flash forward
// rounds each score, exp2 (polynomial, ≤ 2e-7 relative) and the fp32 sums over ≤ a few hundred
// keys: measured ~1e-7–1e-6. The backward adds the fp32 recomputation of P from the fp32 lse, five
// fp32 products and dS = P (dP − Δ), which cancels: measured ~1e-6. The bounds:
constexpr double kForwardTolerance = 1e-5;
constexpr double kBackwardTolerance = 1e-4;

struct Problem {
  int B;
  int64_t S;
  int H;
  int Hkv;
  int D;
  bool documents;
  int64_t window = 0;  // sliding window; 0: none
  Precision precision = Precision::fp32;
};

void PrintTo(const Problem& c, std::ostream* os) {
  *os << "B=" << c.B << " S=" << c.S << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " docs=" << c.documents
      << " window=" << c.window << (c.precision == Precision::bf16 ? " bf16" : "");
}

const char* precision_name(Precision precision) { return precision == Precision::bf16 ? "bf16" : "fp32"; }

// The arithmetics the kernels are tested in: fp32, and bf16 each way the cpu backend runs it — on AMX-BF16
// tiles (the default where the CPU has them), on AVX512-BF16's dot products (turned on for the test), and
// on the fp32 products over the same rounded operands; where this CPU or build lacks a unit, its row runs
// the next path.
enum class Arithmetic { fp32, bf16_amx_tiles, bf16_dot_products, bf16_fp32_products };
const auto kArithmetics = ::testing::Values(Arithmetic::fp32, Arithmetic::bf16_amx_tiles, Arithmetic::bf16_dot_products,
                                            Arithmetic::bf16_fp32_products);
Precision precision_of(Arithmetic a) { return a == Arithmetic::fp32 ? Precision::fp32 : Precision::bf16; }
const char* arithmetic_name(Arithmetic a) {
  switch (a) {
    case Arithmetic::fp32: return "fp32";
    case Arithmetic::bf16_amx_tiles: return "bf16amx";
    case Arithmetic::bf16_dot_products: return "bf16dots";
    case Arithmetic::bf16_fp32_products: return "bf16fp32products";
  }
  return "";
}
// The cpu backend's bf16 path for the scope of a test.
class ArithmeticScope {
 public:
  explicit ArithmeticScope(Arithmetic a)
      : saved_dots_(cpu::CpuBackend::set_bf16_dot_products(a == Arithmetic::bf16_dot_products)),
        saved_amx_(cpu::CpuBackend::set_amx_tiles(a == Arithmetic::bf16_amx_tiles)) {
    if (a == Arithmetic::bf16_amx_tiles)
      std::printf("[ bf16     ] AMX-BF16 tiles: %s\n",
                  cpu::amx_tiles_available() ? "used" : "not on this CPU/build (fp32 products)");
    if (a == Arithmetic::bf16_dot_products)
      std::printf("[ bf16     ] AVX512-BF16 dot products: %s\n",
                  cpu::bf16_dot_products_available() ? "used" : "not on this CPU/build (fp32 products)");
  }
  ~ArithmeticScope() {
    cpu::CpuBackend::set_bf16_dot_products(saved_dots_);
    cpu::CpuBackend::set_amx_tiles(saved_amx_);
  }
  ArithmeticScope(const ArithmeticScope&) = delete;
  ArithmeticScope& operator=(const ArithmeticScope&) = delete;

 private:
  bool saved_dots_, saved_amx_;
};

// Random inputs of a problem, in float (what the kernel sees) and the same values in double.
struct Inputs {
  std::vector<float> q, k, v, dout;  // (B, S, H, D), (B, S, Hkv, D) ×2, (B, S, H, D)
  std::vector<int32_t> docs;         // (B, S), empty without documents
  std::vector<double> qd, kd, vd, doutd;
  double scale;
  const int32_t* doc_ptr() const { return docs.empty() ? nullptr : docs.data(); }
};

std::vector<double> to_double(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }

Inputs make_inputs(Rng& rng, const Problem& c) {
  Inputs in;
  const size_t q_size = static_cast<size_t>(c.B) * c.S * c.H * c.D;
  const size_t kv_size = static_cast<size_t>(c.B) * c.S * c.Hkv * c.D;
  in.q = random_normal<float>(rng, q_size);
  in.k = random_normal<float>(rng, kv_size);
  in.v = random_normal<float>(rng, kv_size);
  in.dout = random_normal<float>(rng, q_size);
  if (c.documents) {  // packed documents of random lengths (mean ~40 tokens), ids increasing
    in.docs.resize(static_cast<size_t>(c.B) * c.S);
    for (int b = 0; b < c.B; ++b) {
      int32_t doc = static_cast<int32_t>(rng.below(5));
      for (int64_t s = 0; s < c.S; ++s) {
        if (s > 0 && rng.uniform() < 1.0 / 40) ++doc;
        in.docs[b * c.S + s] = doc;
      }
    }
  }
  in.qd = to_double(in.q);
  in.kd = to_double(in.k);
  in.vd = to_double(in.v);
  in.doutd = to_double(in.dout);
  in.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  return in;
}

// The problem's whole-sequence attention over the inputs: as the kernels see them (float), or the same
// values in double (the reference's).
AttentionParams float_params(const Problem& c, const Inputs& in) {
  return {.q = in.q.data(), .k = in.k.data(), .v = in.v.data(), .doc_ids = in.doc_ptr(), .B = c.B, .S = c.S,
          .H = c.H, .Hkv = c.Hkv, .D = c.D, .scale = in.scale, .window = c.window, .precision = c.precision};
}
BasicAttentionParams<double> double_params(const Problem& c, const Inputs& in) {
  return {.q = in.qd.data(), .k = in.kd.data(), .v = in.vd.data(), .doc_ids = in.doc_ptr(), .B = c.B, .S = c.S,
          .H = c.H, .Hkv = c.Hkv, .D = c.D, .scale = in.scale, .window = c.window, .precision = c.precision};
}

struct Result {
  std::vector<double> out, lse, dq, dk, dv;
};

Result reference_result(const Problem& c, const Inputs& in) {
  Result r;
  const size_t q_size = in.q.size(), kv_size = in.k.size();
  r.out.resize(q_size);
  r.lse.resize(static_cast<size_t>(c.B) * c.H * c.S);
  reference::attention_forward(r.out.data(), r.lse.data(), double_params(c, in));
  r.dq.resize(q_size);
  r.dk.resize(kv_size);
  r.dv.resize(kv_size);
  reference::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), in.doutd.data(), r.out.data(), r.lse.data(),
                                double_params(c, in));
  return r;
}

struct FloatResult {
  std::vector<float> out, lse, dq, dk, dv;
};

// The bounds of a comparison against the reference in the same precision, for an output of `rows` rows
// of D values: fp32 as above; bf16, the same-operand bounds of tests/tolerances.h (both sides round the
// same operands; only the values each side computes itself, P̃, P and dS, may round the other way).
double forward_tolerance(Precision precision, double rows) {
  return precision == Precision::bf16 ? testing::attention_bf16_same_operands_forward(rows) : kForwardTolerance;
}
double backward_tolerance(Precision precision, double rows) {
  return precision == Precision::bf16 ? testing::attention_bf16_same_operands_backward(rows) : kBackwardTolerance;
}

void expect_close(const FloatResult& got, const Result& want, const char* what, const Problem& c) {
  const double q_rows = static_cast<double>(c.B) * c.S * c.H, kv_rows = static_cast<double>(c.B) * c.S * c.Hkv;
  const double out_error = relative_error(got.out, want.out);
  const double lse_error = relative_error(got.lse, want.lse);
  const double dq_error = relative_error(got.dq, want.dq);
  const double dk_error = relative_error(got.dk, want.dk);
  const double dv_error = relative_error(got.dv, want.dv);
  // the kernel vs the float64 oracle of the same precision on the same inputs (the bounds above)
  EXPECT_LE(out_error, forward_tolerance(c.precision, q_rows));
  EXPECT_LE(lse_error, forward_tolerance(c.precision, q_rows));
  EXPECT_LE(dq_error, backward_tolerance(c.precision, q_rows));
  EXPECT_LE(dk_error, backward_tolerance(c.precision, kv_rows));
  EXPECT_LE(dv_error, backward_tolerance(c.precision, kv_rows));
  std::printf("[ errors   ] %s vs reference: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", what, out_error, lse_error,
              dq_error, dk_error, dv_error);
}

// ---------------------------------------------------------------------------------------------
// Chunk pairs, as the FPDT pipeline feeds them.

// Tokens [begin, begin + len) of every batch of x (B, S, W) → (B, len, W).
template <typename T>
std::vector<T> slice_tokens(const std::vector<T>& x, int B, int64_t S, int64_t W, int64_t begin, int64_t len) {
  std::vector<T> y(static_cast<size_t>(B) * len * W);
  for (int b = 0; b < B; ++b) std::copy_n(x.begin() + (b * S + begin) * W, len * W, y.begin() + b * len * W);
  return y;
}
// x (B, S, W)[tokens begin..] += y (B, len, W)
void add_tokens(std::vector<float>& x, const std::vector<float>& y, int B, int64_t S, int64_t W, int64_t begin,
                int64_t len) {
  for (int b = 0; b < B; ++b)
    for (int64_t i = 0; i < len * W; ++i) x[(b * S + begin) * W + i] += y[b * len * W + i];
}
// lse (B, H, S) ↔ (B, H, len)
std::vector<float> slice_lse(const std::vector<float>& lse, int B, int H, int64_t S, int64_t begin, int64_t len) {
  std::vector<float> y(static_cast<size_t>(B) * H * len);
  for (int bh = 0; bh < B * H; ++bh) std::copy_n(lse.begin() + bh * S + begin, len, y.begin() + bh * len);
  return y;
}
void put_lse(std::vector<float>& lse, const std::vector<float>& y, int B, int H, int64_t S, int64_t begin,
             int64_t len) {
  for (int bh = 0; bh < B * H; ++bh) std::copy_n(y.begin() + bh * len, len, lse.begin() + bh * S + begin);
}

struct Range {
  int64_t begin, len;
};
std::vector<Range> cut(int64_t S, int64_t chunk) {
  std::vector<Range> ranges;
  for (int64_t begin = 0; begin < S; begin += chunk) ranges.push_back({begin, std::min(chunk, S - begin)});
  return ranges;
}

AttentionChunkParams block_params(const Problem& c, double scale, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<int32_t>& q_docs, const std::vector<int32_t>& kv_docs, Range qr,
                                  Range kr) {
  AttentionChunkParams p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.q_doc_ids = c.documents ? q_docs.data() : nullptr;
  p.kv_doc_ids = c.documents ? kv_docs.data() : nullptr;
  p.B = c.B;
  p.Cq = qr.len;
  p.Ck = kr.len;
  p.H = c.H;
  p.Hkv = c.Hkv;
  p.D = c.D;
  p.q_begin = qr.begin;
  p.kv_begin = kr.begin;
  p.scale = scale;
  p.window = c.window;
  p.precision = c.precision;
  return p;
}

// The whole sequence through one backend's chunk kernels: for each q chunk, every kv chunk (masked
// ones included) in a shuffled order, merged by accumulate; then the backward pair by pair, also
// shuffled.
FloatResult chunked(Backend& backend, const Problem& c, const Inputs& in, int64_t q_chunk, int64_t kv_chunk,
                    Rng& rng) {
  const int64_t S = c.S, Wq = static_cast<int64_t>(c.H) * c.D, Wkv = static_cast<int64_t>(c.Hkv) * c.D;
  const auto q_ranges = cut(S, q_chunk), kv_ranges = cut(S, kv_chunk);
  auto shuffled = [&](size_t n) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    return order;
  };
  auto docs_of = [&](Range r) {
    return c.documents ? slice_tokens(in.docs, c.B, S, 1, r.begin, r.len) : std::vector<int32_t>();
  };
  FloatResult r;
  r.out.assign(in.q.size(), 0.0f);
  r.lse.assign(static_cast<size_t>(c.B) * c.H * S, 0.0f);
  r.dq.assign(in.q.size(), 0.0f);
  r.dk.assign(in.k.size(), 0.0f);
  r.dv.assign(in.k.size(), 0.0f);
  for (const Range qr : q_ranges) {
    const auto q = slice_tokens(in.q, c.B, S, Wq, qr.begin, qr.len);
    const auto q_docs = docs_of(qr);
    std::vector<float> out(q.size(), 7.0f), lse(static_cast<size_t>(c.B) * c.H * qr.len, 7.0f);
    bool first = true;
    for (size_t index : shuffled(kv_ranges.size())) {
      const Range kr = kv_ranges[index];
      const auto k = slice_tokens(in.k, c.B, S, Wkv, kr.begin, kr.len);
      const auto v = slice_tokens(in.v, c.B, S, Wkv, kr.begin, kr.len);
      const auto kv_docs = docs_of(kr);
      backend.attention_chunk_forward(out.data(), lse.data(), block_params(c, in.scale, q, k, v, q_docs, kv_docs, qr, kr),
                                      /*accumulate=*/!first);
      first = false;
    }
    add_tokens(r.out, out, c.B, S, Wq, qr.begin, qr.len);
    put_lse(r.lse, lse, c.B, c.H, S, qr.begin, qr.len);
  }
  // Backward: Δ of each q chunk from its final out, then every pair in a shuffled order.
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t i = 0; i < q_ranges.size(); ++i)
    for (size_t j = 0; j < kv_ranges.size(); ++j) pairs.emplace_back(i, j);
  for (size_t index : shuffled(pairs.size())) {
    const Range qr = q_ranges[pairs[index].first], kr = kv_ranges[pairs[index].second];
    const auto q = slice_tokens(in.q, c.B, S, Wq, qr.begin, qr.len);
    const auto dout = slice_tokens(in.dout, c.B, S, Wq, qr.begin, qr.len);
    const auto out = slice_tokens(r.out, c.B, S, Wq, qr.begin, qr.len);
    const auto lse = slice_lse(r.lse, c.B, c.H, S, qr.begin, qr.len);
    std::vector<float> delta(lse.size());
    backend.attention_chunk_delta(delta.data(), dout.data(), out.data(), c.B, qr.len, c.H, c.D);
    const auto k = slice_tokens(in.k, c.B, S, Wkv, kr.begin, kr.len);
    const auto v = slice_tokens(in.v, c.B, S, Wkv, kr.begin, kr.len);
    const auto q_docs = docs_of(qr), kv_docs = docs_of(kr);
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    backend.attention_chunk_backward(dq.data(), dk.data(), dv.data(), dout.data(), lse.data(), delta.data(),
                                     block_params(c, in.scale, q, k, v, q_docs, kv_docs, qr, kr));
    add_tokens(r.dq, dq, c.B, S, Wq, qr.begin, qr.len);
    add_tokens(r.dk, dk, c.B, S, Wkv, kr.begin, kr.len);
    add_tokens(r.dv, dv, c.B, S, Wkv, kr.begin, kr.len);
  }
  return r;
}

struct ChunkCase {
  Problem problem;
  int64_t q_chunk, kv_chunk;
};

void PrintTo(const ChunkCase& c, std::ostream* os) {
  PrintTo(c.problem, os);
  *os << " Cq=" << c.q_chunk << " Ck=" << c.kv_chunk;
}

// (backend, case): the reference's chunk kernels (the spec) and the cpu flash kernels.
class ChunkedAttention : public ::testing::TestWithParam<std::tuple<std::string, ChunkCase, Arithmetic>> {};

TEST_P(ChunkedAttention, ShuffledBlocksMatchFullReference) {
  const auto& [backend_name, chunk_case, arithmetic] = GetParam();
  const ArithmeticScope scope(arithmetic);
  ChunkCase cc = chunk_case;
  cc.problem.precision = precision_of(arithmetic);
  const Problem& c = cc.problem;
  Rng rng(fresh_seed());
  const Inputs in = make_inputs(rng, c);
  const Result want = reference_result(c, in);
  const auto backend = make_backend(pipeline::parse_backend(backend_name));
  const FloatResult got = chunked(*backend, c, in, cc.q_chunk, cc.kv_chunk, rng);
  std::ostringstream what;
  what << backend_name << " ";
  PrintTo(cc, &what);
  expect_close(got, want, what.str().c_str(), c);
}

// Chunks not multiples of the 96-token tiles, Cq ≠ Ck both ways, so blocks are diagonal with the
// diagonal off-centre, full, or entirely above the diagonal (skipped); with windows, blocks also lie
// partly or wholly before the window (skipped), and a window below one tile masks inside a tile.
INSTANTIATE_TEST_SUITE_P(Backends, ChunkedAttention,
                         ::testing::Combine(::testing::Values("reference", "cpu"),
                                            ::testing::Values(ChunkCase{{1, 230, 4, 4, 64, false}, 100, 70},
                                                              ChunkCase{{2, 230, 8, 2, 32, true}, 64, 150},
                                                              ChunkCase{{1, 260, 8, 1, 128, true}, 130, 97},
                                                              ChunkCase{{2, 120, 4, 2, 16, true}, 17, 40},
                                                              ChunkCase{{1, 400, 4, 2, 64, false, 100}, 64, 64},
                                                              ChunkCase{{2, 300, 4, 4, 32, true, 37}, 100, 70},
                                                              ChunkCase{{1, 330, 8, 2, 48, false, 200}, 130, 97},
                                                              ChunkCase{{1, 100, 2, 1, 16, false, 1}, 30, 30}),
                                            kArithmetics),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, ChunkCase, Arithmetic>>& info) {
                           const ChunkCase& c = std::get<1>(info.param);
                           std::ostringstream name;
                           name << std::get<0>(info.param) << "_" << arithmetic_name(std::get<2>(info.param)) << "_B"
                                << c.problem.B << "_S" << c.problem.S << "_Hkv"
                                << c.problem.Hkv << "_D" << c.problem.D << "_Cq" << c.q_chunk << "_Ck" << c.kv_chunk
                                << (c.problem.documents ? "_docs" : "");
                           if (c.problem.window) name << "_window" << c.problem.window;
                           return name.str();
                         });

// ---------------------------------------------------------------------------------------------
// Relative error of lse over its finite rows; the rows that saw nothing (−inf) must be the same.
double lse_error(const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<float> got_finite, want_finite;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(std::isinf(got[i]), std::isinf(want[i])) << "row " << i;
    if (!std::isinf(want[i]) && !std::isinf(got[i])) {
      got_finite.push_back(got[i]);
      want_finite.push_back(want[i]);
    }
  }
  return relative_error(got_finite, want_finite);
}

// One q block against one kv block cut into 1, 2, 4 or 8 pieces, merged in a shuffled order: equals
// the kv block in one call (forward by LSE merge; backward: dq sums, dk and dv concatenate) — also
// with a sliding window, under which some pieces lie wholly before the window of some q rows and
// the last q rows see no key of the block at all.
class FlashMerge : public ::testing::TestWithParam<std::tuple<int64_t, Arithmetic>> {};

TEST_P(FlashMerge, KvPiecesInAnyOrderEqualOneBlock) {
  Rng rng(fresh_seed());
  cpu::CpuBackend flash;
  const ArithmeticScope scope(std::get<1>(GetParam()));
  const Problem c{2, 0, 8, 2, 64, true, std::get<0>(GetParam()), precision_of(std::get<1>(GetParam()))};
  const int64_t Cq = 150, Ck = 333, q_begin = 400, kv_begin = 100;  // a diagonal block: kv ends at 432
  const int64_t Wq = static_cast<int64_t>(c.H) * c.D, Wkv = static_cast<int64_t>(c.Hkv) * c.D;
  const auto q = random_normal<float>(rng, c.B * Cq * Wq);
  const auto k = random_normal<float>(rng, c.B * Ck * Wkv);
  const auto v = random_normal<float>(rng, c.B * Ck * Wkv);
  const auto dout = random_normal<float>(rng, c.B * Cq * Wq);
  std::vector<int32_t> q_docs(c.B * Cq), kv_docs(c.B * Ck);
  for (int b = 0; b < c.B; ++b) {  // documents change at global positions 250 and 420
    for (int64_t i = 0; i < Cq; ++i) q_docs[b * Cq + i] = (q_begin + i >= 420) + (q_begin + i >= 250);
    for (int64_t j = 0; j < Ck; ++j) kv_docs[b * Ck + j] = (kv_begin + j >= 420) + (kv_begin + j >= 250);
  }
  Inputs in;
  in.scale = 0.125;
  auto params = [&](const std::vector<float>& kk, const std::vector<float>& vv, const std::vector<int32_t>& docs,
                    Range kr) {
    return block_params(c, in.scale, q, kk, vv, q_docs, docs, {q_begin, Cq}, {kv_begin + kr.begin, kr.len});
  };

  std::vector<float> want_out(q.size()), want_lse(static_cast<size_t>(c.B) * c.H * Cq);
  flash.attention_chunk_forward(want_out.data(), want_lse.data(), params(k, v, kv_docs, {0, Ck}), false);
  std::vector<float> delta(want_lse.size());
  flash.attention_chunk_delta(delta.data(), dout.data(), want_out.data(), c.B, Cq, c.H, c.D);
  std::vector<float> want_dq(q.size(), 0.0f), want_dk(k.size(), 0.0f), want_dv(v.size(), 0.0f);
  flash.attention_chunk_backward(want_dq.data(), want_dk.data(), want_dv.data(), dout.data(), want_lse.data(),
                                 delta.data(), params(k, v, kv_docs, {0, Ck}));

  for (int pieces : {1, 2, 4, 8}) {
    std::vector<Range> ranges = cut(Ck, (Ck + pieces - 1) / pieces);
    for (size_t i = ranges.size(); i > 1; --i) std::swap(ranges[i - 1], ranges[rng.below(i)]);
    std::vector<float> out(q.size(), 0.0f), lse(want_lse.size(), -INFINITY);  // the empty softmax
    std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
    for (const Range kr : ranges) {
      const auto kk = slice_tokens(k, c.B, Ck, Wkv, kr.begin, kr.len);
      const auto vv = slice_tokens(v, c.B, Ck, Wkv, kr.begin, kr.len);
      const auto docs = slice_tokens(kv_docs, c.B, Ck, 1, kr.begin, kr.len);
      flash.attention_chunk_forward(out.data(), lse.data(), params(kk, vv, docs, kr), /*accumulate=*/true);
    }
    for (const Range kr : ranges) {  // backward from the one-block (final) lse and Δ
      const auto kk = slice_tokens(k, c.B, Ck, Wkv, kr.begin, kr.len);
      const auto vv = slice_tokens(v, c.B, Ck, Wkv, kr.begin, kr.len);
      const auto docs = slice_tokens(kv_docs, c.B, Ck, 1, kr.begin, kr.len);
      std::vector<float> dk_piece(kk.size(), 0.0f), dv_piece(vv.size(), 0.0f);
      flash.attention_chunk_backward(dq.data(), dk_piece.data(), dv_piece.data(), dout.data(), want_lse.data(),
                                     delta.data(), params(kk, vv, docs, kr));
      add_tokens(dk, dk_piece, c.B, Ck, Wkv, kr.begin, kr.len);
      add_tokens(dv, dv_piece, c.B, Ck, Wkv, kr.begin, kr.len);
    }
    // Same fp32 maths, regrouped: a merge adds a few roundings of O(1) values per row (fp32 ε = 6e-8);
    // dq sums `pieces` partial products in another order. 1e-6 is ~10 ε, far below any real error.
    // bf16 too, but for out: every piece anchors its P̃ at a power of two and a (query, key) pair's score
    // is the same bits in any piece, yet s − m is rounded where the integer m is far above s, so now and
    // then an r(P̃) flips (the same-operand bound, tolerances.h); the backward reads the same lse and Δ.
    const double out_error = relative_error(out, want_out), lse_errors = lse_error(lse, want_lse);
    const double dq_error = relative_error(dq, want_dq);
    const double dk_error = relative_error(dk, want_dk), dv_error = relative_error(dv, want_dv);
    EXPECT_LE(out_error, c.precision == Precision::bf16
                             ? testing::attention_bf16_same_operands_forward(static_cast<double>(c.B) * Cq * c.H)
                             : 1e-6)
        << pieces << " pieces";
    EXPECT_LE(lse_errors, 1e-6) << pieces << " pieces";
    EXPECT_LE(dq_error, 1e-6) << pieces << " pieces";
    EXPECT_LE(dk_error, 1e-6) << pieces << " pieces";
    EXPECT_LE(dv_error, 1e-6) << pieces << " pieces";
    std::printf("[ errors   ] %s window %lld, %d kv pieces vs one block: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
                precision_name(c.precision), static_cast<long long>(c.window), pieces, out_error, lse_errors, dq_error,
                dk_error, dv_error);
  }
}

// Window 0: none; 90: below one 96-token tile, and q rows from 522 on see no key of [100, 433).
INSTANTIATE_TEST_SUITE_P(Windows, FlashMerge,
                         ::testing::Combine(::testing::Values(0, 90), kArithmetics),
                         [](const auto& info) {
                           return std::string(arithmetic_name(std::get<1>(info.param)))
                               .append("_window")
                               .append(std::to_string(std::get<0>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------
// A block with no visible pair — above the causal diagonal, wholly before the sliding window, or
// documents that never meet — is skipped: accumulate leaves out/lse bit for bit, the backward adds
// nothing; overwrite writes the empty softmax (out 0, lse −inf).
TEST(FlashMasked, FullyMaskedBlockIsSkipped) {
  Rng rng(fresh_seed());
  cpu::CpuBackend flash;
  const int B = 2, H = 4, Hkv = 2, D = 32;
  const int64_t Cq = 100, Ck = 120;
  const auto q = random_normal<float>(rng, B * Cq * H * D);
  const auto k = random_normal<float>(rng, B * Ck * Hkv * D);
  const auto v = random_normal<float>(rng, B * Ck * Hkv * D);
  const auto dout = random_normal<float>(rng, B * Cq * H * D);
  const auto lse = random_normal<float>(rng, B * H * Cq);
  const auto delta = random_normal<float>(rng, B * H * Cq);
  const std::vector<int32_t> q_docs(B * Cq, 1), kv_docs(B * Ck, 2);

  AttentionChunkParams above;  // kv block [1000, 1120) after q block [500, 600)
  above.q = q.data();
  above.k = k.data();
  above.v = v.data();
  above.B = B;
  above.Cq = Cq;
  above.Ck = Ck;
  above.H = H;
  above.Hkv = Hkv;
  above.D = D;
  above.q_begin = 500;
  above.kv_begin = 1000;
  above.scale = 0.2;
  AttentionChunkParams other_document = above;  // below the diagonal, but documents 1 vs 2
  other_document.kv_begin = 0;
  other_document.q_doc_ids = q_docs.data();
  other_document.kv_doc_ids = kv_docs.data();
  AttentionChunkParams before_window = above;  // kv [380, 500) before q [500, 600): 500 − 499 = 1 ≥ window 1
  before_window.kv_begin = 380;
  before_window.window = 1;

  for (AttentionChunkParams p : {above, other_document, before_window})
    for (const Arithmetic arithmetic :
         {Arithmetic::fp32, Arithmetic::bf16_amx_tiles, Arithmetic::bf16_dot_products, Arithmetic::bf16_fp32_products}) {
    const ArithmeticScope scope(arithmetic);
    p.precision = precision_of(arithmetic);
    auto out = random_normal<float>(rng, q.size());
    auto out_lse = random_normal<float>(rng, lse.size());
    const auto out_before = out, lse_before = out_lse;
    flash.attention_chunk_forward(out.data(), out_lse.data(), p, /*accumulate=*/true);
    EXPECT_EQ(0, std::memcmp(out.data(), out_before.data(), out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(out_lse.data(), lse_before.data(), out_lse.size() * sizeof(float)));

    flash.attention_chunk_forward(out.data(), out_lse.data(), p, /*accumulate=*/false);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
    EXPECT_TRUE(std::all_of(out_lse.begin(), out_lse.end(), [](float x) { return x == -INFINITY; }));

    auto dq = random_normal<float>(rng, q.size());
    auto dk = random_normal<float>(rng, k.size());
    auto dv = random_normal<float>(rng, v.size());
    const auto dq_before = dq, dk_before = dk, dv_before = dv;
    flash.attention_chunk_backward(dq.data(), dk.data(), dv.data(), dout.data(), lse.data(), delta.data(), p);
    EXPECT_EQ(0, std::memcmp(dq.data(), dq_before.data(), dq.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dk.data(), dk_before.data(), dk.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(dv.data(), dv_before.data(), dv.size() * sizeof(float)));
    }
}

// Inside a diagonal block, the q rows before the block's first key see nothing, and with a window of
// 100 neither do the rows from 120 + 150 + 99 = 369 on: merged with accumulate, they keep their out
// and lse bit for bit; the other rows change. In fp32 and bf16.
class FlashMaskedRows : public ::testing::TestWithParam<Arithmetic> {};

TEST_P(FlashMaskedRows, RowsThatSeeNothingAreUntouched) {
  Rng rng(fresh_seed());
  cpu::CpuBackend flash;
  const int B = 1, H = 2, Hkv = 1, D = 64;
  const int64_t Cq = 400, Ck = 150, kv_begin = 120, window = 100;  // rows 0..119, 369..399 see none of 120..269
  const auto q = random_normal<float>(rng, B * Cq * H * D);
  const auto k = random_normal<float>(rng, B * Ck * Hkv * D);
  const auto v = random_normal<float>(rng, B * Ck * Hkv * D);
  AttentionChunkParams p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.B = B;
  p.Cq = Cq;
  p.Ck = Ck;
  p.H = H;
  p.Hkv = Hkv;
  p.D = D;
  p.kv_begin = kv_begin;
  p.scale = 0.125;
  p.window = window;
  const ArithmeticScope scope(GetParam());
  p.precision = precision_of(GetParam());
  auto out = random_normal<float>(rng, q.size());
  auto lse = random_normal<float>(rng, B * H * Cq);
  const auto out_before = out, lse_before = lse;
  flash.attention_chunk_forward(out.data(), lse.data(), p, /*accumulate=*/true);
  for (int h = 0; h < H; ++h) {
    for (int64_t i = 0; i < Cq; ++i) {
      const bool sees_nothing = i < kv_begin || i - (kv_begin + Ck - 1) >= window;
      EXPECT_EQ(lse[h * Cq + i] == lse_before[h * Cq + i], sees_nothing) << "head " << h << " row " << i;
      const size_t row = (i * H + h) * D;
      EXPECT_EQ(std::memcmp(out.data() + row, out_before.data() + row, D * sizeof(float)) == 0, sees_nothing)
          << "head " << h << " row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arithmetics, FlashMaskedRows, kArithmetics,
                         [](const auto& info) { return std::string(arithmetic_name(info.param)); });

// ---------------------------------------------------------------------------------------------
// The fp32 backward, fed chunk pair by chunk pair, against float64 central finite differences of
// loss = Σ dout ∘ out of the float64 reference forward, on a random sample of q, k, v coordinates.
class FlashGradient : public ::testing::TestWithParam<int64_t> {};

TEST_P(FlashGradient, ChunkedBackwardMatchesFiniteDifferences) {
  Rng rng(fresh_seed());
  const Problem c{2, 60, 4, 2, 32, true, GetParam()};
  Inputs in = make_inputs(rng, c);
  cpu::CpuBackend flash;
  const FloatResult got = chunked(flash, c, in, 25, 20, rng);

  std::vector<double> out(in.q.size()), lse(static_cast<size_t>(c.B) * c.H * c.S);
  auto loss = [&]() {
    reference::attention_forward(out.data(), lse.data(), double_params(c, in));
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += in.doutd[i] * out[i];
    return sum;
  };
  const double h = 1e-4;
  auto check = [&](std::vector<double>& x, const std::vector<float>& grad, const char* name) {
    std::vector<double> numeric, analytic;
    for (int sample = 0; sample < 96; ++sample) {
      const size_t i = rng.below(x.size());
      const double saved = x[i];
      x[i] = saved + h;
      const double plus = loss();
      x[i] = saved - h;
      const double minus = loss();
      x[i] = saved;
      numeric.push_back((plus - minus) / (2 * h));
      analytic.push_back(grad[i]);
    }
    // FD in float64: truncation h² · O(1) ≈ 1e-8, cancellation 1e-16 · |loss| / h ≈ 1e-11; the rest is
    // the fp32 kernel's own error (~1e-6). The backward bound:
    const double error = relative_error(analytic, numeric);
    EXPECT_LE(error, kBackwardTolerance) << name;
    std::printf("[ errors   ] chunked fp32 %s vs float64 finite differences: %.2e\n", name, error);
  };
  check(in.qd, got.dq, "dq");
  check(in.kd, got.dk, "dk");
  check(in.vd, got.dv, "dv");
}

// Window 0: none; 23: across the 25 × 20 blocks.
INSTANTIATE_TEST_SUITE_P(Windows, FlashGradient, ::testing::Values(0, 23),
                         [](const auto& info) { return std::string("window").append(std::to_string(info.param)); });

// ---------------------------------------------------------------------------------------------
// The full-sequence attention of the cpu backend on a problem (forward, then backward from its own out
// and lse).
FloatResult flash_full(const Problem& c, const Inputs& in) {
  cpu::CpuBackend flash;
  FloatResult r;
  r.out.resize(in.q.size());
  r.lse.resize(static_cast<size_t>(c.B) * c.H * c.S);
  flash.attention_forward(r.out.data(), r.lse.data(), float_params(c, in));
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.k.size());
  flash.attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), r.out.data(), r.lse.data(),
                           float_params(c, in));
  return r;
}

// dq adds its kv tiles in a fixed order — with a window, from the first kv tile whose window reaches
// the q tile — and every other output is written by one task: the results are bitwise the same
// whatever the thread count.
class FlashDeterminism : public ::testing::TestWithParam<std::tuple<int64_t, Arithmetic>> {};

TEST_P(FlashDeterminism, SameBitsForOneAndManyThreads) {
  Rng rng(fresh_seed());
  const ArithmeticScope scope(std::get<1>(GetParam()));
  const Problem c{1, 400, 4, 2, 64, true, std::get<0>(GetParam()), precision_of(std::get<1>(GetParam()))};
  const Inputs in = make_inputs(rng, c);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const FloatResult r = flash_full(c, in);
    omp_set_num_threads(saved);
    return r;
  };
  const FloatResult one = run(1), many = run(4);
  EXPECT_EQ(one.out, many.out);
  EXPECT_EQ(one.lse, many.lse);
  EXPECT_EQ(one.dq, many.dq);
  EXPECT_EQ(one.dk, many.dk);
  EXPECT_EQ(one.dv, many.dv);
}

// The packed copies of K/V (forward) and Q/dO (backward) go one (b, kv head) group at a time when
// the budget is tiny, all at once by default: the same bits either way.
TEST_P(FlashDeterminism, SameBitsWhateverThePackBudget) {
  Rng rng(fresh_seed());
  const ArithmeticScope scope(std::get<1>(GetParam()));
  const Problem c{2, 300, 4, 2, 48, true, std::get<0>(GetParam()), precision_of(std::get<1>(GetParam()))};
  const Inputs in = make_inputs(rng, c);
  auto run = [&](int64_t budget_floats) {
    const int64_t saved = cpu::CpuBackend::set_pack_budget_floats(budget_floats);
    const FloatResult r = flash_full(c, in);
    cpu::CpuBackend::set_pack_budget_floats(saved);
    return r;
  };
  const FloatResult all = run(int64_t{1} << 40), one_group = run(1);
  EXPECT_EQ(all.out, one_group.out);
  EXPECT_EQ(all.lse, one_group.lse);
  EXPECT_EQ(all.dq, one_group.dq);
  EXPECT_EQ(all.dk, one_group.dk);
  EXPECT_EQ(all.dv, one_group.dv);
  // and still the right answer (tolerances as above)
  expect_close(one_group, reference_result(c, in), "one group per batch", c);
}

// Window 0: none; 150: across the 96-token tiles, so q tiles have different first visitors.
INSTANTIATE_TEST_SUITE_P(Windows, FlashDeterminism,
                         ::testing::Combine(::testing::Values(0, 150), kArithmetics),
                         [](const auto& info) {
                           return std::string(arithmetic_name(std::get<1>(info.param)))
                               .append("_window")
                               .append(std::to_string(std::get<0>(info.param)));
                         });

// ---------------------------------------------------------------------------------------------
// Diagonal blocks are computed down to kPanel × kRows blocks (32 × 8 on AVX-512): forward panels of
// 32 queries skip the keys after their last query, backward key panels the queries before their
// first key, and each dQ row group reads only the keys it may see. One q block against one kv block
// at offsets that are multiples of neither (and q blocks whose rows end inside a row group), then an
// earlier kv block merged in (accumulate), and the backward of the first block from the final lse:
// against the reference chunk kernels on the same fp32 inputs (tolerances as for kForwardTolerance).
struct DiagonalCase {
  const char* what;
  int B, H, Hkv, D;
  int64_t q_begin, Cq, kv_begin, Ck, window;
  bool documents;
};

void PrintTo(const DiagonalCase& c, std::ostream* os) { *os << c.what; }

// The check of one case, in the cpu backend's current arithmetic (ArithmeticScope).
void expect_block_matches_reference_chunk_kernels(const DiagonalCase& c, Precision precision, Rng& rng) {
  cpu::CpuBackend flash;
  auto doc_of = [](int b, int64_t position) { return static_cast<int32_t>((position + 11 * b) / 37); };
  const int64_t earlier_begin = std::max<int64_t>(0, c.kv_begin - 50), earlier_keys = c.kv_begin - earlier_begin;
  const size_t q_size = static_cast<size_t>(c.B) * c.Cq * c.H * c.D;
  const auto q = random_normal<float>(rng, q_size), dout = random_normal<float>(rng, q_size);
  const auto k = random_normal<float>(rng, static_cast<size_t>(c.B) * c.Ck * c.Hkv * c.D);
  const auto v = random_normal<float>(rng, k.size());
  const auto k_earlier = random_normal<float>(rng, static_cast<size_t>(c.B) * earlier_keys * c.Hkv * c.D);
  const auto v_earlier = random_normal<float>(rng, k_earlier.size());
  std::vector<int32_t> q_docs, kv_docs, earlier_docs;
  for (int b = 0; b < c.B; ++b) {
    for (int64_t i = 0; i < c.Cq; ++i) q_docs.push_back(doc_of(b, c.q_begin + i));
    for (int64_t j = 0; j < c.Ck; ++j) kv_docs.push_back(doc_of(b, c.kv_begin + j));
    for (int64_t j = 0; j < earlier_keys; ++j) earlier_docs.push_back(doc_of(b, earlier_begin + j));
  }
  const Problem problem{c.B, 0, c.H, c.Hkv, c.D, c.documents, c.window, precision};
  const AttentionChunkParams block = block_params(problem, 1.0 / std::sqrt(static_cast<double>(c.D)), q, k, v, q_docs,
                                                  kv_docs, {c.q_begin, c.Cq}, {c.kv_begin, c.Ck});
  AttentionChunkParams earlier = block;
  earlier.k = k_earlier.data();
  earlier.v = v_earlier.data();
  earlier.kv_doc_ids = c.documents ? earlier_docs.data() : nullptr;
  earlier.Ck = earlier_keys;
  earlier.kv_begin = earlier_begin;

  const size_t lse_size = static_cast<size_t>(c.B) * c.H * c.Cq;
  const double q_rows = static_cast<double>(lse_size), kv_rows = static_cast<double>(c.B) * c.Ck * c.Hkv;
  std::vector<float> out(q_size, 7.0f), lse(lse_size, 7.0f), out_want(q_size, 7.0f), lse_want(lse_size, 7.0f);
  flash.attention_chunk_forward(out.data(), lse.data(), block, /*accumulate=*/false);
  reference::attention_chunk_forward(out_want.data(), lse_want.data(), block, /*accumulate=*/false);
  EXPECT_LE(relative_error(out, out_want), forward_tolerance(precision, q_rows)) << "out of the diagonal block";
  EXPECT_LE(lse_error(lse, lse_want), forward_tolerance(precision, q_rows)) << "lse of the diagonal block";
  if (earlier_keys > 0) {
    flash.attention_chunk_forward(out.data(), lse.data(), earlier, /*accumulate=*/true);
    reference::attention_chunk_forward(out_want.data(), lse_want.data(), earlier, /*accumulate=*/true);
    EXPECT_LE(relative_error(out, out_want), forward_tolerance(precision, q_rows)) << "out after the merge";
    EXPECT_LE(lse_error(lse, lse_want), forward_tolerance(precision, q_rows)) << "lse after the merge";
  }

  // The backward of the diagonal block, both from the reference's final out and lse.
  std::vector<float> delta(lse_size);
  reference::attention_chunk_delta(delta.data(), dout.data(), out_want.data(), c.B, c.Cq, c.H, c.D);
  std::vector<float> dq(q_size, 0.0f), dk(k.size(), 0.0f), dv(k.size(), 0.0f);
  std::vector<float> dq_want = dq, dk_want = dk, dv_want = dv;
  flash.attention_chunk_backward(dq.data(), dk.data(), dv.data(), dout.data(), lse_want.data(), delta.data(), block);
  reference::attention_chunk_backward(dq_want.data(), dk_want.data(), dv_want.data(), dout.data(), lse_want.data(),
                                      delta.data(), block);
  EXPECT_LE(relative_error(dq, dq_want), backward_tolerance(precision, q_rows));
  EXPECT_LE(relative_error(dk, dk_want), backward_tolerance(precision, kv_rows));
  EXPECT_LE(relative_error(dv, dv_want), backward_tolerance(precision, kv_rows));
  std::printf("[ errors   ] %s %s: out %.2e dq %.2e dk %.2e dv %.2e\n", precision_name(precision), c.what,
              relative_error(out, out_want),
              relative_error(dq, dq_want), relative_error(dk, dk_want), relative_error(dv, dv_want));
}

class FlashDiagonal : public ::testing::TestWithParam<std::tuple<DiagonalCase, Arithmetic>> {};

TEST_P(FlashDiagonal, MatchesTheReferenceChunkKernels) {
  const auto& [c, arithmetic] = GetParam();
  const ArithmeticScope scope(arithmetic);
  Rng rng(fresh_seed());
  expect_block_matches_reference_chunk_kernels(c, precision_of(arithmetic), rng);
}

INSTANTIATE_TEST_SUITE_P(
    Offsets, FlashDiagonal,
    ::testing::Combine(::testing::Values(
        DiagonalCase{"make_run_shape", 8, 8, 4, 32, 0, 256, 0, 256, 0, false},
        DiagonalCase{"offsets_off_every_tile", 2, 4, 1, 20, 150, 61, 3, 203, 0, false},
        DiagonalCase{"rows_end_inside_a_row_group", 1, 2, 2, 16, 0, 60, 28, 64, 0, false},
        DiagonalCase{"keys_start_mid_panel", 2, 4, 2, 64, 100, 130, 109, 190, 0, true},
        DiagonalCase{"window_across_panels_docs", 2, 6, 2, 48, 0, 200, 0, 200, 50, true},
        DiagonalCase{"window_shorter_than_a_row_group", 1, 4, 4, 32, 70, 97, 40, 140, 5, false},
        DiagonalCase{"one_query", 3, 2, 1, 8, 255, 1, 0, 256, 0, true},
        DiagonalCase{"few_keys_many_queries", 1, 8, 2, 40, 223, 256, 200, 33, 0, false},
        DiagonalCase{"odd_head_dim", 2, 4, 2, 15, 30, 140, 0, 170, 0, true},
        // one query row (decoding: forward_single_query), over keys in several of its 512-key tasks
        DiagonalCase{"decode_gqa_long_cache", 1, 9, 3, 64, 5000, 1, 4000, 1001, 0, false},
        DiagonalCase{"decode_window_and_documents", 2, 4, 2, 33, 1500, 1, 300, 1300, 700, true}),
    kArithmetics),
    [](const ::testing::TestParamInfo<std::tuple<DiagonalCase, Arithmetic>>& info) {
      return std::string(arithmetic_name(std::get<1>(info.param))).append("_").append(std::get<0>(info.param).what);
    });

// The same check on blocks of fresh random shapes: ragged block lengths and offsets (off every tile and
// register tile: the AMX path's whole 16-row tiles and 32-key steps included), diagonal or not, GQA,
// D of 64, 128 or odd, with or without a window and documents.
class FlashRandomBlocks : public ::testing::TestWithParam<Arithmetic> {};

TEST_P(FlashRandomBlocks, MatchTheReferenceChunkKernels) {
  const ArithmeticScope scope(GetParam());
  Rng rng(fresh_seed());
  constexpr int kHeadDims[] = {64, 128, 33, 97};
  for (int draw = 0; draw < 6; ++draw) {
    DiagonalCase c{"random", 1 + static_cast<int>(rng.below(2)), 0, 1 + static_cast<int>(rng.below(2)),
                   kHeadDims[rng.below(4)], 0, 1 + static_cast<int64_t>(rng.below(300)), 0,
                   1 + static_cast<int64_t>(rng.below(300)), 0, rng.below(2) == 1};
    c.H = c.Hkv * (1 << rng.below(3));  // groups of 1, 2 or 4 q heads
    c.kv_begin = static_cast<int64_t>(rng.below(200));
    // (with documents (37 tokens each), a block on the diagonal, so that some pairs share one)
    c.q_begin = c.kv_begin + static_cast<int64_t>(rng.below(static_cast<uint64_t>(c.documents ? c.Ck : c.Ck + 200)));
    c.window = rng.below(2) == 1 ? 1 + static_cast<int64_t>(rng.below(250)) : 0;
    if (!block_has_visible_pair(c.q_begin, c.Cq, c.kv_begin, c.Ck, c.window)) c.window = 0;  // the causal block sees
    std::printf("[ draw     ] B=%d H=%d Hkv=%d D=%d q [%lld, +%lld) kv [%lld, +%lld) window %lld docs %d\n", c.B, c.H,
                c.Hkv, c.D, static_cast<long long>(c.q_begin), static_cast<long long>(c.Cq),
                static_cast<long long>(c.kv_begin), static_cast<long long>(c.Ck), static_cast<long long>(c.window),
                c.documents);
    expect_block_matches_reference_chunk_kernels(c, precision_of(GetParam()), rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Arithmetics, FlashRandomBlocks, kArithmetics,
                         [](const auto& info) { return std::string(arithmetic_name(info.param)); });

// Blocks of one query row (forward_single_query), fresh random shapes: the query anywhere at or after the
// block's first key, up to 3,000 keys (several 512-key tasks, a window's start inside one), GQA groups of
// 1 to 8, D a multiple of 16 or not, with and without documents; then the same bits on 1 and 4 threads.
class FlashSingleQuery : public ::testing::TestWithParam<Arithmetic> {};

TEST_P(FlashSingleQuery, RandomBlocksMatchTheReferenceAndAreDeterministic) {
  const ArithmeticScope scope(GetParam());
  Rng rng(fresh_seed());
  constexpr int kHeadDims[] = {64, 128, 8, 33, 97};
  for (int draw = 0; draw < 6; ++draw) {
    DiagonalCase c{"single_query", 1 + static_cast<int>(rng.below(2)), 0, 1 + static_cast<int>(rng.below(3)),
                   kHeadDims[rng.below(5)], 0, 1, static_cast<int64_t>(rng.below(200)),
                   1 + static_cast<int64_t>(rng.below(3000)), 0, rng.below(2) == 1};
    c.H = c.Hkv * (1 << rng.below(4));
    // (with documents, the query among the block's keys, so that some share its document)
    c.q_begin = c.kv_begin + static_cast<int64_t>(rng.below(static_cast<uint64_t>(c.documents ? c.Ck : c.Ck + 100)));
    c.window = rng.below(2) == 1 ? 1 + static_cast<int64_t>(rng.below(2000)) : 0;
    if (!block_has_visible_pair(c.q_begin, c.Cq, c.kv_begin, c.Ck, c.window)) c.window = 0;  // the causal block sees
    std::printf("[ draw     ] B=%d H=%d Hkv=%d D=%d q %lld kv [%lld, +%lld) window %lld docs %d\n", c.B, c.H, c.Hkv,
                c.D, static_cast<long long>(c.q_begin), static_cast<long long>(c.kv_begin),
                static_cast<long long>(c.Ck), static_cast<long long>(c.window), c.documents);
    expect_block_matches_reference_chunk_kernels(c, precision_of(GetParam()), rng);
  }
  // Threads take the tasks in any order; the partials are merged in key order.
  const int64_t Ck = 2500;
  const auto q = random_normal<float>(rng, 8 * 64), k = random_normal<float>(rng, static_cast<size_t>(Ck) * 2 * 64),
             v = random_normal<float>(rng, k.size());
  const Problem problem{1, 0, 8, 2, 64, false, 0, precision_of(GetParam())};
  const AttentionChunkParams block = block_params(problem, 0.125, q, k, v, {}, {}, {Ck + 10, 1}, {0, Ck});
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(q.size()), lse(8);
    cpu::CpuBackend().attention_chunk_forward(out.data(), lse.data(), block, /*accumulate=*/false);
    omp_set_num_threads(saved);
    return std::pair{out, lse};
  };
  EXPECT_EQ(run(1), run(4));
}

// K and V given as bf16 words (a bf16 KV cache, read as stored) are the same as their values given as floats,
// bit for bit: on the single-query kernel (one query row), on the tiled one (many rows, widened first) and on
// the reference. The backward takes floats only.
TEST_P(FlashSingleQuery, KvAsBf16WordsAreTheirValues) {
  const ArithmeticScope scope(GetParam());
  Rng rng(fresh_seed());
  const int B = 2, H = 6, Hkv = 3, D = 40;
  const int64_t Ck = 700, kv_begin = 100;
  const testing::Bf16Values k = testing::random_bf16(rng, static_cast<size_t>(B) * Ck * Hkv * D);
  const testing::Bf16Values v = testing::random_bf16(rng, k.words.size());
  const Problem problem{B, 0, H, Hkv, D, false, 0, precision_of(GetParam())};
  for (const int64_t Cq : {int64_t{1}, int64_t{37}}) {
    const auto q = random_normal<float>(rng, static_cast<size_t>(B) * Cq * H * D);
    const AttentionChunkParams floats =
        block_params(problem, 0.15, q, k.values, v.values, {}, {}, {kv_begin + Ck - 20, Cq}, {kv_begin, Ck});
    AttentionChunkParams words = floats;
    words.k = words.v = nullptr;
    words.k_words = k.words.data();
    words.v_words = v.words.data();
    const size_t rows = static_cast<size_t>(B) * Cq * H;
    auto run = [&](Backend& backend, const AttentionChunkParams& block) {
      std::vector<float> out(rows * D, 3.0f), lse(rows, 0.5f);  // accumulated into: the merge reads them too
      backend.attention_chunk_forward(out.data(), lse.data(), block, /*accumulate=*/true);
      return std::pair{out, lse};
    };
    cpu::CpuBackend cpu;
    const auto reference = make_backend(BackendKind::reference);
    EXPECT_EQ(run(cpu, words), run(cpu, floats)) << "cpu, Cq " << Cq;
    EXPECT_EQ(run(*reference, words), run(*reference, floats)) << "reference, Cq " << Cq;
    std::vector<float> grad(k.words.size());
    EXPECT_THROW(cpu.attention_chunk_backward(grad.data(), grad.data(), grad.data(), q.data(), q.data(), q.data(),
                                              words),
                 Error);
  }
}

INSTANTIATE_TEST_SUITE_P(Arithmetics, FlashSingleQuery, kArithmetics,
                         [](const auto& info) { return std::string(arithmetic_name(info.param)); });

// ---------------------------------------------------------------------------------------------
TEST(FlashParams, RefusedAtTheEdge) {
  const std::vector<float> x(64 * 512, 0.0f);
  const std::vector<int32_t> docs(64, 0);
  std::vector<float> out(64 * 512), lse(64);
  AttentionChunkParams good;
  good.q = good.k = good.v = x.data();
  good.B = 1;
  good.Cq = good.Ck = 4;
  good.H = good.Hkv = 2;
  good.D = 64;
  good.scale = 0.125;
  EXPECT_NO_THROW(cpu::CpuBackend::validate(good));

  AttentionChunkParams wide = good;
  wide.D = 300;
  AttentionChunkParams no_dim = good;
  no_dim.D = 0;
  AttentionChunkParams uneven = good;
  uneven.H = 3;
  AttentionChunkParams one_sided = good;
  one_sided.q_doc_ids = docs.data();
  AttentionChunkParams no_scale = good;
  no_scale.scale = NAN;
  AttentionChunkParams no_k = good;
  no_k.k = nullptr;
  AttentionChunkParams negative_window = good;
  negative_window.window = -1;
  AttentionChunkParams many_heads = good;  // H·D = 2^25: beyond the packing's 32-bit offsets
  many_heads.H = many_heads.Hkv = 1 << 17;
  many_heads.D = 256;
  cpu::CpuBackend flash;
  for (const auto& bad : {wide, no_dim, uneven, one_sided, no_scale, no_k, negative_window, many_heads}) {
    EXPECT_THROW(flash.attention_chunk_forward(out.data(), lse.data(), bad, false), Error);
  }
  try {
    cpu::CpuBackend::validate(wide);
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("head dim 300"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fpdt::kernels
