// Model presets, validation, and Hugging Face config.json read field by field (see config.h). The
// table kFields names every field fpdt knows for each model type and what it does with it. A field
// not in the table is what transformers ignores for that type (its config class keeps it as an
// attribute, its modelling code never reads it): fpdt ignores it too and lists it; the refused
// fields at values that would change the model are named together in one clear error.
#include "fpdt/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/base/file_io.h"
#include "fpdt/model/rope.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "model";
using Json = nlohmann::json;

// ---- presets -------------------------------------------------------------------------------------

ModelConfig llama(std::string name, int V, int h, int L, int Hq, int Hkv, int f, double theta, bool tied) {
  ModelConfig config;
  config.name = std::move(name);
  config.type = ModelType::llama;
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
  config.type = ModelType::gpt2;
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

// ---- the field table -----------------------------------------------------------------------------

constexpr uint8_t kLlama = 1, kMistral = 2, kQwen2 = 4, kGpt2 = 8;
constexpr uint8_t kLlamaLike = kLlama | kMistral | kQwen2, kAll = kLlamaLike | kGpt2;

uint8_t type_bit(ModelType type) {
  switch (type) {
    case ModelType::llama: return kLlama;
    case ModelType::mistral: return kMistral;
    case ModelType::qwen2: return kQwen2;
    case ModelType::gpt2: return kGpt2;
  }
  return 0;
}

// kept: read, checked and written back into checkpoints, but not used by training.
// alias: transformers' attribute_map sends it to another field (`value` names it); it must agree.
enum class Use { used, kept, harmless, alias, refused };

struct Field {
  const char* name;
  uint8_t types;  // the model types it belongs to
  Use use;
  // used: transformers' default when the field is absent, as JSON ("" = required);
  // refused: the values accepted because they change nothing, as JSON, separated by '|';
  // alias: the field it names.
  const char* value;
  const char* note;
};

// auto_map is not in the table, so that it is listed among the ignored fields with this note:
// transformers without trust_remote_code builds the model of model_type from its own code and leaves
// the remote code unrun; so does fpdt.
constexpr const char* kAutoMapNote = "names remote modelling code, which is not run, as transformers without trust_remote_code";

// Every field of transformers 5.24's LlamaConfig, MistralConfig, Qwen2Config and GPT2Config and of
// their base PreTrainedConfig, plus the legacy ones configs on the Hub still carry.
constexpr Field kFields[] = {
    // What the model is.
    {"model_type", kAll, Use::used, "", "llama, mistral, qwen2 or gpt2"},
    {"_name_or_path", kAll, Use::used, "\"\"", "shown as the model's name"},
    {"architectures", kAll, Use::harmless, "", "the Python class; the weights decide what loads (an extra head is an unexpected tensor)"},
    {"transformers_version", kAll, Use::harmless, "", "the version that wrote the file"},
    // Llama family shapes.
    {"vocab_size", kLlamaLike, Use::used, "", "V"},
    {"hidden_size", kLlamaLike, Use::used, "", "h"},
    {"intermediate_size", kLlamaLike, Use::used, "", "f, the SwiGLU width"},
    {"num_hidden_layers", kLlamaLike, Use::used, "", "L"},
    {"num_attention_heads", kLlamaLike, Use::used, "", "Hq"},
    {"num_key_value_heads", kLlama, Use::used, "null", "Hkv (absent: Hq)"},
    {"num_key_value_heads", kMistral, Use::used, "8", "Hkv"},
    {"num_key_value_heads", kQwen2, Use::used, "32", "Hkv"},
    {"head_dim", kLlamaLike, Use::used, "null", "D (absent: h / Hq)"},
    {"hidden_act", kLlamaLike, Use::used, "\"silu\"", "silu (or swish): the SwiGLU gate; any other is refused"},
    {"rms_norm_eps", kLlamaLike, Use::used, "1e-6", "RMSNorm epsilon"},
    {"max_position_embeddings", kLlama, Use::used, "2048", "context length; the default original length of llama3/yarn"},
    {"max_position_embeddings", kMistral, Use::used, "131072", "context length; the default original length of llama3/yarn"},
    {"max_position_embeddings", kQwen2, Use::used, "32768", "context length; the default original length of llama3/yarn"},
    {"tie_word_embeddings", kLlamaLike, Use::used, "false", "LM head shares the token embedding"},
    {"rope_parameters", kLlamaLike, Use::used, "null", "RoPE θ and scaling (transformers ≥ 5 layout)"},
    {"rope_scaling", kLlamaLike, Use::used, "null", "RoPE scaling (older layout; must agree with rope_parameters)"},
    {"rope_theta", kLlamaLike, Use::used, "null", "RoPE θ (older layout; absent everywhere: 10000)"},
    {"original_max_position_embeddings", kLlamaLike, Use::used, "null", "pretraining length of llama3/yarn (as transformers, it overrides rope_parameters')"},
    {"partial_rotary_factor", kLlamaLike, Use::refused, "1|null", "transformers' Llama family rotates the whole head whatever this says"},
    {"attention_bias", kLlama | kMistral, Use::refused, "false", "biases on q/k/v/o projections are not built for these types"},
    {"mlp_bias", kLlama, Use::refused, "false", "biases on the MLP projections are not built"},
    {"pretraining_tp", kLlama, Use::harmless, "", "tensor-parallel slicing at pretraining; the same maths"},
    {"attention_dropout", kLlamaLike, Use::harmless, "", "dropout (fpdt trains without dropout)"},
    {"sliding_window", kMistral, Use::used, "4096", "W: a query sees the keys (q − W, q] in every layer (null: none)"},
    {"layer_types", kMistral, Use::refused, "null", "per-layer attention is Ministral's; transformers' Mistral ignores it"},
    {"use_sliding_window", kQwen2, Use::used, "false", "turns sliding_window on"},
    {"sliding_window", kQwen2, Use::used, "4096", "W for the layers that slide (null: none)"},
    {"max_window_layers", kQwen2, Use::used, "28", "layers from this index on slide, when layer_types is absent"},
    {"layer_types", kQwen2, Use::used, "null", "full_attention / sliding_attention per layer"},
    {"use_mrope", kQwen2, Use::refused, "false", "multimodal RoPE (Qwen2-VL) is not built"},
    // GPT-2.
    {"vocab_size", kGpt2, Use::used, "", "V"},
    {"n_embd", kGpt2, Use::used, "", "h"},
    {"n_layer", kGpt2, Use::used, "", "L"},
    {"n_head", kGpt2, Use::used, "", "Hq = Hkv"},
    {"n_positions", kGpt2, Use::used, "", "rows of the learned position table"},
    {"hidden_size", kGpt2, Use::alias, "n_embd", "GPT2Config's attribute_map reads it as n_embd"},
    {"num_hidden_layers", kGpt2, Use::alias, "n_layer", "GPT2Config's attribute_map reads it as n_layer"},
    {"num_attention_heads", kGpt2, Use::alias, "n_head", "GPT2Config's attribute_map reads it as n_head"},
    {"max_position_embeddings", kGpt2, Use::alias, "n_positions", "GPT2Config's attribute_map reads it as n_positions"},
    {"n_inner", kGpt2, Use::used, "null", "f (null: 4h)"},
    {"activation_function", kGpt2, Use::used, "\"gelu_new\"", "gelu_new or gelu_pytorch_tanh (tanh GELU); any other is refused"},
    {"layer_norm_epsilon", kGpt2, Use::used, "1e-5", "LayerNorm epsilon"},
    {"tie_word_embeddings", kGpt2, Use::used, "true", "LM head shares the token embedding"},
    {"scale_attn_weights", kGpt2, Use::used, "true", "softmax scale 1/sqrt(D) (false: 1)"},
    {"scale_attn_by_inverse_layer_idx", kGpt2, Use::used, "false", "softmax scale further divided by layer + 1"},
    {"reorder_and_upcast_attn", kGpt2, Use::harmless, "", "fp32 attention under mixed precision; fpdt computes it in fp32"},
    {"n_ctx", kGpt2, Use::harmless, "", "legacy copy of n_positions; transformers ignores it"},
    {"resid_pdrop", kGpt2, Use::harmless, "", "dropout (fpdt trains without dropout)"},
    {"embd_pdrop", kGpt2, Use::harmless, "", "dropout (fpdt trains without dropout)"},
    {"attn_pdrop", kGpt2, Use::harmless, "", "dropout (fpdt trains without dropout)"},
    {"summary_type", kGpt2, Use::harmless, "", "GPT2DoubleHeadsModel's classifier"},
    {"summary_use_proj", kGpt2, Use::harmless, "", "GPT2DoubleHeadsModel's classifier"},
    {"summary_activation", kGpt2, Use::harmless, "", "GPT2DoubleHeadsModel's classifier"},
    {"summary_proj_to_labels", kGpt2, Use::harmless, "", "GPT2DoubleHeadsModel's classifier"},
    {"summary_first_dropout", kGpt2, Use::harmless, "", "GPT2DoubleHeadsModel's classifier"},
    {"add_cross_attention", kGpt2, Use::refused, "false", "cross-attention to an encoder is not built"},
    // Every type: what the Python objects do around the model.
    {"dtype", kAll, Use::harmless, "", "storage type of the weights; fpdt keeps fp32 master weights"},
    {"torch_dtype", kAll, Use::harmless, "", "storage type of the weights; fpdt keeps fp32 master weights"},
    {"initializer_range", kAll, Use::harmless, "", "init of new weights (fpdt's own init: N(0, 0.02))"},
    {"use_cache", kAll, Use::harmless, "", "inference KV cache"},
    {"bos_token_id", kAll, Use::kept, "",
     "generate()'s first token: an id in [0, V) or null (absent: the training tokenizer's)"},
    {"eos_token_id", kAll, Use::kept, "",
     "generate() stops on it: an id in [0, V), a list of them, or null (absent: the training tokenizer's)"},
    {"pad_token_id", kAll, Use::kept, "",
     "padding of batched generation: an id in [0, V) or null (a negative id, older conversions' 'none': null)"},
    {"sep_token_id", kAll, Use::harmless, "", "token ids for generation and padding"},
    {"decoder_start_token_id", kAll, Use::harmless, "", "token ids for generation and padding"},
    {"output_hidden_states", kAll, Use::harmless, "", "what the Python model returns"},
    {"output_attentions", kAll, Use::harmless, "", "what the Python model returns"},
    {"return_dict", kAll, Use::harmless, "", "what the Python model returns"},
    {"torchscript", kAll, Use::harmless, "", "what the Python model returns"},
    {"chunk_size_feed_forward", kAll, Use::harmless, "", "computes the MLP in token chunks; the same maths"},
    {"is_decoder", kAll, Use::harmless, "", "decoder-only models are decoders"},
    {"id2label", kAll, Use::harmless, "", "classification heads"},
    {"label2id", kAll, Use::harmless, "", "classification heads"},
    {"num_labels", kAll, Use::harmless, "", "classification heads"},
    {"problem_type", kAll, Use::harmless, "", "classification heads"},
    {"finetuning_task", kAll, Use::harmless, "", "classification heads"},
    {"tokenizer_class", kAll, Use::harmless, "", "tokenizer and pipeline presets"},
    {"prefix", kAll, Use::harmless, "", "tokenizer and pipeline presets"},
    {"task_specific_params", kAll, Use::harmless, "", "tokenizer and pipeline presets"},
    {"attn_implementation", kAll, Use::harmless, "", "which Python kernel computes attention; the same maths"},
    {"_attn_implementation", kAll, Use::harmless, "", "which Python kernel computes attention; the same maths"},
    {"_attn_implementation_autoset", kAll, Use::harmless, "", "which Python kernel computes attention; the same maths"},
    {"_commit_hash", kAll, Use::harmless, "", "the Hub revision it came from"},
    {"gradient_checkpointing", kAll, Use::harmless, "", "legacy training switch; the same maths"},
    {"use_bfloat16", kAll, Use::harmless, "", "legacy training switch; the same maths"},
    {"tf_legacy_loss", kAll, Use::harmless, "", "legacy training switch; the same maths"},
    {"xla_device", kAll, Use::harmless, "", "legacy training switch; the same maths"},
    {"is_encoder_decoder", kAll, Use::refused, "false", "encoder-decoder models are not built"},
    {"tie_encoder_decoder", kAll, Use::refused, "false", "encoder-decoder models are not built"},
    {"cross_attention_hidden_size", kAll, Use::refused, "null", "cross-attention is not built"},
    {"pruned_heads", kAll, Use::refused, "{}|null", "pruned attention heads change the shapes per layer"},
    {"quantization_config", kAll, Use::refused, "null", "quantized weights are not read; load a float checkpoint"},
};

// transformers moves these to generation_config.json and ignores them in config.json.
constexpr const char* kGenerationFields[] = {
    "assistant_confidence_threshold", "assistant_lookbehind", "bad_words_ids", "begin_suppress_tokens",
    "diversity_penalty", "do_sample", "early_stopping", "encoder_no_repeat_ngram_size",
    "encoder_repetition_penalty", "epsilon_cutoff", "eta_cutoff", "exponential_decay_length_penalty",
    "forced_bos_token_id", "forced_eos_token_id", "length_penalty", "max_length", "min_length",
    "no_repeat_ngram_size", "num_assistant_tokens", "num_assistant_tokens_schedule", "num_beam_groups",
    "num_beams", "num_return_sequences", "output_scores", "remove_invalid_values", "repetition_penalty",
    "return_dict_in_generate", "suppress_tokens", "target_lookbehind", "temperature", "top_k", "top_p",
    "typical_p"};
constexpr const char* kGenerationNote = "generation defaults (transformers reads them from generation_config.json)";

// The generation token ids: their config.json keys and fields.
constexpr std::pair<const char*, std::optional<TokenIds> ModelConfig::*> kTokenIdFields[] = {
    {"bos_token_id", &ModelConfig::bos_token_id},
    {"eos_token_id", &ModelConfig::eos_token_id},
    {"pad_token_id", &ModelConfig::pad_token_id}};

// The keys of a rope_parameters object, per rope_type (transformers' _validate_*_rope_parameters).
struct RopeKeys {
  const char* type;
  std::vector<std::string> keys;  // beside rope_type / type, rope_theta and partial_rotary_factor
};
const std::vector<RopeKeys>& rope_keys() {
  static const std::vector<RopeKeys> table = {
      {"default", {}},
      {"linear", {"factor"}},
      {"dynamic", {"factor"}},
      {"llama3", {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
      {"yarn",
       {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim", "truncate"}},
  };
  return table;
}

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : ", ") + word;
  return text;
}

// A refused field's accepted values ("false|null") as words: "`false` or `null`" with quote "`".
std::string either(const std::string& values, const std::string& quote) {
  std::string text;
  std::stringstream list(values);
  std::string one;
  while (std::getline(list, one, '|')) text += (text.empty() ? "" : " or ") + quote + one + quote;
  return text;
}

std::string excerpt(const Json& value) { return json::excerpt(value, 57); }

// Reads a config.json object by the field table, for one model type. A key transformers ignores is
// listed (a file's) or refused (the command line's, where an unknown word is a typo).
enum class UnknownKeys { listed, refused };
class HfReader {
 public:
  HfReader(const Json& json, ModelType type, std::string where, UnknownKeys unknown = UnknownKeys::listed)
      : json_(json), type_(type), bit_(type_bit(type)), where_(std::move(where)), unknown_(unknown) {}

  const std::string& where() const { return where_; }
  std::string type_name() const { return model_type_name(type_); }

  // Keys outside the table are ignored (listed by ignored()); refused keys must hold an accepted
  // value, and every one that does not is named in one error.
  void check_fields() const {
    std::string refused;
    for (const auto& [key, value] : json_.items()) {
      bool generation = false;
      for (const char* name : kGenerationFields) generation = generation || key == name;
      if (generation) continue;
      const Field* field = find(key.c_str());
      if (field == nullptr) {
        ignore(key);
        continue;
      }
      if (field->use == Use::alias && value != this->value(field->value)) {
        refused += std::string(refused.empty() ? "" : "; ") + "field '" + key + "' = " + excerpt(value) +
                   " disagrees with " + field->value + " " + excerpt(this->value(field->value)) + " (" + field->note + ")";
        continue;
      }
      if (field->use != Use::refused || accepted(*field, value)) continue;
      refused += std::string(refused.empty() ? "" : "; ") + "field '" + key + "' = " + excerpt(value) + " (" + field->note +
                 "; fpdt accepts only " + either(field->value, "") + ")";
    }
    if (!refused.empty()) throw Error(kModule, where_ + ": refused for model_type " + type_name() + ": " + refused,
                                      "remove or change these fields; docs/hf_config.md lists what each one means");
  }

  // A key transformers ignores for this type: a config.json field outside the table, or a key of a
  // RoPE object that transformers' RoPE check only warns about.
  bool lists_unknown_keys() const { return unknown_ == UnknownKeys::listed; }
  void ignore(const std::string& name) const { ignored_.push_back(json::excerpt_text(name)); }
  const std::vector<std::string>& ignored() const { return ignored_; }

  bool present(const char* name) const { return json_.contains(name) && !json_[name].is_null(); }

  // The field's value, or transformers' default for this type when absent.
  Json value(const char* name) const {
    if (json_.contains(name)) return json_[name];
    const Field* field = find(name);
    FPDT_ASSERT(field != nullptr && field->use == Use::used);
    if (field->value[0] == '\0')
      throw Error(kModule, where_ + ": missing field '" + std::string(name) + "' (" + field->note + ")",
                  "is this a Hugging Face config.json of model_type " + type_name() + "?");
    return Json::parse(field->value);
  }

  // A JSON integer in [min, INT32_MAX] (larger sizes would overflow the kernels' int arguments).
  int integer(const char* name, int64_t min) const { return integer_value(value(name), name, min); }
  int integer_value(const Json& value, const std::string& name, int64_t min) const {
    if (!value.is_number_integer()) wrong_type(name, value, "a whole number");
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMax)) out_of_range(name, value, min);
    const int64_t number = value.get<int64_t>();
    if (number < min || number > kMax) out_of_range(name, value, min);
    return static_cast<int>(number);
  }
  double real(const char* name) const { return real_value(value(name), name); }
  double real_value(const Json& value, const std::string& name) const {
    if (!value.is_number() || !std::isfinite(value.get<double>())) wrong_type(name, value, "a finite number");
    return value.get<double>();
  }
  bool boolean(const char* name) const {
    const Json v = value(name);
    if (!v.is_boolean()) wrong_type(name, v, "true or false");
    return v.get<bool>();
  }
  std::string text(const char* name) const {
    const Json v = value(name);
    if (!v.is_string()) wrong_type(name, v, "a string");
    return v.get<std::string>();
  }

  [[noreturn]] void wrong_type(const std::string& name, const Json& value, const char* want) const {
    throw Error(kModule, where_ + ": field '" + json::excerpt_text(name) + "' has the wrong type (" + excerpt(value) + ", expected " + want + ")");
  }
  [[noreturn]] void out_of_range(const std::string& name, const Json& value, int64_t min) const {
    // nlohmann reads 0 and every other non-negative integer as unsigned: compare the value, not its kind.
    const bool too_small = value.is_number_unsigned() ? value.get<uint64_t>() < static_cast<uint64_t>(std::max<int64_t>(min, 0))
                                                      : value.get<int64_t>() < min;
    throw Error(kModule,
                where_ + ": field '" + json::excerpt_text(name) + "' = " + excerpt(value) + " is outside [" + std::to_string(min) + ", " +
                    std::to_string(std::numeric_limits<int32_t>::max()) + "]",
                too_small ? "a size must be at least " + std::to_string(min)
                          : "sizes beyond 2^31 - 1 are refused (the kernels index with 32-bit sizes)");
  }
  [[noreturn]] void bad_value(const std::string& name, const Json& value, const std::string& why,
                              const std::string& hint = "") const {
    throw Error(kModule, where_ + ": field '" + json::excerpt_text(name) + "' = " + excerpt(value) + " " + why, hint);
  }

 private:
  const Field* find(const char* name) const {
    for (const Field& field : kFields)
      if ((field.types & bit_) != 0 && std::string(field.name) == name) return &field;
    return nullptr;
  }
  static bool accepted(const Field& field, const Json& value) {
    std::stringstream values(field.value);
    std::string one;
    while (std::getline(values, one, '|'))
      if (Json::parse(one) == value) return true;
    return false;
  }
  const Json& json_;
  ModelType type_;
  uint8_t bit_;
  std::string where_;
  UnknownKeys unknown_;
  mutable std::vector<std::string> ignored_;
};

// ---- RoPE ----------------------------------------------------------------------------------------

RopeType rope_type_from_name(const std::string& name, const std::string& where) {
  if (name == "default") return RopeType::none;
  if (name == "linear") return RopeType::linear;
  if (name == "dynamic") return RopeType::dynamic;
  if (name == "llama3") return RopeType::llama3;
  if (name == "yarn") return RopeType::yarn;
  throw Error(kModule, where + ": rope_type '" + json::excerpt_text(name) + "' is not supported",
              "use default, linear, llama3 or yarn (dynamic is read but not trained)");
}

// Reads one rope_parameters object (keys as in transformers) into theta and scaling. `object_name`
// names it in errors; `max_positions` and `original_override` are the config's, for the defaults.
void read_rope_object(const HfReader& r, const Json& rope, const std::string& object_name, int64_t max_positions,
                      std::optional<int64_t> original_override, std::optional<double>& theta, RopeScaling& scaling) {
  const std::string where = object_name + " ";
  if (!rope.is_object()) r.wrong_type(object_name, rope, "an object");
  if (rope.contains("rope_type") && rope.contains("type") && rope["rope_type"] != rope["type"])
    r.bad_value(object_name + ".type", rope["type"], "disagrees with rope_type " + excerpt(rope["rope_type"]));
  const Json type_value = rope.contains("rope_type") ? rope["rope_type"] : rope.contains("type") ? rope["type"] : Json("default");
  if (!type_value.is_string()) r.wrong_type(object_name + ".rope_type", type_value, "a string");
  const std::string type_name = type_value.get<std::string>();
  scaling = RopeScaling{};
  scaling.type = rope_type_from_name(type_name, r.where() + ": " + object_name);
  const std::vector<std::string>* keys = nullptr;
  for (const RopeKeys& row : rope_keys())
    if (type_name == row.type) keys = &row.keys;
  for (const auto& [key, value] : rope.items()) {
    if (key == "rope_type" || key == "type") continue;
    const std::string name = object_name + "." + key;
    if (key == "rope_theta") {
      const double value_theta = r.real_value(value, name);
      if (!(value_theta > 0)) r.bad_value(name, value, "must be positive");
      theta = value_theta;
      continue;
    }
    if (key == "partial_rotary_factor") {
      if (value.is_null() || value == Json(1)) continue;
      r.bad_value(name, value, "is refused: transformers' Llama family rotates the whole head whatever this says",
                  "remove it");
    }
    bool known = false;
    for (const std::string& allowed : *keys) known = known || key == allowed;
    if (known) continue;
    if (r.lists_unknown_keys())
      r.ignore(name);
    else
      throw Error(kModule, r.where() + ": " + object_name + " key '" + json::excerpt_text(key) + "' is not a parameter of rope_type " + type_name,
                  "rope_type " + type_name + " reads " + (keys->empty() ? std::string("only rope_theta") : join(*keys)));
  }
  auto number = [&](const char* key) -> std::optional<double> {
    if (!rope.contains(key) || rope[key].is_null()) return std::nullopt;
    return r.real_value(rope[key], object_name + "." + key);
  };
  auto required = [&](const char* key) -> double {
    const std::optional<double> value = number(key);
    if (!value)
      throw Error(kModule, r.where() + ": " + object_name + " of rope_type " + type_name + " needs '" + key + "'");
    return *value;
  };
  auto positive = [&](const char* key, double value) {
    if (!(value > 0)) r.bad_value(object_name + "." + key, rope[key], "must be positive");
  };
  if (scaling.type == RopeType::none) return;
  if (scaling.type == RopeType::llama3 || scaling.type == RopeType::yarn) {
    // transformers: a top-level original_max_position_embeddings wins; absent everywhere, the
    // config's max_position_embeddings.
    const std::optional<double> inside = number("original_max_position_embeddings");
    if (inside && original_override && *inside != static_cast<double>(*original_override))
      r.bad_value(object_name + ".original_max_position_embeddings", rope["original_max_position_embeddings"],
                  "disagrees with the top-level original_max_position_embeddings " + std::to_string(*original_override));
    scaling.original_max_positions =
        original_override ? *original_override
                          : inside ? r.integer_value(rope["original_max_position_embeddings"],
                                                     object_name + ".original_max_position_embeddings", 1)
                                   : max_positions;
  }
  if (scaling.type == RopeType::yarn && rope.contains("factor") && rope["factor"].is_null()) {
    // transformers: a null factor is the ratio of the context lengths.
    scaling.factor = static_cast<double>(max_positions) / static_cast<double>(scaling.original_max_positions);
  } else {
    scaling.factor = required("factor");
    positive("factor", scaling.factor);
  }
  if (scaling.type == RopeType::llama3) {
    scaling.low_freq_factor = required("low_freq_factor");
    scaling.high_freq_factor = required("high_freq_factor");
    positive("low_freq_factor", scaling.low_freq_factor);
    if (!(scaling.high_freq_factor > scaling.low_freq_factor))
      r.bad_value(object_name + ".high_freq_factor", rope["high_freq_factor"],
                  "must be larger than low_freq_factor " + excerpt(rope["low_freq_factor"]));
  }
  if (scaling.type == RopeType::yarn) {
    // transformers: `beta_fast or 32`, `beta_slow or 1`: absent, null and 0 take the default.
    const double beta_fast = number("beta_fast").value_or(0.0), beta_slow = number("beta_slow").value_or(0.0);
    scaling.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
    scaling.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    scaling.attention_factor = number("attention_factor");
    if (scaling.attention_factor) positive("attention_factor", *scaling.attention_factor);
    scaling.mscale = number("mscale").value_or(0.0);
    scaling.mscale_all_dim = number("mscale_all_dim").value_or(0.0);
    if (rope.contains("truncate") && !rope["truncate"].is_null()) {
      if (!rope["truncate"].is_boolean()) r.wrong_type(object_name + ".truncate", rope["truncate"], "true or false");
      scaling.truncate = rope["truncate"].get<bool>();
    }
  }
}

// RoPE of a Llama-family config, from either layout; when both are given they must agree.
void read_rope(const HfReader& r, ModelConfig& config) {
  const Json parameters = r.value("rope_parameters");
  const Json legacy = r.value("rope_scaling");
  std::optional<int64_t> original_override;
  if (r.present("original_max_position_embeddings"))
    original_override = r.integer("original_max_position_embeddings", 1);
  std::optional<double> theta;
  if (r.present("rope_theta")) {
    theta = r.real("rope_theta");
    if (!(*theta > 0)) r.bad_value("rope_theta", r.value("rope_theta"), "must be positive");
  }
  const bool has_parameters = parameters.is_object() ? !parameters.empty() : !parameters.is_null();
  const bool has_legacy = legacy.is_object() ? !legacy.empty() : !legacy.is_null();
  RopeScaling scaling;
  if (has_parameters) {
    std::optional<double> inner_theta;
    read_rope_object(r, parameters, "rope_parameters", config.max_positions, original_override, inner_theta, scaling);
    if (inner_theta && theta && *inner_theta != *theta)
      r.bad_value("rope_theta", r.value("rope_theta"), "disagrees with rope_parameters.rope_theta " + excerpt(parameters["rope_theta"]),
                  "keep one θ");
    if (inner_theta) theta = inner_theta;
  }
  if (has_legacy) {
    RopeScaling legacy_scaling;
    std::optional<double> legacy_theta;
    read_rope_object(r, legacy, "rope_scaling", config.max_positions, original_override, legacy_theta, legacy_scaling);
    if (has_parameters && !(legacy_scaling == scaling))
      throw Error(kModule, r.where() + ": rope_scaling " + excerpt(legacy) + " disagrees with rope_parameters " +
                               excerpt(parameters),
                  "keep one of the two layouts, or make them equal");
    if (legacy_theta && theta && *legacy_theta != *theta)
      r.bad_value("rope_scaling.rope_theta", legacy["rope_theta"], "disagrees with θ " + std::to_string(*theta));
    if (legacy_theta) theta = legacy_theta;
    scaling = legacy_scaling;
  }
  config.rope_theta = theta.value_or(10000.0);
  config.rope_scaling = scaling;
}

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

// int64 arithmetic that refuses to overflow (shapes multiplied out).
int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) throw Error(kModule, what + " overflows 64-bit arithmetic");
  return out;
}
int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) throw Error(kModule, what + " overflows 64-bit arithmetic");
  return out;
}

// Parameter counts with every product checked (validate() runs them first).
struct Counts {
  int64_t all = 0;
  int64_t non_embedding = 0;
};
Counts count_parameters(const ModelConfig& c) {
  const std::string what = "the parameter count of model '" + json::excerpt_text(c.name) + "'";
  const int64_t h = c.hidden, f = c.ffn_hidden;
  const int64_t norm = c.has_bias() ? 2 * h : h;
  int64_t per_layer = checked_add(2 * norm, checked_mul(h, c.qkv_dim(), what), what);
  per_layer = checked_add(per_layer, checked_mul(c.q_dim(), h, what), what);
  per_layer = checked_add(per_layer, checked_mul(checked_mul(h, f, what), c.family == Family::llama ? 3 : 2, what), what);
  if (c.has_qkv_bias()) per_layer = checked_add(per_layer, c.qkv_dim(), what);
  if (c.has_bias()) per_layer = checked_add(per_layer, h + f + h, what);
  const int64_t table = checked_mul(c.vocab_size, h, what);
  Counts counts;
  counts.non_embedding = checked_add(checked_mul(per_layer, c.layers, what), norm, what);
  if (!c.tie_embeddings) counts.non_embedding = checked_add(counts.non_embedding, table, what);
  counts.all = checked_add(counts.non_embedding, table, what);
  if (c.learned_positions()) counts.all = checked_add(counts.all, checked_mul(c.max_positions, h, what), what);
  return counts;
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

Json rope_parameters_object(const ModelConfig& config, bool with_theta) {
  const RopeScaling& s = config.rope_scaling;
  Json json = Json::object();
  json["rope_type"] = s.type == RopeType::none ? "default" : rope_type_name(s.type);
  if (with_theta) json["rope_theta"] = config.rope_theta;
  if (s.type == RopeType::none) return json;
  json["factor"] = s.factor;
  if (s.type == RopeType::llama3 || s.type == RopeType::yarn)
    json["original_max_position_embeddings"] = s.original_max_positions;
  if (s.type == RopeType::llama3) {
    json["low_freq_factor"] = s.low_freq_factor;
    json["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == RopeType::yarn) {
    json["beta_fast"] = s.beta_fast;
    json["beta_slow"] = s.beta_slow;
    if (s.attention_factor) json["attention_factor"] = *s.attention_factor;
    if (s.mscale != 0.0) json["mscale"] = s.mscale;
    if (s.mscale_all_dim != 0.0) json["mscale_all_dim"] = s.mscale_all_dim;
    json["truncate"] = s.truncate;
  }
  return json;
}

}  // namespace

std::string model_type_name(ModelType type) {
  switch (type) {
    case ModelType::llama: return "llama";
    case ModelType::mistral: return "mistral";
    case ModelType::qwen2: return "qwen2";
    case ModelType::gpt2: return "gpt2";
  }
  return "?";
}

std::string rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::none: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::llama3: return "llama3";
    case RopeType::yarn: return "yarn";
  }
  return "?";
}

int64_t ModelConfig::window(int layer) const {
  return sliding_window > 0 && sliding_layers.at(static_cast<size_t>(layer)) ? sliding_window : 0;
}

double ModelConfig::attention_scale(int layer) const {
  double scale = family == Family::gpt && !scale_attn_weights ? 1.0 : 1.0 / std::sqrt(static_cast<double>(head_dim));
  if (family == Family::gpt && scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(layer + 1);
  return scale;
}

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
  if ((family == Family::gpt) != (type == ModelType::gpt2))
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': model_type " + model_type_name(type) + " is not of the " +
                             (family == Family::gpt ? "GPT" : "Llama") + " family");
  // The kernels take row widths as int: q, k, v rows together, and Llama's gate | up rows.
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  const int64_t q = int64_t{heads} * head_dim, kv = int64_t{kv_heads} * head_dim;
  const int64_t up_rows = family == Family::llama ? 2 * int64_t{ffn_hidden} : ffn_hidden;
  if (q + 2 * kv > kIntMax || up_rows > kIntMax)
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': projection widths (q/k/v " + std::to_string(q + 2 * kv) + ", MLP " +
                             std::to_string(up_rows) + ") exceed 2^31 - 1",
                "the kernels index rows with 32-bit sizes");
  if (heads % kv_heads != 0)
    throw Error(kModule,
                "model '" + json::excerpt_text(name) + "': " + std::to_string(heads) + " query heads cannot be shared evenly by " +
                    std::to_string(kv_heads) + " key/value heads",
                "num_attention_heads must be a multiple of num_key_value_heads");
  if (family == Family::gpt && kv_heads != heads)
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': the GPT family has no grouped-query attention (heads " +
                             std::to_string(heads) + ", kv heads " + std::to_string(kv_heads) + ")");
  if (family == Family::gpt && q != hidden)
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': hidden size " + std::to_string(hidden) + " is not heads × head_dim (" +
                             std::to_string(heads) + " × " + std::to_string(head_dim) + ")");
  if (uses_rope() && (rotary_dim <= 0 || rotary_dim > head_dim || rotary_dim % 2 != 0))
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': rotary dims " + std::to_string(rotary_dim) +
                             " must be even and in (0, head_dim = " + std::to_string(head_dim) + "]");
  if (uses_rope() && !(rope_theta > 0 && std::isfinite(rope_theta)))
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': RoPE θ must be a positive number, got " + format_number(rope_theta));
  if (learned_positions()) positive(max_positions, "position table size");
  if (!(norm_eps > 0)) throw Error(kModule, "model '" + json::excerpt_text(name) + "': norm epsilon must be positive");
  if (sliding_window < 0 || (sliding_window > 0 && sliding_layers.size() != static_cast<size_t>(layers)))
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': sliding window " + std::to_string(sliding_window) + " needs one flag per layer (" +
                             std::to_string(sliding_layers.size()) + " for " + std::to_string(layers) + " layers)");
  for (const auto& [field, member] : kTokenIdFields)
    if (const std::optional<TokenIds>& stated = this->*member)
      for (int id : stated->ids)
        if (id < 0 || id >= vocab_size)
          throw Error(kModule, "model '" + json::excerpt_text(name) + "': " + field + " " + std::to_string(id) +
                                   " is not a token id of the vocabulary [0, " + std::to_string(vocab_size) + ")");
  count_parameters(*this);  // throws when a count overflows
}

int64_t ModelConfig::parameter_count() const { return count_parameters(*this).all; }

int64_t ModelConfig::non_embedding_parameter_count() const { return count_parameters(*this).non_embedding; }

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

namespace {

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

void override_rope(ModelConfig& config, std::optional<double> theta, const std::string& scaling_json) {
  if (!theta && scaling_json.empty()) return;
  if (!config.uses_rope())
    throw Error(kModule, "model '" + json::excerpt_text(config.name) + "' has learned positions, not RoPE",
                "--rope-theta and --rope-scaling apply to llama, mistral and qwen2 models");
  if (theta) {
    if (!(*theta > 0 && std::isfinite(*theta)))
      throw Error(kModule, "--rope-theta must be a positive number, got " + format_number(*theta));
    config.rope_theta = *theta;
  }
  if (!scaling_json.empty()) {
    Json rope;
    try {
      rope = Json::parse(scaling_json);
    } catch (const std::exception& error) {
      throw Error(kModule, "--rope-scaling is not valid JSON: " + std::string(error.what()),
                  "give an object such as '{\"rope_type\": \"yarn\", \"factor\": 4}'");
    }
    const Json empty = Json::object();
    const HfReader reader(empty, config.type, "--rope-scaling", UnknownKeys::refused);
    std::optional<double> inner_theta;
    read_rope_object(reader, rope, "--rope-scaling", config.max_positions, std::nullopt, inner_theta,
                     config.rope_scaling);
    if (inner_theta && theta && *inner_theta != *theta)
      throw Error(kModule, "--rope-scaling's rope_theta disagrees with --rope-theta", "give θ once");
    if (inner_theta) config.rope_theta = *inner_theta;
  }
  config.validate();
}

std::string describe_rope(const ModelConfig& config) {
  if (!config.uses_rope()) return "learned positions";
  std::string text = "theta " + format_number(config.rope_theta);
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeType::none) return text;
  text += ", " + rope_type_name(s.type) + " x" + format_number(s.factor);
  if (s.type == RopeType::llama3)
    text += " (original " + std::to_string(s.original_max_positions) + ", low " + format_number(s.low_freq_factor) +
            ", high " + format_number(s.high_freq_factor) + ")";
  if (s.type == RopeType::yarn)
    text += " (original " + std::to_string(s.original_max_positions) + ", beta " + format_number(s.beta_fast) + "/" +
            format_number(s.beta_slow) + ", attention x" + format_number(rope_frequencies(config).attention_scaling) + ")";
  return text;
}

std::string rope_parameters_json(const ModelConfig& config) {
  if (!config.uses_rope()) return "null";
  return rope_parameters_object(config, true).dump();
}

std::string describe_ignored(const ModelConfig& config) {
  if (config.ignored_fields.empty()) return "none";
  std::string text;
  bool auto_map = false;
  for (const std::string& name : config.ignored_fields) {
    text += (text.empty() ? "" : ", ") + name;
    auto_map = auto_map || name == "auto_map";
  }
  return auto_map ? text + " (auto_map " + kAutoMapNote + ")" : text;
}

std::string describe_window(const ModelConfig& config) {
  if (config.sliding_window == 0) return "none";
  std::string layers;
  int count = 0;
  for (int layer = 0; layer < config.layers; ++layer)
    if (config.window(layer) > 0) {
      layers += (layers.empty() ? "" : ",") + std::to_string(layer);
      ++count;
    }
  if (count == 0) return "none";
  return std::to_string(config.sliding_window) + " tokens (" +
         (count == config.layers ? std::string("all layers") : "layers " + layers) + ")";
}

std::string hf_field_table_markdown() {
  auto types = [](uint8_t bits) {
    if (bits == kAll) return std::string("all");
    std::string text;
    for (ModelType type : {ModelType::llama, ModelType::mistral, ModelType::qwen2, ModelType::gpt2})
      if ((bits & type_bit(type)) != 0) text += (text.empty() ? "" : ", ") + model_type_name(type);
    return text;
  };
  auto use = [](const Field& field) {
    switch (field.use) {
      case Use::used:
        return std::string("used") + (field.value[0] == '\0' ? " (required)" : ", default `" + std::string(field.value) + "`");
      case Use::kept: return std::string("kept (checked, written into checkpoints)");
      case Use::harmless: return std::string("harmless");
      case Use::alias: return "must equal `" + std::string(field.value) + "`";
      case Use::refused: return "refused unless " + either(field.value, "`");
    }
    return std::string();
  };
  std::string text = "| field | model types | fpdt | what it is |\n| --- | --- | --- | --- |\n";
  for (const Field& field : kFields)
    text += "| `" + std::string(field.name) + "` | " + types(field.types) + " | " + use(field) + " | " + field.note + " |\n";
  std::string generation;
  for (const char* name : kGenerationFields) generation += (generation.empty() ? "`" : ", `") + std::string(name) + "`";
  text += "| " + generation + " | all | harmless | " + kGenerationNote + " |\n";
  return text;
}

ModelConfig resolve_model(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code error;  // a path that cannot be examined is read below, which says why
  const std::vector<std::string> presets = preset_names();
  const bool is_preset = std::find(presets.begin(), presets.end(), name_or_path) != presets.end();
  const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json") ||
                       fs::exists(name_or_path, error);
  if (is_preset || !is_path) {
    ModelConfig config = preset(name_or_path);  // throws for an unknown name, listing the presets
    config.validate();
    return config;
  }
  if (!fs::is_directory(name_or_path, error)) return load_hf_config(name_or_path);
  const std::string config_path = path_in(name_or_path, "config.json");
  if (!fs::exists(config_path, error))
    throw Error(kModule, "folder " + name_or_path + " holds no config.json",
                "give a Hugging Face model folder, a config.json, or a preset name");
  return load_hf_config(config_path);
}

}  // namespace fpdt::model
