// The sample a finished run ends with: its trained weights gathered from every rank's shards, then text
// generated on rank 0 through a one-rank FPDT pipeline on the host's kernels (sampler.h), whatever
// backend trained.
#pragma once

#include <cstdint>
#include <string>

#include "fpdt/comm/communicator.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/train/sampler.h"

namespace fpdt::train {

inline constexpr int64_t kSampleChunkTokens = 4096;  // the sample's chunks (its prompt is short)

// Refuses, before any work, a sample sample_trained_model could not make (a KV cache beyond the learned
// positions, 64-bit sizes or the machine's memory), naming --sample-tokens.
void check_trained_model_sample(const model::ModelConfig& config, const data::Tokenizer& tokenizer,
                                const std::string& prompt, const SampleSettings& sample);

// `prompt` continued by sample.new_tokens tokens, rendered by `tokenizer`, on rank 0 ("" on the others);
// the sampler's seed is seed + 7. Collective over the ranks of `states` (the gather).
std::string sample_trained_model(const model::ModelConfig& config, pipeline::ModelStates& states,
                                 const data::Tokenizer& tokenizer, const std::string& prompt,
                                 const SampleSettings& sample, uint64_t seed, int rank);

}  // namespace fpdt::train
