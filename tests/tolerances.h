// The fp32 error bounds of the numerics tests (invariances, parity, goldens, backend conformance), each
// stated from what the comparison reorders — the terms of the longest sum, the rounded stages in a row,
// the precision of the other side — by one formula, fp32_bound, derived below. Bitwise checks stay bitwise.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fpdt/model/config.h"

namespace fpdt::testing {

// u: one fp32 rounding to nearest moves a value by at most 2^-24 ≈ 6.0e-8 of itself.
inline constexpr double kFp32Rounding = 0x1p-24;

// The other side of a comparison: fp32 summed in another order (both sides round), or a reference
// computed in float64 (only our side rounds; its own rounding, ~1e-16, is nothing here).
enum class Against { fp32, float64 };

// What an fp32 result is made of.
struct Reordering {
  double summation = 1;     // terms in the longest sum behind one output: a GEMM's inner dimension, the
                            // keys of a softmax, the vocabulary of a log-sum-exp, the tokens of a weight
                            // gradient
  double depth = 1;         // such sums in a row between the inputs and the output (1: one kernel)
  Against against = Against::fp32;
  double averaged_over = 1; // the result is the mean of this many outputs whose errors are independent
                            // (a loss: the mean over its tokens)
  double conditioning = 1;  // how much the stages amplify a relative error (≥ 1; 1 for sums of products
                            // and smooth maps; more where a stage subtracts nearly equal values — each
                            // call site that sets it says why)
};

// The bound on relative_error (norm-wise, relative) between the two sides. Derivation: an output made of
// `depth` sums in a row of `summation` terms each carries, to first order, N = summation·depth rounding
// errors δ, each of at most u relative to the partial sum it rounds (Higham, Accuracy and Stability of
// Numerical Algorithms, §3.1). Another order changes which partial sums are rounded: the same number of
// errors of the same size, not the same errors. Added worst case, N·u (γ_N) is ~1e-3 for a model's
// gradients: no test could tell a wrong kernel from rounding. On random data the δ are independent with
// mean zero (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019), a δ uniform in [−u, u] has variance u²/3,
// so one side's error has a standard deviation of u·√(N/3) relative to the output, and the difference of
// two fp32 sides u·√(2N/3) (their errors are independent). A mean over M outputs with independent errors
// divides that by √M. The bound is kStandardDeviations (6) of them: a Gaussian tail of 2·10⁻⁹, and the
// norm-wise measure, an average over many outputs, stays near one standard deviation (times the
// conditioning of the stages, which the first-order model leaves out: tests measure 1–3 there).
inline constexpr double kStandardDeviations = 6.0;

// The conditioning of outputs that are sums whose terms may cancel, for Reordering::conditioning: the
// rounding error of a sum scales with its terms' root-sum-square ‖t‖₂ (the partial sums of random-sign
// terms grow as ‖t‖₂ does), fp32_bound relative to the output — which is ‖t‖₂ on average over many
// outputs (E[(Σ t)²] = Σ t² for independent zero-mean terms) but can be far smaller in one that cancels.
// scales: each output's ‖t‖₂ (or a bound on it); outputs: the outputs. max(1, ‖scales‖ / ‖outputs‖): 1
// over many outputs, large over a few that happen to cancel.
inline double cancellation(const std::vector<double>& scales, const std::vector<double>& outputs) {
  double scale_squares = 0.0, output_squares = 0.0;
  for (const double scale : scales) scale_squares += scale * scale;
  for (const double output : outputs) output_squares += output * output;
  return std::max(1.0, std::sqrt(scale_squares / std::max(output_squares, 1e-300)));
}

inline double fp32_bound(const Reordering& r) {
  const double sides = r.against == Against::fp32 ? 2.0 : 1.0;
  return kStandardDeviations * kFp32Rounding * std::sqrt(sides * r.summation * r.depth / (3.0 * r.averaged_over)) *
         r.conditioning;
}

// --- fp32 sums that truncate: tensor cores (the cuda backend's bf16 GEMMs on cuBLASLt, cuDNN's attention)
// add their products in fp32 but round each sum toward zero (Fasi, Higham, Mikaitis and Pranesh, "Numerical
// behavior of NVIDIA tensor cores", PeerJ CS 2021), not to nearest: an addition's error is θ·s with θ in
// (−2u, 0] of the partial sum s — one-sided, where fp32_bound's δ has mean zero.
// Derivation. A sum of K terms t_j, added in order, errs by −Σ_k θ_k S_k (S_k: the partial sums). Split θ_k
// into its mean θ̄ (|θ̄| ≤ 2u, u = kFp32Rounding) and a zero-mean part of at most 2u. The zero-mean part is
// fp32_bound's model with a rounding twice as wide: 2·fp32_bound. The mean part is a bias, θ̄·Σ_k S_k, and
// Σ_k S_k = Σ_j (K − j + 1)·t_j: for independent zero-mean terms its root mean square is √(Σ_j (K − j + 1)²)
// = √(K(K + 1)(2K + 1)/6) ≈ K^(3/2)/√3 times a term's, against √K times for the sum itself: relative to the
// output, the bias is |θ̄|·K/√3 ≤ 2u·K/√3 (adding the terms one by one is the worst order: blocked sums, as
// tensor cores make them, have smaller partial sums and fewer of them). Norm-wise over outputs the two sums are strongly
// correlated (ρ = √3/2), so their ratio holds near K/√3 even over few outputs; outputs that cancel are the
// conditioning's (product_cancellation), as for fp32_bound. Averaging does not shrink a bias: no √K, no
// kStandardDeviations, the worst mean instead. At K = 1100 it is 7.6e-5 (fp32_bound: 6.9e-6): a tensor-core
// sum is held to this, not to fp32_bound (truncating_sum_test.cpp emulates such sums against both).
inline double truncating_sum_bound(double summation) {
  return 2 * kFp32Rounding * summation / std::sqrt(3.0) +
         2 * fp32_bound({.summation = summation, .against = Against::float64});
}

// How a kernel's fp32 sums are rounded: to nearest (the CPUs' FMAs and AMX's fp32 accumulators, CUDA cores)
// or toward zero (tensor cores).
enum class Accumulation { nearest, truncating };
inline double fp32_sum_bound(double summation, Accumulation accumulation) {
  return accumulation == Accumulation::truncating
             ? truncating_sum_bound(summation)
             : fp32_bound({.summation = summation, .against = Against::float64});
}

// --- bf16 products (kernels/ops.h's Precision::bf16: each product's inputs rounded to bf16, fp32 sums).
// u_bf16: bf16 keeps 8 significant bits, so rounding to nearest moves a value by at most 2^-8 of itself.
inline constexpr double kBf16Rounding = 0x1p-8;

// The bound on relative_error between a bf16 product and the float64 product of the unrounded inputs.
// Derivation: a term whose `rounded_inputs` factors are each rounded (linear: x·w, dout·w, dout·x: 2)
// becomes x(1 + α)·w(1 + β) = xw(1 + α + β + αβ), |α|, |β| ≤ u_bf16. Added worst case this is 2·u_bf16 of
// Σ|xw| (~8e-3, and unbounded relative to a sum that cancels). On random data the α, β are independent
// with mean zero and variance u_bf16²/3 (as fp32_bound's δ), so an output Σᵢ xᵢwᵢ(αᵢ + βᵢ) has variance
// (2u_bf16²/3)·Σᵢ(xᵢwᵢ)², and for independent zero-mean terms E[(Σᵢ xᵢwᵢ)²] = Σᵢ E[(xᵢwᵢ)²]: relative to
// the output, a standard deviation of u_bf16·√(rounded_inputs/3), whatever the length of the sum (these
// errors are relative to the terms, not to partial sums as fp32's are). The fp32 summation over
// `summation` terms adds fp32_bound's own error against float64, independent of it; the two bounds are
// added (above their root-sum-square). kStandardDeviations as there.
// On tensor cores the sums truncate: fp32_sum_bound's truncating bound in place of fp32_bound.
// The bound needs kBf16MinOutputs outputs or more in the norm: relative_error is then a ratio of two sums of
// many squares (errors over outputs), near its mean; over a few outputs it is a ratio of two small
// chi-squared sums, heavy-tailed (3 outputs: F(3, 3), beyond 6 standard deviations in ~1 % of draws), and
// from 32 its logarithm's spread (~2/√32) puts 6 standard deviations ~10 of its own away. A product with
// fewer outputs is checked against its rounded inputs only (the fp32 bound; the stronger check anyway).
inline constexpr int64_t kBf16MinOutputs = 32;
inline double bf16_product_bound(double summation, double rounded_inputs = 2,
                                 Accumulation accumulation = Accumulation::nearest) {
  return kStandardDeviations * kBf16Rounding * std::sqrt(rounded_inputs / 3.0) +
         fp32_sum_bound(summation, accumulation);
}

// The sums in a row of one transformer layer's forward: the norm's statistics, the q/k/v projection, the
// scores QKᵀ, the softmax's normaliser, P·V, the output projection, the second norm, the MLP's up (and
// gate, beside it: not in a row) and down projections. Elementwise steps (RoPE, the activation, the
// residual adds) round once per value, not once per term: nothing beside these sums. The head adds the
// final norm, the LM head and the loss's log-sum-exp.
inline constexpr double kSumsPerLayer = 9;
inline constexpr double kSumsInHead = 3;

// What `config`'s forward (its logits, per-token losses) or its weight gradients reorder, over `tokens`
// tokens (B·T) with at most `keys` keys per query: the longest sum is the widest of the hidden size, the
// MLP, the heads' concatenation, the keys and the vocabulary — and for gradients the tokens, summed into
// every weight gradient; the backward retraces the forward's sums in reverse (dX and dW of a linear are
// beside each other, not in a row), so gradients are twice as deep.
inline Reordering transformer_reordering(const model::ModelConfig& config, int64_t tokens, int64_t keys,
                                         bool gradients, Against against = Against::fp32) {
  Reordering r;
  r.summation = std::max({static_cast<double>(config.hidden), static_cast<double>(config.ffn_hidden),
                          static_cast<double>(config.q_dim()), static_cast<double>(keys),
                          static_cast<double>(config.vocab_size), gradients ? static_cast<double>(tokens) : 0.0});
  r.depth = (kSumsPerLayer * config.layers + kSumsInHead) * (gradients ? 2 : 1);
  r.against = against;
  return r;
}

// The same for the mean loss over `counted` targets (each token's loss rounds independently).
inline Reordering transformer_loss_reordering(const model::ModelConfig& config, int64_t tokens, int64_t keys,
                                              double counted, Against against = Against::fp32) {
  Reordering r = transformer_reordering(config, tokens, keys, false, against);
  r.averaged_over = counted;
  return r;
}

// ---- bf16 runs of the whole model: the pipeline's invariances in bf16, and bf16 against fp32 ---------------

// u = kBf16Rounding (above): one rounding to bf16 moves a value by at most 2^-8 of itself.

// The bf16 roundings in a row behind one output of a bf16 model: in each layer's forward the kept
// activations model/layer.h lists — the attention norm, q/k/v, o, x_mid, the MLP norm, gate/up, act,
// x_out — and attention's P (rounded before P·V): 9; in each layer's backward the roundings the kernels add
// to their products' inputs — dout of the MLP's down and up, of the output projection and of the QKV
// projection, attention's dO and dS — and the residual stream's gradient the model rounds (dL/dx_mid and
// dL/dx, layer.h): 8. The head: the final norm, and (backward) the head's dout and its dL/dx.
inline constexpr double kBf16RoundingsPerLayer = 9;
inline constexpr double kBf16RoundingsPerLayerBackward = 8;

inline double bf16_roundings(const model::ModelConfig& config, bool gradients) {
  const double forward = kBf16RoundingsPerLayer * config.layers + 1;
  return gradients ? forward + kBf16RoundingsPerLayerBackward * config.layers + 2 : forward;
}

// The bound on relative_error between a bf16 run and another bf16 run that sums in another order (both_bf16:
// chunked against unchunked), or an fp32 run of the same model (only one side rounds to bf16). Derivation:
// where both sides round the same value, their fp32 sums differ by δ (fp32_bound: ~1e-6), which puts the
// value on the other side of a bf16 rounding boundary with probability ≈ δ / 2u and then makes it differ
// by a whole bf16 step, 2u: each rounding turns a relative difference e into √(2u·e) RMS. In a row of
// roundings that grows from 1e-6 to 9e-5, 8e-4, 2.5e-3: past the first few the two sides' rounding
// errors are as good as independent, so the bound is fp32_bound's model with bf16's rounding:
// N = the roundings in a row (bf16_roundings), each δ uniform in [−u, u] (variance u²/3), one side's
// error u·√(N/3), the difference of two bf16 sides u·√(2N/3), divided by √M for a mean over M outputs
// with independent errors, 6 standard deviations. The fp32 sums between the roundings add ~1e-6: nothing
// beside. A bf16 run against fp32 also rounds the weights (each GEMM rounds w), the same perturbation for
// every token: its loss is not averaged over tokens (averaged_over 1).
inline double bf16_bound(double roundings, bool both_bf16, double averaged_over = 1) {
  const double sides = both_bf16 ? 2.0 : 1.0;
  return kStandardDeviations * kBf16Rounding * std::sqrt(sides * roundings / (3.0 * averaged_over));
}

}  // namespace fpdt::testing

// ---------------------------------------------------------------------------------------------------------
namespace fpdt::testing {

// bf16 attention: what kernels/reference/attention_chunk.h rounds (q, k, v, P̃, dO, P, dS), bounded by
// the same statistical model as fp32_bound (independent roundings, kStandardDeviations of their spread).
//
// u: one rounding to bf16, kBf16Rounding (above).

// Against the float64 reference on the unrounded inputs: every product term behind an output carries the
// roundings of its operands — uniform in [−u, u], variance u²/3, independent — and the ones that reach it
// through a score: an absolute error in a score s is a relative error in e^s, and s = scale·Σ_D q k with
// unit-variance q, k and scale = 1/√D moves by u·√(2/3) (r(q) and r(k) of each of its D terms): two
// roundings' worth. An output of terms carrying n roundings each is off by u·√(n/3) of itself (norm-wise,
// first order); fp32's own arithmetic (~1e-6) is nothing beside it.
//   forward out: the score (2), r(P̃), r(v): n = 4.  lse: the scores only, log-sum-exp'd: n = 2.
//   dv = Σ r(P)·r(dO): the score (2), r(P), r(dO): 4.  dq = scale·Σ r(dS)·r(k), dk alike: dS = P·(dP − Δ)
//   has P's 3, dP = r(dO)·r(v)'s 2 and Δ = rowsum(dO ∘ out)'s 4 (out's), then r(dS) and r(k) (or r(q)): 11,
//   with the conditioning of dP − Δ, a difference of nearly equal values in some rows (the fp32 backward's
//   errors are 10× its forward's for the same reason; here, measured: 2).
inline double bf16_attention_bound(double roundings, double conditioning = 1) {
  return kStandardDeviations * kBf16Rounding * std::sqrt(roundings / 3.0) * conditioning;
}
inline const double kAttentionBf16Forward = bf16_attention_bound(4);
inline const double kAttentionBf16Lse = bf16_attention_bound(2);
inline const double kAttentionBf16Backward = bf16_attention_bound(11, 2);

// A fast bf16 kernel against the bf16 reference (the same operands rounded on both sides): the values a
// side computes before it rounds them — P̃, P, dS — differ between the sides by their fp32 error, σ
// relative, so r(y) differs only where a rounding boundary falls between y and y': with probability
// |y − y'| / spacing, by one spacing (2u|y|). Mean square: 2u·|y|²·E|y − y'| = 2u·σ·√(2/π)·|y|², a standard
// deviation of √(1.6·u·σ) relative — in place of a rounding's u/√3 — per such operand, plus fp32's own
// reordering (fp32_bound). σ: a unit-variance score is a D-term fp32 sum, u₃₂·√(D/3) ≈ 4e-7 at D = 128
// (the reference's float64 rounds nothing), and 2^x's polynomial adds ~1e-7: σ ≈ 4e-7. Forward: r(P̃),
// one such operand. Backward: r(P), r(dS) and the forward's through Δ, three, dS's σ conditioned by
// dP − Δ as above (2; a window of one key makes dS the rounding residue r(dO)·r(v) − dO·r(v) itself).
// The flips are rare events, so the average above holds only over many; one flip of a row's dominant
// probability moves that row by up to a spacing, 2u of its largest term (≤ 3× the row: a softmax over
// a handful of keys), which over `rows` rows of like norm is 2u·3/√rows norm-wise: added once.
inline double bf16_flip_bound(double rows, double operands, double conditioning = 1) {
  constexpr double kSigma = 4e-7;
  const double flips = std::sqrt(1.6 * kBf16Rounding * kSigma * operands) * conditioning;
  const double one_large_flip = 2 * kBf16Rounding * 3 / std::sqrt(std::max(rows, 1.0));
  const double reordering = fp32_bound({.summation = 512, .depth = 2, .against = Against::float64});
  return kStandardDeviations * flips + one_large_flip + reordering;
}
// Of outputs of `rows` rows of D values (out, dq: B·Cq·H; dk, dv: B·Ck·Hkv).
inline double attention_bf16_same_operands_forward(double rows) { return bf16_flip_bound(rows, 1); }
inline double attention_bf16_same_operands_backward(double rows) { return bf16_flip_bound(rows, 3, 2); }

// cuDNN's fused attention (the CUDA backend's bf16 path, kernels/cuda/sdpa_attention.cu) rounds where the
// spec does — r(q), r(k), r(v), r(P̃), r(dO), r(P), r(dS) — with two differences and three more roundings:
//  - r(P̃) is taken from cuDNN's own running maximum, not the spec's integer-lifted one: the same size of
//    rounding at another point, so against the spec on the same operands the two roundings are independent
//    (a difference of u·√(2/3) per term, in place of the rare flips);
//  - each block's out leaves cuDNN as bf16 words (r(o)), and each block's dq, dk, dv too: one rounding of
//    each output, at most u of itself elementwise, so at most u norm-wise over any number of rows (merging
//    blocks by LSE is a convex combination: still u);
//  - the backward's Δ is cuDNN's own rowsum(r(dO) ∘ O'), O' made so that it is Δ within u·|Δ| (worst case;
//    sdpa_attention.cu derives it): one rounding's worth more in dS = P (dP − Δ), conditioned by dP − Δ as
//    the spec's Δ is (2, above);
//  - the sums run on tensor cores, which truncate instead of rounding to nearest: each addition errs by less
//    than 2u₃₂ = 2^-23, one-sided, so a sum of K terms is biased by up to 2u₃₂·K/√3 of its size on random
//    data (check_linear_in derives it) — 2e-5 at K = 512 keys, nothing beside bf16's 2^-8: left out.
// Against the unrounded float64 reference (check_attention): forward out n = 4 + r(o) = 5; lse unchanged
// (fp32 out of cuDNN); backward 11 + r(output) + Δ's rounding = 13, conditioning 2 as before.
inline const double kAttentionBf16ForwardCudnn = bf16_attention_bound(5);
inline const double kAttentionBf16BackwardCudnn = bf16_attention_bound(13, 2);
// Against the bf16 spec on the same operands (check_attention_chunk): the flips above plus, forward, the
// independent r(P̃) (6 standard deviations of u·√(2/3); one dominant key's 2u lies inside it) and r(o) (u,
// worst case); backward, r(output) (u, worst case) and Δ's rounding (6 standard deviations of u/√3,
// conditioned 2).
inline double attention_bf16_cudnn_forward(double rows) {
  return attention_bf16_same_operands_forward(rows) + kStandardDeviations * kBf16Rounding * std::sqrt(2.0 / 3.0) +
         kBf16Rounding;
}
inline double attention_bf16_cudnn_backward(double rows) {
  return attention_bf16_same_operands_backward(rows) + kBf16Rounding +
         kStandardDeviations * kBf16Rounding * std::sqrt(1.0 / 3.0) * 2;
}

}  // namespace fpdt::testing
