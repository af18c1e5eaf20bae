// Hugging Face tensor names, checkpoint folders and our checkpoints' weight files (see hf_checkpoint.h).
#include "fpdt/model/hf_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"

namespace fpdt::model {

namespace {

constexpr const char* kModule = "model";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string layer_prefix(int layer) { return "layers." + std::to_string(layer) + "."; }

// The base model's prefix in a causal-LM checkpoint (transformers' base_model_prefix).
std::string base_prefix(const ModelConfig& config) { return config.family == Family::gpt ? "transformer." : "model."; }

// Buffers older checkpoints hold that transformers drops on load (they are derived, not weights).
bool dropped_on_load(const ModelConfig& config, const std::string& name) {
  if (config.family == Family::gpt) {
    // transformer.h.<n>.attn.bias / attn.masked_bias: GPT-2's causal mask.
    if (!name.starts_with("transformer.h.")) return false;
    const size_t dot = name.find('.', std::strlen("transformer.h."));
    if (dot == std::string::npos) return false;
    const std::string rest = name.substr(dot + 1);
    return rest == "attn.bias" || rest == "attn.masked_bias";
  }
  return name.starts_with("model.layers.") && name.ends_with(".self_attn.rotary_emb.inv_freq");
}

// Copies one Hugging Face tensor from `reader` into its rows of `params` (fp32).
void read_entry(const SafetensorsReader& reader, const std::string& name, const HfTensor& entry,
                const ParameterLayout& layout, ParameterBlock& params, std::vector<float>& staging) {
  const ParameterInfo& info = layout.at(entry.internal_name);
  const int64_t columns = info.numel() / info.shape[0];
  float* rows = params.get(entry.internal_name) + entry.row_begin * columns;
  if (!entry.transposed) {
    reader.read(name, Tensor(rows, DType::f32, entry.hf_shape));
    return;
  }
  // Conv1D: the file holds (in, out) = (columns, rows); ours is (rows, columns).
  staging.resize(static_cast<size_t>(shape_numel(entry.hf_shape)));
  reader.read(name, Tensor(staging.data(), DType::f32, entry.hf_shape));
  for (int64_t i = 0; i < columns; ++i)
    for (int64_t o = 0; o < entry.rows; ++o) rows[o * columns + i] = staging[i * entry.rows + o];
}

std::string names_excerpt(const std::vector<std::string>& names) {
  std::string text = "'" + names[0] + "'";
  if (names.size() > 1) text += " (and " + std::to_string(names.size() - 1) + " more)";
  return text;
}

}  // namespace

void check_finite(const float* values, int64_t count, const std::string& path, const std::string& name) {
  int64_t nans = 0, infinities = 0;
  for (int64_t i = 0; i < count; ++i) {
    nans += std::isnan(values[i]) ? 1 : 0;
    infinities += std::isinf(values[i]) ? 1 : 0;
  }
  if (nans + infinities == 0) return;
  throw Error(kModule,
              path + ": tensor '" + name + "' holds " + std::to_string(nans) + " NaN and " + std::to_string(infinities) +
                  " Inf among its " + std::to_string(count) + " values",
              "these weights are damaged: download or export them again");
}

std::vector<HfTensor> hf_tensor_map(const ModelConfig& config) {
  std::vector<HfTensor> map;
  const int64_t h = config.hidden, f = config.ffn_hidden, q = config.q_dim(), kv = config.kv_dim();
  auto whole = [&](std::string hf, Shape shape, std::string internal) {
    const int64_t rows = shape[0];
    map.push_back({std::move(hf), std::move(shape), std::move(internal), 0, rows, false});
  };
  auto rows = [&](std::string hf, Shape shape, std::string internal, int64_t begin) {
    const int64_t count = shape[0];
    map.push_back({std::move(hf), std::move(shape), std::move(internal), begin, count, false});
  };
  auto conv1d = [&](std::string hf, int64_t in, int64_t out, std::string internal) {
    map.push_back({std::move(hf), {in, out}, std::move(internal), 0, out, true});
  };
  if (config.family == Family::llama) {
    whole("model.embed_tokens.weight", {config.vocab_size, h}, "embed.weight");
    for (int layer = 0; layer < config.layers; ++layer) {
      const std::string hf = "model.layers." + std::to_string(layer) + ".";
      const std::string p = layer_prefix(layer);
      whole(hf + "input_layernorm.weight", {h}, p + "attn_norm.weight");
      rows(hf + "self_attn.q_proj.weight", {q, h}, p + "attn.qkv.weight", 0);
      rows(hf + "self_attn.k_proj.weight", {kv, h}, p + "attn.qkv.weight", q);
      rows(hf + "self_attn.v_proj.weight", {kv, h}, p + "attn.qkv.weight", q + kv);
      if (config.has_qkv_bias()) {
        rows(hf + "self_attn.q_proj.bias", {q}, p + "attn.qkv.bias", 0);
        rows(hf + "self_attn.k_proj.bias", {kv}, p + "attn.qkv.bias", q);
        rows(hf + "self_attn.v_proj.bias", {kv}, p + "attn.qkv.bias", q + kv);
      }
      whole(hf + "self_attn.o_proj.weight", {h, q}, p + "attn.out.weight");
      whole(hf + "post_attention_layernorm.weight", {h}, p + "mlp_norm.weight");
      rows(hf + "mlp.gate_proj.weight", {f, h}, p + "mlp.up.weight", 0);
      rows(hf + "mlp.up_proj.weight", {f, h}, p + "mlp.up.weight", f);
      whole(hf + "mlp.down_proj.weight", {h, f}, p + "mlp.down.weight");
    }
    whole("model.norm.weight", {h}, "final_norm.weight");
    if (!config.tie_embeddings) whole("lm_head.weight", {config.vocab_size, h}, "lm_head.weight");
  } else {
    whole("transformer.wte.weight", {config.vocab_size, h}, "embed.weight");
    whole("transformer.wpe.weight", {config.max_positions, h}, "pos_embed.weight");
    for (int layer = 0; layer < config.layers; ++layer) {
      const std::string hf = "transformer.h." + std::to_string(layer) + ".";
      const std::string p = layer_prefix(layer);
      whole(hf + "ln_1.weight", {h}, p + "attn_norm.weight");
      whole(hf + "ln_1.bias", {h}, p + "attn_norm.bias");
      conv1d(hf + "attn.c_attn.weight", h, config.qkv_dim(), p + "attn.qkv.weight");
      whole(hf + "attn.c_attn.bias", {config.qkv_dim()}, p + "attn.qkv.bias");
      conv1d(hf + "attn.c_proj.weight", q, h, p + "attn.out.weight");
      whole(hf + "attn.c_proj.bias", {h}, p + "attn.out.bias");
      whole(hf + "ln_2.weight", {h}, p + "mlp_norm.weight");
      whole(hf + "ln_2.bias", {h}, p + "mlp_norm.bias");
      conv1d(hf + "mlp.c_fc.weight", h, f, p + "mlp.up.weight");
      whole(hf + "mlp.c_fc.bias", {f}, p + "mlp.up.bias");
      conv1d(hf + "mlp.c_proj.weight", f, h, p + "mlp.down.weight");
      whole(hf + "mlp.c_proj.bias", {h}, p + "mlp.down.bias");
    }
    whole("transformer.ln_f.weight", {h}, "final_norm.weight");
    whole("transformer.ln_f.bias", {h}, "final_norm.bias");
    if (!config.tie_embeddings) whole("lm_head.weight", {config.vocab_size, h}, "lm_head.weight");
  }
  return map;
}

// ---- HfCheckpoint ------------------------------------------------------------------------------------

HfCheckpoint::HfCheckpoint(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir_)) throw Error(kModule, "no checkpoint folder " + dir_, "give a Hugging Face model folder");
  if (fs::exists(fs::path(dir_) / kSingleFile)) {
    add_file(kSingleFile);
    return;
  }
  const std::string index_path = (fs::path(dir_) / kIndexFile).string();
  if (!fs::exists(index_path)) {
    const bool has_bin = fs::exists(fs::path(dir_) / "pytorch_model.bin") ||
                         fs::exists(fs::path(dir_) / "pytorch_model.bin.index.json");
    throw Error(kModule, dir_ + " holds no " + kSingleFile + " and no " + kIndexFile,
                has_bin ? "pytorch_model.bin checkpoints are not read: convert them with transformers' "
                          "save_pretrained (safetensors)"
                        : "give the folder of a Hugging Face model (config.json + safetensors weights)");
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_path, kModule, "check the path and its permissions"));
  } catch (const nlohmann::json::exception& error) {
    throw Error(kModule, index_path + " is not valid JSON: " + error.what(), "download the index again");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(kModule, index_path + " has no weight_map object", "download the index again");
  // Every shard the index names (in name order); every tensor it lists must be in its shard.
  std::vector<std::string> shards;
  std::map<std::string, std::string> listed;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw Error(kModule, index_path + ": weight_map entry '" + name + "' is not a file name");
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      throw Error(kModule, index_path + ": weight_map names '" + shard + "', not a file beside the index");
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    listed[name] = shard;
  }
  std::sort(shards.begin(), shards.end());
  for (const std::string& shard : shards) {
    if (!fs::exists(fs::path(dir_) / shard))
      throw Error(kModule, dir_ + ": shard " + shard + " named by " + kIndexFile + " is missing",
                  "download every shard the index lists");
    add_file(shard);
  }
  for (const auto& [name, shard] : listed) {
    const auto found = tensors_.find(name);
    if (found == tensors_.end() || readers_[found->second.file]->path() != (fs::path(dir_) / shard).string())
      throw Error(kModule, index_path + " places tensor '" + name + "' in " + shard + ", which does not hold it",
                  "the index and its shards come from different downloads");
  }
}

void HfCheckpoint::add_file(const std::string& file_name) {
  readers_.push_back(std::make_unique<SafetensorsReader>((std::filesystem::path(dir_) / file_name).string()));
  const size_t file = readers_.size() - 1;
  for (const std::string& name : readers_[file]->names()) {
    if (tensors_.count(name) != 0)
      throw Error(kModule, dir_ + ": tensor '" + name + "' is stored twice (" +
                               readers_[tensors_[name].file]->path() + " and " + readers_[file]->path() + ")");
    tensors_[name] = Stored{file, name};
  }
}

std::vector<std::string> HfCheckpoint::files() const {
  std::vector<std::string> paths;
  for (const auto& reader : readers_) paths.push_back(reader->path());
  return paths;
}

void HfCheckpoint::load(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params) const {
  // Full names: a base model's checkpoint (no prefix) is read as transformers reads it into a
  // causal LM, by adding the base model's prefix.
  const std::string prefix = base_prefix(config);
  std::map<std::string, const Stored*> by_full_name;
  for (const auto& [name, stored] : tensors_) {
    const std::string full = name.starts_with(prefix) || name == "lm_head.weight" ? name : prefix + name;
    if (by_full_name.count(full) != 0)
      throw Error(kModule, dir_ + " holds both '" + by_full_name[full]->name + "' and '" + name + "'",
                  "a checkpoint has its tensors once, with or without the '" + prefix + "' prefix");
    by_full_name[full] = &stored;
  }
  const std::string hint = "are these the weights of the config.json beside them (model_type " +
                           model_type_name(config.type) + ", " + std::to_string(config.layers) + " layers)?";
  // Check names and shapes of everything before reading anything.
  const std::vector<HfTensor> map = hf_tensor_map(config);
  std::vector<std::string> missing;
  std::set<std::string> used;
  for (const HfTensor& entry : map) {
    const auto found = by_full_name.find(entry.hf_name);
    if (found == by_full_name.end()) {
      missing.push_back(entry.hf_name);
      continue;
    }
    used.insert(entry.hf_name);
    const SafetensorsReader& reader = *readers_[found->second->file];
    const SafetensorsEntry& stored = reader.entry(found->second->name);
    if (stored.shape != entry.hf_shape)
      throw Error(kModule,
                  reader.path() + ": tensor '" + found->second->name + "' has shape " + shape_string(stored.shape) +
                      ", the model expects " + shape_string(entry.hf_shape),
                  hint);
    if (stored.dtype != DType::f32 && stored.dtype != DType::bf16 && stored.dtype != DType::f16)
      throw Error(kModule, reader.path() + ": tensor '" + found->second->name + "' is " + dtype_name(stored.dtype),
                  "weights are read from F32, BF16 or F16");
  }
  if (!missing.empty()) throw Error(kModule, dir_ + ": missing tensor " + names_excerpt(missing), hint);
  const bool tied_head_stored = config.tie_embeddings && by_full_name.count("lm_head.weight") != 0;
  std::vector<std::string> unexpected;
  for (const auto& [full, stored] : by_full_name)
    if (used.count(full) == 0 && !dropped_on_load(config, full) && !(tied_head_stored && full == "lm_head.weight"))
      unexpected.push_back(stored->name);
  if (!unexpected.empty()) throw Error(kModule, dir_ + ": unexpected tensor " + names_excerpt(unexpected), hint);

  std::vector<float> staging;
  for (const HfTensor& entry : map) {
    const Stored& stored = *by_full_name.at(entry.hf_name);
    read_entry(*readers_[stored.file], stored.name, entry, layout, params, staging);
    const ParameterInfo& info = layout.at(entry.internal_name);
    const int64_t columns = info.numel() / info.shape[0];
    check_finite(params.get(entry.internal_name) + entry.row_begin * columns, entry.rows * columns,
                 readers_[stored.file]->path(), stored.name);
  }
  if (tied_head_stored) {
    // A tied model's head is its embedding; a stored copy must say the same.
    const Stored& stored = *by_full_name.at("lm_head.weight");
    const SafetensorsReader& reader = *readers_[stored.file];
    const ParameterInfo& embed = layout.at("embed.weight");
    if (reader.entry(stored.name).shape != embed.shape)
      throw Error(kModule, reader.path() + ": lm_head.weight has shape " + shape_string(reader.entry(stored.name).shape) +
                               ", the embedding " + shape_string(embed.shape), hint);
    staging.resize(static_cast<size_t>(embed.numel()));
    reader.read(stored.name, Tensor(staging.data(), DType::f32, embed.shape));
    if (std::memcmp(staging.data(), params.get("embed.weight"), staging.size() * sizeof(float)) != 0)
      throw Error(kModule, reader.path() + ": lm_head.weight differs from the token embedding, but config.json ties them",
                  "set tie_word_embeddings to false in config.json if the head is its own tensor");
  }
}

// ---- our checkpoints' weight files ---------------------------------------------------------------------

void load_hf_safetensors(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                         const std::string& path, const std::string& name_prefix) {
  SafetensorsReader reader(path);
  std::vector<float> staging;
  for (const HfTensor& entry : hf_tensor_map(config))
    read_entry(reader, name_prefix + entry.hf_name, entry, layout, params, staging);
}

void save_hf_safetensors(const ModelConfig& config, const ParameterLayout& layout, const ParameterBlock& params,
                         const std::string& path, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer;
  std::vector<std::unique_ptr<std::vector<float>>> transposed_copies;
  for (const HfTensor& entry : hf_tensor_map(config)) {
    const ParameterInfo& info = layout.at(entry.internal_name);
    const int64_t columns = info.numel() / info.shape[0];
    float* rows = params.get(entry.internal_name) + entry.row_begin * columns;
    if (!entry.transposed) {
      writer.add(entry.hf_name, Tensor(rows, DType::f32, entry.hf_shape));
      continue;
    }
    auto copy = std::make_unique<std::vector<float>>(static_cast<size_t>(shape_numel(entry.hf_shape)));
    for (int64_t i = 0; i < columns; ++i)
      for (int64_t o = 0; o < entry.rows; ++o) (*copy)[i * entry.rows + o] = rows[o * columns + i];
    writer.add(entry.hf_name, Tensor(copy->data(), DType::f32, entry.hf_shape));
    transposed_copies.push_back(std::move(copy));
  }
  writer.set_metadata("format", "pt");
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  writer.write(path);
}

}  // namespace fpdt::model
