// The next-token rule and the generation loop (see sampler.h).
#include "fpdt/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/timer.h"

namespace fpdt::train {

int32_t next_token(const float* logits, int V, const SampleSettings& settings, Rng& rng, SamplerScratch& scratch) {
  if (settings.greedy) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  FPDT_CHECK(settings.temperature > 0 && settings.top_p > 0 && settings.top_p <= 1, "sample",
             "temperature must be positive and top-p in (0, 1]", "");
  std::vector<std::pair<float, int32_t>>& ranked = scratch.ranked;
  ranked.resize(static_cast<size_t>(V));
  for (int32_t id = 0; id < V; ++id) ranked[static_cast<size_t>(id)] = {logits[id], id};
  const int k = settings.top_k > 0 ? std::min(settings.top_k, V) : V;
  // Most likely first; equal logits by id, so the order (and the draw) is the same on every rank and run.
  std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<double>& weights = scratch.weights;
  weights.resize(static_cast<size_t>(k));
  double total = 0.0;
  for (int j = 0; j < k; ++j) {
    weights[static_cast<size_t>(j)] = std::exp((static_cast<double>(ranked[static_cast<size_t>(j)].first) -
                                                ranked[0].first) / settings.temperature);
    total += weights[static_cast<size_t>(j)];
  }
  // Nucleus: the fewest most likely tokens whose probability reaches top_p.
  int kept = k;
  if (settings.top_p < 1) {
    double mass = 0.0;
    for (int j = 0; j < k; ++j) {
      mass += weights[static_cast<size_t>(j)] / total;
      if (mass >= settings.top_p) {
        kept = j + 1;
        break;
      }
    }
    total = 0.0;
    for (int j = 0; j < kept; ++j) total += weights[static_cast<size_t>(j)];
  }
  double pick = rng.uniform() * total;
  for (int j = 0; j < kept; ++j) {
    pick -= weights[static_cast<size_t>(j)];
    if (pick <= 0) return ranked[static_cast<size_t>(j)].second;
  }
  return ranked[static_cast<size_t>(kept - 1)].second;
}

Generation generate(pipeline::FpdtModel& model, const std::vector<int32_t>& prompt, const SampleSettings& settings,
                    Rng& rng) {
  FPDT_CHECK(settings.new_tokens >= 0, "sample", "a negative number of tokens to generate", "");
  Generation result;
  if (settings.new_tokens == 0) return result;
  const int V = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  SamplerScratch scratch;
  const Timer prefill;
  model.prefill(prompt, settings.new_tokens - 1, logits.data());  // the last new token is never decoded
  result.prefill_seconds = prefill.seconds();
  const Timer decode;
  for (int64_t i = 0; i < settings.new_tokens; ++i) {
    if (i > 0) model.decode(result.tokens.back(), logits.data());
    const int32_t token = next_token(logits.data(), V, settings, rng, scratch);
    result.tokens.push_back(token);
    if (std::find(settings.stop_ids.begin(), settings.stop_ids.end(), token) != settings.stop_ids.end()) {
      result.stopped = true;
      break;
    }
  }
  result.decode_seconds = decode.seconds();
  return result;
}

std::vector<int32_t> stop_ids(const std::string& folder, const model::ModelConfig& config) {
  const std::string text = model::read_generation_config(folder);
  if (!text.empty()) {
    const nlohmann::json generation = nlohmann::json::parse(text);  // read_generation_config checked it
    const auto found = generation.find("eos_token_id");
    if (found != generation.end() && !found->is_null()) {
      std::vector<int32_t> ids;
      for (const auto& id : found->is_array() ? *found : nlohmann::json::array({*found})) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= config.vocab_size)
          throw Error("sample", folder + "/generation_config.json: eos_token_id " + id.dump() +
                                    " is not a token id of the vocabulary of " + std::to_string(config.vocab_size),
                      "fix or remove the field");
        ids.push_back(id.get<int32_t>());
      }
      return ids;
    }
  }
  if (!config.eos_token_id) return {};
  return std::vector<int32_t>(config.eos_token_id->ids.begin(), config.eos_token_id->ids.end());
}

}  // namespace fpdt::train
