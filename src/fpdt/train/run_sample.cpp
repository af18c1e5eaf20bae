// A finished run's sample: gather, then generate on rank 0 (see run_sample.h).
#include "fpdt/train/run_sample.h"

#include <cstring>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/tensor/memory.h"

namespace fpdt::train {

namespace {

// The sampler's run: one rank, forward only, everything resident, chunks of kSampleChunkTokens.
pipeline::RunSpec sample_run() {
  pipeline::RunSpec run;
  run.forward_only = true;
  run.offload = pipeline::OffloadConfig{pipeline::OffloadKind::none, ""};
  run.chunk_tokens = kSampleChunkTokens;
  return run;
}

}  // namespace

void check_trained_model_sample(const model::ModelConfig& config, const data::Tokenizer& tokenizer,
                                const std::string& prompt, const SampleSettings& sample) {
  if (sample.new_tokens <= 0) return;
  const auto prompt_tokens = static_cast<int64_t>(tokenizer.encode(prompt).size());
  if (prompt_tokens == 0)
    throw Error("train", "the sample's --prompt is empty: there is nothing to continue",
                "give --prompt some text, or drop --sample-tokens");
  try {
    (void)pipeline::plan_generation(config, sample_run(), 1, 0, prompt_tokens, sample.new_tokens - 1, false);
  } catch (const Error& error) {
    throw Error(error.module(), "--sample-tokens " + std::to_string(sample.new_tokens) + ": " + error.message(),
                "lower --sample-tokens");
  }
}

std::string sample_trained_model(const model::ModelConfig& config, pipeline::ModelStates& states,
                                 const data::Tokenizer& tokenizer, const std::string& prompt,
                                 const SampleSettings& sample, uint64_t seed, int rank) {
  model::ParameterBlock weights(states.layout(), "weights for the sample", Tier::offload);
  states.gather_weights(weights);
  if (rank != 0) return "";
  // The sampler computes on the host's kernels, whatever backend trained (its memory is host memory): one
  // rank, fp32, everything resident, chunks of kSampleChunkTokens.
  const auto host = kernels::make_backend(kernels::BackendKind::cpu);
  const auto one_rank = comm::make_local();
  pipeline::FpdtModel sampler(config, *host, *one_rank, sample_run(), seed);
  std::memcpy(sampler.params().data(), weights.data(), sizeof(float) * static_cast<size_t>(weights.numel()));
  Rng rng(seed + 7);
  std::vector<int32_t> tokens = tokenizer.encode(prompt);
  const Generation generation = generate(sampler, tokens, sample, rng);
  tokens.insert(tokens.end(), generation.tokens.begin(), generation.tokens.end());
  return tokenizer.render(tokens);
}

}  // namespace fpdt::train
