// Parameter layout, parameter blocks and initialisation (see parameters.h).
#include "fpdt/model/parameters.h"

#include <cmath>
#include <cstring>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"

namespace fpdt::model {

namespace {
std::string layer_prefix(int layer) { return "layers." + std::to_string(layer) + "."; }
}  // namespace

ParameterLayout::ParameterLayout(const ModelConfig& config) {
  const int64_t h = config.hidden, f = config.ffn_hidden;
  const bool bias = config.has_bias();
  add("embed.weight", {config.vocab_size, h});
  if (config.learned_positions()) add("pos_embed.weight", {config.max_positions, h});
  close_unit("embeddings");
  for (int layer = 0; layer < config.layers; ++layer) {
    const std::string p = layer_prefix(layer);
    add(p + "attn_norm.weight", {h});
    if (bias) add(p + "attn_norm.bias", {h});
    add(p + "attn.qkv.weight", {config.qkv_dim(), h});
    if (config.has_qkv_bias()) add(p + "attn.qkv.bias", {config.qkv_dim()});
    close_unit("layer " + std::to_string(layer) + " norm + qkv");
    add(p + "attn.out.weight", {h, config.q_dim()});
    if (bias) add(p + "attn.out.bias", {h});
    add(p + "mlp_norm.weight", {h});
    if (bias) add(p + "mlp_norm.bias", {h});
    add(p + "mlp.up.weight", {config.family == Family::llama ? 2 * f : f, h});
    if (bias) add(p + "mlp.up.bias", {f});
    add(p + "mlp.down.weight", {h, f});
    if (bias) add(p + "mlp.down.bias", {h});
    close_unit("layer " + std::to_string(layer) + " out + mlp");
  }
  add("final_norm.weight", {h});
  if (bias) add("final_norm.bias", {h});
  if (!config.tie_embeddings) add("lm_head.weight", {config.vocab_size, h});
  close_unit("head");
}

void ParameterLayout::close_unit(const std::string& name) {
  const int64_t begin = units_.empty() ? 0 : units_.back().end;
  units_.push_back(ParameterUnit{name, begin, total_numel_});
}

int ParameterLayout::unit_of(int64_t offset) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (offset < units_[u].end) return static_cast<int>(u);
  throw Error("model", "offset " + std::to_string(offset) + " is past the parameters");
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

ParameterBlock::ParameterBlock(const ParameterLayout& layout, const std::string& what, Tier tier)
    : layout_(&layout),
      buffer_(tier, static_cast<size_t>(layout.total_numel()) * sizeof(float), what,
              "the model does not fit the compute tier; raise --compute-mem, choose a smaller model or shard "
              "its states over more ranks (--zero)"),
      data_(buffer_.as<float>()) {
  zero();
}

Tensor ParameterBlock::view(const std::string& name) const {
  const ParameterInfo& info = layout_->at(name);
  return Tensor(data() + info.offset, DType::f32, info.shape);
}

void ParameterBlock::zero() { std::memset(data_, 0, sizeof(float) * static_cast<size_t>(numel())); }

void init_parameters(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                     uint64_t seed) {
  Rng rng(seed);
  init_parameters(config, layout, 0, layout.total_numel(), params.data(), rng);
}

void init_parameters(const ModelConfig& config, const ParameterLayout& layout, int64_t begin, int64_t end,
                     float* data, Rng& rng) {
  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  for (const ParameterInfo& info : layout.tensors()) {
    if (info.offset < begin || info.offset >= end) continue;
    float* values = data + (info.offset - begin);
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

}  // namespace fpdt::model
