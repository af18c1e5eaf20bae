// Top-k / temperature sampling over a fixed-length sliding context window (see sampler.h).
#include "fpdt/train/sampler.h"

#include <algorithm>
#include <cmath>

#include "fpdt/base/error.h"

namespace fpdt::train {

std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const SampleSettings& settings, Rng& rng) {
  FPDT_CHECK(!prompt.empty(), "sample", "the prompt is empty", "give at least one token of prompt");
  FPDT_CHECK(settings.context_tokens > 0 && settings.temperature > 0, "sample",
             "context length and temperature must be positive", "");
  const int V = model.config().vocab_size;
  const int64_t T = settings.context_tokens;
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> window(static_cast<size_t>(T));
  std::vector<float> logits(static_cast<size_t>(T * V));
  std::vector<std::pair<float, int32_t>> ranked(static_cast<size_t>(V));
  for (int64_t i = 0; i < settings.new_tokens; ++i) {
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(tokens.size()), T);
    std::fill(window.begin(), window.end(), 0);
    std::copy(tokens.end() - length, tokens.end(), window.begin());
    model.forward(model::Batch{1, T, window.data(), nullptr, nullptr}, logits.data());
    const float* last = logits.data() + (length - 1) * V;
    for (int32_t id = 0; id < V; ++id) ranked[id] = {last[id], id};
    const int k = settings.top_k > 0 ? std::min(settings.top_k, V) : V;
    std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    double total = 0.0;
    std::vector<double> weights(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      weights[j] = std::exp((ranked[j].first - ranked[0].first) / settings.temperature);
      total += weights[j];
    }
    double pick = rng.uniform() * total;
    int chosen = k - 1;
    for (int j = 0; j < k; ++j) {
      pick -= weights[j];
      if (pick <= 0) {
        chosen = j;
        break;
      }
    }
    tokens.push_back(ranked[chosen].second);
  }
  return tokens;
}

}  // namespace fpdt::train
