// Parameter layout, Hugging Face name mapping, initialisation and safetensors I/O (see parameters.h).
#include "fpdt/model/parameters.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/tensor/safetensors.h"

namespace fpdt::model {

namespace {
std::string layer_prefix(int layer) { return "layers." + std::to_string(layer) + "."; }
}  // namespace

ParameterLayout::ParameterLayout(const ModelConfig& config) {
  const int64_t h = config.hidden, f = config.ffn_hidden;
  const bool bias = config.has_bias();
  add("embed.weight", {config.vocab_size, h});
  if (config.learned_positions()) add("pos_embed.weight", {config.max_positions, h});
  for (int layer = 0; layer < config.layers; ++layer) {
    const std::string p = layer_prefix(layer);
    add(p + "attn_norm.weight", {h});
    if (bias) add(p + "attn_norm.bias", {h});
    add(p + "attn.qkv.weight", {config.qkv_dim(), h});
    if (bias) add(p + "attn.qkv.bias", {config.qkv_dim()});
    add(p + "attn.out.weight", {h, config.q_dim()});
    if (bias) add(p + "attn.out.bias", {h});
    add(p + "mlp_norm.weight", {h});
    if (bias) add(p + "mlp_norm.bias", {h});
    add(p + "mlp.up.weight", {config.family == Family::llama ? 2 * f : f, h});
    if (bias) add(p + "mlp.up.bias", {f});
    add(p + "mlp.down.weight", {h, f});
    if (bias) add(p + "mlp.down.bias", {h});
  }
  add("final_norm.weight", {h});
  if (bias) add("final_norm.bias", {h});
  if (!config.tie_embeddings) add("lm_head.weight", {config.vocab_size, h});
}

void ParameterLayout::add(const std::string& name, Shape shape) {
  ParameterInfo info{name, std::move(shape), total_numel_};
  // Keep every tensor 64-byte aligned so vector loads never straddle.
  total_numel_ += (info.numel() + 15) / 16 * 16;
  index_[name] = tensors_.size();
  tensors_.push_back(std::move(info));
}

const ParameterInfo& ParameterLayout::at(const std::string& name) const {
  const auto found = index_.find(name);
  if (found == index_.end()) throw Error("model", "no parameter named '" + name + "'");
  return tensors_[found->second];
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

ParameterBlock::ParameterBlock(const ParameterLayout& layout, const std::string& what)
    : layout_(&layout),
      buffer_(Tier::compute, static_cast<size_t>(layout.total_numel()) * sizeof(float), what,
              "the model does not fit the compute tier; raise --compute-mem or choose a smaller model") {
  zero();
}

Tensor ParameterBlock::view(const std::string& name) const {
  const ParameterInfo& info = layout_->at(name);
  return Tensor(data() + info.offset, DType::f32, info.shape);
}

void ParameterBlock::zero() { std::memset(buffer_.data(), 0, buffer_.bytes()); }

void init_parameters(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                     uint64_t seed) {
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  for (const ParameterInfo& info : layout.tensors()) {
    float* values = params.get(info.name);
    const bool is_bias = info.name.ends_with(".bias");
    const bool is_norm = info.name.find("norm.") != std::string::npos;
    const bool is_residual_out = info.name.ends_with("attn.out.weight") || info.name.ends_with("mlp.down.weight");
    for (int64_t i = 0; i < info.numel(); ++i) {
      if (is_norm && !is_bias)
        values[i] = 1.0f;
      else if (is_bias)
        values[i] = 0.0f;
      else
        values[i] = static_cast<float>((is_residual_out ? residual_std : 0.02) * rng.normal());
    }
  }
}

void load_hf_safetensors(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                         const std::string& path, const std::string& name_prefix) {
  SafetensorsReader reader(path);
  std::vector<float> staging;
  for (const HfTensor& entry : hf_tensor_map(config)) {
    const std::string name = name_prefix + entry.hf_name;
    const ParameterInfo& info = layout.at(entry.internal_name);
    const int64_t columns = info.numel() / info.shape[0];
    float* rows = params.get(entry.internal_name) + entry.row_begin * columns;
    if (!entry.transposed) {
      reader.read(name, Tensor(rows, DType::f32, entry.hf_shape));
      continue;
    }
    // Conv1D: the file holds (in, out) = (columns, rows); ours is (rows, columns).
    staging.resize(static_cast<size_t>(shape_numel(entry.hf_shape)));
    reader.read(name, Tensor(staging.data(), DType::f32, entry.hf_shape));
    for (int64_t i = 0; i < columns; ++i)
      for (int64_t o = 0; o < entry.rows; ++o) rows[o * columns + i] = staging[i * entry.rows + o];
  }
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
