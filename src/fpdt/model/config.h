// Model configuration: the shape of a decoder-only transformer of the Llama family (RMSNorm, RoPE,
// SwiGLU, GQA, no biases) or the GPT family (LayerNorm, GELU, learned positions, biases), from a
// preset name or a Hugging Face config.json. validate() refuses impossible shapes with one sentence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fpdt::model {

enum class Family { llama, gpt };

struct ModelConfig {
  std::string name = "custom";
  Family family = Family::llama;
  int vocab_size = 0;        // V
  int hidden = 0;            // h
  int layers = 0;            // L
  int heads = 0;             // Hq
  int kv_heads = 0;          // Hkv
  int head_dim = 0;          // D
  int ffn_hidden = 0;        // f
  int64_t max_positions = 0; // learned position table size (GPT); RoPE models: informative only
  double rope_theta = 10000.0;
  int rotary_dim = 0;        // dims of each head that RoPE rotates (≤ D, even); Llama: D
  double norm_eps = 1e-5;
  bool tie_embeddings = false;

  // Derived shapes.
  int q_dim() const { return heads * head_dim; }       // Hq·D
  int kv_dim() const { return kv_heads * head_dim; }   // Hkv·D
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  bool uses_rope() const { return family == Family::llama; }
  bool has_bias() const { return family == Family::gpt; }
  bool learned_positions() const { return family == Family::gpt; }

  // Throws fpdt::Error for an impossible configuration (h % Hq when D is implied, Hq % Hkv, ...).
  void validate() const;
  // Parameter counts: all, and without the embedding tables (token and position) — the LM head is
  // counted in the second only when it is untied.
  int64_t parameter_count() const;
  int64_t non_embedding_parameter_count() const;
};

// Presets: "llama-tiny", "gpt-tiny", "llama-demo", and the paper's models "gpt-2.7b", "gpt-6.7b",
// "gpt-13b", "gpt-30b", "llama3-8b", "llama3-70b". Throws fpdt::Error listing them for an unknown one.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// Hugging Face config.json (model_type "llama", "mistral", "qwen2" or "gpt2"). Throws fpdt::Error
// naming the file and the field for a missing, malformed or unsupported entry.
ModelConfig load_hf_config(const std::string& path);
ModelConfig parse_hf_config(const std::string& json_text, const std::string& where);
// The config.json text Hugging Face tools need to load our checkpoints.
std::string to_hf_config_json(const ModelConfig& config);

// A preset name, or a path to a config.json (anything ending in ".json").
ModelConfig resolve_model(const std::string& name_or_path);

}  // namespace fpdt::model
