// Model presets, validation and Hugging Face config.json parsing (see config.h).
#include "fpdt/model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "model";

ModelConfig llama(std::string name, int V, int h, int L, int Hq, int Hkv, int f, double theta, bool tied) {
  ModelConfig config;
  config.name = std::move(name);
  config.family = Family::llama;
  config.vocab_size = V;
  config.hidden = h;
  config.layers = L;
  config.heads = Hq;
  config.kv_heads = Hkv;
  config.head_dim = h / Hq;
  config.rotary_dim = config.head_dim;
  config.ffn_hidden = f;
  config.max_positions = 1 << 20;
  config.rope_theta = theta;
  config.norm_eps = 1e-5;
  config.tie_embeddings = tied;
  return config;
}

ModelConfig gpt(std::string name, int V, int h, int L, int Hq, int64_t positions) {
  ModelConfig config;
  config.name = std::move(name);
  config.family = Family::gpt;
  config.vocab_size = V;
  config.hidden = h;
  config.layers = L;
  config.heads = Hq;
  config.kv_heads = Hq;
  config.head_dim = h / Hq;
  config.rotary_dim = 0;
  config.ffn_hidden = 4 * h;
  config.max_positions = positions;
  config.norm_eps = 1e-5;
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

// Field access with errors that name the file and the field.
template <typename T>
T field(const nlohmann::json& json, const char* key, const std::string& where) {
  if (!json.contains(key) || json[key].is_null())
    throw Error(kModule, where + ": missing field '" + key + "'", "is this a Hugging Face config.json?");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)  // no float-to-int undefined behaviour
    return json::integer<T>(json[key], where + ": field '" + key + "'", kModule);
  try {
    return json[key].get<T>();
  } catch (const std::exception&) {
    throw Error(kModule, where + ": field '" + key + "' has the wrong type (" + json::excerpt(json[key]) + ")");
  }
}

template <typename T>
T field_or(const nlohmann::json& json, const char* key, T fallback, const std::string& where) {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return field<T>(json, key, where);
}

}  // namespace

void ModelConfig::validate() const {
  auto positive = [&](int64_t value, const char* what) {
    if (value <= 0)
      throw Error(kModule, "model '" + json::excerpt_text(name) + "': " + what + " must be positive, got " + std::to_string(value));
  };
  positive(vocab_size, "vocab_size");
  positive(hidden, "hidden size");
  positive(layers, "number of layers");
  positive(heads, "number of attention heads");
  positive(kv_heads, "number of key/value heads");
  positive(head_dim, "head dimension");
  positive(ffn_hidden, "MLP hidden size");
  if (heads % kv_heads != 0)
    throw Error(kModule,
                "model '" + json::excerpt_text(name) + "': " + std::to_string(heads) + " query heads cannot be shared evenly by " +
                    std::to_string(kv_heads) + " key/value heads",
                "num_attention_heads must be a multiple of num_key_value_heads");
  if (family == Family::gpt && kv_heads != heads)
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': the GPT family has no grouped-query attention (heads " +
                             std::to_string(heads) + ", kv heads " + std::to_string(kv_heads) + ")");
  if (family == Family::gpt && q_dim() != hidden)
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': hidden size " + std::to_string(hidden) + " is not heads × head_dim (" +
                             std::to_string(heads) + " × " + std::to_string(head_dim) + ")");
  if (uses_rope() && (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0))
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': rotary dims " + std::to_string(rotary_dim) +
                             " must be even and in (0, head_dim = " + std::to_string(head_dim) + "]");
  if (learned_positions()) positive(max_positions, "position table size");
  if (norm_eps <= 0) throw Error(kModule, "model '" + json::excerpt_text(name) + "': norm epsilon must be positive");
}

int64_t ModelConfig::parameter_count() const {
  // The token table, plus everything else (an untied head is in the non-embedding count).
  int64_t count = non_embedding_parameter_count() + int64_t{vocab_size} * hidden;
  if (learned_positions()) count += max_positions * hidden;
  return count;
}

int64_t ModelConfig::non_embedding_parameter_count() const {
  const int64_t h = hidden, f = ffn_hidden;
  const int64_t norm = has_bias() ? 2 * h : h;
  int64_t per_layer = 2 * norm + h * qkv_dim() + int64_t{q_dim()} * h;
  per_layer += family == Family::llama ? 3 * h * f : 2 * h * f;
  if (has_bias()) per_layer += qkv_dim() + h + f + h;
  int64_t count = per_layer * layers + norm;
  if (!tie_embeddings) count += int64_t{vocab_size} * h;
  return count;
}

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
  throw Error(kModule, "unknown model preset '" + name + "'", "use one of " + known + ", or a path to a config.json");
}

ModelConfig parse_hf_config(const std::string& json_text, const std::string& where) {
  const nlohmann::json json = json::parse(json_text, where, kModule, "check the file's syntax");
  if (!json.is_object()) throw Error(kModule, where + " is not a JSON object");
  const std::string type = field<std::string>(json, "model_type", where);
  ModelConfig config;
  config.name = field_or<std::string>(json, "_name_or_path", where, where);
  if (type == "llama" || type == "mistral" || type == "qwen2") {
    config.family = Family::llama;
    config.vocab_size = field<int>(json, "vocab_size", where);
    config.hidden = field<int>(json, "hidden_size", where);
    config.layers = field<int>(json, "num_hidden_layers", where);
    config.heads = field<int>(json, "num_attention_heads", where);
    config.kv_heads = field_or<int>(json, "num_key_value_heads", config.heads, where);
    config.ffn_hidden = field<int>(json, "intermediate_size", where);
    if (config.heads > 0 && config.hidden % config.heads != 0 && !json.contains("head_dim"))
      throw Error(kModule,
                  where + ": hidden_size " + std::to_string(config.hidden) + " is not divisible by " +
                      std::to_string(config.heads) + " attention heads",
                  "fix hidden_size or num_attention_heads, or give head_dim explicitly");
    config.head_dim = field_or<int>(json, "head_dim", config.heads > 0 ? config.hidden / config.heads : 0, where);
    const double partial = field_or<double>(json, "partial_rotary_factor", 1.0, where);
    config.rotary_dim = static_cast<int>(config.head_dim * partial);
    config.rope_theta = field_or<double>(json, "rope_theta", 10000.0, where);
    config.norm_eps = field_or<double>(json, "rms_norm_eps", 1e-6, where);
    config.max_positions = field_or<int64_t>(json, "max_position_embeddings", 4096, where);
    config.tie_embeddings = field_or<bool>(json, "tie_word_embeddings", false, where);
    const std::string act = field_or<std::string>(json, "hidden_act", "silu", where);
    if (act != "silu" && act != "swish")
      throw Error(kModule, where + ": hidden_act '" + json::excerpt_text(act) + "' is not supported for " + type, "use silu (SwiGLU)");
    if (json.contains("rope_scaling") && !json["rope_scaling"].is_null())
      throw Error(kModule, where + ": rope_scaling is not supported yet", "remove it to train with plain RoPE");
    if (field_or<bool>(json, "attention_bias", false, where) || field_or<bool>(json, "mlp_bias", false, where))
      throw Error(kModule, where + ": Llama with biases (attention_bias/mlp_bias) is not supported");
  } else if (type == "gpt2") {
    config.family = Family::gpt;
    config.vocab_size = field<int>(json, "vocab_size", where);
    config.hidden = field<int>(json, "n_embd", where);
    config.layers = field<int>(json, "n_layer", where);
    config.heads = field<int>(json, "n_head", where);
    config.kv_heads = config.heads;
    if (config.heads > 0 && config.hidden % config.heads != 0)
      throw Error(kModule,
                  where + ": n_embd " + std::to_string(config.hidden) + " is not divisible by n_head " +
                      std::to_string(config.heads),
                  "fix n_embd or n_head");
    config.head_dim = config.heads > 0 ? config.hidden / config.heads : 0;
    config.ffn_hidden = field_or<int>(json, "n_inner", 4 * config.hidden, where);
    config.max_positions = field<int64_t>(json, "n_positions", where);
    config.norm_eps = field_or<double>(json, "layer_norm_epsilon", 1e-5, where);
    config.tie_embeddings = field_or<bool>(json, "tie_word_embeddings", true, where);
    const std::string act = field_or<std::string>(json, "activation_function", "gelu_new", where);
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw Error(kModule, where + ": activation_function '" + json::excerpt_text(act) + "' is not supported",
                  "use gelu_new (the tanh form of GELU)");
  } else {
    throw Error(kModule, where + ": model_type '" + json::excerpt_text(type) + "' is not supported", "use llama, mistral, qwen2 or gpt2");
  }
  config.validate();
  return config;
}

ModelConfig load_hf_config(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw Error(kModule, "cannot open model config " + path, "check the path");
  std::stringstream text;
  text << file.rdbuf();
  return parse_hf_config(text.str(), path);
}

std::string to_hf_config_json(const ModelConfig& config) {
  nlohmann::ordered_json json;
  if (config.family == Family::llama) {
    json["architectures"] = {"LlamaForCausalLM"};
    json["model_type"] = "llama";
    json["vocab_size"] = config.vocab_size;
    json["hidden_size"] = config.hidden;
    json["intermediate_size"] = config.ffn_hidden;
    json["num_hidden_layers"] = config.layers;
    json["num_attention_heads"] = config.heads;
    json["num_key_value_heads"] = config.kv_heads;
    json["head_dim"] = config.head_dim;
    json["hidden_act"] = "silu";
    json["rms_norm_eps"] = config.norm_eps;
    json["rope_theta"] = config.rope_theta;
    if (config.rotary_dim != config.head_dim)
      json["partial_rotary_factor"] = static_cast<double>(config.rotary_dim) / config.head_dim;
    json["max_position_embeddings"] = config.max_positions;
    json["tie_word_embeddings"] = config.tie_embeddings;
    json["attention_bias"] = false;
    json["mlp_bias"] = false;
  } else {
    json["architectures"] = {"GPT2LMHeadModel"};
    json["model_type"] = "gpt2";
    json["vocab_size"] = config.vocab_size;
    json["n_embd"] = config.hidden;
    json["n_layer"] = config.layers;
    json["n_head"] = config.heads;
    json["n_inner"] = config.ffn_hidden;
    json["n_positions"] = config.max_positions;
    json["layer_norm_epsilon"] = config.norm_eps;
    json["activation_function"] = "gelu_new";
    json["tie_word_embeddings"] = config.tie_embeddings;
  }
  json["torch_dtype"] = "float32";
  return json.dump(2) + "\n";
}

ModelConfig resolve_model(const std::string& name_or_path) {
  if (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json")
    return load_hf_config(name_or_path);
  ModelConfig config = preset(name_or_path);
  config.validate();
  return config;
}

}  // namespace fpdt::model
