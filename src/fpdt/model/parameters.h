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
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);
  const std::vector<ParameterInfo>& tensors() const { return tensors_; }
  const ParameterInfo& at(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  int64_t total_numel() const { return total_numel_; }

 private:
  void add(const std::string& name, Shape shape);
  std::vector<ParameterInfo> tensors_;
  std::map<std::string, size_t> index_;
  int64_t total_numel_ = 0;
};

// A float block in the compute tier laid out by a ParameterLayout, with named views.
class ParameterBlock {
 public:
  ParameterBlock(const ParameterLayout& layout, const std::string& what);
  float* data() const { return buffer_.as<float>(); }
  int64_t numel() const { return layout_->total_numel(); }
  float* get(const std::string& name) const { return data() + layout_->at(name).offset; }
  Tensor view(const std::string& name) const;
  void zero();

 private:
  const ParameterLayout* layout_;
  Buffer buffer_;
};

// Initialise weights as GPT-2/Llama training does: matrices and embeddings N(0, 0.02), output
// projections (attn.out, mlp.down) N(0, 0.02/sqrt(2L)), norm weights 1, biases 0.
void init_parameters(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                     uint64_t seed);

}  // namespace fpdt::model
