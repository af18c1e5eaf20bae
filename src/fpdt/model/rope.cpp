// RoPE frequencies from a model config (see rope.h), in float64, as transformers 5.24 computes them
// (modeling_rope_utils: _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
// _compute_yarn_parameters).
#include "fpdt/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "fpdt/base/error.h"

namespace fpdt::model {

namespace {

// YaRN's attention scale for a context `scale` times the original (1 when not longer).
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// Llama 3.1: frequencies whose wavelength exceeds original / low_freq_factor are divided by factor,
// those below original / high_freq_factor kept, and those between interpolated smoothly.
void llama3_scale(std::vector<double>& inv_freq, const RopeScaling& s) {
  const double original = static_cast<double>(s.original_max_positions);
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
      continue;
    }
    const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = (1.0 - smooth) * f / s.factor + smooth * f;
  }
}

// YaRN: a linear ramp over the pair index between interpolated (÷ factor) frequencies, for the pairs
// that turn less than beta_slow times over the original context, and extrapolated (unchanged) ones,
// for those that turn more than beta_fast times; returns the attention scaling.
double yarn_scale(std::vector<double>& inv_freq, const RopeScaling& s, double base, int dim) {
  const double original = static_cast<double>(s.original_max_positions);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers: prevents a division by zero
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1.0 - ramp;  // weight of the unchanged frequency
    inv_freq[i] = inv_freq[i] / s.factor * (1.0 - extrapolation) + inv_freq[i] * extrapolation;
  }
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale != 0.0 && s.mscale_all_dim != 0.0)
    return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor, 1.0);
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& config) {
  RopeFrequencies rope;
  if (!config.uses_rope()) return rope;
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeType::dynamic)
    throw Error("model", "model '" + config.name + "' uses rope_type dynamic, which is refused",
                "dynamic NTK scaling recomputes the frequencies from each sequence's length at inference; train "
                "with --rope-scaling linear, llama3 or yarn, or --rope-theta");
  const int half = config.rotary_dim / 2;
  rope.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) rope.inv_freq[i] = std::pow(config.rope_theta, -2.0 * i / config.rotary_dim);
  switch (s.type) {
    case RopeType::none:
    case RopeType::dynamic: break;
    case RopeType::linear:
      for (double& f : rope.inv_freq) f /= s.factor;
      break;
    case RopeType::llama3: llama3_scale(rope.inv_freq, s); break;
    case RopeType::yarn: rope.attention_scaling = yarn_scale(rope.inv_freq, s, config.rope_theta, config.rotary_dim); break;
  }
  return rope;
}

}  // namespace fpdt::model
