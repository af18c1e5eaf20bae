// The Backend conformance table (as ggml's test-backend-ops): every op of the Backend interface, on
// the backend under test, against the reference kernels run in float64 (the spec), on fresh random
// inputs at several shapes including odd ones (1 element, sizes off every vector width and tile,
// the parallel paths). Each row is one op family; its tolerances stand next to its comparisons, with
// their reasons. The error measure is the norm-wise relative error of testing.h; an accumulating (+=)
// output is compared by its increment, so a wrong term cannot hide behind the initial content.
// backend_ops_test.cpp runs the rows on the host backends (reference, cpu, cpu-guarded) and checks that
// the table names every op of backend_ops.inc; backend_ops_cuda_test.cpp runs them on cuda (label `cuda`).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/guarded/guarded_memory.h"
#include "fpdt/kernels/reference/activation.h"
#include "fpdt/kernels/reference/adamw.h"
#include "fpdt/kernels/reference/attention.h"
#include "fpdt/kernels/reference/attention_chunk.h"
#include "fpdt/kernels/reference/cross_entropy.h"
#include "fpdt/kernels/reference/elementwise.h"
#include "fpdt/kernels/reference/embedding.h"
#include "fpdt/kernels/reference/linear.h"
#include "fpdt/kernels/reference/norm.h"
#include "fpdt/kernels/reference/rope.h"
#include "fpdt/tensor/dtype.h"
#include "testing.h"

namespace fpdt::kernels::conformance {

using testing::fresh_seed;
using testing::random_normal;
using testing::random_uniform;
using testing::relative_error;
using testing::to_double;

// ---------------------------------------------------------------------------------------------
// Where the backend under test keeps its tensors: host memory (reference, cpu), device memory (cuda) or
// guarded memory (cpu-guarded: the host cannot read it), the last two reached by copies.
struct Memory {
  void* (*alloc)(size_t bytes);
  void (*release)(void* ptr);
  void (*to_backend)(void* dst, const void* host_src, size_t bytes);
  void (*to_host)(void* host_dst, const void* src, size_t bytes);
};

// guarded_memory()'s buffers by handle, for Memory's plain functions.
inline std::map<void*, std::unique_ptr<DeviceBuffer>>& guarded_buffers() {
  static std::map<void*, std::unique_ptr<DeviceBuffer>> buffers;
  return buffers;
}

inline Memory memory_of(const std::string& backend) {
  if (backend == "cuda") return {cuda_device_alloc, cuda_device_free, cuda_copy_to_device, cuda_copy_to_host};
  if (backend == "cpu-guarded")
    return {[](size_t bytes) {
              auto buffer = guarded_memory().allocate(bytes, "conformance test tensor", "");
              void* handle = buffer->data();
              guarded_buffers()[handle] = std::move(buffer);
              return handle;
            },
            [](void* handle) { guarded_buffers().erase(handle); },
            [](void* dst, const void* src, size_t bytes) { guarded_memory().upload(dst, src, bytes); },
            [](void* dst, const void* src, size_t bytes) { guarded_memory().download(dst, src, bytes); }};
  auto copy = [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); };
  return {[](size_t bytes) { return std::malloc(bytes); }, [](void* ptr) { std::free(ptr); }, copy, copy};
}

// A copy of a host array in the backend's memory; host() copies it back.
template <typename T>
class Placed {
 public:
  Placed(const Memory& memory, const std::vector<T>& values) : memory_(memory), n_(values.size()) {
    ptr_ = static_cast<T*>(memory_.alloc(n_ > 0 ? n_ * sizeof(T) : 1));
    if (n_ > 0) memory_.to_backend(ptr_, values.data(), n_ * sizeof(T));
  }
  ~Placed() { memory_.release(ptr_); }
  Placed(const Placed&) = delete;
  Placed& operator=(const Placed&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> host() const {
    std::vector<T> values(n_);
    if (n_ > 0) memory_.to_host(values.data(), ptr_, n_ * sizeof(T));
    return values;
  }

 private:
  Memory memory_;
  size_t n_;
  T* ptr_ = nullptr;
};

// What a row's check gets: the backend under test, its memory and the test's random numbers.
struct OpCheck {
  Backend& backend;
  Memory memory;
  Rng& rng;
  template <typename T>
  std::unique_ptr<Placed<T>> place(const std::vector<T>& values) const {
    return std::make_unique<Placed<T>>(memory, values);
  }
};

// ---------------------------------------------------------------------------------------------
// Comparisons (printed, so a log shows each error next to its bound).

inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                         double tolerance) {
  const double error = relative_error(got, want);
  std::printf("[ error    ] %s: %.3e (tolerance %.2e)\n", what.c_str(), error, tolerance);
  EXPECT_LE(error, tolerance) << what;  // NaN fails too
}

// An accumulating output: the increment got − initial against want − initial, in float64, within
// `tolerance` (the increment's own bound) plus the one rounding of initial + increment, which is u of the
// sum: relative to the increment, the bound of one rounding times ‖want‖ / ‖want − initial‖.
inline void expect_close_increment(const std::string& what, const std::vector<float>& got,
                                   const std::vector<float>& initial, const std::vector<double>& want,
                                   double tolerance) {
  std::vector<double> got_increment(got.size()), want_increment(want.size());
  for (size_t i = 0; i < got.size() && i < initial.size(); ++i) got_increment[i] = double{got[i]} - initial[i];
  for (size_t i = 0; i < want.size() && i < initial.size(); ++i) want_increment[i] = want[i] - initial[i];
  const double error = relative_error(got_increment, want_increment);
  const std::vector<double> zero(want.size(), 0.0);
  const double sum_over_increment = relative_error(want, zero) / std::max(relative_error(want_increment, zero), 1e-300);
  const double bound = tolerance + testing::fp32_bound({.against = testing::Against::float64}) * sum_over_increment;
  std::printf("[ error    ] %s (increment): %.3e (tolerance %.2e)\n", what.c_str(), error, bound);
  EXPECT_LE(error, bound) << what;
}

// An optional accumulating output (a null pointer skips it): its increment when the op was given it,
// else untouched, bit for bit.
inline void expect_increment_or_untouched(bool given, const std::string& what, const std::vector<float>& got,
                                          const std::vector<float>& initial, const std::vector<double>& want,
                                          double tolerance) {
  if (given) {
    expect_close_increment(what, got, initial, want, tolerance);
  } else {
    EXPECT_EQ(got, initial) << what << ": null output, nothing may be written";
  }
}

// LSE rows may be −inf (no visible key): −inf on both sides in the same rows, the rest close.
inline void expect_close_lse(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
                             double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<float> got_finite;
  std::vector<double> want_finite;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::isinf(got[i]) && got[i] < 0, std::isinf(want[i]) && want[i] < 0) << what << " row " << i;
    if (!std::isinf(want[i])) {
      got_finite.push_back(got[i]);
      want_finite.push_back(want[i]);
    }
  }
  expect_close(what, got_finite, want_finite, tolerance);
}

// testing::cancellation of a product's outputs: `squares`, the same product over its inputs' squares (each
// output's Σ t², a bias's square among its terms), and `product`, the product itself (without what it
// accumulates into).
inline double product_cancellation(const std::vector<double>& squares, const std::vector<double>& product) {
  std::vector<double> scales(squares.size());
  for (size_t i = 0; i < squares.size(); ++i) scales[i] = std::sqrt(squares[i]);
  return testing::cancellation(scales, product);
}
inline std::vector<double> squared(const std::vector<double>& values) {
  std::vector<double> squares(values.size());
  for (size_t i = 0; i < values.size(); ++i) squares[i] = values[i] * values[i];
  return squares;
}
// want − initial: what an op that accumulates added.
inline std::vector<double> added(const std::vector<double>& want, const std::vector<float>& initial) {
  std::vector<double> increment(want.size());
  for (size_t i = 0; i < want.size(); ++i) increment[i] = want[i] - initial[i];
  return increment;
}

inline std::string shape_text(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string text;
  for (const auto& [name, value] : dims)
    text += std::string(text.empty() ? "" : " ") + name + "=" + std::to_string(value);
  return text;
}

// ---------------------------------------------------------------------------------------------
// The rows.

// embedding_forward, embedding_backward
inline void check_embedding(OpCheck& t) {
  // A gather copies values: exact. `+=` adds one fp32 rounding per element (6e-8 of the sum, so up
  // to a few 1e-7 of an increment several times smaller than the initial content), and the backward
  // sums the rows of repeated ids in fp32 (cpu in its own order): a few ulps of each sum.
  // 1e-5 bounds both with a wide margin and catches any wrong row (an error of O(1)).
  constexpr double kTolerance = 1e-5;
  struct Shape {
    int64_t N;
    int h, V;
  };
  // One short row; few ids, so rows repeat; past the cpu's parallel threshold.
  for (const Shape s : {Shape{1, 7, 3}, Shape{37, 100, 17}, Shape{300, 512, 64}}) {
    const std::string tag = " [" + shape_text({{"N", s.N}, {"h", s.h}, {"V", s.V}}) + "]";
    std::vector<int32_t> ids(s.N);
    for (auto& id : ids) id = static_cast<int32_t>(t.rng.below(s.V));
    const auto table = random_normal<float>(t.rng, s.V * s.h);
    const auto ids_placed = t.place(ids);
    const auto table_placed = t.place(table);
    for (const bool accumulate : {false, true}) {
      const auto initial = random_normal<float>(t.rng, s.N * s.h);
      const auto out = t.place(initial);
      t.backend.embedding_forward(out->get(), ids_placed->get(), table_placed->get(), s.N, s.h, accumulate);
      auto want = to_double(initial);
      reference::embedding_forward(want.data(), ids.data(), to_double(table).data(), s.N, s.h, accumulate);
      if (accumulate) {
        expect_close_increment("embedding_forward +=" + tag, out->host(), initial, want, kTolerance);
      } else {
        expect_close("embedding_forward" + tag, out->host(), want, 0.0);  // a gather: exact
      }
    }
    const auto dout = random_normal<float>(t.rng, s.N * s.h);
    const auto dtable_initial = random_normal<float>(t.rng, s.V * s.h);
    const auto dtable = t.place(dtable_initial), dout_placed = t.place(dout);
    t.backend.embedding_backward(dtable->get(), dout_placed->get(), ids_placed->get(), s.N, s.h);
    auto want = to_double(dtable_initial);
    reference::embedding_backward(want.data(), to_double(dout).data(), ids.data(), s.N, s.h);
    expect_close_increment("embedding_backward dtable" + tag, dtable->host(), dtable_initial, want, kTolerance);
    if (t.backend.name() == "cuda") {
      // cuda adds each row's tokens in token order, as the reference does: bitwise its fp32 sums
      // (ulysses.cpp and the gradient norm rely on a reproducible embedding gradient).
      std::vector<float> want_fp32 = dtable_initial;
      reference::embedding_backward(want_fp32.data(), dout.data(), ids.data(), s.N, s.h);
      EXPECT_EQ(dtable->host(), want_fp32) << "embedding_backward" << tag << ": not the reference's fp32 order";
    }
  }
}

// rmsnorm_forward, rmsnorm_backward, layernorm_forward, layernorm_backward
inline void check_norm(OpCheck& t) {
  // Elementwise work in fp32 (a few roundings of 6e-8 each), row statistics over h and weight
  // gradients over N accumulated in float64 (cpu) or fp32 (cuda, over ≤ 1000 terms): within a few
  // fp32 ulps of the float64 reference; 1e-5 leaves a wide margin and still catches any wrong term.
  constexpr double kTolerance = 1e-5;
  constexpr double kEps = 1e-5;
  struct Shape {
    int64_t N;
    int h;
  };
  // 300 × 512: past the cpu's parallel threshold, several column blocks; h = 1000: not a multiple of
  // cuda's block; one short row. (Not h = 1: a one-element row normalises to ±1, whose dx is ~eps / x²,
  // all cancellation — no fp32 kernel gets it to a relative 1e-5, nor needs to.)
  for (const Shape s : {Shape{1, 5}, Shape{37, 100}, Shape{300, 512}, Shape{7, 1000}}) {
    const std::string tag = " [" + shape_text({{"N", s.N}, {"h", s.h}}) + "]";
    auto x = random_normal<float>(t.rng, s.N * s.h);
    for (auto& value : x) value += 3.0f;  // a mean well away from zero: LayerNorm's two-pass variance
    const auto weight = random_normal<float>(t.rng, s.h);
    const auto bias = random_normal<float>(t.rng, s.h);
    const auto dout = random_normal<float>(t.rng, s.N * s.h);
    const auto x_placed = t.place(x), weight_placed = t.place(weight), bias_placed = t.place(bias);
    const auto dout_placed = t.place(dout);
    const auto x64 = to_double(x), weight64 = to_double(weight), bias64 = to_double(bias), dout64 = to_double(dout);

    {  // RMSNorm
      const auto out = t.place(std::vector<float>(s.N * s.h, 7.0f));  // junk: overwritten
      const auto rstd = t.place(std::vector<float>(s.N, 7.0f));
      t.backend.rmsnorm_forward(out->get(), rstd->get(), x_placed->get(), weight_placed->get(), s.N, s.h, kEps);
      std::vector<double> out_want(s.N * s.h), rstd_want(s.N);
      reference::rmsnorm_forward(out_want.data(), rstd_want.data(), x64.data(), weight64.data(), s.N, s.h, kEps);
      expect_close("rmsnorm_forward out" + tag, out->host(), out_want, kTolerance);
      expect_close("rmsnorm_forward rstd" + tag, rstd->host(), rstd_want, kTolerance);
      // Backward from the backend's own saved rstd on both sides.
      const auto dx_initial = random_normal<float>(t.rng, s.N * s.h);
      const auto dweight_initial = random_normal<float>(t.rng, s.h);
      const auto dx = t.place(dx_initial), dweight = t.place(dweight_initial);
      t.backend.rmsnorm_backward(dx->get(), dweight->get(), dout_placed->get(), x_placed->get(), weight_placed->get(),
                                 rstd->get(), s.N, s.h);
      auto dx_want = to_double(dx_initial), dweight_want = to_double(dweight_initial);
      reference::rmsnorm_backward(dx_want.data(), dweight_want.data(), dout64.data(), x64.data(), weight64.data(),
                                  to_double(rstd->host()).data(), s.N, s.h);
      expect_close_increment("rmsnorm_backward dx" + tag, dx->host(), dx_initial, dx_want, kTolerance);
      expect_close_increment("rmsnorm_backward dweight" + tag, dweight->host(), dweight_initial, dweight_want,
                             kTolerance);
    }
    for (const bool with_bias : {true, false}) {  // LayerNorm, GPT-2's (with bias) and without
      const std::string what = std::string(with_bias ? "layernorm" : "layernorm (no bias)");
      const auto out = t.place(std::vector<float>(s.N * s.h, 7.0f));
      const auto mean = t.place(std::vector<float>(s.N, 7.0f));
      const auto rstd = t.place(std::vector<float>(s.N, 7.0f));
      t.backend.layernorm_forward(out->get(), mean->get(), rstd->get(), x_placed->get(), weight_placed->get(),
                                  with_bias ? bias_placed->get() : nullptr, s.N, s.h, kEps);
      std::vector<double> out_want(s.N * s.h), mean_want(s.N), rstd_want(s.N);
      reference::layernorm_forward(out_want.data(), mean_want.data(), rstd_want.data(), x64.data(), weight64.data(),
                                   with_bias ? bias64.data() : nullptr, s.N, s.h, kEps);
      expect_close(what + "_forward out" + tag, out->host(), out_want, kTolerance);
      expect_close(what + "_forward mean" + tag, mean->host(), mean_want, kTolerance);
      expect_close(what + "_forward rstd" + tag, rstd->host(), rstd_want, kTolerance);
      const auto dx_initial = random_normal<float>(t.rng, s.N * s.h);
      const auto dweight_initial = random_normal<float>(t.rng, s.h);
      const auto dbias_initial = random_normal<float>(t.rng, s.h);
      const auto dx = t.place(dx_initial), dweight = t.place(dweight_initial), dbias = t.place(dbias_initial);
      t.backend.layernorm_backward(dx->get(), dweight->get(), with_bias ? dbias->get() : nullptr, dout_placed->get(),
                                   x_placed->get(), weight_placed->get(), mean->get(), rstd->get(), s.N, s.h);
      auto dx_want = to_double(dx_initial), dweight_want = to_double(dweight_initial);
      auto dbias_want = to_double(dbias_initial);
      reference::layernorm_backward(dx_want.data(), dweight_want.data(), with_bias ? dbias_want.data() : nullptr,
                                    dout64.data(), x64.data(), weight64.data(), to_double(mean->host()).data(),
                                    to_double(rstd->host()).data(), s.N, s.h);
      expect_close_increment(what + "_backward dx" + tag, dx->host(), dx_initial, dx_want, kTolerance);
      expect_close_increment(what + "_backward dweight" + tag, dweight->host(), dweight_initial, dweight_want,
                             kTolerance);
      expect_increment_or_untouched(with_bias, what + "_backward dbias" + tag, dbias->host(), dbias_initial,
                                    dbias_want, kTolerance);
    }
  }
}

// linear_forward, linear_backward
inline std::vector<float> bf16_rounded(std::vector<float> values) {
  for (float& value : values) value = fpdt::round_to_bf16(value);
  return values;
}

// One precision's checks. fp32: one fp32 GEMM against float64, each output a sum over I (forward), O (dx)
// or N (dw, dbias). bf16 (the spec: reference/linear.h): against float64 on the unrounded inputs within
// the bf16 rounding of both factors (bf16_product_bound), and against float64 on the bf16-rounded inputs
// within the fp32 bound alone (the same rounded values; only the fp32 sums differ). dbias sums the
// unrounded dout: the fp32 bound on the unrounded reference (a rounded dout would miss it by ~1e-3). A bf16
// product of fewer than kBf16MinOutputs outputs has the check against rounded inputs only (tolerances.h).
// working_copy (bf16): w is given only as its bf16 words (ops.h WeightMatrix, values null — as a bf16 run's
// ZeRO-3 gathers it), which must give the same values, so the same bounds. Every bound carries its outputs'
// cancellation (product_cancellation): 1 over the larger shapes, more where the few outputs of N = 1,
// O = 3 cancel (seen over 300 draws: up to 0.48 of the bound without it).
// The sums of a bf16 product on cuda run on tensor cores, which truncate (tolerances.h truncating_sum_bound):
// there the fp32 part of each bf16 bound is the truncating one; fp32 products (CUDA cores, strict fp32
// cuBLASLt) and every host backend round to nearest.
inline void check_linear_in(OpCheck& t, Precision precision, bool working_copy = false) {
  const bool bf16 = precision == Precision::bf16;
  const testing::Accumulation accumulation = bf16 && t.backend.name() == "cuda" ? testing::Accumulation::truncating
                                                                                : testing::Accumulation::nearest;
  auto fp32 = [accumulation](int64_t summation) {
    return testing::fp32_sum_bound(static_cast<double>(summation), accumulation);
  };
  auto bound = [&](int64_t summation) {
    return bf16 ? testing::bf16_product_bound(static_cast<double>(summation), 2, accumulation) : fp32(summation);
  };
  auto bound_applies = [&](int64_t outputs) { return !bf16 || outputs >= testing::kBf16MinOutputs; };
  const std::string tag_precision = bf16 ? (working_copy ? " bf16 (w as bf16 words)" : " bf16") : "";
  // One row; sizes off every multiple of 8 and 16; the cpu backend's team GEMM cuts 300 × 512 × 257 by
  // rows, 1100 × 40 × 33's weight gradient (and 64 × 600 × 40's forward) along K, and 64 × 600 × 40's
  // weight gradient by columns.
  for (const LinearShape s : {LinearShape{1, 7, 3}, LinearShape{37, 100, 75}, LinearShape{300, 512, 257},
                              LinearShape{1100, 40, 33}, LinearShape{64, 600, 40}}) {
    const std::string tag = tag_precision + " [" + shape_text({{"N", s.N}, {"I", s.I}, {"O", s.O}}) + "]";
    const auto x = random_normal<float>(t.rng, s.N * s.I);
    const auto w = random_normal<float>(t.rng, int64_t{s.O} * s.I, 0.05);
    const auto bias = random_normal<float>(t.rng, s.O);
    const auto dout = random_normal<float>(t.rng, s.N * s.O);
    const auto x_placed = t.place(x), w_placed = t.place(w), bias_placed = t.place(bias), dout_placed = t.place(dout);
    std::vector<uint16_t> w_words(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_words[i] = fpdt::float_to_bf16(w[i]);
    const auto w_words_placed = t.place(w_words);
    const kernels::WeightMatrix w_op = working_copy ? kernels::WeightMatrix(nullptr, w_words_placed->get())
                                                    : kernels::WeightMatrix(w_placed->get());
    const auto x64 = to_double(x), w64 = to_double(w), bias64 = to_double(bias), dout64 = to_double(dout);
    const auto x_squares = squared(x64), w_squares = squared(w64), bias_squares = squared(bias64),
               dout_squares = squared(dout64);
    // The products' inputs as a bf16 run sees them (fp32 runs: unchanged).
    const auto x64r = bf16 ? to_double(bf16_rounded(x)) : x64, w64r = bf16 ? to_double(bf16_rounded(w)) : w64,
               dout64r = bf16 ? to_double(bf16_rounded(dout)) : dout64;
    for (const bool with_bias : {false, true})
      for (const bool accumulate : {false, true}) {
        const std::string what = std::string("linear_forward") + (with_bias ? " bias" : "") + (accumulate ? " +=" : "");
        const auto initial = random_normal<float>(t.rng, s.N * s.O);
        const auto out = t.place(initial);
        t.backend.linear_forward(out->get(), x_placed->get(), w_op, with_bias ? bias_placed->get() : nullptr, s.N, s.I,
                                 s.O, accumulate, precision);
        auto want = to_double(initial), want_rounded = want;
        reference::linear_forward(want.data(), x64.data(), w64.data(), with_bias ? bias64.data() : nullptr, s.N, s.I,
                                  s.O, accumulate);
        reference::linear_forward(want_rounded.data(), x64r.data(), w64r.data(), with_bias ? bias64.data() : nullptr,
                                  s.N, s.I, s.O, accumulate);
        std::vector<double> squares(s.N * s.O, 0.0);
        reference::linear_forward(squares.data(), x_squares.data(), w_squares.data(),
                                  with_bias ? bias_squares.data() : nullptr, s.N, s.I, s.O, false);
        const double kappa =
            product_cancellation(squares, accumulate ? added(want, initial) : want);
        const auto got = out->host();
        const bool spec = bound_applies(s.N * s.O);
        if (accumulate) {
          if (spec) expect_close_increment(what + tag, got, initial, want, kappa * bound(s.I));
          if (bf16)
            expect_close_increment(what + tag + " vs rounded inputs", got, initial, want_rounded, kappa * fp32(s.I));
        } else {
          if (spec) expect_close(what + tag, got, want, kappa * bound(s.I));
          if (bf16) expect_close(what + tag + " vs rounded inputs", got, want_rounded, kappa * fp32(s.I));
        }
      }
    // dx overwritten (with dbias), dx accumulated (without), no dx at all (with dbias).
    enum class Dx { overwrite, accumulate, none };
    for (const Dx mode : {Dx::overwrite, Dx::accumulate, Dx::none}) {
      const bool with_dbias = mode != Dx::accumulate;
      const std::string what = std::string("linear_backward") +
                               (mode == Dx::overwrite ? " dx=" : mode == Dx::accumulate ? " dx+=" : " no-dx");
      const auto dx_initial = random_normal<float>(t.rng, s.N * s.I);
      const auto dw_initial = random_normal<float>(t.rng, int64_t{s.O} * s.I);
      const auto dbias_initial = random_normal<float>(t.rng, s.O);
      const auto dx = t.place(dx_initial), dw = t.place(dw_initial), dbias = t.place(dbias_initial);
      t.backend.linear_backward(mode == Dx::none ? nullptr : dx->get(), dw->get(), with_dbias ? dbias->get() : nullptr,
                                dout_placed->get(), x_placed->get(), w_op, s, mode == Dx::accumulate, precision);
      auto dx_want = to_double(dx_initial), dw_want = to_double(dw_initial), dbias_want = to_double(dbias_initial);
      reference::linear_backward(mode == Dx::none ? nullptr : dx_want.data(), dw_want.data(),
                                 with_dbias ? dbias_want.data() : nullptr, dout64.data(), x64.data(), w64.data(), s.N,
                                 s.I, s.O, mode == Dx::accumulate);
      auto dx_want_rounded = to_double(dx_initial), dw_want_rounded = to_double(dw_initial);
      reference::linear_backward<double>(mode == Dx::none ? nullptr : dx_want_rounded.data(), dw_want_rounded.data(),
                                         nullptr, dout64r.data(), x64r.data(), w64r.data(), s.N, s.I, s.O,
                                         mode == Dx::accumulate);
      std::vector<double> dx_squares(s.N * s.I, 0.0), dw_squares(int64_t{s.O} * s.I, 0.0), dbias_squares(s.O, 0.0);
      reference::linear_backward(dx_squares.data(), dw_squares.data(), dbias_squares.data(), dout_squares.data(),
                                 x_squares.data(), w_squares.data(), s.N, s.I, s.O, false);
      const double dx_kappa = product_cancellation(
          dx_squares, mode == Dx::accumulate ? added(dx_want, dx_initial) : dx_want);
      const double dw_kappa = product_cancellation(dw_squares, added(dw_want, dw_initial));
      const double dbias_kappa = product_cancellation(dbias_squares, added(dbias_want, dbias_initial));
      const auto dx_got = dx->host(), dw_got = dw->host();
      const bool dx_spec = bound_applies(s.N * s.I), dw_spec = bound_applies(int64_t{s.O} * s.I);
      if (mode == Dx::overwrite) {
        if (dx_spec) expect_close(what + " dx" + tag, dx_got, dx_want, dx_kappa * bound(s.O));
        if (bf16)
          expect_close(what + " dx" + tag + " vs rounded inputs", dx_got, dx_want_rounded, dx_kappa * fp32(s.O));
      } else if (mode == Dx::accumulate) {
        if (dx_spec) expect_close_increment(what + " dx" + tag, dx_got, dx_initial, dx_want, dx_kappa * bound(s.O));
        if (bf16)
          expect_close_increment(what + " dx" + tag + " vs rounded inputs", dx_got, dx_initial, dx_want_rounded,
                                 dx_kappa * fp32(s.O));
      } else {
        expect_increment_or_untouched(false, what + " dx" + tag, dx_got, dx_initial, dx_want, bound(s.O));
      }
      if (dw_spec)
        expect_close_increment(what + " dw" + tag, dw_got, dw_initial, dw_want, dw_kappa * bound(s.N));
      if (bf16)
        expect_close_increment(what + " dw" + tag + " vs rounded inputs", dw_got, dw_initial, dw_want_rounded,
                               dw_kappa * fp32(s.N));
      expect_increment_or_untouched(with_dbias, what + " dbias" + tag, dbias->host(), dbias_initial, dbias_want,
                                    dbias_kappa * testing::fp32_sum_bound(static_cast<double>(s.N),
                                                                           testing::Accumulation::nearest));  // column sums: no tensor cores
    }
  }
  // Empty inner dimensions (cuda: cuBLASLt refuses k = 0, so such a GEMM must never reach it, not even
  // its heuristic). Forward over I = 0 inputs: out = bias exactly. Backward over N = 0 tokens (a rank
  // or chunk with none): dw and dbias keep their bits.
  {
    const int64_t N = 5;
    const int O = 3;
    const auto bias = random_normal<float>(t.rng, O);
    const auto out = t.place(random_normal<float>(t.rng, N * O));
    const std::vector<float> none;
    const auto none_placed = t.place(none), bias_placed = t.place(bias);
    t.backend.linear_forward(out->get(), none_placed->get(), none_placed->get(), bias_placed->get(), N, 0, O, false,
                             precision);
    std::vector<float> want(N * O);
    for (int64_t i = 0; i < N * O; ++i) want[i] = bias[i % O];
    EXPECT_EQ(out->host(), want) << "linear_forward" << tag_precision << " [N=5 I=0 O=3]: out = bias";
    const int I = 24;
    const auto w = t.place(random_normal<float>(t.rng, int64_t{O} * I));
    const auto dw_initial = random_normal<float>(t.rng, int64_t{O} * I), dbias_initial = random_normal<float>(t.rng, O);
    const auto dw = t.place(dw_initial), dbias = t.place(dbias_initial);
    t.backend.linear_backward(none_placed->get(), dw->get(), dbias->get(), none_placed->get(), none_placed->get(),
                              w->get(), {0, I, O}, false, precision);
    EXPECT_EQ(dw->host(), dw_initial) << "linear_backward" << tag_precision << " [N=0]: dw changed";
    EXPECT_EQ(dbias->host(), dbias_initial) << "linear_backward" << tag_precision << " [N=0]: dbias changed";
  }
}

inline void check_linear(OpCheck& t) {
  check_linear_in(t, Precision::fp32);
  check_linear_in(t, Precision::bf16);
  check_linear_in(t, Precision::bf16, true);
}

// rope_forward, rope_backward
inline void check_rope(OpCheck& t) {
  // cos and sin are taken in float64 and rounded to fp32 once (cpu), then two rounded products and a
  // sum per output: a few ulps (6e-8) per entry. An angle taken in fp32 at position 1e6 would be off
  // by ~6e-2, far outside 1e-6.
  constexpr double kTolerance = 1e-6;
  struct Shape {
    int64_t N;
    int H, D, rotary_dim;
    int64_t max_position;
    double attention_scaling;
    bool random_table;  // any table, not only θ^(−2i/d): the kernels must read the one they are given
  };
  for (const Shape s : {Shape{1, 1, 2, 2, 1, 1.0, false}, Shape{37, 3, 24, 16, 1'000'000, 1.0, false},
                        Shape{19, 3, 64, 64, 2'000'000, 1.0, false}, Shape{5, 2, 12, 6, 4096, 1.3, true},
                        Shape{300, 8, 128, 128, 1 << 20, 0.8, true}}) {  // 300 × 8 × 128: the parallel path
    const std::string tag = " [" + shape_text({{"N", s.N}, {"H", s.H}, {"D", s.D}, {"rotary_dim", s.rotary_dim}}) +
                            " scaling=" + std::to_string(s.attention_scaling) +
                            (s.random_table ? " random table" : "") + "]";
    std::vector<int64_t> pos(s.N);
    for (auto& p : pos) p = static_cast<int64_t>(t.rng.below(static_cast<uint64_t>(s.max_position) + 1));
    pos[0] = s.max_position;  // the largest position always present
    std::vector<double> inv_freq(s.rotary_dim / 2);
    for (int i = 0; i < s.rotary_dim / 2; ++i)
      inv_freq[i] = s.random_table ? t.rng.uniform(1e-4, 1.0) : std::pow(500000.0, -2.0 * i / s.rotary_dim);
    const RopeParams rope{inv_freq.data(), s.attention_scaling, s.rotary_dim};
    const auto x = random_normal<float>(t.rng, s.N * s.H * s.D);
    const auto pos_placed = t.place(pos);
    const auto forward = t.place(x);
    t.backend.rope_forward(forward->get(), pos_placed->get(), s.N, s.H, s.D, rope);
    auto want = to_double(x);
    reference::rope_forward(want.data(), pos.data(), s.N, s.H, s.D, rope);
    expect_close("rope_forward" + tag, forward->host(), want, kTolerance);
    const auto backward = t.place(x);
    t.backend.rope_backward(backward->get(), pos_placed->get(), s.N, s.H, s.D, rope);
    want = to_double(x);
    reference::rope_backward(want.data(), pos.data(), s.N, s.H, s.D, rope);
    expect_close("rope_backward" + tag, backward->host(), want, kTolerance);  // same arithmetic, −sin
  }
}

// swiglu_forward, swiglu_backward, gelu_forward, gelu_backward
inline void check_activation(OpCheck& t) {
  // fp32 inputs are exact in float64, so the gap is the kernel's own error: a vector exp or tanh
  // (≈ 2 ulp), one division and a handful of rounded products, ~1e-7 per entry. 2e-6 leaves room for
  // the amplification of silu' and gelu' near their zero crossings.
  constexpr double kTolerance = 2e-6;
  // 7: the tail alone, less than one vector; 1037 = 129 blocks of 8 and a tail of 5; 65539: the
  // parallel path with a tail. (Not n = 1: one element's relative error is ill-conditioned, e.g. GELU
  // of x ≈ −10 is a subnormal ~1e-38, whose relative error says nothing about the kernel.)
  for (const int64_t n : {int64_t{7}, int64_t{1037}, int64_t{65539}}) {
    const std::string tag = " [n=" + std::to_string(n) + "]";
    auto gate = random_normal<float>(t.rng, n, 3.0);
    auto up = random_normal<float>(t.rng, n, 3.0);
    const auto dout = random_normal<float>(t.rng, n);
    // Saturated sigmoid / tanh on both sides, and exactly zero.
    const float extremes[] = {-100.0f, -40.0f, -10.0f, 0.0f, 10.0f, 40.0f, 100.0f};
    for (size_t i = 0; i < std::size(extremes) && i + 1 < static_cast<size_t>(n); ++i) gate[i + 1] = extremes[i];
    const auto gate_placed = t.place(gate), up_placed = t.place(up), dout_placed = t.place(dout);
    const auto gate64 = to_double(gate), up64 = to_double(up), dout64 = to_double(dout);
    const std::vector<float> junk(n, 7.0f);  // every output is overwritten
    std::vector<double> want(n), want2(n);

    const auto out = t.place(junk);
    t.backend.swiglu_forward(out->get(), gate_placed->get(), up_placed->get(), n);
    reference::swiglu_forward(want.data(), gate64.data(), up64.data(), n);
    expect_close("swiglu_forward" + tag, out->host(), want, kTolerance);

    const auto dgate = t.place(junk), dup = t.place(junk);
    t.backend.swiglu_backward(dgate->get(), dup->get(), dout_placed->get(), gate_placed->get(), up_placed->get(), n);
    reference::swiglu_backward(want.data(), want2.data(), dout64.data(), gate64.data(), up64.data(), n);
    expect_close("swiglu_backward dgate" + tag, dgate->host(), want, kTolerance);
    expect_close("swiglu_backward dup" + tag, dup->host(), want2, kTolerance);

    const auto gelu = t.place(junk);
    t.backend.gelu_forward(gelu->get(), gate_placed->get(), n);
    reference::gelu_forward(want.data(), gate64.data(), n);
    expect_close("gelu_forward" + tag, gelu->host(), want, kTolerance);

    const auto dx = t.place(junk);
    t.backend.gelu_backward(dx->get(), dout_placed->get(), gate_placed->get(), n);
    reference::gelu_backward(want.data(), dout64.data(), gate64.data(), n);
    expect_close("gelu_backward" + tag, dx->host(), want, kTolerance);

    // fp32 writes no input (the forwards' inputs are writable for bf16's sake).
    EXPECT_EQ(gate_placed->host(), gate) << "fp32 swiglu_forward / gelu_forward wrote gate" << tag;
    EXPECT_EQ(up_placed->host(), up) << "fp32 swiglu_forward wrote up" << tag;

    // bf16: the fp32 op between the roundings (backend_ops.inc), bit for bit — the inputs rounded in place,
    // and each output round_to_bf16 of what this backend's fp32 op gives on the rounded inputs (checked
    // against float64 above).
    const std::vector<float> gate16 = bf16_rounded(gate), up16 = bf16_rounded(up);
    const auto gate16_placed = t.place(gate16), up16_placed = t.place(up16);
    auto expect_rounded_from = [&](const std::string& what, const std::vector<float>& got,
                                   const std::vector<float>& fp32_result) {
      EXPECT_EQ(got, bf16_rounded(fp32_result)) << what << ": not round_to_bf16 of the fp32 op's result" << tag;
    };
    const auto out32 = t.place(junk), out16 = t.place(junk);
    t.backend.swiglu_forward(out32->get(), gate16_placed->get(), up16_placed->get(), n);
    const auto gate_in = t.place(gate), up_in = t.place(up);
    t.backend.swiglu_forward(out16->get(), gate_in->get(), up_in->get(), n, Precision::bf16);
    EXPECT_EQ(gate_in->host(), gate16) << "bf16 swiglu_forward: gate not rounded in place" << tag;
    EXPECT_EQ(up_in->host(), up16) << "bf16 swiglu_forward: up not rounded in place" << tag;
    expect_rounded_from("bf16 swiglu_forward", out16->host(), out32->host());

    const auto dgate32 = t.place(junk), dup32 = t.place(junk), dgate16 = t.place(junk), dup16 = t.place(junk);
    t.backend.swiglu_backward(dgate32->get(), dup32->get(), dout_placed->get(), gate16_placed->get(),
                              up16_placed->get(), n);
    t.backend.swiglu_backward(dgate16->get(), dup16->get(), dout_placed->get(), gate16_placed->get(),
                              up16_placed->get(), n, Precision::bf16);
    expect_rounded_from("bf16 swiglu_backward dgate", dgate16->host(), dgate32->host());
    expect_rounded_from("bf16 swiglu_backward dup", dup16->host(), dup32->host());

    const auto gelu32 = t.place(junk), gelu16 = t.place(junk), x_in = t.place(gate);
    t.backend.gelu_forward(gelu32->get(), gate16_placed->get(), n);
    t.backend.gelu_forward(gelu16->get(), x_in->get(), n, Precision::bf16);
    EXPECT_EQ(x_in->host(), gate16) << "bf16 gelu_forward: x not rounded in place" << tag;
    expect_rounded_from("bf16 gelu_forward", gelu16->host(), gelu32->host());
  }
}

// attention_forward, attention_backward (full sequence)
// The attention kernels' sums in a row, for their bounds against float64 (each a sum over D or the S keys):
// forward, the score q·k, its exp (a polynomial or expf, a few ulps: as much as one more sum), the
// softmax's normaliser and P·V; backward, the score and P again (from the lse), dP = dO·V, Δ = dO·O,
// dS = P (dP − Δ) and the products dS·K, dSᵀ·Q, Pᵀ·dO.
inline constexpr double kAttentionForwardSums = 4;
inline constexpr double kAttentionBackwardSums = 6;
// Both rows run every case in fp32 and in bf16 (the spec: reference/attention_chunk.h). bf16 against the
// unrounded float64 reference: the bounds from bf16 rounding (tests/tolerances.h, kAttentionBf16*) — but
// the chunk row against the bf16 reference itself (check_attention_chunk says why).
inline constexpr Precision kAttentionPrecisions[] = {Precision::fp32, Precision::bf16};

inline void check_attention(OpCheck& t) {
  struct Shape {
    int B;
    int64_t S;
    int H, Hkv, D;
    bool documents;
    int64_t window;
  };
  // One token (its lse is one score: 16 of them, so the norm-wise error is not that of one number near
  // 0). The cpu tiles are 96 tokens (S = 97, 130, 200: whole and partial tiles); D 12 and 16 are below one
  // vector, 40 and 80 off every multiple of 32; every GQA ratio 1, 2, 4, 8; windows of 1 (a query sees
  // only itself), shorter than a tile, and across tiles.
  const Shape shapes[] = {{2, 1, 8, 2, 16, false, 0},      {1, 130, 8, 8, 32, false, 0},
                          {2, 130, 8, 4, 64, true, 0},     {1, 200, 8, 2, 128, true, 0},
                          {2, 100, 8, 1, 64, false, 0},    {1, 97, 4, 4, 128, false, 0},
                          {1, 150, 16, 2, 32, true, 0},    {1, 50, 4, 2, 16, true, 0},
                          {2, 40, 4, 1, 12, false, 0},     {1, 5, 2, 1, 40, false, 0},
                          {1, 33, 6, 2, 80, false, 0},     {2, 64, 4, 2, 32, false, 1},
                          {1, 230, 4, 2, 64, false, 37},   {2, 200, 8, 4, 48, true, 100},
                          {1, 300, 4, 4, 64, false, 200},  {1, 60, 2, 1, 16, true, 500}};
  for (const Shape& s : shapes)
    for (const Precision precision : kAttentionPrecisions) {
    const bool bf16 = precision == Precision::bf16;
    const std::string tag = " [" +
                            shape_text({{"B", s.B}, {"S", s.S}, {"H", s.H}, {"Hkv", s.Hkv}, {"D", s.D},
                                        {"docs", s.documents}, {"window", s.window}}) +
                            (bf16 ? " bf16" : "") + "]";
    const size_t q_size = static_cast<size_t>(s.B) * s.S * s.H * s.D;
    const size_t kv_size = static_cast<size_t>(s.B) * s.S * s.Hkv * s.D;
    const size_t lse_size = static_cast<size_t>(s.B) * s.H * s.S;
    const auto q = random_normal<float>(t.rng, q_size), k = random_normal<float>(t.rng, kv_size);
    const auto v = random_normal<float>(t.rng, kv_size), dout = random_normal<float>(t.rng, q_size);
    std::vector<int32_t> docs(static_cast<size_t>(s.B) * s.S);
    for (int b = 0; b < s.B; ++b) {  // packed documents of random lengths (mean ~40 tokens), ids increasing
      int32_t doc = static_cast<int32_t>(t.rng.below(5));
      for (int64_t i = 0; i < s.S; ++i) {
        if (i > 0 && t.rng.uniform() < 1.0 / 40) ++doc;
        docs[b * s.S + i] = doc;
      }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
    const auto q_placed = t.place(q), k_placed = t.place(k), v_placed = t.place(v), dout_placed = t.place(dout);
    const auto docs_placed = t.place(docs);
    const int32_t* docs_host = s.documents ? docs.data() : nullptr;
    const int32_t* docs_backend = s.documents ? docs_placed->get() : nullptr;

    const AttentionParams params{.q = q_placed->get(), .k = k_placed->get(), .v = v_placed->get(),
                                 .doc_ids = docs_backend, .B = s.B, .S = s.S, .H = s.H, .Hkv = s.Hkv, .D = s.D,
                                 .scale = scale, .window = s.window, .precision = precision};
    const std::vector<double> q_double = to_double(q), k_double = to_double(k), v_double = to_double(v);
    const BasicAttentionParams<double> params_want{.q = q_double.data(), .k = k_double.data(), .v = v_double.data(),
                                                   .doc_ids = docs_host, .B = s.B, .S = s.S, .H = s.H, .Hkv = s.Hkv,
                                                   .D = s.D, .scale = scale, .window = s.window};

    const auto out = t.place(std::vector<float>(q_size, 7.0f));  // junk: every output is overwritten
    const auto lse = t.place(std::vector<float>(lse_size, 7.0f));
    t.backend.attention_forward(out->get(), lse->get(), params);
    std::vector<double> out_want(q_size), lse_want(lse_size);
    reference::attention_forward(out_want.data(), lse_want.data(), params_want);
    const double summation = static_cast<double>(std::max<int64_t>(s.S, s.D));
    // cuda in bf16: the sequence on cuDNN's fused attention where it takes it (kernels/cuda/sdpa_attention.cu),
    // with the roundings tolerances.h's kAttentionBf16*Cudnn count; else the CUDA-core kernels, as the spec.
    const AttentionChunkParams whole = whole_sequence_block(params);
    const bool cudnn_forward = bf16 && cuda_attention_on_cudnn(t.backend, whole, false);
    const bool cudnn_backward = bf16 && cuda_attention_on_cudnn(t.backend, whole, true);
    const std::string path = cudnn_forward || cudnn_backward ? " (cuDNN)" : "";
    const double forward_bound = bf16 ? (cudnn_forward ? testing::kAttentionBf16ForwardCudnn
                                                       : testing::kAttentionBf16Forward)
                                      : testing::fp32_bound({.summation = summation,
                                                             .depth = kAttentionForwardSums,
                                                             .against = testing::Against::float64});
    const double lse_bound = bf16 ? testing::kAttentionBf16Lse : forward_bound;
    const double backward_bound =
        bf16 ? (cudnn_backward ? testing::kAttentionBf16BackwardCudnn : testing::kAttentionBf16Backward)
             : testing::fp32_bound({.summation = summation,
                                    .depth = kAttentionForwardSums + kAttentionBackwardSums,
                                    .against = testing::Against::float64});
    expect_close("attention_forward out" + tag + path, out->host(), out_want, forward_bound);
    expect_close("attention_forward lse" + tag + path, lse->host(), lse_want, lse_bound);

    // Backward from the backend's own out and lse; the reference from its float64 ones.
    const auto dq = t.place(std::vector<float>(q_size, 7.0f));
    const auto dk = t.place(std::vector<float>(kv_size, 7.0f));
    const auto dv = t.place(std::vector<float>(kv_size, 7.0f));
    t.backend.attention_backward(dq->get(), dk->get(), dv->get(), dout_placed->get(), out->get(), lse->get(), params);
    std::vector<double> dq_want(q_size), dk_want(kv_size), dv_want(kv_size);
    reference::attention_backward(dq_want.data(), dk_want.data(), dv_want.data(), to_double(dout).data(),
                                  out_want.data(), lse_want.data(), params_want);
    if (s.window == 1 || s.S == 1) {
      // Each query sees only itself (a window of 1, or one token): P = 1, Δ = dO·O = dO·v = dP, so dS = P (dP − Δ) and the exact dq and dk are
      // 0. What is left is the rounding of the two dot products over D: a dot product a·b rounds D partial
      // sums of typical size √i·‖a‖‖b‖/D, a standard deviation of u‖a‖‖b‖/√6; the two, u‖dO‖‖v‖/√3 (that of
      // one rounding, fp32_bound's unit), times scale·‖k‖ (dq) or scale·‖q‖ (dk): an absolute bound on
      // ‖got − want‖ over all rows. In bf16, dP − Δ = (r(dO) − dO)·r(v) (out is r(v) exactly): the
      // rounding of dO, one bf16 rounding's worth in place of those two (fp32's, beside it, nothing); on cuDNN
      // its Δ adds one more (within u·|Δ| ≤ u‖dO‖‖v‖ of Δ: tolerances.h), two in all.
      double dq_scale = 0.0, dk_scale = 0.0;
      auto norm = [&](const std::vector<float>& values, size_t row) {
        double sum = 0.0;
        for (int d = 0; d < s.D; ++d) sum += double{values[row * s.D + d]} * values[row * s.D + d];
        return std::sqrt(sum);
      };
      for (int64_t row = 0; row < static_cast<int64_t>(s.B) * s.S; ++row)
        for (int h = 0; h < s.H; ++h) {
          const size_t q_row = static_cast<size_t>(row * s.H + h), kv_row = static_cast<size_t>(row * s.Hkv + h / (s.H / s.Hkv));
          const double cancelled = scale * norm(dout, q_row) * norm(v, kv_row);
          dq_scale += std::pow(cancelled * norm(k, kv_row), 2);
          dk_scale += std::pow(cancelled * norm(q, q_row), 2);
        }
      const double rounding = bf16 ? testing::bf16_attention_bound(cudnn_backward ? 2 : 1)
                                   : testing::fp32_bound({.against = testing::Against::float64});
      for (const auto& [what, got, want, bound] :
           {std::tuple{"dq", dq->host(), &dq_want, rounding * std::sqrt(dq_scale)},
            std::tuple{"dk", dk->host(), &dk_want, rounding * std::sqrt(dk_scale)}}) {
        std::vector<double> difference(got.size());
        for (size_t i = 0; i < got.size(); ++i) difference[i] = got[i] - (*want)[i];
        const double error = relative_error(difference, std::vector<double>(got.size(), 0.0));
        std::printf("[ error    ] attention_backward %s%s: %.3e absolute (tolerance %.2e)\n", what, tag.c_str(), error,
                    bound);
        EXPECT_LE(error, bound) << what << tag;
      }
    } else {
      expect_close("attention_backward dq" + tag + path, dq->host(), dq_want, backward_bound);
      expect_close("attention_backward dk" + tag + path, dk->host(), dk_want, backward_bound);
    }
    expect_close("attention_backward dv" + tag + path, dv->host(), dv_want, backward_bound);
    }
}

// attention_chunk_forward, attention_chunk_delta, attention_chunk_backward: one q chunk against a
// list of kv chunks merged by LSE (the FPDT pattern), then Δ and the backward of every block from the
// final out and lse.
inline void check_attention_chunk(OpCheck& t) {
  // Against reference/attention_chunk (float64 inside, fp32 out: one more rounding in a row). The forward
  // as full attention's (kAttentionForwardSums) plus one merge (rescale and add) per block so far; Δ is
  // one dot product over D per row; the backward starts from equal out, lse and Δ, so its sums are
  // kAttentionBackwardSums. Sums run over D, the keys (dq) or the q chunk's tokens (dk, dv). bf16: the
  // backend in bf16 against the same unrounded reference, within the bf16 rounding bounds (as above).
  auto bound = [](double summation, double depth) {
    return testing::fp32_bound({.summation = summation, .depth = depth + 1, .against = testing::Against::float64});
  };
  struct Range {
    int64_t begin, tokens;  // global positions [begin, begin + tokens)
  };
  struct Case {
    const char* what;
    int B, H, Hkv, D;
    Range q;
    std::vector<Range> kv;  // merged in this order
    bool documents;
    int64_t window;
  };
  const Case cases[] = {
      {"earlier + diagonal, GQA", 2, 4, 2, 64, {45, 45}, {{0, 45}, {45, 45}}, false, 0},
      {"documents: some rows see nothing", 1, 4, 4, 128, {70, 70}, {{0, 70}, {70, 70}}, true, 0},
      {"D off every multiple of 32", 1, 6, 2, 80, {33, 33}, {{0, 33}, {33, 33}}, false, 0},
      {"the largest head dim", 1, 2, 1, 256, {20, 20}, {{0, 20}, {20, 20}}, false, 0},
      {"Cq != Ck, diagonal off-centre", 2, 4, 2, 32, {100, 150}, {{0, 130}, {130, 97}, {227, 30}}, true, 0},
      {"a one-token q chunk", 1, 2, 1, 8, {5, 1}, {{0, 3}, {3, 3}}, false, 0},
      {"window inside the blocks", 2, 4, 2, 48, {120, 60}, {{60, 60}, {120, 60}}, true, 37},
      {"window: first block wholly outside", 1, 4, 1, 64, {400, 130}, {{0, 200}, {200, 200}, {400, 130}}, false, 150},
      {"window of two tokens", 1, 2, 2, 16, {50, 50}, {{0, 50}, {50, 50}}, false, 2},
      {"no key visible: above the diagonal", 1, 2, 1, 32, {0, 16}, {{100, 16}}, false, 0},
  };
  for (const Case& c : cases)
    for (const Precision precision : kAttentionPrecisions) {
    const bool bf16 = precision == Precision::bf16;
    const std::string tag = std::string(" [") + c.what + ": " +
                            shape_text({{"B", c.B}, {"H", c.H}, {"Hkv", c.Hkv}, {"D", c.D}, {"q_begin", c.q.begin},
                                        {"Cq", c.q.tokens}, {"window", c.window}}) +
                            (bf16 ? " bf16" : "") + "]";
    const int64_t Cq = c.q.tokens;
    const size_t q_size = static_cast<size_t>(c.B) * Cq * c.H * c.D, stat_size = static_cast<size_t>(c.B) * c.H * Cq;
    auto doc_of = [](int b, int64_t position) { return static_cast<int32_t>((position * 7 + b * 3) / 97); };
    const auto q = random_normal<float>(t.rng, q_size);
    std::vector<int32_t> q_docs;
    for (int b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < Cq; ++i) q_docs.push_back(doc_of(b, c.q.begin + i));
    const auto q_placed = t.place(q);
    const auto q_docs_placed = t.place(q_docs);
    struct Block {
      std::vector<float> k, v, k_squares;  // k_squares = k² elementwise (the lse's conditioning below)
      std::vector<int32_t> docs;
      std::unique_ptr<Placed<float>> k_placed, v_placed;
      std::unique_ptr<Placed<int32_t>> docs_placed;
      AttentionChunkParams host, backend, squares;  // squares: host's with v = k²
    };
    std::vector<Block> blocks(c.kv.size());
    for (size_t n = 0; n < c.kv.size(); ++n) {
      Block& block = blocks[n];
      const Range kv = c.kv[n];
      const size_t kv_size = static_cast<size_t>(c.B) * kv.tokens * c.Hkv * c.D;
      block.k = random_normal<float>(t.rng, kv_size);
      block.v = random_normal<float>(t.rng, kv_size);
      for (int b = 0; b < c.B; ++b)
        for (int64_t j = 0; j < kv.tokens; ++j) block.docs.push_back(doc_of(b, kv.begin + j));
      block.k_placed = t.place(block.k);
      block.v_placed = t.place(block.v);
      block.docs_placed = t.place(block.docs);
      AttentionChunkParams p;
      p.B = c.B;
      p.Cq = Cq;
      p.Ck = kv.tokens;
      p.H = c.H;
      p.Hkv = c.Hkv;
      p.D = c.D;
      p.q_begin = c.q.begin;
      p.kv_begin = kv.begin;
      p.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
      p.window = c.window;
      p.precision = precision;  // the reference computes the bf16 spec itself (see the bounds below)
      block.host = block.backend = p;
      block.host.q = q.data();
      block.host.k = block.k.data();
      block.host.v = block.v.data();
      block.backend.q = q_placed->get();
      block.backend.k = block.k_placed->get();
      block.backend.v = block.v_placed->get();
      if (c.documents) {
        block.host.q_doc_ids = q_docs.data();
        block.host.kv_doc_ids = block.docs.data();
        block.backend.q_doc_ids = q_docs_placed->get();
        block.backend.kv_doc_ids = block.docs_placed->get();
      }
      for (const float value : block.k) block.k_squares.push_back(value * value);
      block.squares = block.host;
      block.squares.v = block.k_squares.data();
      block.squares.precision = Precision::fp32;
    }

    // Forward: the first block overwrites (junk before), the others merge. A block with no visible key
    // leaves out and lse bit for bit (so the reference and the backend agree exactly there).
    const auto out = t.place(std::vector<float>(q_size, 7.0f));
    const auto lse = t.place(std::vector<float>(stat_size, 7.0f));
    std::vector<float> out_want(q_size, 7.0f), lse_want(stat_size, 7.0f);
    // The fp32 lse's conditioning (testing::cancellation): a row's lse moves by Σ_j P_j·δs_j when its
    // scores move by δs_j, and a score's error scales with its terms t_d = scale·q_d·k_jd as ‖t‖₂ does,
    // not with the score Σ_d t_d, which cancels: Σ_j P_j‖t_j‖₂ ≤ (Σ_j P_j‖t_j‖₂²)^½ = scale·(q² · out')^½,
    // out' the reference's out with v = k² (same P, same masks). Rows of many keys have lse ~log Ck and
    // that scale ~1: conditioning 1. A block that leaves one visible key per head (a window of two tokens:
    // 2 rows, each lse one score over D = 16) has lse = Σ_d t_d itself, near 0 at times (seen: 4.07e-6
    // against 3.58e-6 with conditioning 1).
    std::vector<float> squares_out(q_size), squares_lse(stat_size);
    auto lse_conditioning = [&] {
      std::vector<double> scales, finite_lse;
      for (int b = 0; b < c.B; ++b)
        for (int h = 0; h < c.H; ++h)
          for (int64_t i = 0; i < Cq; ++i) {
            const double row_lse = lse_want[(static_cast<size_t>(b) * c.H + h) * Cq + i];
            if (std::isinf(row_lse)) continue;
            const size_t row = ((static_cast<size_t>(b) * Cq + i) * c.H + h) * c.D;
            double squares = 0.0;
            for (int d = 0; d < c.D; ++d) squares += double{q[row + d]} * q[row + d] * squares_out[row + d];
            scales.push_back(std::sqrt(squares / c.D));  // scale² = 1 / D
            finite_lse.push_back(row_lse);
          }
      return testing::cancellation(scales, finite_lse);
    };
    // cuda in bf16: which blocks cuDNN's fused attention runs (tolerances.h attention_bf16_cudnn_*: its own
    // roundings beside the spec's); the CUDA-core kernels run the rest, as the spec.
    std::vector<bool> cudnn_forward(blocks.size()), cudnn_backward(blocks.size());
    for (size_t n = 0; n < blocks.size(); ++n) {
      cudnn_forward[n] = bf16 && cuda_attention_on_cudnn(t.backend, blocks[n].backend, false);
      cudnn_backward[n] = bf16 && cuda_attention_on_cudnn(t.backend, blocks[n].backend, true);
    }
    bool any_cudnn_forward = false;
    double keys = 0;
    for (size_t n = 0; n < blocks.size(); ++n) {
      const bool accumulate = n > 0;
      any_cudnn_forward = any_cudnn_forward || cudnn_forward[n];
      t.backend.attention_chunk_forward(out->get(), lse->get(), blocks[n].backend, accumulate);
      reference::attention_chunk_forward(out_want.data(), lse_want.data(), blocks[n].host, accumulate);
      reference::attention_chunk_forward(squares_out.data(), squares_lse.data(), blocks[n].squares, accumulate);
      const std::string step = " after block " + std::to_string(n) + tag + (any_cudnn_forward ? " (cuDNN)" : "");
      keys += static_cast<double>(c.kv[n].tokens);
      const double q_rows = static_cast<double>(c.B) * Cq * c.H;
      const double forward_bound =
          bf16 ? (any_cudnn_forward ? testing::attention_bf16_cudnn_forward(q_rows)
                                    : testing::attention_bf16_same_operands_forward(q_rows))
               : bound(std::max<double>(keys, c.D), kAttentionForwardSums + static_cast<double>(n + 1));
      // bf16's bound already holds few rows (its one large flip, 2u·3/√rows, dwarfs fp32's cancellation).
      const double lse_bound = bf16 ? forward_bound : forward_bound * lse_conditioning();
      expect_close("attention_chunk_forward out" + step, out->host(), to_double(out_want), forward_bound);
      expect_close_lse("attention_chunk_forward lse" + step, lse->host(), to_double(lse_want), lse_bound);
    }
    // In bf16 this row holds each block against the spec itself (the reference in bf16: the same operands
    // rounded), not the unrounded float64 reference (check_attention does that over whole sequences): a
    // block of a window of two tokens holds one or two visible rows — one score as a row's lse, one
    // dS = P(dP − Δ), a difference of two nearly equal dot products, as a row of dk — whose bf16 error
    // against the unrounded values no averaging over rows bounds (seen: lse 0.0205 against 0.0191, dk 0.112
    // against 0.0898). The same operands' bound does (tolerances.h attention_bf16_same_operands_*), by rows.
    const double fp32_backward_bound =
        bound(std::max({keys, static_cast<double>(c.D), static_cast<double>(Cq)}), kAttentionBackwardSums);
    auto backward_bound = [&](double rows, bool cudnn) {
      if (!bf16) return fp32_backward_bound;
      return cudnn ? testing::attention_bf16_cudnn_backward(rows) : testing::attention_bf16_same_operands_backward(rows);
    };
    bool any_cudnn_backward = false;
    if (blocks.size() == 1 && !block_has_visible_pair(c.q.begin, Cq, c.kv[0].begin, c.kv[0].tokens, c.window)) {
      // Nothing visible: the empty softmax when overwriting, and untouched bits when merging.
      for (const float value : out->host()) EXPECT_EQ(value, 0.0f) << tag;
      for (const float value : lse->host()) EXPECT_TRUE(std::isinf(value) && value < 0) << tag;
      const auto before = random_normal<float>(t.rng, q_size), lse_before = random_normal<float>(t.rng, stat_size);
      const auto merged = t.place(before), merged_lse = t.place(lse_before);
      t.backend.attention_chunk_forward(merged->get(), merged_lse->get(), blocks[0].backend, /*accumulate=*/true);
      EXPECT_EQ(merged->host(), before) << "a block with no visible key changed out" << tag;
      EXPECT_EQ(merged_lse->host(), lse_before) << "a block with no visible key changed lse" << tag;
    }

    // Δ and the backward on equal inputs: both sides continue from the reference's final out and lse.
    const auto dout = random_normal<float>(t.rng, q_size);
    const auto dout_placed = t.place(dout), final_out = t.place(out_want), final_lse = t.place(lse_want);
    const auto delta = t.place(std::vector<float>(stat_size, 7.0f));
    t.backend.attention_chunk_delta(delta->get(), dout_placed->get(), final_out->get(), c.B, Cq, c.H, c.D);
    std::vector<float> delta_want(stat_size);
    reference::attention_chunk_delta(delta_want.data(), dout.data(), out_want.data(), c.B, Cq, c.H, c.D);
    expect_close("attention_chunk_delta" + tag, delta->host(), to_double(delta_want), bound(c.D, 1));
    const auto final_delta = t.place(delta_want);

    const auto dq_initial = random_normal<float>(t.rng, q_size);  // dq, dk, dv accumulate (+=)
    const auto dq = t.place(dq_initial);
    auto dq_want = dq_initial;
    bool any_visible = false;
    for (size_t n = 0; n < blocks.size(); ++n) {
      const auto dk_initial = random_normal<float>(t.rng, blocks[n].k.size());
      const auto dv_initial = random_normal<float>(t.rng, blocks[n].v.size());
      const auto dk = t.place(dk_initial), dv = t.place(dv_initial);
      t.backend.attention_chunk_backward(dq->get(), dk->get(), dv->get(), dout_placed->get(), final_lse->get(),
                                         final_delta->get(), blocks[n].backend);
      auto dk_want = dk_initial, dv_want = dv_initial;
      reference::attention_chunk_backward(dq_want.data(), dk_want.data(), dv_want.data(), dout.data(),
                                          lse_want.data(), delta_want.data(), blocks[n].host);
      const double kv_rows = static_cast<double>(c.B) * c.kv[n].tokens * c.Hkv;
      const std::string step = " block " + std::to_string(n) + tag + (cudnn_backward[n] ? " (cuDNN)" : "");
      any_cudnn_backward = any_cudnn_backward || cudnn_backward[n];
      const bool visible = block_has_visible_pair(c.q.begin, Cq, c.kv[n].begin, c.kv[n].tokens, c.window);
      any_visible |= visible;
      if (visible) {
        expect_close_increment("attention_chunk_backward dk" + step, dk->host(), dk_initial, to_double(dk_want),
                               backward_bound(kv_rows, cudnn_backward[n]));
        expect_close_increment("attention_chunk_backward dv" + step, dv->host(), dv_initial, to_double(dv_want),
                               backward_bound(kv_rows, cudnn_backward[n]));
      } else {  // a block with nothing visible adds nothing
        EXPECT_EQ(dk->host(), dk_initial) << step;
        EXPECT_EQ(dv->host(), dv_initial) << step;
      }
    }
    if (any_visible) {
      expect_close_increment("attention_chunk_backward dq (all blocks)" + tag, dq->host(), dq_initial,
                             to_double(dq_want), backward_bound(static_cast<double>(c.B) * Cq * c.H, any_cudnn_backward));
    } else {
      EXPECT_EQ(dq->host(), dq_initial) << tag;
    }
    }
}

// cross_entropy_forward, cross_entropy_backward
inline void check_cross_entropy(OpCheck& t) {
  // lse: the sum of exps in fp32 per tile (~√tile · 6e-8) and across tiles in float64 (cpu), rounded
  // to fp32 once: ≲ 1e-7; losses carry the same. The backward (each side from its own lse) adds the
  // fp32 rounding of lse, up to 2^-18 ≈ 4e-6 relative on every probability at |lse| ≈ 90.
  constexpr double kForwardTolerance = 1e-6;
  constexpr double kBackwardTolerance = 1e-5;
  struct Shape {
    int64_t N;
    int V;
    double scale;  // logits normal(0, scale), or uniform(−scale, scale)
    bool uniform, mask;
  };
  const Shape shapes[] = {{1, 1, 1.0, false, false},      {37, 1000, 2.0, false, true},  // V below one cpu tile
                          {9, 4099, 2.0, false, false},    // 4 tiles and a tail of 3
                          {37, 1000, 80.0, true, true},    // logits in ±80
                          {5, 3001, 80.0, true, true},     // ±80 across tiles
                          {13, 5003, 4.0, false, true}};
  for (const Shape& s : shapes) {
    const std::string tag = " [" + shape_text({{"N", s.N}, {"V", s.V}}) + " logits " +
                            (s.uniform ? "±" : "σ=") + std::to_string(static_cast<int>(s.scale)) +
                            (s.mask ? " mask" : "") + "]";
    const auto logits = s.uniform ? random_uniform<float>(t.rng, s.N * s.V, -s.scale, s.scale)
                                  : random_normal<float>(t.rng, s.N * s.V, s.scale);
    std::vector<int32_t> targets(s.N);
    for (auto& target : targets) target = static_cast<int32_t>(t.rng.below(s.V));
    if (s.N > 1) targets[s.N / 2] = kIgnoreIndex;
    auto mask = random_uniform<float>(t.rng, s.N, 0.0, 1.0);
    mask[0] = 0.0f;
    const double dloss_scale = 1.0 / static_cast<double>(s.N);
    const auto logits_placed = t.place(logits), mask_placed = t.place(mask);
    const auto targets_placed = t.place(targets);
    const auto logits64 = to_double(logits), mask64 = to_double(mask);
    const float* mask_backend = s.mask ? mask_placed->get() : nullptr;
    const double* mask_want = s.mask ? mask64.data() : nullptr;

    const auto losses = t.place(std::vector<float>(s.N, 7.0f)), lse = t.place(std::vector<float>(s.N, 7.0f));
    t.backend.cross_entropy_forward(losses->get(), lse->get(), logits_placed->get(), targets_placed->get(),
                                    mask_backend, s.N, s.V);
    std::vector<double> losses_want(s.N), lse_want(s.N);
    reference::cross_entropy_forward(losses_want.data(), lse_want.data(), logits64.data(), targets.data(), mask_want,
                                     s.N, s.V);
    expect_close("cross_entropy_forward losses" + tag, losses->host(), losses_want, kForwardTolerance);
    expect_close("cross_entropy_forward lse" + tag, lse->host(), lse_want, kForwardTolerance);

    std::vector<double> dlogits_want(s.N * s.V);
    reference::cross_entropy_backward(dlogits_want.data(), logits64.data(), lse_want.data(), targets.data(),
                                      mask_want, dloss_scale, s.N, s.V);
    const auto dlogits = t.place(std::vector<float>(s.N * s.V, 7.0f));
    t.backend.cross_entropy_backward(dlogits->get(), logits_placed->get(), lse->get(), targets_placed->get(),
                                     mask_backend, dloss_scale, s.N, s.V);
    expect_close("cross_entropy_backward dlogits" + tag, dlogits->host(), dlogits_want, kBackwardTolerance);
    // In place (dlogits aliasing logits), as the model runs it: each element is read before it is
    // written, with the same arithmetic, so the bits equal those of separate buffers.
    t.backend.cross_entropy_backward(logits_placed->get(), logits_placed->get(), lse->get(), targets_placed->get(),
                                     mask_backend, dloss_scale, s.N, s.V);
    EXPECT_EQ(logits_placed->host(), dlogits->host()) << "in place differs from separate buffers" << tag;
  }
}

// cross_entropy_sums (sums in the backend's memory), argmax_rows (indices in host memory)
inline void check_head_results(OpCheck& t) {
  for (const int64_t N : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{5003}}) {
    for (const bool with_mask : {false, true}) {
      const std::string tag = " [N=" + std::to_string(N) + (with_mask ? " mask" : "") + "]";
      const auto losses = random_uniform<float>(t.rng, N, 0.0, 12.0), mask = random_uniform<float>(t.rng, N, 0.0, 1.0);
      std::vector<int32_t> targets(static_cast<size_t>(N));
      for (auto& target : targets) target = t.rng.below(3) == 0 ? kIgnoreIndex : static_cast<int32_t>(t.rng.below(50));
      const auto losses_placed = t.place(losses), mask_placed = t.place(mask);
      const auto targets_placed = t.place(targets);
      const double initial[2] = {t.rng.uniform(-5.0, 5.0), t.rng.uniform(0.0, 5.0)};
      const auto sums_placed = t.place(std::vector<double>{initial[0], initial[1]});  // added to where they are
      t.backend.cross_entropy_sums(sums_placed->get(), losses_placed->get(), targets_placed->get(),
                                   with_mask ? mask_placed->get() : nullptr, N);
      const std::vector<double> got = sums_placed->host();
      const auto losses64 = to_double(losses), mask64 = to_double(mask);
      double want[2] = {initial[0], initial[1]};
      reference::cross_entropy_sums(want, losses64.data(), targets.data(), with_mask ? mask64.data() : nullptr, N);
      // Float64 sums of ≤ 5003 fp32 values, only their order differs between backends (≤ N · 1.1e-16
      // of the sum of magnitudes, ~5.6e-13): 1e-12 of the magnitudes plus the initial values.
      double magnitude[2] = {std::abs(initial[0]), std::abs(initial[1])};
      for (int64_t n = 0; n < N; ++n) {
        magnitude[0] += losses[n];
        magnitude[1] += targets[n] != kIgnoreIndex ? (with_mask ? mask[n] : 1.0f) : 0.0f;
      }
      for (int k = 0; k < 2; ++k) {
        std::printf("[ error    ] cross_entropy_sums[%d]%s: %.3e of %.3e (tolerance 1e-12 relative)\n", k,
                    tag.c_str(), std::abs(got[k] - want[k]), magnitude[k]);
        EXPECT_LE(std::abs(got[k] - want[k]), 1e-12 * magnitude[k]) << k << tag;
      }
      if (!with_mask) {
        EXPECT_EQ(got[1], want[1]) << "a count of whole rows is exact" << tag;
      }
    }
  }
  // argmax: exact. Rows of fresh normals (no ties), a constant row (index 0) and a row whose maximum
  // appears twice (the first), across the widths of one thread, a block and several per thread.
  for (const int V : {1, 7, 256, 1000, 4099}) {
    const int64_t N = 9;
    const std::string tag = " [N=9 V=" + std::to_string(V) + "]";
    auto x = random_normal<float>(t.rng, N * V, 3.0);
    std::fill(x.begin() + V, x.begin() + 2 * V, 0.25f);
    if (V > 1) {
      const int64_t first = t.rng.below(static_cast<uint64_t>(V - 1));
      x[2 * V + first] = x[2 * V + V - 1] = 100.0f;
    }
    const auto x_placed = t.place(x);
    std::vector<int32_t> got(static_cast<size_t>(N), -7), want(static_cast<size_t>(N));
    t.backend.argmax_rows(got.data(), x_placed->get(), N, V);
    reference::argmax_rows(want.data(), x.data(), N, V);
    EXPECT_EQ(got, want) << "argmax_rows" << tag;
  }
}

// adamw_update
inline void check_adamw(OpCheck& t) {
  // One step from random state. fp32 kernels round m, v and the update a few times (6e-8 each);
  // the update is ~lr = 3e-3 of a parameter: every array within ~1e-7 of the float64 reference.
  constexpr double kTolerance = 1e-6;
  AdamWParams params;
  params.lr = 3e-3;
  params.weight_decay = 0.1;
  params.step = 7;
  // 7: the scalar tail alone; 37: a vector block and a tail; 100003: the parallel path. (Not n = 1: the
  // relative error of one m = β₁m + (1 − β₁)g that cancels to near zero says nothing about the kernel.)
  for (const int64_t n : {int64_t{7}, int64_t{37}, int64_t{100003}}) {
    const std::string tag = " [n=" + std::to_string(n) + "]";
    const auto param0 = random_normal<float>(t.rng, n), m0 = random_normal<float>(t.rng, n, 0.1);
    const auto v0 = random_uniform<float>(t.rng, n, 0.0, 0.01), grad = random_normal<float>(t.rng, n);
    const auto param = t.place(param0), m = t.place(m0), v = t.place(v0), grad_placed = t.place(grad);
    t.backend.adamw_update(param->get(), m->get(), v->get(), grad_placed->get(), n, params);
    auto param_want = to_double(param0), m_want = to_double(m0), v_want = to_double(v0);
    reference::adamw_update(param_want.data(), m_want.data(), v_want.data(), to_double(grad).data(), n, params);
    expect_close("adamw_update param" + tag, param->host(), param_want, kTolerance);
    expect_close("adamw_update m" + tag, m->host(), m_want, kTolerance);
    expect_close("adamw_update v" + tag, v->host(), v_want, kTolerance);
  }
}

// The bf16 value nearest x by the rule itself, in float64 (x not NaN): one of the two bf16 values around x
// (x with its low 16 bits cleared, and the next one away from zero), the nearer, the one with an even last
// bit on a tie; ±inf stay, a float past bf16's largest rounds to inf.
// A float's value in float64 from its bits — exact, and unlike double{x} not read as zero for a subnormal x
// when the thread flushes subnormals (DAZ: the cpu backend sets it on its team, the caller's thread included).
inline double exact_double(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int exponent = static_cast<int>((bits >> 23) & 0xffu);
  const uint32_t mantissa = bits & 0x7fffffu;
  const double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -149)
                                         : std::ldexp(static_cast<double>(mantissa | 0x800000u), exponent - 150);
  return bits >> 31 ? -magnitude : magnitude;
}

inline float nearest_bf16_by_rule(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t low_bits = bits & 0xffff0000u;
  float low, high;
  std::memcpy(&low, &low_bits, 4);
  const uint32_t high_bits = low_bits + 0x10000u;  // next bf16 away from zero (may be inf)
  std::memcpy(&high, &high_bits, 4);
  // Past the largest bf16 the next value is inf, weighed as the 2^128 it stands for (IEEE's overflow rule).
  const double high_value = std::isinf(high) && !std::isinf(x) ? std::copysign(0x1p128, double{x}) : exact_double(high);
  const double to_low = std::fabs(exact_double(x) - exact_double(low)), to_high = std::fabs(exact_double(x) - high_value);
  const bool low_even = ((low_bits >> 16) & 1u) == 0;
  return std::isinf(x) || to_low < to_high || (to_low == to_high && low_even) ? low : high;
}

// sum_squares, scale_inplace, add_inplace, count_invalid, round_to_bf16, pack_bf16, unpack_bf16
inline void check_elementwise(OpCheck& t) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{37}, int64_t{100003}}) {
    const std::string tag = " [n=" + std::to_string(n) + "]";
    const auto x = random_normal<float>(t.rng, n, 3.0);
    const auto x_placed = t.place(x);
    // The whole array as one block, then in blocks of a fresh size (the last one shorter).
    const int64_t block_sizes[] = {std::max<int64_t>(n, 1), 1 + static_cast<int64_t>(t.rng.uniform(0.0, 2000.0))};
    for (const int64_t block : block_sizes) {
      const int64_t blocks = (n + block - 1) / block;
      std::vector<double> got(static_cast<size_t>(blocks));
      t.backend.sum_squares(got.data(), x_placed->get(), n, block);
      // The gradient norm is promised bitwise reproducible (pipeline/model_states.h): a second call sums
      // in the same order (cuda: no atomics).
      std::vector<double> again(got.size());
      t.backend.sum_squares(again.data(), x_placed->get(), n, block);
      EXPECT_EQ(again, got) << "sum_squares is not reproducible" << tag << " block " << block;
      const auto x_double = to_double(x);
      double worst = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        const double want = reference::sum_squares(x_double.data() + b * block, std::min(block, n - b * block));
        worst = std::max(worst, want == 0.0 ? std::abs(got[b]) : std::abs(got[b] - want) / want);
      }
      // Squares of floats are exact in float64; only the order of ≤ 1e5 float64 additions differs
      // (worst case n · 1.1e-16 ≈ 1e-11, typically ~1e-16): 1e-12 relative.
      std::printf("[ error    ] sum_squares%s [block=%lld]: %.3e (tolerance 1e-12)\n", tag.c_str(),
                  static_cast<long long>(block), worst);
      EXPECT_LE(worst, 1e-12) << tag << " block " << block;
    }

    const float alpha = static_cast<float>(t.rng.uniform(-2.0, 2.0));
    t.backend.scale_inplace(x_placed->get(), alpha, n);
    const auto scaled = x_placed->host();
    auto want_scaled = to_double(x);
    reference::scale_inplace(want_scaled.data(), double{alpha}, n);
    // The product of two floats is exact in float64; the kernel rounds it once: ≤ 2^-24 relative.
    expect_close("scale_inplace" + tag, scaled, want_scaled, 0x1p-24);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], x[i] * alpha) << "one fp32 multiply, i=" << i << tag;

    // add_inplace: one fp32 add per element, exact.
    const auto y0 = random_normal<float>(t.rng, n, 3.0);
    const auto sum_placed = t.place(y0);
    t.backend.add_inplace(sum_placed->get(), x_placed->get(), n);
    const auto added = sum_placed->host();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(added[i], y0[i] + scaled[i]) << "add_inplace, i=" << i << tag;

    // count_invalid: exact. NaN, ±inf and a few negative zeros and largest floats planted at fresh places.
    auto y = random_normal<float>(t.rng, n, 3.0);
    const float planted[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::max(),
                             -std::numeric_limits<float>::max()};
    for (int k = 0; k < 12 && n > 0; ++k) y[t.rng.below(static_cast<uint64_t>(n))] = planted[k % 6];
    const auto y_placed = t.place(y);
    for (const bool negative_invalid : {false, true}) {
      int64_t got = -1;
      t.backend.count_invalid(&got, y_placed->get(), n, negative_invalid);
      EXPECT_EQ(got, reference::count_invalid(y.data(), n, negative_invalid))
          << "count_invalid" << tag << (negative_invalid ? " negatives too" : "");
    }

    // round_to_bf16 against the rule itself, in float64: the result is one of the two bf16 values
    // around x (x with its low 16 bits cleared, and the next one away from zero), the nearer, the
    // one with an even last bit on a tie; ±inf and NaN stay, a float past bf16's largest rounds to inf.
    // Fresh ties and near-ties planted beside the specials.
    auto r = random_normal<float>(t.rng, n, 3.0);
    for (int k = 0; k < 24 && n > 0; ++k) {
      const size_t i = t.rng.below(static_cast<uint64_t>(n));
      uint32_t bits;
      std::memcpy(&bits, &r[i], 4);
      bits = (bits & 0xffff0000u) | (k % 3 == 0 ? 0x8000u : k % 3 == 1 ? 0x7fffu : 0x8001u);
      std::memcpy(&r[i], &bits, 4);
      if (k < 6) r[i] = planted[k];
    }
    const auto r_placed = t.place(r);
    t.backend.round_to_bf16(r_placed->get(), n);
    const auto rounded = r_placed->host();
    for (int64_t i = 0; i < n; ++i) {
      const float x = r[static_cast<size_t>(i)], got = rounded[static_cast<size_t>(i)];
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(got)) << "round_to_bf16 keeps NaN, i=" << i << tag;
        continue;
      }
      const float want = nearest_bf16_by_rule(x);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
          << "round_to_bf16(" << x << ") = " << got << ", want " << want << ", i=" << i << tag;
    }

    // pack_bf16: each word is the upper half of the float the rule picks (exact: a bf16 value is a float
    // whose low 16 bits are 0), NaN stays NaN; the same draws, specials and ties.
    const auto packed = t.place(std::vector<uint16_t>(static_cast<size_t>(n), 0));
    const auto r_source = t.place(r);
    t.backend.pack_bf16(packed->get(), r_source->get(), n);
    const auto words = packed->host();
    for (int64_t i = 0; i < n; ++i) {
      const float x = r[static_cast<size_t>(i)];
      const uint32_t word = static_cast<uint32_t>(words[static_cast<size_t>(i)]) << 16;
      float got;
      std::memcpy(&got, &word, 4);
      if (std::isnan(x)) {
        ASSERT_TRUE(std::isnan(got)) << "pack_bf16 keeps NaN, i=" << i << tag;
        continue;
      }
      const float want = nearest_bf16_by_rule(x);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
          << "pack_bf16(" << x << ") = " << got << ", want " << want << ", i=" << i << tag;
    }
  }

  // unpack_bf16 of every one of the 65536 words (NaNs, infs, zeros, subnormals included), shuffled:
  // the float whose upper half is the word and whose lower half is 0, bit for bit.
  std::vector<uint16_t> all(65536);
  for (size_t w = 0; w < all.size(); ++w) all[w] = static_cast<uint16_t>(w);
  for (size_t w = all.size() - 1; w > 0; --w) std::swap(all[w], all[t.rng.below(w + 1)]);
  const auto all_placed = t.place(all);
  const auto widened = t.place(std::vector<float>(all.size(), 0.0f));
  t.backend.unpack_bf16(widened->get(), all_placed->get(), static_cast<int64_t>(all.size()));
  const auto floats = widened->host();
  for (size_t w = 0; w < all.size(); ++w) {
    uint32_t bits;
    std::memcpy(&bits, &floats[w], 4);
    ASSERT_EQ(bits, static_cast<uint32_t>(all[w]) << 16) << "unpack_bf16 of word " << all[w];
  }
}

// One row per op family: the Backend ops it runs (backend_ops_test.cpp checks that together they are
// every op of backend_ops.inc) and its check.
struct Row {
  const char* name;
  std::vector<std::string> ops;
  void (*check)(OpCheck&);
};

inline const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      {"embedding", {"embedding_forward", "embedding_backward"}, check_embedding},
      {"norm", {"rmsnorm_forward", "rmsnorm_backward", "layernorm_forward", "layernorm_backward"}, check_norm},
      {"linear", {"linear_forward", "linear_backward"}, check_linear},
      {"rope", {"rope_forward", "rope_backward"}, check_rope},
      {"activation", {"swiglu_forward", "swiglu_backward", "gelu_forward", "gelu_backward"}, check_activation},
      {"attention", {"attention_forward", "attention_backward"}, check_attention},
      {"attention_chunk",
       {"attention_chunk_forward", "attention_chunk_delta", "attention_chunk_backward"},
       check_attention_chunk},
      {"cross_entropy", {"cross_entropy_forward", "cross_entropy_backward"}, check_cross_entropy},
      {"head_results", {"cross_entropy_sums", "argmax_rows"}, check_head_results},
      {"adamw", {"adamw_update"}, check_adamw},
      {"elementwise",
       {"sum_squares", "scale_inplace", "add_inplace", "count_invalid", "round_to_bf16", "pack_bf16", "unpack_bf16"},
       check_elementwise},
  };
  return table;
}

// Test parameter: (backend name, row index). Instantiated by backend_ops_test.cpp (reference, cpu)
// and backend_ops_cuda_test.cpp (cuda).
class BackendOps : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

inline std::string row_test_name(const ::testing::TestParamInfo<BackendOps::ParamType>& info) {
  std::string backend = std::get<0>(info.param);
  std::replace(backend.begin(), backend.end(), '-', '_');  // test names are identifiers: cpu_guarded
  return backend + "_" + rows()[std::get<1>(info.param)].name;
}

TEST_P(BackendOps, MatchesReference) {
  const auto& [backend_name, row] = GetParam();
  if (backend_name == "cuda") {
    ASSERT_TRUE(cuda_available())
        << "no usable CUDA device (or a build without CUDA): the `cuda` tests run only on GPU machines; build "
           "with -DFPDT_CUDA=ON and run `ctest -L cuda` where nvidia-smi shows a GPU";
  }
  const auto backend = make_backend(pipeline::parse_backend(backend_name));
  ASSERT_EQ(backend->name(), backend_name);
  Rng rng(fresh_seed());
  OpCheck check{*backend, memory_of(backend_name), rng};
  rows()[row].check(check);
}

}  // namespace fpdt::kernels::conformance
