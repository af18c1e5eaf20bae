// Top-k / temperature sampling over a fixed-length sliding context window (see sampler.h).
#include "fpdt/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/base/machine.h"

namespace fpdt::train {

namespace {

// Each token runs the unchunked model over the whole window: its activations and T × V logits must fit
// this machine's memory, or the context is refused before anything is allocated.
void check_context_fits(const model::ModelConfig& config, int64_t T) {
  const std::optional<size_t> activations = model::Transformer::activation_bytes(config, 1, T);
  const long double bytes = activations ? static_cast<long double>(*activations) + static_cast<long double>(T) *
                                                                                  (static_cast<long double>(config.vocab_size) + 1) * 4
                                        : std::numeric_limits<long double>::infinity();
  const size_t memory = machine_memory_bytes();
  if (!activations || (memory > 0 && bytes > static_cast<long double>(memory)))
    throw Error("sample",
                "--context " + std::to_string(T) + " needs " +
                    (activations ? format_bytes(static_cast<double>(bytes)) : std::string("more bytes than 64-bit sizes count")) +
                    " for one forward of model '" + config.name + "' over the whole window (activations and " +
                    std::to_string(T) + " x " + std::to_string(config.vocab_size) + " logits), more than this machine's " +
                    format_bytes(static_cast<double>(memory)) + " of memory",
                "lower --context: the window slides over the text, so a shorter one still generates any number of tokens");
}

}  // namespace

std::vector<int32_t> generate(model::Transformer& model, const std::vector<int32_t>& prompt,
                              const SampleSettings& settings, Rng& rng) {
  FPDT_CHECK(!prompt.empty(), "sample", "the prompt is empty", "give at least one token of prompt");
  FPDT_CHECK(settings.context_tokens > 0 && settings.temperature > 0, "sample",
             "context length and temperature must be positive", "");
  const int V = model.config().vocab_size;
  const int64_t T = settings.context_tokens;
  check_context_fits(model.config(), T);
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
