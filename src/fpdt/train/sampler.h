// Text generation: the next-token rule (greedy, or sampled with temperature, top-k and top-p) and the
// loop that asks the FPDT pipeline for logits — the prompt prefilled once into its KV cache, then one
// decode per token (pipeline/generation.cpp) — until the token count or an end-of-turn id.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/fpdt_model.h"

namespace fpdt::train {

struct SampleSettings {
  int64_t new_tokens = 300;       // at most this many tokens after the prompt
  bool greedy = false;            // the argmax (lowest id among equals); else sampled:
  double temperature = 0.8;       // logits / temperature, then softmax
  int top_k = 40;                 // among the k most likely (0: the whole vocabulary)
  double top_p = 1.0;             // and the fewest of those whose probabilities sum to ≥ top_p (1: all)
  std::vector<int32_t> stop_ids;  // generation ends after one of these (kept in the output)
};

// What next_token works in, grown to V once and reused token after token.
struct SamplerScratch {
  std::vector<std::pair<float, int32_t>> ranked;  // (logit, id), the most likely first
  std::vector<double> weights;                    // their unnormalised probabilities
};

// The next token from logits (V): the rule of `settings`.
int32_t next_token(const float* logits, int V, const SampleSettings& settings, Rng& rng, SamplerScratch& scratch);

struct Generation {
  std::vector<int32_t> tokens;  // generated, the prompt not included
  bool stopped = false;         // ended on a stop id
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// `prompt` continued through `model` (laid out forward only; every rank of its group calls this with the
// same arguments and the same rng state, and every rank returns the same tokens).
Generation generate(pipeline::FpdtModel& model, const std::vector<int32_t>& prompt, const SampleSettings& settings,
                    Rng& rng);

// The ids generation stops on for a model folder: generation_config.json's eos_token_id (one id or a
// list), else config.json's; none when neither states one.
std::vector<int32_t> stop_ids(const std::string& folder, const model::ModelConfig& config);

}  // namespace fpdt::train
