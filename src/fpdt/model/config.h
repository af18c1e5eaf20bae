// Model configuration: the shape of a decoder-only transformer of the Llama family (RMSNorm, RoPE,
// SwiGLU, GQA; Hugging Face model types llama, mistral, qwen2) or the GPT family (LayerNorm, GELU,
// learned positions, biases; gpt2), from a preset name (presets.cpp) or a Hugging Face config.json
// read field by field (hf_config.cpp; hf_fields.cpp holds the table of every field: used, harmless or
// refused; RoPE's parameters are rope_parameters.cpp's). validate() refuses impossible shapes in one sentence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fpdt::model {

enum class Family { llama, gpt };
// The Hugging Face model_type; fixes the family and what the type adds (qwen2's q/k/v biases).
enum class ModelType { llama, mistral, qwen2, gpt2 };
std::string model_type_name(ModelType type);

// RoPE frequency scaling for context extension, as transformers' rope_parameters
// (modeling_rope_utils): the frequencies themselves are computed by model/rope.
enum class RopeType { none, linear, dynamic, llama3, yarn };  // none: transformers' "default"
std::string rope_type_name(RopeType type);

struct RopeScaling {
  RopeType type = RopeType::none;
  double factor = 1.0;                  // linear, dynamic, llama3, yarn
  int64_t original_max_positions = 0;   // llama3, yarn: the pretraining context length
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  double beta_fast = 32.0;              // yarn: bounds of the linear ramp between extrapolated
  double beta_slow = 1.0;               //       and interpolated frequencies
  std::optional<double> attention_factor;  // yarn: given, or derived from factor (and mscale)
  double mscale = 0.0;                  // yarn, DeepSeek style; 0: absent
  double mscale_all_dim = 0.0;          // yarn; 0: absent
  bool truncate = true;                 // yarn: round the ramp's bounds to whole dims
  bool operator==(const RopeScaling&) const = default;
};

// A generation token id field of config.json as it was stated: null, one id, or a list of ids
// (eos_token_id may be one: Llama 3.1 ends a turn on any of three).
struct TokenIds {
  std::vector<int> ids;  // in [0, V); empty and not a list: null
  bool list = false;     // written as a JSON list, even of one id
  bool operator==(const TokenIds&) const = default;
};

struct ModelConfig {
  std::string name = "custom";
  ModelType type = ModelType::llama;
  Family family = Family::llama;  // llama for llama/mistral/qwen2, gpt for gpt2 (validate() checks)
  int vocab_size = 0;        // V
  int hidden = 0;            // h
  int layers = 0;            // L
  int heads = 0;             // Hq
  int kv_heads = 0;          // Hkv
  int head_dim = 0;          // D
  int ffn_hidden = 0;        // f
  int64_t max_positions = 0; // learned position table size (GPT); RoPE models: the context length
                             // the config names (yarn's default pretraining length)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int rotary_dim = 0;        // dims of each head that RoPE rotates (≤ D, even); Llama: D
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  // Sliding-window attention (Mistral, Qwen2): a query at q sees the keys (q − W, q] in the layers
  // marked in sliding_layers (L entries); 0: every layer attends to the whole causal prefix.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // GPT-2's softmax scaling: 1/sqrt(D) when scale_attn_weights, further divided by layer + 1 when
  // scale_attn_by_inverse_layer_idx.
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  // Generation token ids (bos_token_id, eos_token_id, pad_token_id): training does not use them; they
  // are written back into checkpoints so that transformers' generate() starts and stops on the tokens
  // the model knows. nullopt: the config does not state the field (a checkpoint takes its tokenizer's).
  std::optional<TokenIds> bos_token_id, eos_token_id, pad_token_id;
  // The config.json keys fpdt ignored because transformers ignores them for this type (metadata such
  // as `_model_name_or_path`, `unsloth_version`, `rope_scaling.finetuned`): listed in the config table
  // and by `fpdt inspect`, not written into checkpoints.
  std::vector<std::string> ignored_fields;

  // Derived shapes.
  int q_dim() const { return heads * head_dim; }       // Hq·D
  int kv_dim() const { return kv_heads * head_dim; }   // Hkv·D
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  bool uses_rope() const { return family == Family::llama; }
  bool has_bias() const { return family == Family::gpt; }          // every linear and norm
  bool has_qkv_bias() const { return has_bias() || type == ModelType::qwen2; }
  bool learned_positions() const { return family == Family::gpt; }
  // The attention window of `layer` in tokens (0: none) and its softmax scale.
  int64_t window(int layer) const;
  double attention_scale(int layer) const;

  // Throws fpdt::Error for an impossible configuration (h % Hq when D is implied, Hq % Hkv, sizes
  // whose products overflow, a token id outside the vocabulary, ...).
  void validate() const;
  // Parameter counts: all, and without the embedding tables (token and position) — the LM head is
  // counted in the second only when it is untied.
  int64_t parameter_count() const;
  int64_t non_embedding_parameter_count() const;
};

// Presets (presets.cpp): "llama-tiny", "gpt-tiny", "llama-demo", and the paper's models "gpt-2.7b", "gpt-6.7b",
// "gpt-13b", "gpt-30b", "llama3-8b", "llama3-70b". Throws fpdt::Error listing them for an unknown one.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// Hugging Face config.json (hf_config.cpp; model_type "llama", "mistral", "qwen2" or "gpt2"), read by the field
// table: every field is used, kept (the generation token ids, checked against the vocabulary),
// harmless (ignored: dropout, dtype, ...) or refused; a field outside the table is one transformers
// ignores for the type, and is listed in ignored_fields. Throws fpdt::Error naming the file and the
// field for a missing or malformed entry, and every refused one in one message.
ModelConfig load_hf_config(const std::string& path);
ModelConfig parse_hf_config(const std::string& json_text, const std::string& where);
// The config.json text Hugging Face tools need to load our checkpoints (RoPE in both layouts:
// rope_parameters for transformers ≥ 5, rope_theta / rope_scaling for older readers; the generation
// token ids as stated, null where the config states none).
std::string to_hf_config_json(const ModelConfig& config);

// The first config.json field in which `given` describes another model than `saved`: its key and both
// values (excerpts); nullopt when they agree. A generation token id counts only when both state it.
struct ConfigDifference {
  std::string field, saved, given;
};
std::optional<ConfigDifference> config_difference(const ModelConfig& saved, const ModelConfig& given);

// A Hugging Face folder's generation_config.json (generate()'s defaults: token ids, sampling) as its
// text, "" when the folder has none; checkpoints carry it as it is. Throws fpdt::Error naming the file
// when it is not a JSON object.
inline constexpr const char* kGenerationConfigFile = "generation_config.json";
std::string read_generation_config(const std::string& folder);

// Context extension (rope_parameters.cpp): replaces the RoPE base and/or scaling of a RoPE model. `scaling_json` is a
// rope_parameters object as in config.json ({"rope_type": "yarn", "factor": 4, ...}), read by the
// same rules; "" keeps the config's. Throws fpdt::Error for a GPT model or a bad value.
void override_rope(ModelConfig& config, std::optional<double> theta, const std::string& scaling_json);

// One line for people (ASCII, for tables): "theta 500000, llama3 x8 (original 8192, low 1, high 4)";
// "learned positions" for GPT. And the rope_parameters object of config.json as JSON text (for
// `fpdt plan --json`).
std::string describe_rope(const ModelConfig& config);
std::string rope_parameters_json(const ModelConfig& config);
// "none", or the ignored fields: "unsloth_version, rope_scaling.finetuned".
std::string describe_ignored(const ModelConfig& config);
// "none", or "16 tokens (layers 1-3)" / "4096 tokens (all layers)".
std::string describe_window(const ModelConfig& config);

// The field table as a Markdown table (hf_fields.cpp; docs/hf_config.md holds it; a test keeps the two equal).
std::string hf_field_table_markdown();

// What --model names: a preset (a word without '/' that is a preset's name), else a path: a Hugging
// Face model folder (its config.json is read) or a config.json file. Every command reads --model here.
ModelConfig resolve_model(const std::string& name_or_path);

}  // namespace fpdt::model
