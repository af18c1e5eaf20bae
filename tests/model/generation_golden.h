// Transformers' greedy generation on the small HF test models (tools/make_generation_golden.py):
// tests/golden/<set>/generation.safetensors read into its prompts, the tokens generate(do_sample=False)
// made from each in fp32, and each step's top-1/top-2 logit margin. fpdt's generation must give those tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/tensor/safetensors.h"
#include "hf_golden.h"

namespace fpdt::testing {

// Every set with a generation.safetensors (the tool writes one for each model folder of tests/golden).
inline const std::vector<std::string>& generation_sets() {
  static const std::vector<std::string> sets = {"llama",   "llama_tied", "llama3",     "yarn",       "mistral",
                                                "qwen2",   "gpt2",       "grad_llama", "grad_qwen2", "grad_gpt2"};
  return sets;
}

struct GenerationPrompt {
  std::vector<int32_t> prompt;        // (P) the prompt's ids
  std::vector<int32_t> tokens;        // (N) the ids transformers generated greedily
  std::vector<float> margins;         // (N) at each generated step, top-1 logit − top-2 logit
  std::vector<float> scales;          // (N) at each generated step, the logits' RMS ‖l‖₂/√V
  std::vector<float> first_logits;    // (V) the logits of step 0 (the last prompt position)
};

struct GenerationGolden {
  std::string set, dir;
  model::ModelConfig config;
  int max_new_tokens = 0;
  double margin_threshold = 0.0;  // every margin is ≥ this × its step's scale (the tool redraws others)
  std::vector<GenerationPrompt> prompts;

  explicit GenerationGolden(const std::string& name)
      : set(name), dir(golden_dir(name)), config(model::load_hf_config(dir + "/config.json")) {
    const SafetensorsReader file(dir + "/generation.safetensors");
    max_new_tokens = std::stoi(file.metadata("max_new_tokens"));
    margin_threshold = std::stod(file.metadata("margin_threshold"));
    const int count = std::stoi(file.metadata("prompts"));
    for (int i = 0; i < count; ++i) {
      const std::string n = std::to_string(i);
      prompts.push_back({file.read_ints("prompt_" + n), file.read_ints("tokens_" + n), file.read_floats("margins_" + n),
                         file.read_floats("scales_" + n), file.read_floats("first_logits_" + n)});
    }
  }
  // The folder's weights, as `fpdt train --init-from` reads them.
  void load(const model::ParameterLayout& layout, model::ParameterBlock& params) const {
    model::HfCheckpoint(dir).load(config, layout, params);
  }
};

}  // namespace fpdt::testing
