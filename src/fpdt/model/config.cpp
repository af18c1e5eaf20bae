// ModelConfig itself (see config.h): its words, its derived values, validate() and the parameter
// counts, and resolve_model, which turns what --model names into a config. The presets are
// presets.cpp's, Hugging Face config.json hf_config.cpp's (its field table hf_fields.cpp's), RoPE's
// parameters rope_parameters.cpp's.
#include "fpdt/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/model/hf_reader.h"

namespace fpdt::model {

namespace {

using detail::format_number;
using detail::kModule;
using detail::kTokenIdFields;

// int64 arithmetic that refuses to overflow (shapes multiplied out), naming `what` when it would.
int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (!fpdt::checked_mul(out, a, b)) throw Error(kModule, what + " overflows 64-bit arithmetic");
  return out;
}
int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t out = 0;
  if (!fpdt::checked_add(out, a, b)) throw Error(kModule, what + " overflows 64-bit arithmetic");
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

}  // namespace

namespace detail {

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace detail

std::string model_type_name(ModelType type) {
  switch (type) {
    case ModelType::llama: return "llama";
    case ModelType::mistral: return "mistral";
    case ModelType::qwen2: return "qwen2";
    case ModelType::gpt2: return "gpt2";
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
  if (!(norm_eps > 0 && std::isfinite(norm_eps)))  // +inf would make every norm 0: a model that learns nothing
    throw Error(kModule, "model '" + json::excerpt_text(name) + "': norm epsilon must be a positive number, got " +
                             format_number(norm_eps));
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

