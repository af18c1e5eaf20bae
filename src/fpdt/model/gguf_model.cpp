// A GGUF file's model: its ModelConfig from the architecture's metadata keys and its weights under
// Hugging Face names (see gguf.h). The names and the q/k permutation are llama.cpp's
// convert_hf_to_gguf.py read backwards; the keys are its gguf-py constants.
#include <algorithm>
#include <cmath>
#include <set>
#include <span>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/gguf_types.h"
#include "fpdt/model/hf_checkpoint.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "gguf";

// Keys of an architecture's metadata ("llama.block_count").
struct ArchKeys {
  const GgufFile& file;
  std::string arch;
  std::string key(const std::string& name) const { return arch + "." + name; }
  int positive(const std::string& name) const {
    const int64_t value = file.integer(key(name));
    if (value <= 0 || value > INT32_MAX)
      throw Error(kModule, file.path() + ": metadata '" + key(name) + "' is " + std::to_string(value) + ", not a positive size",
                  "the file is corrupt");
    return static_cast<int>(value);
  }
};

// As transformers' GGUF loader reads general.architecture: llama.cpp writes Mistral models as "llama";
// transformers takes one for "mistral" only when general.name is exactly "mistral".
ModelType architecture_type(const GgufFile& file, const std::string& arch) {
  if (arch == "llama")
    return file.find("general.name") && file.text("general.name") == "mistral" ? ModelType::mistral : ModelType::llama;
  if (arch == "mistral") return ModelType::mistral;
  if (arch == "qwen2") return ModelType::qwen2;
  if (arch == "gpt2") return ModelType::gpt2;
  throw Error(kModule,
              file.path() + ": general.architecture is '" + json::excerpt_text(arch) +
                  "', which fpdt does not implement",
              "fpdt reads the llama, mistral, qwen2 and gpt2 architectures");
}

// llama.cpp's rope.scaling.* keys → transformers' rope_parameters.
void read_rope_scaling(const ArchKeys& keys, ModelConfig& config) {
  const GgufFile& file = keys.file;
  const std::string type_key = keys.key("rope.scaling.type");
  const std::string type = file.find(type_key) ? file.text(type_key) : "none";
  if (type == "none") return;
  const std::optional<double> factor = file.optional_real(keys.key("rope.scaling.factor"));
  if (!factor || !(*factor > 0 && std::isfinite(*factor)))  // NaN passed a test of <= 0
    throw Error(kModule,
                file.path() + ": RoPE scaling '" + json::excerpt_text(type) + "' without a positive " +
                    keys.key("rope.scaling.factor") + (factor ? " (it is " + format_number(*factor) + ")" : ""),
                "the file is corrupt");
  config.rope_scaling.factor = *factor;
  if (type == "linear") {
    config.rope_scaling.type = RopeType::linear;
    return;
  }
  if (type != "yarn")
    throw Error(kModule,
                file.path() + ": " + type_key + " is '" + json::excerpt_text(type) + "', which fpdt does not implement",
                "fpdt reads RoPE scaling none, linear and yarn");
  config.rope_scaling.type = RopeType::yarn;
  config.rope_scaling.original_max_positions = file.find(keys.key("rope.scaling.original_context_length"))
                                                  ? keys.positive("rope.scaling.original_context_length")
                                                  : config.max_positions;
  for (const auto& [name, beta] : {std::pair{"rope.scaling.yarn_beta_fast", &config.rope_scaling.beta_fast},
                                   std::pair{"rope.scaling.yarn_beta_slow", &config.rope_scaling.beta_slow}}) {
    const std::optional<double> value = file.optional_real(keys.key(name));
    if (!value) continue;
    if (!std::isfinite(*value))
      throw Error(kModule, file.path() + ": metadata '" + keys.key(name) + "' is " + format_number(*value),
                  "the file is corrupt");
    *beta = *value;
  }
  for (const char* unmapped : {"rope.scaling.yarn_ext_factor", "rope.scaling.yarn_attn_factor"})
    if (file.find(keys.key(unmapped)))
      throw Error(kModule, file.path() + ": metadata '" + keys.key(unmapped) + "' has no Hugging Face equivalent fpdt implements",
                  "fpdt's yarn is transformers' (attention factor 0.1·ln(factor) + 1)");
}

// The sizes every architecture states, and its norm epsilon (under `eps_key`).
void read_sizes(const ArchKeys& keys, ModelConfig& config, const std::string& eps_key) {
  config.hidden = keys.positive("embedding_length");
  config.layers = keys.positive("block_count");
  config.ffn_hidden = keys.positive("feed_forward_length");
  config.heads = keys.positive("attention.head_count");
  config.max_positions = keys.positive("context_length");
  const std::optional<double> eps = keys.file.optional_real(keys.key(eps_key));
  if (!eps) throw Error(kModule, keys.file.path() + " has no metadata '" + keys.key(eps_key) + "'",
                        "the model's metadata is incomplete: convert it again");
  config.norm_eps = *eps;
}

void read_llama_like(const ArchKeys& keys, ModelConfig& config) {
  const GgufFile& file = keys.file;
  config.family = Family::llama;
  read_sizes(keys, config, "attention.layer_norm_rms_epsilon");
  config.kv_heads = file.find(keys.key("attention.head_count_kv")) ? keys.positive("attention.head_count_kv") : config.heads;
  if (file.find(keys.key("attention.key_length"))) {
    config.head_dim = keys.positive("attention.key_length");
  } else {
    if (config.hidden % config.heads != 0)
      throw Error(kModule, file.path() + ": " + keys.key("embedding_length") + " " + std::to_string(config.hidden) +
                               " is not divisible by " + std::to_string(config.heads) + " heads",
                  "the file is corrupt");
    config.head_dim = config.hidden / config.heads;
  }
  if (file.find(keys.key("attention.value_length")) && keys.positive("attention.value_length") != config.head_dim)
    throw Error(kModule, file.path() + ": value heads of " + std::to_string(keys.positive("attention.value_length")) +
                             " dims, key heads of " + std::to_string(config.head_dim),
                "fpdt implements attention with equal key and value head sizes");
  config.rotary_dim = config.head_dim;
  if (file.find(keys.key("rope.dimension_count")) && keys.positive("rope.dimension_count") != config.head_dim)
    throw Error(kModule, file.path() + ": RoPE rotates " + std::to_string(keys.positive("rope.dimension_count")) +
                             " dims of heads of " + std::to_string(config.head_dim),
                "fpdt implements RoPE over the whole head for llama, mistral and qwen2");
  config.rope_theta = file.optional_real(keys.key("rope.freq_base")).value_or(10000.0);
  read_rope_scaling(keys, config);
  if (file.tensor("rope_freqs.weight"))
    throw Error(kModule, file.path() + " holds rope_freqs.weight (Llama 3.1-style RoPE frequency factors), which fpdt does not read",
                "convert the Hugging Face model itself (its config.json states rope_scaling llama3) and give that folder");
  if (config.type == ModelType::mistral) {
    // transformers' MistralConfig default (the GGUF keys state no window).
    config.sliding_window = 4096;
    config.sliding_layers.assign(static_cast<size_t>(config.layers), true);
  }
}

void read_gpt2(const ArchKeys& keys, ModelConfig& config) {
  const GgufFile& file = keys.file;
  config.family = Family::gpt;
  read_sizes(keys, config, "attention.layer_norm_epsilon");
  config.kv_heads = config.heads;
  if (config.hidden % config.heads != 0)
    throw Error(kModule, file.path() + ": " + keys.key("embedding_length") + " is not divisible by the head count",
                "the file is corrupt");
  config.head_dim = config.hidden / config.heads;
  config.rotary_dim = 0;
}

std::optional<TokenIds> token_id(const GgufFile& file, const char* key) {
  const std::optional<int64_t> id = file.optional_integer(std::string("tokenizer.ggml.") + key);
  if (!id) return std::nullopt;
  return TokenIds{{static_cast<int>(*id)}, false};
}

// ---- tensor names ------------------------------------------------------------------------------------

// The GGUF name of a Hugging Face tensor ("model.layers.3.self_attn.q_proj.weight" → "blk.3.attn_q.weight").
std::string gguf_name(const ModelConfig& config, const std::string& hf_name) {
  static const std::pair<const char*, const char*> kLlama[] = {
      {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"},       {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},            {"mlp.down_proj", "ffn_down"}};
  static const std::pair<const char*, const char*> kGpt2[] = {
      {"ln_1", "attn_norm"},   {"attn.c_attn", "attn_qkv"}, {"attn.c_proj", "attn_output"},
      {"ln_2", "ffn_norm"},    {"mlp.c_fc", "ffn_up"},      {"mlp.c_proj", "ffn_down"}};
  static const std::pair<const char*, const char*> kGlobals[] = {
      {"model.embed_tokens.", "token_embd."}, {"model.norm.", "output_norm."},       {"lm_head.", "output."},
      {"transformer.wte.", "token_embd."},    {"transformer.wpe.", "position_embd."}, {"transformer.ln_f.", "output_norm."}};
  for (const auto& [hf, gguf] : kGlobals)
    if (hf_name.starts_with(hf)) return gguf + hf_name.substr(std::string(hf).size());
  const std::string layers = config.family == Family::gpt ? "transformer.h." : "model.layers.";
  FPDT_ASSERT(hf_name.starts_with(layers));
  const size_t dot = hf_name.find('.', layers.size());
  const std::string layer = hf_name.substr(layers.size(), dot - layers.size());
  const std::string rest = hf_name.substr(dot + 1);
  const size_t suffix = rest.rfind('.');
  const std::string module = rest.substr(0, suffix);
  using Names = std::span<const std::pair<const char*, const char*>>;
  for (const auto& [hf, gguf] : config.family == Family::gpt ? Names(kGpt2) : Names(kLlama))
    if (module == hf) return "blk." + layer + "." + gguf + rest.substr(suffix);
  FPDT_ASSERT(false);
  return "";
}

// llama.cpp's converter permutes the rows of q_proj and k_proj (architecture llama) so that each head's
// rotary pairs are adjacent: GGUF row 2i + j of a head holds Hugging Face row j·D/2 + i. Undone in place
// on `rows` (heads·D rows of `columns`).
void unpermute_rotary_rows(float* rows, int heads, int head_dim, int64_t columns) {
  std::vector<float> head(static_cast<size_t>(head_dim * columns));
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    float* base = rows + static_cast<int64_t>(h) * head_dim * columns;
    std::copy(base, base + head.size(), head.begin());
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j)
        std::copy_n(head.data() + (2 * i + j) * columns, columns, base + (j * half + i) * columns);
  }
}

// llama.cpp's converter permutes q/k for its "llama" architecture, which transformers undoes (its
// LlamaTensorProcessor); a file of architecture "mistral" is read as transformers reads it, unpermuted.
bool permuted_by_converter(const GgufFile& file) { return file.text("general.architecture") == "llama"; }

}  // namespace

ModelConfig gguf_model_config(const GgufFile& file) {
  const std::string arch = file.text("general.architecture");
  ModelConfig config;
  config.type = architecture_type(file, arch);
  config.name = file.find("general.name") ? file.text("general.name") : arch;
  const ArchKeys keys{file, arch};  // a "mistral" read from "llama" keeps the llama.* keys
  if (config.type == ModelType::gpt2)
    read_gpt2(keys, config);
  else
    read_llama_like(keys, config);
  const GgufTensorInfo* embedding = file.tensor("token_embd.weight");
  if (embedding == nullptr || embedding->shape.size() != 2)
    throw Error(kModule, file.path() + " has no 2-D token_embd.weight", "is this a language model's GGUF file?");
  // As transformers: the key, else the tokenizer's token count; a file with neither, the embedding's rows.
  const std::vector<GgufValue>* tokens = file.array("tokenizer.ggml.tokens", GgufValueType::string);
  config.vocab_size = file.find(keys.key("vocab_size")) ? keys.positive("vocab_size")
                      : tokens != nullptr                 ? static_cast<int>(std::min<size_t>(tokens->size(), INT32_MAX))
                                                          : static_cast<int>(embedding->shape[0]);
  config.tie_embeddings = file.tensor("output.weight") == nullptr;
  config.bos_token_id = token_id(file, "bos_token_id");
  config.eos_token_id = token_id(file, "eos_token_id");
  config.pad_token_id = token_id(file, "padding_token_id");
  try {
    config.validate();
  } catch (const Error& error) {
    throw Error(kModule, file.path() + ": its metadata describes an impossible model: " + error.message(),
                error.hint().empty() ? "the file is corrupt" : error.hint());
  }
  return config;
}

void load_gguf_weights(const GgufFile& file, const ModelConfig& config, const ParameterLayout& layout,
                       ParameterBlock& params) {
  // Check every tensor before reading any: present, its shape (GPT-2's Conv1D weights are stored
  // transposed by the converter, i.e. in our (out, in) layout), a type fpdt reads.
  const std::vector<HfTensor> map = hf_tensor_map(config);
  std::set<std::string> expected;
  for (const HfTensor& entry : map) {
    const std::string name = gguf_name(config, entry.hf_name);
    expected.insert(name);
    const GgufTensorInfo* tensor = file.tensor(name);
    const std::string hint = "is this file's metadata (" + model_type_name(config.type) + ", " +
                             std::to_string(config.layers) + " layers) the model of its tensors?";
    if (tensor == nullptr) throw Error(kModule, file.path() + " has no tensor '" + name + "' (" + entry.hf_name + ")", hint);
    const Shape shape = entry.transposed ? Shape{entry.hf_shape[1], entry.hf_shape[0]} : entry.hf_shape;
    if (tensor->shape != shape)
      throw Error(kModule, file.path() + ": tensor '" + name + "' has shape " + shape_string(tensor->shape) +
                               ", the model expects " + shape_string(shape), hint);
    if (!ggml_type_supported(tensor->type))
      throw Error(kModule, file.path() + ": tensor '" + name + "' is " + *ggml_type_name(tensor->type) +
                               ", a type fpdt does not dequantize",
                  "fpdt reads " + supported_ggml_types() + "; requantize the model to one of them (llama-quantize)");
  }
  for (const GgufTensorInfo& tensor : file.tensors())
    if (expected.count(tensor.name) == 0)
      throw Error(kModule,
                  file.path() + ": unexpected tensor '" + json::excerpt_text(tensor.name) + "' for a " +
                      model_type_name(config.type) + " model of " + std::to_string(config.layers) + " layers",
                  "fpdt reads the tensors of the llama, mistral, qwen2 and gpt2 architectures only");
  const bool permuted = permuted_by_converter(file);
  for (const HfTensor& entry : map) {
    const GgufTensorInfo& tensor = *file.tensor(gguf_name(config, entry.hf_name));
    const ParameterInfo& info = layout.at(entry.internal_name);
    const int64_t columns = info.numel() / info.shape[0];
    float* rows = params.get(entry.internal_name) + entry.row_begin * columns;
    file.read(tensor, rows);
    check_finite(rows, shape_numel(tensor.shape), file.path(), tensor.name);
    if (!permuted || entry.hf_shape.size() != 2) continue;
    if (entry.hf_name.ends_with("self_attn.q_proj.weight"))
      unpermute_rotary_rows(rows, config.heads, config.head_dim, columns);
    else if (entry.hf_name.ends_with("self_attn.k_proj.weight"))
      unpermute_rotary_rows(rows, config.kv_heads, config.head_dim, columns);
  }
}

}  // namespace fpdt::model
