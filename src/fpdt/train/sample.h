// `fpdt sample`: a checkpoint's continuation of a prompt, generated through the FPDT pipeline on the sp
// ranks of the world — the prompt prefilled chunk by chunk into a KV cache in the run's offload tier, then
// one token at a time (sampler.h) — with the memory it took, or (a dry run) the memory it would take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fpdt/base/options.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/train/sampler.h"

namespace fpdt::train {

// The run `fpdt sample` describes unless told otherwise: one rank, chunks of 4K tokens, everything resident.
inline pipeline::RunSpec default_sample_run() {
  pipeline::RunSpec run;
  run.chunk_tokens = 4096;
  run.offload = pipeline::OffloadConfig{pipeline::OffloadKind::none, ""};
  return run;
}

struct SampleCommand {
  pipeline::RunSpec run = default_sample_run();  // its S is the prompt's length, not an option
  std::string checkpoint = "runs/demo";  // run folder (its latest step), step folder or Hugging Face folder
  std::string prompt = "And God said";
  std::string prompt_file;               // the prompt read from this file instead ("-": standard input)
  std::optional<double> rope_theta;      // the checkpoint's RoPE replaced (eval's options)
  std::string rope_scaling;
  SampleSettings sampling;
  bool ignore_end_of_turn = false;       // else the model's end-of-turn ids end the generation (stop_ids)
  uint64_t seed = 1;
  bool print_ids = false;
  bool dry_run = false;                  // the memory of the generation only
};

void declare_sample_options(OptionSet& set, SampleCommand& settings);

struct SampleResult {
  std::vector<int32_t> prompt;  // the prompt's token ids
  Generation generation;
  std::string text;             // prompt and generated tokens, rendered
  std::string description;      // the checkpoint, its RoPE, the prompt's length and the run's layout
  size_t compute_peak_bytes = 0, offload_peak_bytes = 0, peak_rss_bytes = 0;  // this rank
};

// Runs on every rank of `world` (its size is --sp); every rank returns the same tokens. A dry run lays
// out the generation of the prompt's length (and --tokens) and returns the peaks only. Throws
// fpdt::Error for bad settings, a missing checkpoint or prompt file, or a prompt the model cannot take.
SampleResult sample(const SampleCommand& settings, comm::Communicator& world);

}  // namespace fpdt::train
