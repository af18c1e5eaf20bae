// The field table of Hugging Face config.json (kFields): every field fpdt knows for each model type and
// what it does with it, the reader that walks a config.json object by it (HfReader, hf_reader.h), and
// the table as Markdown (docs/hf_config.md holds it; a test keeps the two equal). A field not in the
// table is what transformers ignores for that type (its config class keeps it as an attribute, its
// modelling code never reads it): fpdt ignores it too and lists it; the refused fields at values that
// would change the model are named together in one clear error.
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/model/config.h"
#include "fpdt/model/hf_reader.h"

namespace fpdt::model {

namespace detail {

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

}  // namespace detail

namespace {

using detail::Field;
using detail::Json;
using detail::Use;

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

// A refused field's accepted values ("false|null") as words: "`false` or `null`" with quote "`".
std::string either(const std::string& values, const std::string& quote) {
  std::string text;
  std::stringstream list(values);
  std::string one;
  while (std::getline(list, one, '|')) text += (text.empty() ? "" : " or ") + quote + one + quote;
  return text;
}

}  // namespace

namespace detail {

HfReader::HfReader(const Json& json, ModelType type, std::string where, UnknownKeys unknown)
    : json_(json), type_(type), bit_(type_bit(type)), where_(std::move(where)), unknown_(unknown) {}

void HfReader::check_fields() const {
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

Json HfReader::value(const char* name) const {
  if (json_.contains(name)) return json_[name];
  const Field* field = find(name);
  FPDT_ASSERT(field != nullptr && field->use == Use::used);
  if (field->value[0] == '\0')
    throw Error(kModule, where_ + ": missing field '" + std::string(name) + "' (" + field->note + ")",
                "is this a Hugging Face config.json of model_type " + type_name() + "?");
  return Json::parse(field->value);
}

void HfReader::out_of_range(const std::string& name, const Json& value, int64_t min) const {
  // nlohmann reads 0 and every other non-negative integer as unsigned: compare the value, not its kind.
  const bool too_small = value.is_number_unsigned() ? value.get<uint64_t>() < static_cast<uint64_t>(std::max<int64_t>(min, 0))
                                                    : value.get<int64_t>() < min;
  throw Error(kModule,
              where_ + ": field '" + json::excerpt_text(name) + "' = " + excerpt(value) + " is outside [" + std::to_string(min) + ", " +
                  std::to_string(std::numeric_limits<int32_t>::max()) + "]",
              too_small ? "a size must be at least " + std::to_string(min)
                        : "sizes beyond 2^31 - 1 are refused (the kernels index with 32-bit sizes)");
}

const Field* HfReader::find(const char* name) const {
  for (const Field& field : kFields)
    if ((field.types & bit_) != 0 && std::string(field.name) == name) return &field;
  return nullptr;
}

bool HfReader::accepted(const Field& field, const Json& value) {
  std::stringstream values(field.value);
  std::string one;
  while (std::getline(values, one, '|'))
    if (Json::parse(one) == value) return true;
  return false;
}

}  // namespace detail

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

}  // namespace fpdt::model
