// Model presets: the small models of the tests and the demo, and the paper's models (FPDT, Table 1),
// by name (see config.h).
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/model/config.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "model";

// What every preset states: its name, type and sizes (D = h / Hq).
ModelConfig sized(std::string name, ModelType type, Family family, int V, int h, int L, int Hq, int Hkv, int f) {
  ModelConfig config;
  config.name = std::move(name);
  config.type = type;
  config.family = family;
  config.vocab_size = V;
  config.hidden = h;
  config.layers = L;
  config.heads = Hq;
  config.kv_heads = Hkv;
  config.head_dim = h / Hq;
  config.ffn_hidden = f;
  config.norm_eps = 1e-5;
  return config;
}

// A Llama-family preset: RoPE over whole heads, a context of 2^20 tokens.
ModelConfig llama(std::string name, int V, int h, int L, int Hq, int Hkv, int f, double theta, bool tied) {
  ModelConfig config = sized(std::move(name), ModelType::llama, Family::llama, V, h, L, Hq, Hkv, f);
  config.rotary_dim = config.head_dim;
  config.max_positions = 1 << 20;
  config.rope_theta = theta;
  config.tie_embeddings = tied;
  return config;
}

// A GPT-2 preset: an MLP of 4·h, learned positions, tied embeddings.
ModelConfig gpt(std::string name, int V, int h, int L, int Hq, int64_t positions) {
  ModelConfig config = sized(std::move(name), ModelType::gpt2, Family::gpt, V, h, L, Hq, Hq, 4 * h);
  config.rotary_dim = 0;
  config.max_positions = positions;
  config.tie_embeddings = true;
  return config;
}

std::vector<ModelConfig> presets() {
  return {
      llama("llama-tiny", 257, 64, 2, 4, 2, 176, 10000.0, false),
      gpt("gpt-tiny", 257, 64, 2, 4, 1024),
      llama("llama-demo", 257, 256, 4, 8, 4, 704, 10000.0, true),
      // The paper's models (FPDT, Table 1): GPT sizes as in Megatron, Llama-3 as released.
      gpt("gpt-2.7b", 50257, 2560, 32, 32, 1 << 22),
      gpt("gpt-6.7b", 50257, 4096, 32, 32, 1 << 22),
      gpt("gpt-13b", 50257, 5120, 40, 40, 1 << 22),
      gpt("gpt-30b", 50257, 7168, 48, 56, 1 << 22),
      llama("llama3-8b", 128256, 4096, 32, 32, 8, 14336, 500000.0, false),
      llama("llama3-70b", 128256, 8192, 80, 64, 8, 28672, 500000.0, false),
  };
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& config : presets()) names.push_back(config.name);
  return names;
}

ModelConfig preset(const std::string& name) {
  for (const auto& config : presets())
    if (config.name == name) return config;
  std::string known;
  for (const auto& known_name : preset_names()) known += (known.empty() ? "" : ", ") + known_name;
  throw Error(kModule, "unknown model preset '" + name + "'",
              "use one of " + known + ", or a Hugging Face model folder or config.json");
}

}  // namespace fpdt::model
