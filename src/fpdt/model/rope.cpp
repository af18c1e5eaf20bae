// RoPE frequencies from a model config (see rope.h), in float64.
#include "fpdt/model/rope.h"

#include <cmath>

namespace fpdt::model {

RopeFrequencies rope_frequencies(const ModelConfig& config) {
  RopeFrequencies rope;
  if (!config.uses_rope()) return rope;
  const int half = config.rotary_dim / 2;
  rope.inv_freq.resize(half);
  for (int i = 0; i < half; ++i) rope.inv_freq[i] = std::pow(config.rope_theta, -2.0 * i / config.rotary_dim);
  return rope;
}

}  // namespace fpdt::model
