// Parameter layout: every weight of the model at a fixed offset in one contiguous float block, with
// named views; gradients live in a second block with the same layout (so optimizer, all-reduce and
// checkpoints see one array). The Hugging Face names of these tensors are hf_checkpoint.h's.
//
// Internal tensors (per layer l, prefix "layers.l."), h hidden, f ffn, D head dim:
//   attn_norm.weight (h) [+ .bias (h) GPT]
//   attn.qkv.weight  (Hq·D + 2·Hkv·D, h)   rows: q | k | v      [+ attn.qkv.bias GPT, Qwen2]
//   attn.out.weight  (h, Hq·D)                                  [+ attn.out.bias (h) GPT]
//   mlp_norm.weight  (h) [+ .bias]
//   mlp.up.weight    Llama: (2f, h) rows: gate | up;  GPT: (f, h)   [+ mlp.up.bias (f) GPT]
//   mlp.down.weight  (h, f)                                     [+ mlp.down.bias (h) GPT]
// Globals: embed.weight (V, h); pos_embed.weight (max_positions, h) GPT; final_norm.weight (h)
// [+ .bias GPT]; lm_head.weight (V, h) unless the embeddings are tied.
// Units: the tensors used together, each a contiguous range of the block — unit 0 the embeddings
// (embed, pos_embed); per layer l two: unit 2l + 1 its attention input (attn_norm, attn.qkv), unit
// 2l + 2 the rest (attn.out, mlp_norm, mlp.up, mlp.down) — the halves of a layer's backward use one
// each; unit 2L + 1 the head (final norm, LM head). ZeRO shards, gathers and reduces unit by unit
// (pipeline/model_states.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/model/config.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/tensor/tensor.h"

namespace fpdt::model {

struct ParameterInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in floats, from the start of the block
  int64_t numel() const { return shape_numel(shape); }
  bool is_matrix() const { return shape.size() >= 2; }
};

struct ParameterUnit {
  std::string name;   // "embeddings", "layer 3 norm + qkv", "layer 3 out + mlp", "head"
  int64_t begin = 0;  // floats from the start of the block; the next unit's begin is this one's end
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);
  const std::vector<ParameterInfo>& tensors() const { return tensors_; }
  const ParameterInfo& at(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  int64_t total_numel() const { return total_numel_; }

  const std::vector<ParameterUnit>& units() const { return units_; }
  static constexpr int kEmbeddingUnit = 0;
  static int qkv_unit(int layer) { return 2 * layer + 1; }  // attn_norm, attn.qkv
  static int mlp_unit(int layer) { return 2 * layer + 2; }  // attn.out, mlp_norm, mlp.up, mlp.down
  int head_unit() const { return static_cast<int>(units_.size()) - 1; }
  // The unit holding the tensor at `offset`.
  int unit_of(int64_t offset) const;

 private:
  void add(const std::string& name, Shape shape);
  void close_unit(const std::string& name);
  std::vector<ParameterInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<ParameterUnit> units_;
  int64_t total_numel_ = 0;
};

// A float block laid out by a ParameterLayout, with named views: its own memory (zeroed), or a view of
// memory another owner keeps (pipeline/model_states.h's whole weights and gradients).
class ParameterBlock {
 public:
  // Counted in `tier` (the compute tier, unless it only stages a checkpoint).
  ParameterBlock(const ParameterLayout& layout, const std::string& what, Tier tier = Tier::compute);
  ParameterBlock(const ParameterLayout& layout, float* data) : layout_(&layout), data_(data) {}
  float* data() const { return data_; }
  int64_t numel() const { return layout_->total_numel(); }
  float* get(const std::string& name) const { return data() + layout_->at(name).offset; }
  Tensor view(const std::string& name) const;
  void zero();

 private:
  const ParameterLayout* layout_;
  Buffer buffer_;  // empty for a view
  float* data_;
};

// Initialise weights as GPT-2/Llama training does: matrices and embeddings N(0, 0.02), output
// projections (attn.out, mlp.down) N(0, 0.02/sqrt(2L)), norm weights 1, biases 0.
void init_parameters(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                     uint64_t seed);
// The same values a piece at a time: the tensors that start in [begin, end) of the block, drawn from
// `rng`, written at data + (offset − begin). Calls over consecutive ranges from one Rng(seed) give
// what init_parameters gives (ZeRO-3 initialises one unit at a time and keeps its shard).
void init_parameters(const ModelConfig& config, const ParameterLayout& layout, int64_t begin, int64_t end,
                     float* data, Rng& rng);

}  // namespace fpdt::model
