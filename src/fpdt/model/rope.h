// RoPE frequencies of a model: the one place that turns a config's rotary settings into the table
// the kernels rotate by (kernels::RopeParams). Pure; a model computes it once. The RoPE variants for
// context extension (linear, llama3, yarn scaling) change the table and the attention scaling here,
// as transformers 5.24's modeling_rope_utils computes them (in float64; transformers uses float32).
#pragma once

#include <vector>

#include "fpdt/kernels/ops.h"
#include "fpdt/model/config.h"

namespace fpdt::model {

struct RopeFrequencies {
  std::vector<double> inv_freq;    // (rotary_dim / 2): pair i at position p turns by p · inv_freq[i]
  double attention_scaling = 1.0;  // multiplies cos and sin (YaRN's mscale)

  // The kernels' view of the table; valid while this object lives and is not changed.
  kernels::RopeParams params() const {
    return kernels::RopeParams{inv_freq.data(), attention_scaling, static_cast<int>(2 * inv_freq.size())};
  }
};

// Default RoPE: inv_freq[i] = rope_theta^(−2i / rotary_dim), i < rotary_dim / 2, no scaling; then
// the config's rope_scaling: linear divides every frequency by factor; llama3 divides the
// low frequencies and blends the middle band; yarn ramps between divided and unchanged frequencies
// and sets attention_scaling (given, or 0.1·ln(factor) + 1, or DeepSeek's mscale ratio). Empty for
// a model without RoPE. Throws fpdt::Error for rope_type dynamic (no fixed table to train with).
RopeFrequencies rope_frequencies(const ModelConfig& config);

}  // namespace fpdt::model
