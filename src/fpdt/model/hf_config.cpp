// Hugging Face config.json read into a ModelConfig by the field table (hf_fields.cpp) and written from
// one (see config.h): the sizes of each family, the sliding window, the generation token ids; RoPE is
// rope_parameters.cpp's. Also the first field in which two configs differ, and generation_config.json.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/model/config.h"
#include "fpdt/model/hf_reader.h"

namespace fpdt::model {

namespace {

using detail::excerpt;
using detail::HfReader;
using detail::Json;
using detail::kModule;
using detail::kTokenIdFields;
using detail::read_rope;
using detail::rope_parameters_object;

// The sizes both families have, under each family's names.
void read_sizes(const HfReader& r, ModelConfig& config, const char* hidden, const char* layers, const char* heads) {
  config.vocab_size = r.integer("vocab_size", 1);
  config.hidden = r.integer(hidden, 1);
  config.layers = r.integer(layers, 1);
  config.heads = r.integer(heads, 1);
}

void read_llama_like(const HfReader& r, ModelConfig& config) {
  config.family = Family::llama;
  read_sizes(r, config, "hidden_size", "num_hidden_layers", "num_attention_heads");
  // Absent: Hq for llama, transformers' class default for mistral (8) and qwen2 (32).
  config.kv_heads = r.value("num_key_value_heads").is_null() ? config.heads : r.integer("num_key_value_heads", 1);
  config.ffn_hidden = r.integer("intermediate_size", 1);
  // transformers' LlamaConfig refuses h % Hq != 0 even with head_dim; Mistral and Qwen2 only need it
  // to derive D.
  if (config.hidden % config.heads != 0 && (config.type == ModelType::llama || !r.present("head_dim")))
    throw Error(kModule,
                r.where() + ": hidden_size " + std::to_string(config.hidden) + " is not divisible by " +
                    std::to_string(config.heads) + " attention heads",
                config.type == ModelType::llama ? "fix hidden_size or num_attention_heads"
                                                : "fix hidden_size or num_attention_heads, or give head_dim explicitly");
  config.head_dim = r.present("head_dim") ? r.integer("head_dim", 1) : config.hidden / config.heads;
  config.rotary_dim = config.head_dim;
  config.norm_eps = r.real("rms_norm_eps");
  config.max_positions = r.integer("max_position_embeddings", 1);
  config.tie_embeddings = r.boolean("tie_word_embeddings");
  const std::string act = r.text("hidden_act");
  if (act != "silu" && act != "swish")
    r.bad_value("hidden_act", r.value("hidden_act"), "is not supported for " + r.type_name(), "use silu (SwiGLU)");
  read_rope(r, config);

  if (config.type == ModelType::mistral && !r.value("sliding_window").is_null()) {
    config.sliding_window = r.integer("sliding_window", 1);  // absent: transformers' default 4096
    config.sliding_layers.assign(static_cast<size_t>(config.layers), true);
  }
  if (config.type == ModelType::qwen2) {
    // transformers' Qwen2Config: the window exists only with use_sliding_window; layer i slides when
    // layer_types says so, or (layer_types absent) when i ≥ max_window_layers.
    const bool use_window = r.boolean("use_sliding_window");
    const int64_t window = use_window && !r.value("sliding_window").is_null() ? r.integer("sliding_window", 1) : 0;
    const int first_sliding = r.integer("max_window_layers", 0);
    std::vector<bool> sliding(static_cast<size_t>(config.layers), false);
    const Json types = r.value("layer_types");
    if (!types.is_null()) {
      if (!types.is_array() || types.size() != static_cast<size_t>(config.layers))
        r.bad_value("layer_types", types, "must list one entry per layer (" + std::to_string(config.layers) + ")");
      for (size_t i = 0; i < types.size(); ++i) {
        const std::string kind = types[i].is_string() ? types[i].get<std::string>() : "";
        if (kind != "full_attention" && kind != "attention" && kind != "sliding_attention")
          r.bad_value("layer_types", types[i], "is not full_attention or sliding_attention");
        sliding[i] = kind == "sliding_attention";
      }
    } else {
      for (int i = 0; i < config.layers; ++i) sliding[static_cast<size_t>(i)] = window > 0 && i >= first_sliding;
    }
    if (window > 0) {
      config.sliding_window = window;
      config.sliding_layers = sliding;
    }
  }
}

void read_gpt2(const HfReader& r, ModelConfig& config) {
  config.family = Family::gpt;
  read_sizes(r, config, "n_embd", "n_layer", "n_head");
  config.kv_heads = config.heads;
  if (config.hidden % config.heads != 0)
    throw Error(kModule,
                r.where() + ": n_embd " + std::to_string(config.hidden) + " is not divisible by n_head " +
                    std::to_string(config.heads),
                "fix n_embd or n_head");
  config.head_dim = config.hidden / config.heads;
  if (r.present("n_inner")) {
    config.ffn_hidden = r.integer("n_inner", 1);
  } else {
    const int64_t f = 4 * int64_t{config.hidden};
    if (f > std::numeric_limits<int32_t>::max()) r.bad_value("n_embd", r.value("n_embd"), "makes 4·n_embd exceed 2^31 - 1");
    config.ffn_hidden = static_cast<int>(f);
  }
  config.max_positions = r.integer("n_positions", 1);
  config.norm_eps = r.real("layer_norm_epsilon");
  config.tie_embeddings = r.boolean("tie_word_embeddings");
  config.scale_attn_weights = r.boolean("scale_attn_weights");
  config.scale_attn_by_inverse_layer_idx = r.boolean("scale_attn_by_inverse_layer_idx");
  const std::string act = r.text("activation_function");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.bad_value("activation_function", r.value("activation_function"), "is not supported",
                "use gelu_new (the tanh form of GELU)");
}

// The generation token ids the config states (see ModelConfig::bos_token_id), each in [0, V).
void read_token_ids(const HfReader& r, const Json& json, ModelConfig& config) {
  for (const auto& [name, member] : kTokenIdFields) {
    if (!json.contains(name)) continue;
    const Json& value = json[name];
    const bool list_allowed = std::string(name) == "eos_token_id";
    // Older conversions (Llama 1's, among others) write pad_token_id -1 for "no padding token": null.
    if (std::string(name) == "pad_token_id" && value.is_number_integer() && !value.is_number_unsigned() &&
        value.get<int64_t>() < 0) {
      config.*member = TokenIds{};
      continue;
    }
    TokenIds ids;
    ids.list = value.is_array();
    if (ids.list && !list_allowed) r.wrong_type(name, value, "a token id or null");
    if (!value.is_null() && !value.is_array() && !value.is_number_integer())
      r.wrong_type(name, value, list_allowed ? "a token id, a list of them, or null" : "a token id or null");
    for (const Json& id : ids.list ? value : value.is_null() ? Json::array() : Json::array({value})) {
      if (!id.is_number_integer()) r.wrong_type(name, value, "a list of token ids");
      const bool inside = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(config.vocab_size)
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() < config.vocab_size;
      if (!inside)
        r.bad_value(name, value,
                    (ids.list ? "holds " + excerpt(id) + ", which is" : std::string("is")) +
                        " not a token id of the vocabulary [0, " + std::to_string(config.vocab_size) + ")",
                    "generate() would use a token the model cannot produce; fix the id, or set the field to null");
      ids.ids.push_back(id.get<int>());
    }
    config.*member = std::move(ids);
  }
}

// A stated token id field as config.json writes it; null when not stated.
Json token_ids_json(const std::optional<TokenIds>& stated) {
  if (!stated || (!stated->list && stated->ids.empty())) return nullptr;
  return stated->list ? Json(stated->ids) : Json(stated->ids.front());
}

nlohmann::ordered_json hf_config_object(const ModelConfig& config) {
  nlohmann::ordered_json json;
  if (config.family == Family::llama) {
    const char* architecture = config.type == ModelType::mistral ? "MistralForCausalLM"
                               : config.type == ModelType::qwen2 ? "Qwen2ForCausalLM"
                                                                 : "LlamaForCausalLM";
    json["architectures"] = {architecture};
    json["model_type"] = model_type_name(config.type);
    json["vocab_size"] = config.vocab_size;
    json["hidden_size"] = config.hidden;
    json["intermediate_size"] = config.ffn_hidden;
    json["num_hidden_layers"] = config.layers;
    json["num_attention_heads"] = config.heads;
    json["num_key_value_heads"] = config.kv_heads;
    json["head_dim"] = config.head_dim;
    json["hidden_act"] = "silu";
    json["rms_norm_eps"] = config.norm_eps;
    json["max_position_embeddings"] = config.max_positions;
    json["tie_word_embeddings"] = config.tie_embeddings;
    // RoPE in both layouts, equal: transformers ≥ 5 reads rope_parameters, older readers rope_theta
    // and rope_scaling (transformers 5 takes rope_scaling over rope_parameters when both are there).
    json["rope_parameters"] = rope_parameters_object(config, true);
    json["rope_theta"] = config.rope_theta;
    if (config.rope_scaling.type != RopeType::none) json["rope_scaling"] = rope_parameters_object(config, false);
    if (config.type == ModelType::llama) {
      json["attention_bias"] = false;
      json["mlp_bias"] = false;
    }
    if (config.type == ModelType::mistral)
      json["sliding_window"] = config.sliding_window > 0 ? Json(config.sliding_window) : Json(nullptr);
    if (config.type == ModelType::qwen2) {
      json["use_sliding_window"] = config.sliding_window > 0;
      json["sliding_window"] = config.sliding_window > 0 ? Json(config.sliding_window) : Json(nullptr);
      int first_sliding = config.layers;
      Json types = Json::array();
      for (int layer = 0; layer < config.layers; ++layer) {
        const bool sliding = config.window(layer) > 0;
        if (sliding && first_sliding == config.layers) first_sliding = layer;
        types.push_back(sliding ? "sliding_attention" : "full_attention");
      }
      json["max_window_layers"] = first_sliding;
      json["layer_types"] = types;
    }
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
    json["scale_attn_weights"] = config.scale_attn_weights;
    json["scale_attn_by_inverse_layer_idx"] = config.scale_attn_by_inverse_layer_idx;
  }
  for (const auto& [key, member] : kTokenIdFields) json[key] = token_ids_json(config.*member);
  json["torch_dtype"] = "float32";
  return json;
}


}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& where) {
  const Json json = json::parse(json_text, where, kModule, "check the file's syntax");
  if (!json.is_object()) throw Error(kModule, where + " is not a JSON object");
  if (!json.contains("model_type"))
    throw Error(kModule, where + ": missing field 'model_type'", "is this a Hugging Face config.json?");
  if (!json["model_type"].is_string())
    throw Error(kModule, where + ": field 'model_type' has the wrong type (" + excerpt(json["model_type"]) + ")");
  const std::string type = json["model_type"].get<std::string>();
  ModelConfig config;
  if (type == "llama") config.type = ModelType::llama;
  else if (type == "mistral") config.type = ModelType::mistral;
  else if (type == "qwen2") config.type = ModelType::qwen2;
  else if (type == "gpt2") config.type = ModelType::gpt2;
  else throw Error(kModule, where + ": model_type '" + json::excerpt_text(type) + "' is not supported", "use llama, mistral, qwen2 or gpt2");

  const HfReader reader(json, config.type, where);
  reader.check_fields();
  const std::string name = reader.text("_name_or_path");
  config.name = name.empty() ? where : name;
  if (config.type == ModelType::gpt2)
    read_gpt2(reader, config);
  else
    read_llama_like(reader, config);
  read_token_ids(reader, json, config);
  config.ignored_fields = reader.ignored();
  config.validate();
  return config;
}

ModelConfig load_hf_config(const std::string& path) {
  return parse_hf_config(read_text_file(path, kModule, "give a Hugging Face config.json (or a folder holding one)"), path);
}

std::string to_hf_config_json(const ModelConfig& config) { return hf_config_object(config).dump(2) + "\n"; }

std::optional<ConfigDifference> config_difference(const ModelConfig& saved, const ModelConfig& given) {
  nlohmann::ordered_json a = hf_config_object(saved), b = hf_config_object(given);
  for (const auto& [key, member] : kTokenIdFields)
    if (!(saved.*member) || !(given.*member)) {
      a.erase(key);
      b.erase(key);
    }
  for (const auto& [key, value] : a.items())
    if (!b.contains(key) || b[key] != value)
      return ConfigDifference{key, json::excerpt(value), b.contains(key) ? json::excerpt(b[key]) : "absent"};
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return ConfigDifference{key, "absent", json::excerpt(value)};
  return std::nullopt;
}

std::string read_generation_config(const std::string& folder) {
  const std::string path = path_in(folder, kGenerationConfigFile);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return "";
  std::string text = read_text_file(path, kModule, "remove it, or fix it: it holds generate()'s defaults");
  if (!json::parse(text, path, kModule, "fix or remove it").is_object())
    throw Error(kModule, path + " is not a JSON object", "fix or remove it: it holds generate()'s defaults");
  return text;
}

}  // namespace fpdt::model
