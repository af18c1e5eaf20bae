// Text generation from a trained model: top-k sampling with temperature over a sliding window of
// context. The window has a fixed length, right-padded (causal attention makes padding after the
// last real token invisible to it), so the model's activations are sized once.
#pragma once

#include <cstdint>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/model/transformer.h"

namespace fpdt::train {

struct SampleSettings {
  int64_t new_tokens = 200;
  int64_t context_tokens = 256;
  double temperature = 0.8;
  int top_k = 40;  // 0: sample from the whole vocabulary
};

// Returns prompt + new_tokens generated ids.
std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const SampleSettings& settings, Rng& rng);

}  // namespace fpdt::train
